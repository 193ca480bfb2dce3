"""One evaluation run: a scripted conversation driven through the real transparent compaction.

For each scenario (and, on the simulated provider, each summarizer style) the runner instruments the SDKs
the way an app does (``otel_context.instrument``, a small ``auto_compact_window`` so a long conversation
compacts several times), then sends the scripted history through a real SDK client, a request per turn,
as an agent resends its history. An httpx event hook on the client's own HTTP client captures every
request that goes out, so the evaluation reads what the compaction actually sent. No part of the SDK is
patched.

After each compaction (a new summary message in the request sent):

a. every fact planted so far is classified in that request (verbatim / summary / absent, reversals
   applied, stale values found; :mod:`otel_context.evaluation.classify`), the user's messages so far are
   counted that reach it verbatim, and every piece of the agent's work so far (files read and changed,
   definitions, errors open and closed, commands, decisions) is looked for in it
   (:mod:`otel_context.evaluation.work`);
b. the model answers the probe questions of those facts twice, from the compacted request and from the
   full history, each as one extra request outside the instrumentation (OpenTelemetry's
   ``suppress_instrumentation``: no span, no compaction, no effect on the conversation's state);
c. the compaction's figures are read from its ``compact`` span and the summarizer's ``chat`` span under
   it: tokens before and after, the summarizer's input and output tokens, and, until the next compaction,
   the input tokens the compacted requests spared against the full history (both counted by the simulated
   provider's tokenizer, so the two sides are counted alike).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from otel_context import semconv
from otel_context.evaluation.classify import (
    ABSENT,
    FactStatus,
    assess,
    is_summarizer_request,
    parse_answers,
    request_messages,
    user_messages_kept,
    work_texts,
)
from otel_context.evaluation.prices import price_of
from otel_context.evaluation.scenarios import DEFAULT_SCENARIOS, get_scenario
from otel_context.evaluation.script import (
    DEFAULT_WINDOW,
    KIND_DECISION,
    MIN_TURNS,
    SOURCE_ASSISTANT,
    Fact,
    Scenario,
    ScriptedTurn,
    answer_matches,
)
from otel_context.evaluation.work import GATED_KINDS, KIND_LABELS, Tracked, WorkStatus, assess_work, count_work
from otel_context.formats import for_format
from otel_context.settings import resolve, summary_model_for
from otel_context.span_figures import float_attr, int_attr

__all__ = [
    "APIS",
    "DEFAULT_MODELS",
    "DEFAULT_WINDOW",
    "PROVIDERS",
    "SUMMARIZERS",
    "CompactionRecord",
    "EvalOptions",
    "ProbeResult",
    "RunResult",
    "estimate_live",
    "run",
    "run_one",
]

PROVIDERS = ("simulated", "anthropic", "openai")
APIS = ("anthropic", "openai")
DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}
WIRE_FORMATS = {"anthropic": "anthropic_messages", "openai": "openai_chat"}
MIN_WINDOW = 6_000
#: The model's reply to each turn is dropped (the history is scripted): a short one is enough.
MAX_TOKENS = 256
PROBE_MAX_TOKENS = 800
#: What a live summary may write at most, for the estimate of a live run.
SUMMARY_ESTIMATE_TOKENS = 4_000

#: The length of the blind simulated summaries, as a share of the window (750 tokens at the default 12,000).
SUMMARY_SHARE = 16

#: The simulated summarizer's styles (``SummarizerStyle``), sized from the window: name -> (description, style
#: kwargs). Every one is blind to what the scenarios plant: it keeps text by where it stands, never by what it
#: says (the ``FACT:`` convention of the simulated provider's default summarizer is not used here).
SUMMARIZERS: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "start": lambda window: (
        f"keeps the first {window // SUMMARY_SHARE:,} tokens of its input",
        {"keeps": "start", "max_tokens": window // SUMMARY_SHARE},
    ),
    "end": lambda window: (
        f"keeps only the last {window // SUMMARY_SHARE:,} tokens of its input",
        {"keeps": "end", "max_tokens": window // SUMMARY_SHARE},
    ),
    "sample": lambda window: (
        f"keeps a fixed-seed sample of sentences, {window // SUMMARY_SHARE:,} tokens at most",
        {"keeps": "sample", "max_tokens": window // SUMMARY_SHARE},
    ),
    "unhelpful": lambda window: ("writes a generic summary that keeps nothing specific", {"keeps": "nothing"}),
}

PROBE_INTRO = (
    "Before we go on, answer these questions from our conversation so far. Reply with one line per question, "
    "'<number>. <answer>', the answer as short as possible and using the exact value from the conversation; "
    "write 'unknown' when the conversation does not say."
)


@dataclass(frozen=True)
class EvalOptions:
    """What ``otel-context eval`` was asked for (validated by :meth:`check`)."""

    provider: str = "simulated"
    #: On the simulated provider: which SDK (and wire format) drives it. Live: the provider's own.
    sdk: str = "anthropic"
    model: str | None = None
    summary_model: str | None = None
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    #: Simulated provider only: the summarizer styles to run (each scenario once per style).
    summarizers: tuple[str, ...] = tuple(SUMMARIZERS)
    #: None: each scenario's own (its standard configuration: 12,000, the long one 30,000).
    window: int | None = None
    #: None: each scenario's shipped length; else every scenario is cut (its facts planted proportionally).
    turns: int | None = None
    background: bool = False
    #: Microcompaction on (clearing old tool results) as ``OTEL_CONTEXT_MICROCOMPACT=true`` sets it.
    microcompact: bool = False

    @property
    def live(self) -> bool:
        return self.provider != "simulated"

    @property
    def api(self) -> str:
        return self.provider if self.live else self.sdk

    @property
    def wire_format(self) -> str:
        return WIRE_FORMATS[self.api]

    @property
    def resolved_model(self) -> str:
        return self.model or DEFAULT_MODELS[self.api]

    @property
    def resolved_summary_model(self) -> str:
        """The one model that summarizes this run: ``--summary-model`` may name one per provider
        (``anthropic:...,openai:...``), read as the library reads it."""
        return summary_model_for(
            resolve({"summary_model": self.summary_model}, env={}),
            for_format(self.wire_format).provider,
            self.resolved_model,
        )

    def window_for(self, scenario: Scenario) -> int:
        """The compaction window of a run of ``scenario``: ``--window``, else the scenario's own."""
        return self.window if self.window is not None else scenario.window

    def styles(self) -> tuple[str | None, ...]:
        """The summarizer styles to run: the simulated ones, or the live model's own (None)."""
        return (None,) if self.live else self.summarizers

    def check(self) -> None:
        """Raise ValueError with a message fit for the command line."""
        if self.provider not in PROVIDERS:
            raise ValueError(f"--provider {self.provider!r}: choose one of {', '.join(PROVIDERS)}")
        if self.sdk not in APIS:
            raise ValueError(f"--sdk {self.sdk!r}: choose one of {', '.join(APIS)}")
        for name in self.scenarios:
            get_scenario(name)
        for style in self.summarizers:
            if style not in SUMMARIZERS:
                raise ValueError(f"--summarizer {style!r}: choose one of {', '.join(SUMMARIZERS)} or all")
        if self.window is not None and self.window < MIN_WINDOW:
            raise ValueError(f"--window {self.window}: must be at least {MIN_WINDOW:,} tokens")
        if self.turns is not None and self.turns < MIN_TURNS:
            raise ValueError(f"--turns {self.turns}: must be at least {MIN_TURNS}")


