"""Figures of a demo run, read back from the spans it produced.

The demo's terminal output is built from the telemetry, not from private counters: what the per-turn lines
and the summary say is what a user would see in Jaeger or Grafana. Every attribute is read by its name in
:mod:`otel_context.semconv`.

A *turn* is one ``invoke_agent`` span with everything under it: the agent's ``chat`` calls, its
``execute_tool`` spans, the ``compact`` spans the instrumentation opened inside a chat span, and the
summarizer's own ``chat`` call under each ``compact``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_context import semconv
from otel_context.span_figures import float_attr, int_attr

__all__ = [
    "CacheBreakFigures",
    "CallFigures",
    "CompactionFigures",
    "RunStats",
    "TurnStats",
    "compaction_kind",
    "turn_stats",
]

KIND_MICRO = "micro"
KIND_AUTO = "auto"
KIND_REACTIVE = "reactive"
KIND_MANUAL = "manual"
KIND_PROVIDER = "provider"
KINDS = (KIND_MICRO, KIND_AUTO, KIND_REACTIVE, KIND_MANUAL, KIND_PROVIDER)


def compaction_kind(trigger: str, strategy: str) -> str:
    """The layer of the cascade a compaction belongs to (docs/compaction.md): micro, auto, reactive, ..."""
    if strategy == semconv.STRATEGY_MICROCOMPACT:
        return KIND_MICRO
    if trigger == semconv.TRIGGER_REACTIVE:
        return KIND_REACTIVE
    if trigger == semconv.TRIGGER_MANUAL:
        return KIND_MANUAL
    if trigger == semconv.TRIGGER_PROVIDER or strategy == semconv.STRATEGY_PROVIDER:
        return KIND_PROVIDER
    return KIND_AUTO


@dataclass(frozen=True)
class CallFigures:
    """One ``chat`` span."""

    model: str
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    utilization: float | None
    summarizer: bool  #: the compactor's own call (a child of a ``compact`` span)
    failed: bool
    compacted: bool  #: gen_ai.conversation.compacted
    #: ``otel_context.cost.amount``: what the call cost (None: its model has no known price).
    cost: float | None = None

    @property
    def uncached_input(self) -> int:
        """Input tokens billed at the base price."""
        return max(self.input_tokens - self.cache_read - self.cache_write, 0)


@dataclass(frozen=True)
class CompactionFigures:
    """One ``compact`` span."""

    kind: str
    trigger: str
    strategy: str
    outcome: str
    input_tokens: int
    output_tokens: int
    duration_ms: float
    #: ``background`` (prepared before the threshold, applied without waiting) or ``inline``.
    mode: str = semconv.MODE_INLINE

    @property
    def deferred(self) -> bool:
        """A summary prepared in the background: what it saves counts when a call sends it
        (:class:`AppliedFigures`), not when it is ready."""
        return self.mode == semconv.MODE_BACKGROUND

    @property
    def tokens_saved(self) -> int:
        """Context tokens the compaction removed (0 for a failure)."""
        if self.outcome != semconv.OUTCOME_SUCCESS:
            return 0
        return max(self.input_tokens - self.output_tokens, 0)


@dataclass(frozen=True)
class AppliedFigures:
    """One ``otel_context.compaction.applied`` event: a summary prepared in the background, sent by a call
    (its ``compact`` span ended earlier, when it was ready). What it saved is what it removed from that call."""

    kind: str
    input_tokens: int
    output_tokens: int

    @property
    def tokens_saved(self) -> int:
        return max(self.input_tokens - self.output_tokens, 0)


@dataclass(frozen=True)
class CacheBreakFigures:
    """One ``otel_context.cache_break`` event."""

    intentional: bool
    reason: str
    tokens: int  #: lost tokens (unexpected) or expected lost tokens (intentional)


@dataclass
class TurnStats:
    """What one turn did, from its spans."""

    turn: int
    calls: list[CallFigures] = field(default_factory=list)
    compactions: list[CompactionFigures] = field(default_factory=list)
    cache_breaks: list[CacheBreakFigures] = field(default_factory=list)
    failed: bool = False
    #: The window the line's context % is against: the effective window (the window less the room reserved
    #: for the answer), the one the demo's header names and ``otel_context.context.utilization`` divides by.
    effective_window: int = 0
    #: Background summaries whose summarizer call ended in this turn (ready to apply at the threshold).
    #: Counted by compact span: the summarizer's fallback request is one summary, not two.
    prepared: int = 0
    #: Background summaries applied in this turn (the call that crossed the threshold did not wait): the
    #: ``otel_context.compaction.applied`` events on its calls (the summary's compact span ended earlier).
    applications: list[AppliedFigures] = field(default_factory=list)

    @property
    def applied(self) -> int:
        return len(self.applications)

    @property
    def agent_calls(self) -> list[CallFigures]:
        return [c for c in self.calls if not c.summarizer]

    @property
    def last_call(self) -> CallFigures | None:
        """The turn's last agent call that got an answer: the request the turn ended with.

        Every figure of the demo's turn line is this one call's (its input, its cache reads, its share of
        the window), so the line reads as one ``chat`` span a viewer shows; a context share is a property
        of one request, and a whole turn's sums would mix the requests before and after a compaction."""
        calls = [c for c in self.agent_calls if not c.failed]
        return calls[-1] if calls else None

    @property
    def context_tokens(self) -> int:
        """Input tokens of the turn's last call: how full the context was when the turn ended."""
        last = self.last_call
        return last.input_tokens if last is not None else 0

    @property
    def hit_ratio(self) -> float:
        """Cache-read tokens / input tokens of the turn's last call."""
        last = self.last_call
        return last.cache_read / last.input_tokens if last is not None and last.input_tokens else 0.0

    @property
    def utilization(self) -> float:
        """Input tokens of the turn's last call / :attr:`effective_window` (0 when either is unknown)."""
        return self.context_tokens / self.effective_window if self.effective_window else 0.0

    @property
    def kinds(self) -> list[str]:
        """The kinds of the turn's compactions that changed what was sent, in order: the inline ones that
        succeeded, then the background summaries applied (one prepared in this turn counts in the turn that
        sends it, and one never sent counts nothing: :attr:`prepared` says it was made)."""
        inline = [c.kind for c in self.compactions if c.outcome == semconv.OUTCOME_SUCCESS and not c.deferred]
        return inline + [a.kind for a in self.applications]


