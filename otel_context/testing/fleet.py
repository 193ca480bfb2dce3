"""Many worker processes serving one conversation, for the tests and the benchmark of the shared state store.

Why: a deployment runs N processes and consecutive calls of one conversation land on different ones. This
module spawns real worker processes (``multiprocessing`` spawn: nothing inherited), each instrumented with
otel-context and holding a real SDK client pointed at ONE :class:`~otel_context.testing.SimulatedProvider`
that the parent runs; the parent plays the agent (it keeps the history and hands each call to the next
worker) and reads what the provider received to tell what the fleet did.

>>> with SimulatedProvider() as sim, Fleet(4, sim.base_url, "anthropic", state_store=url) as fleet:  # doctest: +SKIP
...     history = run_agent(fleet, "claude-sonnet-4-6", turns=40)
...     figures = Figures.of(sim.exchanges())
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context.compaction.prompt import CONTINUED_PART_PREFIX, NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER

__all__ = ["Figures", "Fleet", "run_agent"]

SYSTEM = "You are a coding agent. Use the tools."
ANTHROPIC_TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
OPENAI_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


def _serve(conn: Any, base_url: str, sdk: str, settings: dict[str, Any]) -> None:
    """A worker: instrumented, one real SDK client; answers ``("call", kwargs, start_at)`` until ``None``."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_context
    from otel_context import semconv
    from otel_context.conversation import CONVERSATIONS, shared

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    resolved = otel_context.instrument(
        tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader]), **settings
    )
    opened = shared.store_for(resolved)
    if opened is not None and hasattr(opened, "ready"):
        opened.ready(10.0)  # a Cluster's client is made before the first call (a real worker's first calls
        # on a cluster would use their own state for the fraction of a second it takes)
    if sdk == "anthropic":
        import anthropic

        client: Any = anthropic.Anthropic(base_url=base_url, api_key="sim-key", max_retries=0)
        create: Callable[..., Any] = client.messages.create
    else:
        import openai

        client = openai.OpenAI(base_url=base_url + "/v1", api_key="sim-key", max_retries=0)
        create = client.responses.create if sdk == "openai-responses" else client.chat.completions.create
    conn.send("ready")
    while True:
        order = conn.recv()
        if order is None:
            break
        _, kwargs, start_at = order
        if start_at:
            time.sleep(max(0.0, start_at - time.time()))
        before = len(exporter.get_finished_spans())
        began = time.perf_counter()
        try:
            response = create(**kwargs).model_dump(exclude_none=True)
            error = None
        except Exception as exc:
            response, error = None, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - began
        store = shared.store_for(resolved)
        if store is not None:
            store.flush(2.0)  # the test's next call goes to another worker: let this write land first
        spans = exporter.get_finished_spans()
        exporter.clear()
        chats = [s for s in spans[before:] if s.name.startswith("chat") and s.parent is None]
        chat = chats[-1] if chats else None
        attributes = dict(chat.attributes or {}) if chat is not None else {}
        # Compactions this worker ended since its previous call (a background one may end between calls).
        compacts = [s for s in spans if s.name == semconv.COMPACT_SPAN]
        modes = [str((s.attributes or {}).get(semconv.COMPACTION_MODE)) for s in compacts]
        compactions = [
            {
                "span_id": s.context.span_id,
                "parent_id": s.parent.span_id if s.parent is not None else None,
                "mode": (s.attributes or {}).get(semconv.COMPACTION_MODE),
                "outcome": (s.attributes or {}).get(semconv.COMPACTION_OUTCOME),
                "trigger": (s.attributes or {}).get(semconv.COMPACTION_TRIGGER_SOURCE),
                "links": [link.context.span_id for link in s.links],
            }
            for s in compacts
        ]
        conn.send(
            {
                "response": response,
                "error": error,
                "source": attributes.get(semconv.STATE_SOURCE),
                "states": len(CONVERSATIONS),
                "chat": {
                    name: attributes.get(name)
                    for name in (
                        semconv.GEN_AI_CONVERSATION_ID,
                        semconv.CONTEXT_ESTIMATED_TOKENS,
                        semconv.GEN_AI_USAGE_INPUT_TOKENS,
                    )
                },
                "compacted": bool(attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED)),
                "links": len(chat.links) if chat is not None else 0,
                "modes": modes,
                "compactions": compactions,
                "chat_span_id": chat.context.span_id if chat is not None else None,
                "seconds": seconds,
                "waits": _waits(reader),
                "counted": _counted(reader),
                "breaks": sum(
                    1
                    for e in (chat.events if chat is not None else ())
                    if e.name == semconv.CACHE_BREAK_EVENT
                    and not (e.attributes or {}).get(semconv.CACHE_BREAK_INTENTIONAL)
                ),
            }
        )
    conn.send("bye")