@dataclass
class ProbeResult:
    """One probe question at one compaction: the answers from the compacted request and the full history."""

    fact: Fact
    compacted_answer: str
    compacted_ok: bool
    full_answer: str | None = None  #: None: the full history was not asked (see ``RunResult``)
    full_ok: bool | None = None


@dataclass
class CompactionRecord:
    """What one compaction kept, what it cost, and what it spared."""

    number: int
    turn: int  #: 1-based turn whose request carried the new summary
    trigger: str
    tokens_before: int
    tokens_after: int
    summary_input_tokens: int
    summary_output_tokens: int
    summary_cost: float | None
    retention: float | None
    facts: list[FactStatus]
    probes: list[ProbeResult] = field(default_factory=list)
    full_probe_error: str | None = None
    #: Input tokens the compacted requests spared against the full history, from this compaction to the next.
    spared_tokens: int = 0
    spared_cost: float | None = None
    #: The user's messages so far (the request's own included), and how many of them reached the request
    #: verbatim: as a message of their own, or whole inside the summary message.
    user_messages: int = 0
    user_messages_verbatim: int = 0
    user_messages_quoted: int = 0
    #: From the compact span: the retention before the repair, the tokens the repair added and its budget.
    #: None when the span carries no such figure (a compaction the repair did not run on).
    retention_before_repair: float | None = None
    repair_tokens: int | None = None
    repair_budget: int | None = None
    #: From the compact span: the tokens of the work trail the summary message carries, and its budget.
    trail_tokens: int | None = None
    trail_budget: int | None = None
    #: Every piece of the agent's work that had appeared by this request: its kind then, and whether it reached it.
    work: list[WorkStatus] = field(default_factory=list)

    @property
    def work_counts(self) -> dict[str, list[int]]:
        """kind -> [kept, checked] of the agent's work in this request."""
        return count_work(self.work)

    def work_lost(self, kinds: Sequence[str] | None = None) -> list[WorkStatus]:
        """The pieces of work that did not reach this request (of ``kinds``, every kind by default)."""
        return [w for w in self.work if not w.kept and (kinds is None or w.kind in kinds)]

    @property
    def tokens_saved(self) -> int:
        return max(self.tokens_before - self.tokens_after, 0)

    @property
    def repair_over_budget(self) -> bool:
        """Whether the repair added more than its budget (a span without both figures is not held to one)."""
        added, budget = self.repair_tokens, self.repair_budget
        return added is not None and budget is not None and added > budget

    @property
    def trail_over_budget(self) -> bool:
        """Whether the work trail took more than its budget (a span without both figures is not held to one)."""
        taken, budget = self.trail_tokens, self.trail_budget
        return taken is not None and budget is not None and taken > budget

    def count(self, state: str) -> int:
        return sum(1 for s in self.facts if s.state == state and not (s.superseded and state == ABSENT))

    def kept(self, which: Callable[[FactStatus], bool]) -> tuple[int, int]:
        """(kept, checked) of the facts in force that ``which`` selects (a superseded constraint is not in force)."""
        checked = [s for s in self.facts if not s.superseded and which(s)]
        return sum(1 for s in checked if s.state != ABSENT), len(checked)

    @property
    def user_facts(self) -> tuple[int, int]:
        return self.kept(lambda s: s.fact.user_fact)

    @property
    def artifacts(self) -> tuple[int, int]:
        return self.kept(lambda s: s.fact.artifact)

    @property
    def decisions(self) -> tuple[int, int]:
        return self.kept(lambda s: s.fact.kind == KIND_DECISION)

    @property
    def verbatim_share(self) -> float | None:
        """Share of the user's messages so far that reached the request verbatim (own message or quoted whole)."""
        if not self.user_messages:
            return None
        return (self.user_messages_verbatim + self.user_messages_quoted) / self.user_messages

    @property
    def user_lost(self) -> list[FactStatus]:
        return [s for s in self.facts if s.lost and s.fact.user_fact]

    @property
    def lost(self) -> list[FactStatus]:
        return [s for s in self.facts if s.lost]

    @property
    def without_reversal(self) -> list[FactStatus]:
        return [s for s in self.facts if s.without_reversal]

    @property
    def stale(self) -> list[FactStatus]:
        return [s for s in self.facts if s.stale]

    def probe_score(self, full: bool = False) -> tuple[int, int]:
        if full:
            asked = [p for p in self.probes if p.full_ok is not None]
            return sum(1 for p in asked if p.full_ok), len(asked)
        return sum(1 for p in self.probes if p.compacted_ok), len(self.probes)