def _events(span: ReadableSpan) -> Iterable[CacheBreakFigures]:
    for event in span.events:
        if event.name != semconv.CACHE_BREAK_EVENT:
            continue
        attrs = event.attributes or {}
        intentional = bool(attrs.get(semconv.CACHE_BREAK_INTENTIONAL, False))
        key = semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS if intentional else semconv.CACHE_BREAK_LOST_TOKENS
        yield CacheBreakFigures(intentional, str(attrs.get(semconv.CACHE_BREAK_REASON, "")), int_attr(attrs, key))


def _applications(span: ReadableSpan) -> Iterable[AppliedFigures]:
    for event in span.events:
        if event.name != semconv.COMPACTION_APPLIED_EVENT:
            continue
        attrs = event.attributes or {}
        yield AppliedFigures(
            compaction_kind(str(attrs.get(semconv.COMPACTION_TRIGGER_SOURCE, "")), semconv.STRATEGY_SUMMARY),
            int_attr(attrs, semconv.COMPACTION_INPUT_TOKENS),
            int_attr(attrs, semconv.COMPACTION_OUTPUT_TOKENS),
        )


def turn_stats(turn: int, spans: Sequence[ReadableSpan], effective_window: int = 0) -> TurnStats:
    """Figures of one turn from its spans (any order; spans of other turns must not be included)."""
    stats = TurnStats(turn=turn, effective_window=effective_window)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    prepared: set[int | None] = set()  # the compact spans of background summaries that became ready
    for span in ordered:
        attrs = span.attributes or {}
        stats.cache_breaks.extend(_events(span))
        if span.name == semconv.COMPACT_SPAN:
            trigger = str(attrs.get(semconv.COMPACTION_TRIGGER_SOURCE, ""))
            strategy = str(attrs.get(semconv.COMPACTION_STRATEGY, ""))
            stats.compactions.append(
                CompactionFigures(
                    kind=compaction_kind(trigger, strategy),
                    trigger=trigger,
                    strategy=strategy,
                    outcome=str(attrs.get(semconv.COMPACTION_OUTCOME, "")),
                    input_tokens=int_attr(attrs, semconv.COMPACTION_INPUT_TOKENS),
                    output_tokens=int_attr(attrs, semconv.COMPACTION_OUTPUT_TOKENS),
                    duration_ms=float_attr(attrs, semconv.COMPACTION_DURATION_MS) or 0.0,
                    mode=str(attrs.get(semconv.COMPACTION_MODE, semconv.MODE_INLINE)),
                )
            )
        elif attrs.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT:
            parent_id = span.parent.span_id if span.parent is not None else None
            parent = by_id.get(parent_id) if parent_id is not None else None
            # An agent call is a child of the turn's invoke_agent span. A summarizer call is a child of a
            # compact span, which ends in the same turn when inline; a background summary's compact span
            # ends when the summary is ready, which may fall in the next turn's spans, so a chat span whose
            # parent is not among this turn's spans is a background summarizer's call.
            summarizer = parent_id is not None and (parent is None or parent.name == semconv.COMPACT_SPAN)
            background = summarizer and (
                parent is None or (parent.attributes or {}).get(semconv.COMPACTION_MODE) == semconv.MODE_BACKGROUND
            )
            if background and span.status.status_code != StatusCode.ERROR:
                prepared.add(parent_id)
            stats.applications.extend(_applications(span))
            stats.calls.append(
                CallFigures(
                    model=str(attrs.get(semconv.GEN_AI_REQUEST_MODEL, "")),
                    input_tokens=int_attr(attrs, semconv.GEN_AI_USAGE_INPUT_TOKENS),
                    output_tokens=int_attr(attrs, semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
                    cache_read=int_attr(attrs, semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
                    cache_write=int_attr(attrs, semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS),
                    utilization=float_attr(attrs, semconv.CONTEXT_UTILIZATION),
                    summarizer=summarizer,
                    failed=span.status.status_code == StatusCode.ERROR,
                    compacted=bool(attrs.get(semconv.GEN_AI_CONVERSATION_COMPACTED, False)),
                    cost=float_attr(attrs, semconv.COST_AMOUNT) if semconv.COST_AMOUNT in attrs else None,
                )
            )
        elif attrs.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT:
            stats.failed = span.status.status_code == StatusCode.ERROR
    stats.prepared = len(prepared)
    return stats


@dataclass
class RunStats:
    """Totals over the turns of a run."""

    turns: list[TurnStats] = field(default_factory=list)
    #: Compactions settled after the last turn: background summaries prepared but never applied, dropped
    #: (``outcome=discarded``) when the instrumentation was removed.
    after_last_turn: list[CompactionFigures] = field(default_factory=list)
    #: Calls that ended after the last turn: the summarizer's, of background summaries that landed then.
    calls_after_last_turn: list[CallFigures] = field(default_factory=list)

    def add(self, turn: TurnStats) -> None:
        self.turns.append(turn)

    @property
    def calls(self) -> list[CallFigures]:
        return [c for t in self.turns for c in t.calls] + self.calls_after_last_turn

    @property
    def compactions(self) -> list[CompactionFigures]:
        return [c for t in self.turns for c in t.compactions] + self.after_last_turn

    @property
    def cache_breaks(self) -> list[CacheBreakFigures]:
        return [b for t in self.turns for b in t.cache_breaks]

    @property
    def applications(self) -> list[AppliedFigures]:
        return [a for t in self.turns for a in t.applications]

    def total(self, attr: str, *, summarizer: bool | None = None) -> int:
        """Sum of a :class:`CallFigures` field over all calls (optionally only agent or summarizer calls)."""
        return sum(int(getattr(c, attr)) for c in self.calls if summarizer is None or c.summarizer == summarizer)

    def compactions_by_kind(self) -> dict[str, list[CompactionFigures]]:
        """Every compaction, grouped by kind, in cascade order; kinds never seen are left out (a kind whose
        only sign is a background summary applied on its path, as the reactive one, has an empty list)."""
        grouped: dict[str, list[CompactionFigures]] = {}
        applied = {a.kind for a in self.applications}
        for kind in KINDS:
            found = [c for c in self.compactions if c.kind == kind]
            if found or kind in applied:
                grouped[kind] = found
        return grouped

    def kinds_seen(self) -> set[str]:
        """Kinds with at least one successful compaction."""
        return {k for t in self.turns for k in t.kinds}

    @property
    def failed_turns(self) -> int:
        return sum(1 for t in self.turns if t.failed)