def _points(reader: Any, name: str) -> list[Any]:
    """The data points of metric ``name`` this worker recorded."""
    data = reader.get_metrics_data()
    return [
        p
        for rm in (data.resource_metrics if data is not None else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    ]


def _waits(reader: Any) -> list[tuple[str, int, float]]:
    """How often calls of this worker waited for a compaction, per mode, and the longest wait (seconds)."""
    from otel_context import semconv

    points = _points(reader, semconv.METRIC_COMPACTION_WAIT)
    return [(str(p.attributes.get(semconv.COMPACTION_MODE)), int(p.count), float(p.max)) for p in points]


def _counted(reader: Any) -> list[tuple[str, str, str, int]]:
    """This worker's ``otel_context.compactions`` counter: (mode, outcome, trigger, count) per series."""
    from otel_context import semconv

    keys = (semconv.COMPACTION_MODE, semconv.COMPACTION_OUTCOME, semconv.COMPACTION_TRIGGER_SOURCE)
    points = _points(reader, semconv.METRIC_COMPACTIONS)
    return [(*(str(p.attributes.get(k)) for k in keys), int(p.value)) for p in points if p.value]  # type: ignore[misc]


class Fleet:
    """``n`` spawned worker processes; :meth:`call` hands one SDK call to the next worker in turn.

    ``sdk``: "anthropic" (Messages), "openai" (Chat Completions) or "openai-responses" (Responses).
    """

    def __init__(self, n: int, base_url: str, sdk: str, **settings: Any) -> None:
        self.n, self.base_url, self.sdk, self.settings = n, base_url, sdk, settings
        self._workers: list[tuple[Any, Any]] = []
        self._next = 0
        #: The state source each call's chat span reported, in call order.
        self.sources: list[Any] = []
        #: Per call, in call order: its chat span's conversation id, estimated tokens and reported input tokens.
        self.chats: list[dict[str, Any]] = []
        #: Per call, in call order: how many conversation states the worker that served it tracks.
        self.states: list[int] = []
        #: Per call, in call order: whether its chat span says compacted, and how many links it has.
        self.compacted: list[tuple[bool, int]] = []
        #: The ``compaction.mode`` of every ``compact`` span the workers ended.
        self.modes: list[str] = []
        #: Every ``compact`` span the workers ended: span id, parent id, mode, outcome, trigger, links.
        self.compactions: list[dict[str, Any]] = []
        #: The span id of each call's chat span, in call order.
        self.chat_span_ids: list[int | None] = []
        #: Unintended cache breaks the chat spans reported.
        self.breaks = 0
        #: How long each SDK call took in its worker, in call order.
        self.seconds: list[float] = []
        #: Per worker (by pipe): its callers' waits for a compaction, as (mode, count, longest seconds).
        self._waits: dict[int, list[tuple[str, int, float]]] = {}
        #: Per worker (by pipe): its ``otel_context.compactions`` series, as (mode, outcome, trigger, count).
        self._counted: dict[int, list[tuple[str, str, str, int]]] = {}

    def __enter__(self) -> Fleet:
        context = multiprocessing.get_context("spawn")
        for _ in range(self.n):
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, self.base_url, self.sdk, self.settings), daemon=True)
            process.start()
            self._workers.append((parent, process))
        for parent, _ in self._workers:
            if not parent.poll(60) or parent.recv() != "ready":
                raise RuntimeError("a fleet worker did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        for parent, process in self._workers:
            try:
                parent.send(None)
                if parent.poll(10):
                    parent.recv()
            except (OSError, EOFError):
                pass
            process.join(10)
            if process.is_alive():
                process.kill()

    def call(self, worker: int | None = None, **kwargs: Any) -> dict[str, Any]:
        """One SDK call on the next worker (or ``worker``); the response as JSON (raises on a failed call)."""
        index = self._next % self.n if worker is None else worker
        self._next += 1
        parent = self._workers[index][0]
        parent.send(("call", kwargs, 0.0))
        return self._answer(parent)

    def call_at_once(self, workers: Sequence[int], **kwargs: Any) -> list[dict[str, Any]]:
        """The same call on several workers, started at the same instant."""
        start_at = time.time() + 0.5
        for index in workers:
            self._workers[index][0].send(("call", kwargs, start_at))
        return [self._answer(self._workers[index][0]) for index in workers]

    def waits(self) -> dict[str, tuple[int, float]]:
        """Per compaction mode, over all workers: how many calls waited for (or applied) a compaction, and
        the longest such wait in seconds (0.0 for a prepared summary applied at once)."""
        out: dict[str, tuple[int, float]] = {}
        for points in self._waits.values():
            for mode, count, longest in points:
                known = out.get(mode, (0, 0.0))
                out[mode] = (known[0] + count, max(known[1], longest))
        return out

    def counted(self) -> dict[tuple[str, str, str], int]:
        """``otel_context.compactions`` over all workers, per (mode, outcome, trigger)."""
        out: dict[tuple[str, str, str], int] = {}
        for series in self._counted.values():
            for mode, outcome, trigger, count in series:
                out[(mode, outcome, trigger)] = out.get((mode, outcome, trigger), 0) + count
        return out

    def _answer(self, parent: Any) -> dict[str, Any]:
        if not parent.poll(120):
            raise RuntimeError("a fleet worker did not answer in 120 s")
        answer: dict[str, Any] = parent.recv()
        self.sources.append(answer["source"])
        self.chats.append(answer["chat"])
        self.states.append(answer["states"])
        self.compacted.append((answer["compacted"], answer["links"]))
        self.modes.extend(answer["modes"])
        self.compactions.extend(answer["compactions"])
        self.chat_span_ids.append(answer["chat_span_id"])
        self.seconds.append(answer["seconds"])
        self.breaks += answer["breaks"]
        self._waits[id(parent)] = [tuple(w) for w in answer["waits"]]  # type: ignore[misc]
        self._counted[id(parent)] = [tuple(c) for c in answer["counted"]]  # type: ignore[misc]
        if answer["error"] is not None:
            raise RuntimeError(answer["error"])
        response: dict[str, Any] = answer["response"]
        return response


def file_content(path: str, lines: int = 400) -> str:
    return f"# {path}\n" + "".join(f"line {i} of {path}\n" for i in range(lines))


def user_turn(turn: int) -> str:
    return f"Turn {turn}. FACT: fact-{turn}. Now read the file. tool:read_file" + json.dumps({"path": f"f{turn}.py"})


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy with a cache_control breakpoint on the newest block (the usual incremental-caching pattern)."""
    out = list(messages)
    last = dict(out[-1])
    content = last["content"]
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else [dict(b) for b in content]
    )
    blocks[-1]["cache_control"] = {"type": "ephemeral"}
    last["content"] = blocks
    out[-1] = last
    return out


def run_agent(
    fleet: Fleet,
    model: str,
    turns: int,
    file_lines: int = 120,
    pause: float = 0.0,
    before_turn: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """A tool-using agent that resends its whole, growing history on every call, each call served by the
    next worker of ``fleet``; ``pause``: seconds its user thinks between turns; ``before_turn(turn)`` runs
    before each turn (a fault test injects its fault there). Returns the history (never compacted by the
    app)."""
    anthropic = fleet.sdk == "anthropic"
    history: list[dict[str, Any]] = [] if anthropic else [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        if turn and pause:
            time.sleep(pause)
        if before_turn is not None:
            before_turn(turn)
        history.append(
            {"role": "user", "content": [{"type": "text", "text": user_turn(turn)}] if anthropic else user_turn(turn)}
        )
        for _ in range(5):
            if anthropic:
                response = fleet.call(
                    model=model,
                    max_tokens=1024,
                    system=SYSTEM,
                    tools=ANTHROPIC_TOOLS,
                    messages=with_breakpoint(history),
                )
                history.append({"role": "assistant", "content": response["content"]})
                uses = [b for b in response["content"] if b.get("type") == "tool_use"]
                if response.get("stop_reason") != "tool_use" or not uses:
                    break
                history.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": b["id"],
                                "content": file_content(b["input"]["path"], file_lines),
                            }
                            for b in uses
                        ],
                    }
                )
            else:
                response = fleet.call(model=model, max_tokens=1024, tools=OPENAI_TOOLS, messages=history)
                message = response["choices"][0]["message"]
                history.append({k: v for k, v in message.items() if v is not None})
                calls = message.get("tool_calls") or []
                if not calls:
                    break
                for call in calls:
                    path = json.loads(call["function"]["arguments"])["path"]
                    history.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": file_content(path, file_lines)}
                    )
    return history


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _cut_short(response: Any) -> bool:
    """Whether a (non-streamed) reply stopped at its length limit, in any of the three formats."""
    if not isinstance(response, dict):
        return False
    if response.get("stop_reason") == "max_tokens":
        return True
    choices = response.get("choices") or [{}]
    if isinstance(choices[0], dict) and choices[0].get("finish_reason") == "length":
        return True
    return (response.get("incomplete_details") or {}).get("reason") == "max_output_tokens"


@dataclass(frozen=True)
class Figures:
    """What the provider saw of one conversation."""

    #: Summaries asked of the summarizer: its requests, less those that continue a summary made in parts (a span
    #: larger than one request: see otel_context.compaction.summary.split_parts), which belong to one summary.
    summarizer_calls: int
    #: Summaries written: the summarizer's replies not cut at their length limit (a cut one is asked again,
    #: with more room, in the same compaction).
    summaries_written: int
    #: Main requests (not the summarizer's) and those the provider rejected.
    calls: int
    rejected: int
    #: Distinct conversation heads (the first message after the system prompt) of the last ``window`` turns.
    distinct_heads: int
    #: Distinct summary heads ever sent, and distinct serializations of them (equal when every worker sent
    #: each summary byte-identically).
    summary_heads: int
    summary_serializations: int
    #: Cache reads over all input tokens of the main requests.
    cache_read_fraction: float

    @classmethod
    def of(cls, exchanges: Sequence[Any], last_turns: int = 20) -> Figures:
        summaries, mains = [], []
        for exchange in exchanges:
            body = exchange.body if isinstance(exchange.body, dict) else {}
            messages = body.get("messages") or []
            if messages and NO_TOOLS_PREAMBLE in _text(messages[-1]):
                if CONTINUED_PART_PREFIX not in _text(messages[-1]):
                    summaries.append(exchange)
            elif messages:
                mains.append(exchange)
        heads: list[Any] = []
        turn_starts = []
        for exchange in mains:
            messages = [m for m in exchange.body["messages"] if m.get("role") not in ("system", "developer")]
            # The summary message (after the user's messages kept verbatim), or the first message.
            heads.append(next((m for m in messages if SUMMARY_MESSAGE_HEADER[:40] in _text(m)), messages[0]))
            last = messages[-1]
            if last.get("role") == "user" and "FACT: fact-" in _text(last):
                turn_starts.append(len(heads) - 1)
        since = turn_starts[-last_turns] if len(turn_starts) >= last_turns else 0
        recent = {json.dumps(h, sort_keys=True) for h in heads[since:]}
        summary_heads = [h for h in heads if SUMMARY_MESSAGE_HEADER[:40] in _text(h)]
        read = total = 0
        for exchange in mains:
            usage = exchange.usage or {}
            if "prompt_tokens" in usage:
                total += int(usage["prompt_tokens"])
                read += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            else:
                cache_read = int(usage.get("cache_read_input_tokens") or 0)
                read += cache_read
                total += (
                    int(usage.get("input_tokens") or 0)
                    + cache_read
                    + int(usage.get("cache_creation_input_tokens") or 0)
                )
        return cls(
            summarizer_calls=len(summaries),
            summaries_written=sum(1 for e in summaries if not _cut_short(e.response)),
            calls=len(mains),
            rejected=sum(1 for e in mains if e.status >= 400),
            distinct_heads=len(recent),
            summary_heads=len({json.dumps(h, sort_keys=True) for h in summary_heads}),
            summary_serializations=len({json.dumps(h) for h in summary_heads}),
            cache_read_fraction=read / total if total else 0.0,
        )