@dataclass
class RunResult:
    """One scenario with one summarizer."""

    scenario: Scenario
    summarizer: str | None  #: the simulated style, None for a live summarizer
    summarizer_note: str
    provider: str
    model: str
    summary_model: str
    window: int
    turns: int
    compactions: list[CompactionRecord] = field(default_factory=list)
    failed_compactions: int = 0
    peak_request_tokens: int = 0
    full_history_tokens: int = 0
    model_input_tokens: int = 0
    model_output_tokens: int = 0
    probe_input_tokens: int = 0
    probe_output_tokens: int = 0
    interrupted: bool = False
    #: The agent's work in the script: every item, when it appears and when its kind changes.
    timeline: list[Tracked] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.scenario.name}/{self.summarizer or self.summary_model}"

    def failures(self) -> list[str]:
        """One line per failing fact: a user fact lost, a constraint sent without its reversal, or a superseded
        value sent as if current, with the first compaction where it happened and how many it happened in; and
        one per compaction whose repair added, or whose work trail took, more than its budget."""
        found: dict[tuple[str, str], list[CompactionRecord]] = {}
        for record in self.compactions:
            for status in record.facts:
                if status.lost and status.fact.user_fact:
                    found.setdefault((status.fact.id, "lost"), []).append(record)
                if status.without_reversal:
                    found.setdefault((status.fact.id, "alone"), []).append(record)
                if status.stale:
                    found.setdefault((status.fact.id, "stale"), []).append(record)
        out: list[str] = []
        for (fact_id, what), records in found.items():
            fact = self.scenario.fact(fact_id)
            first = records[0]
            where = (
                f"compaction {first.number} (turn {first.turn}), and {len(records) - 1} later"
                if len(records) > 1
                else f"compaction {first.number} (turn {first.turn})"
            )
            if what == "lost":
                out.append(f"{self.label}: the user's {fact.kind.replace('_', ' ')} lost at {where}: {fact.text}")
            elif what == "alone":
                out.append(f"{self.label}: a reversed constraint sent without its reversal at {where}: {fact.text}")
            else:
                out.append(f"{self.label}: a superseded value sent as if current at {where}: {fact.text}")
        out += self.work_failures()
        for record in self.compactions:
            if record.repair_over_budget:
                out.append(
                    f"{self.label}: the repair at compaction {record.number} (turn {record.turn}) added "
                    f"{record.repair_tokens:,} tokens, over its budget of {record.repair_budget:,}"
                )
            if record.trail_over_budget:
                out.append(
                    f"{self.label}: the work trail at compaction {record.number} (turn {record.turn}) took "
                    f"{record.trail_tokens:,} tokens, over its budget of {record.trail_budget:,}"
                )
        return out

    def work_failures(self) -> list[str]:
        """A gated scenario (``Scenario.work_gated``): one line per kind of :data:`GATED_KINDS` that lost an item
        after a compaction, naming each item lost and the first compaction that lost one; none otherwise."""
        if not self.scenario.work_gated:
            return []
        out = []
        for kind in GATED_KINDS:
            lost: dict[str, CompactionRecord] = {}
            seen: set[str] = set()
            for record in self.compactions:
                for status in record.work:
                    if status.kind != kind:
                        continue
                    seen.add(status.tracked.item.id)
                    if not status.kept:
                        lost.setdefault(status.tracked.item.id, record)
            if lost:
                first = min(lost.values(), key=lambda r: r.number)
                out.append(
                    f"{self.label}: {len(lost)} of {len(seen)} {KIND_LABELS[kind]} lost after a compaction (the first "
                    f"at compaction {first.number}, turn {first.turn}): {', '.join(lost)}"
                )
        return out


