"""One demo session: provider, instrumentation, agent, turns, telemetry, in that order and undone in reverse.

:func:`run` is what ``otel-context demo`` calls and what the tests call in-process. It starts the embedded
simulated provider (or, with ``live``, uses the real API), instruments the SDKs the way ``import
otel_context.auto`` does but with the demo's own providers and settings (a small compaction window and
microcompaction on), runs the scripted session through :class:`~otel_context.demo.agent.CodingAgent`, and
hands each finished turn's figures to a callback (the terminal report).

The reactive compaction. The compactor is configured for a window of ``window`` tokens and the simulated
model serves exactly that, so the thresholds keep the session inside it (microcompaction, then summaries).
But a client's token estimate can be wrong (real tokenizers count code and JSON differently), and then
the provider refuses a request the client thought would fit. The demo shows that once: about 60 % into the
run, on a call that carries fresh tool results while the request is well into the window but below the
auto threshold, it queues a fault on the simulated provider (``otel_context.testing.Fault``) that answers
that one request with the provider's "prompt is too long" / ``context_length_exceeded`` error. The
instrumentation compacts reactively and retries once, and the retry goes through.

Ctrl-C: the current turn is abandoned, everything is flushed and shut down, and the figures so far are
returned with ``interrupted=True``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_context import semconv
from otel_context.compaction.budget import budget_for
from otel_context.demo import telemetry as demo_telemetry
from otel_context.demo.agent import AnthropicBackend, Backend, CodingAgent, OpenAIBackend, ToolCall, TurnOutcome
from otel_context.demo.pricing import CostEstimate, estimate
from otel_context.demo.scenario import FACTS, build_script
from otel_context.demo.stats import KIND_REACTIVE, RunStats, TurnStats, turn_stats
from otel_context.demo.tools import ToolResult, Workspace
from otel_context.sdk_setup import ExportTally
from otel_context.settings import Settings
from otel_context.testing.tokens import WireFormat

__all__ = ["DEFAULT_TURNS", "DEFAULT_WINDOW", "DemoOptions", "DemoResult", "run"]

DEFAULT_TURNS = 50
DEFAULT_WINDOW = 24_000
#: The session's largest tool results are about 9,400 tokens; a smaller window cannot hold one of them.
MIN_WINDOW = 12_000
MODELS = {semconv.PROVIDER_ANTHROPIC: "claude-sonnet-4-6", semconv.PROVIDER_OPENAI: "gpt-4.1"}
MAX_TOKENS = 1_024
#: A summarizer request takes this many times the model's --latency (the issue's benchmark: 0.5 s and 3 s).
SUMMARY_LATENCY_FACTOR = 6
MAX_LATENCY = 60.0
#: The start of every run's conversation id (``gen_ai.conversation.id``, a session in Arize Phoenix): one id per
#: run, so that a viewer does not merge the runs of a day into one session.
CONVERSATION_PREFIX = "otel-context-demo"
#: After Ctrl-C, the most the demo waits for a summary in flight before it shuts down.
INTERRUPTED_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class DemoOptions:
    """What ``otel-context demo`` was asked for (validated by :meth:`check`)."""

    provider: str = semconv.PROVIDER_ANTHROPIC
    turns: int = DEFAULT_TURNS
    window: int = DEFAULT_WINDOW
    seed: int = 7
    json_path: Path | None = None
    live: bool = False
    #: Seconds the simulated model takes per request; its summarizer requests take SUMMARY_LATENCY_FACTOR
    #: times as long (a summary writes far more tokens than an agent's step).
    latency: float = 0.0
    #: Summaries prepared in the background before the threshold (the library's default) or inline (the
    #: demo's default: its figures stay fixed for a seed, where a background summary lands whenever its
    #: thread gets to it, and the scripted too-long fault could meet the summarizer's request instead).
    background: bool = False

    @property
    def model(self) -> str:
        return MODELS[self.provider]

    @property
    def effective_window(self) -> int:
        """The window less the room the compactor keeps for each answer (the agent's ``max_tokens``): what
        the instrumentation's ``otel_context.context.utilization`` divides by, and so the turn lines' context %."""
        budget = budget_for(self.model, Settings(), max_output_tokens=MAX_TOKENS, window=self.window)
        return budget.effective if budget is not None else self.window

    def check(self) -> None:
        """Raise ValueError with a message fit for the command line."""
        if self.provider not in MODELS:
            raise ValueError(f"--provider {self.provider!r}: choose one of {', '.join(MODELS)}")
        if self.turns < 1:
            raise ValueError(f"--turns {self.turns}: must be at least 1")
        if self.window < MIN_WINDOW:
            raise ValueError(f"--window {self.window}: must be at least {MIN_WINDOW:,} tokens")
        if not 0 <= self.latency <= MAX_LATENCY:
            raise ValueError(f"--latency {self.latency}: must be between 0 and {MAX_LATENCY:g} seconds")
        if self.latency and self.live:
            raise ValueError("--latency applies to the simulated provider: drop it with --live")


@dataclass
class DemoResult:
    """Everything the report needs after the run."""

    options: DemoOptions
    stats: RunStats = field(default_factory=RunStats)
    outcomes: list[TurnOutcome] = field(default_factory=list)
    spans: Sequence[ReadableSpan] = ()
    interrupted: bool = False
    #: Turn at which the simulated provider rejected a request as too long (None: never).
    too_long_turn: int | None = None
    #: FACT lines the user gave that the final request still carried (None: not checked, e.g. live), and
    #: how many the user gave in this run.
    facts_kept: int | None = None
    facts_total: int = 0
    otlp: tuple[str, str] | None = None
    #: This run's conversation id (see :func:`new_conversation_id`).
    conversation_id: str = ""
    #: OTLP exports by signal ("spans", "metrics"): what became of them (the tallies the exporters count into).
    exports: dict[str, ExportTally] = field(default_factory=dict)
    #: Counter totals by metric name (the in-memory metric reader, read at the end of the run), and the sum
    #: of ``otel_context.compaction.tokens_saved`` under its name.
    metrics: dict[str, float] = field(default_factory=dict)
    #: ``otel_context.compaction.wait`` by mode: (requests that waited for a compaction, seconds waited).
    waits: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def passed_tokens(self) -> list[int]:
        return [t for o in self.outcomes for t in o.passed_tokens]

    def cost(self) -> CostEstimate:
        return estimate(self.options.provider, self.options.model, self.stats.calls, self.passed_tokens)

    def first_turn_over_window(self) -> int | None:
        """The first turn whose never-compacted request would not have fit in the window."""
        for number, outcome in enumerate(self.outcomes, 1):
            if any(t > self.options.window for t in outcome.passed_tokens):
                return number
        return None


TurnCallback = Callable[[TurnStats, TurnOutcome], None]


def _instrument(options: DemoOptions, tel: demo_telemetry.DemoTelemetry) -> Callable[[], None]:
    """Instrument both SDKs with the demo's providers and compaction settings; returns the undo."""
    import otel_context
    from otel_context import engine

    # A fresh session: nothing learned by an earlier run in this process (tests run several) carries over.
    engine.reset()
    otel_context.instrument(
        tracer_provider=tel.tracer_provider,
        meter_provider=tel.meter_provider,
        auto_compact_window=options.window,
        microcompact=True,
        background_compaction=options.background,
    )
    return otel_context.uninstrument


def new_conversation_id() -> str:
    """A conversation id of its own for a run: the prefix, when it started, and a random part (two runs in the
    same second)."""
    return f"{CONVERSATION_PREFIX}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _conversation(conversation_id: str) -> contextlib.AbstractContextManager[Any]:
    import otel_context

    factory = getattr(otel_context, "conversation", None)
    return factory(conversation_id) if factory is not None else contextlib.nullcontext()


def _backend(options: DemoOptions, sim: Any) -> Backend:
    if options.provider == semconv.PROVIDER_ANTHROPIC:
        if options.live:
            import anthropic

            return AnthropicBackend(anthropic.Anthropic(), options.model, MAX_TOKENS)
        return AnthropicBackend(sim.anthropic(), options.model, MAX_TOKENS)
    if options.live:
        import openai

        return OpenAIBackend(openai.OpenAI(), options.model, MAX_TOKENS)
    return OpenAIBackend(sim.openai(), options.model, MAX_TOKENS)


@contextlib.contextmanager
def _provider(options: DemoOptions) -> Iterator[Any]:
    if options.live:
        yield None
        return
    from otel_context.testing import SimulatedProvider

    with SimulatedProvider(
        windows={options.model: options.window},
        latency=options.latency,
        summary_latency=options.latency * (SUMMARY_LATENCY_FACTOR - 1),
    ) as sim:
        yield sim


class _TooLongOnce:
    """Makes the simulated provider reject one request as too long, once (see the module docstring)."""

    def __init__(self, sim: Any, options: DemoOptions, wire_format: WireFormat) -> None:
        self.sim = sim
        self.options = options
        self.wire_format = wire_format
        self.start_turn = max(2, round(options.turns * 0.6))
        self.late_turn = max(2, round(options.turns * 0.8))
        self.turn = 0
        self.injected_at: int | None = None
        self.done = sim is None

    def begin(self, turn: int) -> None:
        self.turn = turn

    def before_call(self, step: int, pending: Sequence[tuple[ToolCall, ToolResult]]) -> None:
        if self.done or self.injected_at is not None or self.turn < self.start_turn or step == 0 or not pending:
            return
        from otel_context.testing import Fault, count_request_tokens, count_tokens

        new = sum(count_tokens(result.content) for _, result in pending)
        last = _last_agent_exchange(self.sim)
        if new < 800 or last is None or not isinstance(last.body, Mapping):
            return
        projected = count_request_tokens(last.body, self.wire_format) + new
        window = self.options.window
        # Below the auto threshold (about 0.89 of the window, so that no other compaction runs first), with
        # most of the request older than this turn (something to summarize). In the last fifth of the run, any
        # request past 40 % of the window will do.
        low = 0.55 if self.turn < self.late_turn else 0.4
        if not (low * window <= projected <= 0.82 * window and new <= 0.5 * projected):
            return
        # No token counts in the message: the demo's fault must not teach the compactor a false window or
        # estimate factor (it learns both from a real "N tokens > M maximum").
        if self.wire_format == "anthropic_messages":
            fault = Fault(
                status=400, error_type="invalid_request_error", message="prompt is too long", path="/messages"
            )
        else:
            fault = Fault(
                status=400,
                error_type="invalid_request_error",
                code="context_length_exceeded",
                message="Your input exceeds the context window of this model. Please adjust your input and try again.",
                path="/chat/completions",
            )
        self.sim.inject(fault)
        self.injected_at = self.turn

    def end(self, stats: TurnStats) -> None:
        if KIND_REACTIVE in stats.kinds:
            self.done = True
        elif self.injected_at is not None and not self.done:
            self.sim.clear_faults()  # not consumed as planned: try again on a later call
            self.injected_at = None


def _last_agent_exchange(sim: Any) -> Any:
    """The agent's last request (a background summarizer's request may have come after it), or None."""
    from otel_context.testing.scripted import summary_pattern

    for exchange in reversed(sim.exchanges):
        items = (
            exchange.body.get("messages") or exchange.body.get("input") if isinstance(exchange.body, Mapping) else None
        )
        if not (isinstance(items, list) and items and summary_pattern().search(repr(items[-1]))):
            return exchange
    return None


def _facts_kept(sim: Any) -> int | None:
    """How many FACT lines the last request the agent sent still carried."""
    last = _last_agent_exchange(sim) if sim is not None else None
    if last is None:
        return None
    text = repr(last.body)
    return sum(1 for fact in FACTS if fact in text)


def _wait_for_summaries(interrupted: bool) -> None:
    """Let the summaries still in flight land before the providers shut down, as an app should: their spans
    are then exported whole (a ready one never applied is dropped by the uninstrumentation, as ``discarded``).
    Briefly after Ctrl-C: the user asked to stop."""
    import otel_context

    otel_context.wait_for_summaries(
        INTERRUPTED_WAIT_SECONDS if interrupted else otel_context.DEFAULT_SUMMARY_WAIT_SECONDS
    )


def run(options: DemoOptions, on_turn: TurnCallback | None = None) -> DemoResult:
    """Run the demo session (see the module docstring)."""
    options.check()
    effective = options.effective_window
    tel = demo_telemetry.setup(options.json_path)
    result = DemoResult(options, otlp=tel.otlp, exports=tel.exports)
    undo: Callable[[], None] | None = None
    ended: int | None = None  # spans finished when the last turn ended
    try:
        undo = _instrument(options, tel)
        with _provider(options) as sim:
            backend = _backend(options, sim)
            # The simulated provider's tokenizer (a pure function, no server) sizes the never-compacted
            # requests for the cost comparison; against the real API it is an approximation.
            from otel_context.testing import count_request_tokens

            counter = count_request_tokens
            tracer = tel.tracer_provider.get_tracer(__name__)
            agent = CodingAgent(backend, Workspace(options.seed), tracer, live=options.live, count_tokens=counter)
            drop = _TooLongOnce(sim, options, backend.wire_format)
            try:
                script = build_script(options.turns, options.seed)
                result.facts_total = sum(1 for fact in FACTS if any(fact in turn.text for turn in script))
                result.conversation_id = new_conversation_id()
                with _conversation(result.conversation_id):
                    for number, turn in enumerate(script, 1):
                        mark = len(tel.finished_spans())
                        drop.begin(number)
                        outcome = agent.run_turn(turn, before_call=drop.before_call)
                        stats = turn_stats(number, tel.finished_spans()[mark:], effective)
                        drop.end(stats)
                        result.outcomes.append(outcome)
                        result.stats.add(stats)
                        if on_turn is not None:
                            on_turn(stats, outcome)
            except KeyboardInterrupt:
                result.interrupted = True
            result.too_long_turn = drop.injected_at
            result.facts_kept = _facts_kept(sim)
            # While the simulated provider still answers: a summary in flight sends its requests to it (once it
            # stopped, the summary failed with a refused connection, a warning and a failed compaction).
            ended = len(tel.finished_spans())
            _wait_for_summaries(result.interrupted)
    finally:
        if ended is None:
            ended = len(tel.finished_spans())
        if undo is not None:
            _wait_for_summaries(result.interrupted)  # at once, unless a turn raised before the wait above
            undo()
        # A background summary in flight lands now, and one waiting to be applied is dropped: their spans end here.
        after = turn_stats(0, tel.finished_spans()[ended:])
        result.stats.after_last_turn, result.stats.calls_after_last_turn = after.compactions, after.calls
        result.metrics = tel.metric_totals()
        saved = tel.histogram_by(semconv.METRIC_COMPACTION_TOKENS_SAVED, semconv.COMPACTION_TRIGGER_SOURCE)
        result.metrics[semconv.METRIC_COMPACTION_TOKENS_SAVED] = sum(total for _, total in saved.values())
        result.waits = tel.histogram_by(semconv.METRIC_COMPACTION_WAIT, semconv.COMPACTION_MODE)
        tel.shutdown()
        result.spans = tel.finished_spans()
    return result