# -- wire formats -------------------------------------------------------------------------------------------


class _Wire:
    """How the scripted turns become one SDK's messages, and how that SDK is called.

    The request goes through the client's own ``post`` (the path every ``create`` ends in, so the
    instrumentation sees it exactly as an app's call) with the JSON body as is: ``create`` first walks a
    whole history through its parameter types, which for a 200-turn conversation resent 200 times cost
    more than everything else the evaluation does.
    """

    api = "anthropic"

    def __init__(self, client: Any, model: str, system: str, tools: Sequence[Mapping[str, Any]]) -> None:
        self.client = client
        self.model = model
        self.system = system
        self.tools = [dict(t) for t in tools]

    def turn(self, turn: ScriptedTurn, index: int) -> list[dict[str, Any]]:
        """The turn's messages: the user's (when it has one), the tool call and its result."""
        raise NotImplementedError

    def join(self, reply: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        """The assistant's reply text and its next tool call as one message, as a model writes them."""
        raise NotImplementedError

    def extend(self, history: Sequence[Any], turn: ScriptedTurn, index: int) -> list[Any]:
        """``history`` with ``turn`` added: its messages; for a turn that continues the agent's work (no user
        message), its tool call joined to the assistant's reply that ends the history."""
        new = self.turn(turn, index)
        if turn.user:
            return [*history, *new]
        last = history[-1] if history else None
        if not isinstance(last, dict) or last.get("role") != "assistant":
            raise ValueError(f"turn {index} continues the agent's work, but the history does not end with its reply")
        return [*history[:-1], self.join(last, new[0]), *new[1:]]

    def reply(self, text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    def messages_of(self, body: Mapping[str, Any]) -> list[Any]:
        return list(body.get("messages") or [])

    def send(self, messages: Sequence[Any], max_tokens: int, probe: bool = False) -> tuple[str, int, int]:
        """Send ``messages``; (reply text, input tokens, output tokens)."""
        raise NotImplementedError

    def errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError


class _AnthropicWire(_Wire):
    api = "anthropic"

    def turn(self, turn: ScriptedTurn, index: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": turn.user}] if turn.user else []
        if turn.tool is not None:
            call_id = f"toolu_eval_{index:04d}"
            out.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call_id, "name": turn.tool.name, "input": dict(turn.tool.arguments)}
                    ],
                }
            )
            out.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call_id, "content": turn.tool.result}],
                }
            )
        return out

    def join(self, reply: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": [{"type": "text", "text": reply["content"]}, *call["content"]]}

    def send(self, messages: Sequence[Any], max_tokens: int, probe: bool = False) -> tuple[str, int, int]:
        from anthropic.types import Message

        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "system": self.system,
            "tools": self.tools,
            "messages": list(messages),
        }
        if probe:
            body["tool_choice"] = {"type": "none"}
        response = self.client.post("/v1/messages", cast_to=Message, body=body)
        text = "".join(getattr(block, "text", "") for block in response.content if block.type == "text")
        usage = response.usage
        read = usage.cache_read_input_tokens or 0
        write = usage.cache_creation_input_tokens or 0
        return text, usage.input_tokens + read + write, usage.output_tokens

    def errors(self) -> tuple[type[BaseException], ...]:
        import anthropic

        return (anthropic.APIStatusError,)


class _OpenAIWire(_Wire):
    api = "openai"

    def turn(self, turn: ScriptedTurn, index: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "user", "content": turn.user}] if turn.user else []
        if turn.tool is not None:
            call_id = f"call_eval_{index:04d}"
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": turn.tool.name, "arguments": json.dumps(dict(turn.tool.arguments))},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": call_id, "content": turn.tool.result})
        return out

    def messages_of(self, body: Mapping[str, Any]) -> list[Any]:
        return [m for m in body.get("messages") or [] if not (isinstance(m, Mapping) and m.get("role") == "system")]

    def join(self, reply: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        return {**call, "content": reply["content"]}

    def send(self, messages: Sequence[Any], max_tokens: int, probe: bool = False) -> tuple[str, int, int]:
        tools = [
            {
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
            }
            for t in self.tools
        ]
        from openai.types.chat import ChatCompletion

        body: dict[str, Any] = {
            "model": self.model,
            "max_completion_tokens": max_tokens,
            "tools": tools,
            "messages": [{"role": "system", "content": self.system}, *messages],
        }
        if probe:
            body["tool_choice"] = "none"
        response = self.client.post("/chat/completions", cast_to=ChatCompletion, body=body)
        text = response.choices[0].message.content or "" if response.choices else ""
        usage = response.usage
        return text, (usage.prompt_tokens if usage else 0), (usage.completion_tokens if usage else 0)

    def errors(self) -> tuple[type[BaseException], ...]:
        import openai

        return (openai.APIStatusError,)


# -- the run ------------------------------------------------------------------------------------------------


class _Capture:
    """Every request body the SDK client sends (an httpx request hook: the bytes on the wire)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> None:
        if request.method != "POST":
            return
        path = request.url.path
        if not (path.endswith("/messages") or path.endswith("/chat/completions")):
            return
        try:
            body = json.loads(request.read() or b"{}")
        except ValueError:
            return
        if isinstance(body, dict):
            self.bodies.append(body)


def _client(options: EvalOptions, sim: Any, capture: _Capture) -> Any:
    """A real SDK client whose HTTP client reports every request to ``capture`` (key and URL: env or sim)."""
    hooks: dict[str, list[Callable[..., Any]]] = {"request": [capture]}
    if options.api == "anthropic":
        import anthropic

        http = anthropic.DefaultHttpxClient(event_hooks=hooks)
        if sim is not None:
            return anthropic.Anthropic(base_url=sim.base_url, api_key="sim-key", max_retries=0, http_client=http)
        return anthropic.Anthropic(http_client=http)
    import openai

    http_client = openai.DefaultHttpxClient(event_hooks=hooks)
    if sim is not None:
        return openai.OpenAI(base_url=sim.openai_base_url, api_key="sim-key", max_retries=0, http_client=http_client)
    return openai.OpenAI(http_client=http_client)


@contextmanager
def _provider(options: EvalOptions, style: str | None, window: int) -> Iterator[Any]:
    if options.live:
        yield None
        return
    from otel_context.testing import SimulatedProvider, SummarizerStyle

    assert style is not None  # a simulated run always has a style
    kwargs = SUMMARIZERS[style](window)[1]
    # The model's own window stays the built-in one (200,000 for the default models): the compactor works
    # to the small --window, and the full-history probe still fits.
    with SimulatedProvider(summarizer=SummarizerStyle(**kwargs)) as sim:
        yield sim


class _Sizes:
    """Tokens of a growing history, counted by the simulated tokenizer one message at a time (the count is
    a sum over messages, and recounting a 100,000-token history every turn would be quadratic). A message
    replaced in place (the assistant's reply a continuing turn joins its tool call to) is counted again."""

    def __init__(self, wire_format: str) -> None:
        self.wire_format = wire_format
        self.counted: list[tuple[Any, int]] = []

    def of(self, messages: Sequence[Any]) -> int:
        from otel_context.testing import count_request_tokens

        same = 0
        while same < min(len(messages), len(self.counted)) and self.counted[same][0] is messages[same]:
            same += 1
        del self.counted[same:]
        for message in messages[same:]:
            size = count_request_tokens({"messages": [message]}, self.wire_format)  # type: ignore[arg-type]
            self.counted.append((message, size))
        return sum(size for _, size in self.counted)


def _summary_text(messages: Sequence[Any]) -> str | None:
    found = [m.text for m in messages if m.summary]
    return "\n".join(found) if found else None


def _in_request(fact: Fact, planted_at: int, turn: int) -> bool:
    """Whether the request of ``turn`` (0-based) carries ``fact``: an assistant's fact is in its reply,
    which joins the history after the turn's request."""
    return planted_at < turn or (planted_at == turn and fact.source != SOURCE_ASSISTANT)


def run_one(options: EvalOptions, scenario: Scenario, style: str | None) -> RunResult:
    """Run ``scenario`` once (see the module docstring)."""
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_context
    from otel_context import engine
    from otel_context.testing import count_request_tokens

    script = scenario.script(options.turns)
    plant = scenario.plant_turns(len(script))
    timeline = scenario.work(options.turns)
    window = options.window_for(scenario)
    note = SUMMARIZERS[style](window)[0] if style else f"{options.provider} API, summaries written by the model"
    result = RunResult(
        scenario=scenario,
        summarizer=style,
        summarizer_note=note,
        provider=options.provider,
        model=options.resolved_model,
        summary_model=options.resolved_summary_model,
        window=window,
        turns=len(script),
        timeline=timeline,
    )
    wire_format = options.wire_format
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider()
    capture = _Capture()
    engine.reset()  # nothing learned by an earlier run in this process carries over
    otel_context.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        auto_compact_window=window,
        summary_model=result.summary_model,  # the one the report names, whatever the environment says
        background_compaction=options.background,
        compaction="auto",
        microcompact=options.microcompact,
    )
    summary_price = price_of(options.api, result.summary_model)  # with the user's prices, now in force
    model_price = price_of(options.api, result.model)
    try:
        with _provider(options, style, window) as sim:
            client = _client(options, sim, capture)
            wire: _Wire = (_AnthropicWire if options.api == "anthropic" else _OpenAIWire)(
                client, result.model, scenario.system, scenario.tools
            )
            history: list[Any] = []
            sizes = _Sizes(wire_format)
            previous_summary: str | None = None
            span_mark = 0
            current: CompactionRecord | None = None
            try:
                with otel_context.conversation(f"otel-context-eval-{scenario.name}"):
                    for index, turn in enumerate(script):
                        messages = wire.extend(history, turn, index)
                        capture.bodies.clear()  # only this turn's requests are needed
                        _, used_in, used_out = wire.send(messages, MAX_TOKENS)
                        result.model_input_tokens += used_in
                        result.model_output_tokens += used_out
                        sent = next(
                            (b for b in reversed(capture.bodies) if not is_summarizer_request(b, wire_format)),
                            None,
                        )
                        history = [*messages, wire.reply(turn.reply)]
                        if sent is None:
                            continue
                        sent_tokens = count_request_tokens(sent, wire_format)  # type: ignore[arg-type]
                        # The full history: what was sent around the messages (system, tools), and every message.
                        fixed = {**sent, "messages": [m for m in sent.get("messages", []) if m.get("role") == "system"]}
                        full_tokens = count_request_tokens(fixed, wire_format) + sizes.of(messages)  # type: ignore[arg-type]
                        result.peak_request_tokens = max(result.peak_request_tokens, sent_tokens)
                        result.full_history_tokens = full_tokens
                        sent_messages = request_messages(sent, wire_format)
                        summary = _summary_text(sent_messages)
                        if summary is not None and summary != previous_summary:
                            previous_summary = summary
                            finished = spans.get_finished_spans()
                            compact_spans = [s for s in finished[span_mark:] if s.name == semconv.COMPACT_SPAN]
                            span_mark = len(finished)
                            planted = [f for f in scenario.facts if _in_request(f, plant[f.id], index)]
                            current = _record(
                                len(result.compactions) + 1,
                                index + 1,
                                compact_spans,
                                finished,
                                planted,
                                sent_messages,
                                summary_price,
                            )
                            current.work = assess_work(timeline, index, work_texts(sent_messages), scenario.root)
                            said = [t.user for t in script[: index + 1] if t.user]
                            verbatim, quoted = user_messages_kept(said, sent_messages)
                            current.user_messages = len(said)
                            current.user_messages_verbatim = verbatim
                            current.user_messages_quoted = quoted
                            result.failed_compactions += sum(
                                1
                                for s in compact_spans
                                if (s.attributes or {}).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_FAILURE
                            )
                            with suppress_instrumentation():
                                _probe(result, current, wire, sent, messages, turn.reply)
                            result.compactions.append(current)
                        if current is not None:
                            spared = max(full_tokens - sent_tokens, 0)
                            current.spared_tokens += spared
                            if model_price is not None:
                                current.spared_cost = (current.spared_cost or 0.0) + model_price.cost(spared, 0)
            except KeyboardInterrupt:
                result.interrupted = True
            finally:
                # The summaries still in flight land while the simulated provider still answers them (after it
                # stops, each would fail on a refused connection and say so), and before the tracer provider's
                # shutdown below: their spans are exported whole. Only the calls in this block start summaries.
                otel_context.wait_for_summaries()
    finally:
        otel_context.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return result


def _record(
    number: int,
    turn: int,
    compact_spans: Sequence[Any],
    finished: Sequence[Any],
    planted: Sequence[Fact],
    sent_messages: Sequence[Any],
    summary_price: Any,
) -> CompactionRecord:
    """The figures of one compaction from its ``compact`` span(s) and the summarizer's ``chat`` spans."""
    done = [
        s
        for s in compact_spans
        if (s.attributes or {}).get(semconv.COMPACTION_STRATEGY) == semconv.STRATEGY_SUMMARY
        and (s.attributes or {}).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS
    ]
    ids = {s.context.span_id for s in done}
    summarizer_calls = [s for s in finished if s.parent is not None and s.parent.span_id in ids]
    summary_in = sum(int_attr(s.attributes or {}, semconv.GEN_AI_USAGE_INPUT_TOKENS) for s in summarizer_calls)
    summary_out = sum(int_attr(s.attributes or {}, semconv.GEN_AI_USAGE_OUTPUT_TOKENS) for s in summarizer_calls)
    last = done[-1] if done else None
    attrs = (last.attributes or {}) if last is not None else {}
    return CompactionRecord(
        number=number,
        turn=turn,
        trigger=str(attrs.get(semconv.COMPACTION_TRIGGER_SOURCE, "")),
        tokens_before=int_attr(attrs, semconv.COMPACTION_INPUT_TOKENS),
        tokens_after=int_attr(attrs, semconv.COMPACTION_OUTPUT_TOKENS),
        summary_input_tokens=summary_in,
        summary_output_tokens=summary_out,
        summary_cost=summary_price.cost(summary_in, summary_out) if summary_price is not None else None,
        retention=float_attr(attrs, semconv.COMPACTION_RETENTION),
        facts=assess(planted, sent_messages),
        retention_before_repair=(
            float_attr(attrs, semconv.COMPACTION_RETENTION_BEFORE_REPAIR)
            if semconv.COMPACTION_RETENTION_BEFORE_REPAIR in attrs
            else None
        ),
        repair_tokens=(
            int_attr(attrs, semconv.COMPACTION_REPAIR_TOKENS) if semconv.COMPACTION_REPAIR_TOKENS in attrs else None
        ),
        repair_budget=(
            int_attr(attrs, semconv.COMPACTION_REPAIR_BUDGET) if semconv.COMPACTION_REPAIR_BUDGET in attrs else None
        ),
        trail_tokens=(
            int_attr(attrs, semconv.COMPACTION_TRAIL_TOKENS) if semconv.COMPACTION_TRAIL_TOKENS in attrs else None
        ),
        trail_budget=(
            int_attr(attrs, semconv.COMPACTION_TRAIL_BUDGET) if semconv.COMPACTION_TRAIL_BUDGET in attrs else None
        ),
    )


def _probe(
    result: RunResult,
    record: CompactionRecord,
    wire: _Wire,
    sent: Mapping[str, Any],
    full_messages: Sequence[Any],
    reply: str,
) -> None:
    """Ask the probe questions of the facts the request carries, from it and from the full history."""
    superseded = {s.fact.id for s in record.facts if s.superseded}
    facts = [s.fact for s in record.facts if s.fact.id not in superseded]
    if not facts:
        return
    question = "\n".join([PROBE_INTRO, *(f"{n}. {f.probe_line()}" for n, f in enumerate(facts, 1))])
    tail = [wire.reply(reply), {"role": "user", "content": question}]
    max_tokens = min(PROBE_MAX_TOKENS, 60 * len(facts) + 100)
    text, used_in, used_out = wire.send([*wire.messages_of(sent), *tail], max_tokens, probe=True)
    result.probe_input_tokens += used_in
    result.probe_output_tokens += used_out
    compacted = parse_answers(text)
    full: dict[int, str] | None = None
    try:
        full_text, used_in, used_out = wire.send([*full_messages, *tail], max_tokens, probe=True)
        result.probe_input_tokens += used_in
        result.probe_output_tokens += used_out
        full = parse_answers(full_text)
    except wire.errors() as exc:  # e.g. the full history is over the live model's window
        record.full_probe_error = f"{type(exc).__name__}: {str(exc)[:200]}"
    for n, fact in enumerate(facts, 1):
        answer = compacted.get(n, "")
        probe = ProbeResult(fact, answer, answer_matches(fact.answer, answer))
        if full is not None:
            probe.full_answer = full.get(n, "")
            probe.full_ok = answer_matches(fact.answer, probe.full_answer)
        record.probes.append(probe)


def run(options: EvalOptions, on_run: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Every scenario asked for, with every summarizer style asked for (one live summarizer when live)."""
    options.check()
    results: list[RunResult] = []
    for name in options.scenarios:
        for style in options.styles():
            result = run_one(options, get_scenario(name), style)
            results.append(result)
            if on_run is not None:
                on_run(result)
            if result.interrupted:
                return results
    return results


def estimate_live(options: EvalOptions) -> tuple[int, int]:
    """An upper estimate of a live run: (input tokens, output tokens), counted by the simulated tokenizer.

    Every turn sends at most a window; each compaction (about one per half window of growth) sends a
    window to the summarizer, a compacted request and the full history to the probes.
    """
    from otel_context.testing import count_request_tokens

    total_in = 0
    total_out = 0
    for name in options.scenarios:
        scenario = get_scenario(name)
        script = scenario.script(options.turns)
        window = options.window_for(scenario)
        system_tokens = count_request_tokens(
            {"system": scenario.system, "tools": [dict(t) for t in scenario.tools], "messages": []},
            "anthropic_messages",
        )
        wire = _AnthropicWire(None, "", scenario.system, scenario.tools)
        counter = _Sizes("anthropic_messages")
        history: list[Any] = []
        sizes: list[int] = []
        for index, turn in enumerate(script):
            history = wire.extend(history, turn, index)
            sizes.append(system_tokens + counter.of(history))
            history.append(wire.reply(turn.reply))
        full = sizes[-1] if sizes else 0
        compactions = max(1, math.ceil(full / (window / 2)))
        total_in += sum(min(s, window) for s in sizes)
        total_in += compactions * (window + window + full)
        total_out += len(script) * MAX_TOKENS + compactions * (SUMMARY_ESTIMATE_TOKENS + 2 * PROBE_MAX_TOKENS)
    return total_in, total_out
