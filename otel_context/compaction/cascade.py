"""The compaction cascade with its telemetry: microcompact, then summary; one ``compact`` span per attempt.

Order of the cascade (docs/compaction.md): microcompact first when enabled (no LLM call), then the summary
when the estimate is still at or above the threshold. Every attempt that could change what is sent gets
a ``compact`` span (docs/telemetry.md) with its figures, ``outcome`` success or failure, and ERROR status +
``error.type`` on failure. The summarizer's own call becomes a child ``chat`` span because the
``compact`` span is current while the summary request is yielded to the instrumentation.

Safety: a history the compactor does not understand (unknown blocks, pairing already broken by the app,
conversation state kept at the provider) is not touched; after every transform the pairing invariant is
checked and repaired, and a result that still fails validation is discarded. Nothing raised here reaches
the app: the engine sends the original request when a compaction fails.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode

from otel_context import pricing, process_state, semconv, telemetry
from otel_context.compaction import alerts, viewers
from otel_context.compaction import hooks as hooks_mod
from otel_context.compaction import repair as repair_mod
from otel_context.compaction import retention as retention_mod
from otel_context.compaction import trail as trail_mod
from otel_context.compaction.budget import Budget
from otel_context.compaction.job import CompactionJob
from otel_context.compaction.microcompact import microcompact_items
from otel_context.compaction.summary import CompactionError, SummaryOutcome, summarize
from otel_context.conversation import ConversationState
from otel_context.conversation.breaker import MAX_CONSECUTIVE_FAILURES
from otel_context.flow import SummaryRequest, SummaryResult, drive, perform_with
from otel_context.formats.base import WireFormatAdapter
from otel_context.settings import configured_summary_model, reject_summary_model, summary_model_for
from otel_context.tokens import estimate_fixed, estimate_items

Item = Mapping[str, Any]

#: Strategies each trigger can use, for counters pre-created at 0.
TRIGGER_STRATEGIES: dict[str, tuple[str, ...]] = {
    semconv.TRIGGER_AUTO: (semconv.STRATEGY_MICROCOMPACT, semconv.STRATEGY_SUMMARY),
    semconv.TRIGGER_MANUAL: (semconv.STRATEGY_MICROCOMPACT, semconv.STRATEGY_SUMMARY),
    semconv.TRIGGER_REACTIVE: (semconv.STRATEGY_SUMMARY,),
    semconv.TRIGGER_PROVIDER: (semconv.STRATEGY_PROVIDER,),
}

_precreated: set[tuple[int, str, str]] = set()
# Reset and a fork's child: kept (the series were started on the instruments, which both keep; the key names
# the instrument, so reconfigured telemetry starts afresh anyway).
process_state.register(__name__, ("_precreated",), on_reset=None, in_forked_child=None)


def precreate_counters(provider: str, model: str | None) -> None:
    """Start every trigger x strategy x outcome series of ``otel_context.compactions`` at 0.

    Prometheus' ``increase()`` cannot see a series born at 1, so the first failure would be invisible.
    Done once per provider/model (bounded: model names are few).
    """
    counter = telemetry.get().instruments.compactions
    key = (id(counter), provider, model or "")  # per instrument: reconfigured telemetry starts afresh
    if key in _precreated:
        return
    _precreated.add(key)
    for trigger, strategies in TRIGGER_STRATEGIES.items():
        for strategy in strategies:
            for outcome in semconv.OUTCOMES:
                counter.add(0, _metric_attrs(trigger, strategy, outcome, provider, model, semconv.MODE_INLINE))
    # Only the automatic summary is ever prepared in the background.
    for outcome in (*semconv.OUTCOMES, semconv.OUTCOME_DISCARDED):
        attrs = _metric_attrs(
            semconv.TRIGGER_AUTO, semconv.STRATEGY_SUMMARY, outcome, provider, model, semconv.MODE_BACKGROUND
        )
        counter.add(0, attrs)
    for reason in semconv.DISCARD_REASONS:
        _count_discarded_spend(0.0, semconv.TRIGGER_AUTO, semconv.STRATEGY_SUMMARY, semconv.MODE_BACKGROUND, reason)
    lives = telemetry.get().instruments.background_summaries
    named = {semconv.GEN_AI_PROVIDER_NAME: provider, semconv.GEN_AI_REQUEST_MODEL: model or ""}
    for event in (semconv.BACKGROUND_PREPARED, semconv.BACKGROUND_APPLIED):
        lives.add(0, {semconv.BACKGROUND_EVENT: event, **named})
    for reason in semconv.DISCARD_REASONS:
        lives.add(
            0,
            {
                semconv.BACKGROUND_EVENT: semconv.BACKGROUND_DISCARDED,
                semconv.COMPACTION_DISCARD_REASON: reason,
                **named,
            },
        )


def _metric_attrs(
    trigger: str, strategy: str, outcome: str, provider: str, model: str | None, mode: str
) -> dict[str, Any]:
    return {
        semconv.COMPACTION_TRIGGER_SOURCE: trigger,
        semconv.COMPACTION_STRATEGY: strategy,
        semconv.COMPACTION_OUTCOME: outcome,
        semconv.COMPACTION_MODE: mode,
        semconv.GEN_AI_PROVIDER_NAME: provider,
        semconv.GEN_AI_REQUEST_MODEL: model or "",
    }


def count_skipped(trigger: str, provider: str, model: str | None, strategy: str = semconv.STRATEGY_SUMMARY) -> None:
    """Count a compaction that was due but not attempted (breaker open, veto)."""
    telemetry.get().instruments.compactions.add(
        1, _metric_attrs(trigger, strategy, semconv.OUTCOME_SKIPPED, provider, model, semconv.MODE_INLINE)
    )


def record_wait(seconds: float, trigger: str, mode: str) -> None:
    """How long a caller's request waited for a compaction before it went out (0: a prepared summary)."""
    telemetry.get().instruments.compaction_wait.record(
        max(0.0, seconds), {semconv.COMPACTION_MODE: mode, semconv.COMPACTION_TRIGGER_SOURCE: trigger}
    )


def not_understood_reason(
    adapter: WireFormatAdapter, body: Mapping[str, Any], items: Sequence[Item], budget: Budget | None = None
) -> str | None:
    """Why this history must be left alone, or None when the compactor can work on it."""
    if budget is not None:
        fixed = estimate_fixed(adapter, body)
        if fixed >= budget.auto_threshold:
            return f"the system prompt and tools alone (~{fixed} tokens) reach the threshold ({budget.auto_threshold})"
    reason = adapter.server_state_reason(body) or adapter.has_unknown_content(items)
    if reason:
        return str(reason)
    problems = adapter.validate(items)
    if problems:
        return "pairing already broken: " + "; ".join(str(p) for p in problems[:3])
    return None


@dataclass(frozen=True)
class CompactionOutcome:
    """What one compaction attempt did, made whole by the step that knows it and never changed after (a later
    step returns a new value: see :mod:`otel_context.compaction.job`). ``items`` is None when nothing changed."""

    strategy: str = semconv.STRATEGY_SUMMARY
    outcome: str = semconv.OUTCOME_SKIPPED
    items: list[Item] | None = None
    #: Index in ``job.items`` up to which items were replaced; ``head`` replaced them.
    cut: int = 0
    head: tuple[Item, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    messages_compacted: int = 0
    duration_ms: float = 0.0
    error_type: str | None = None
    error_message: str | None = None
    skipped_reason: str | None = None
    #: The summarizer's last reply's finish reason (normalized), when one came back.
    finish_reason: str | None = None
    #: The provider compacted (the items are the provider's, not ours to send).
    provider_done: bool = False
    #: A deferred (background) success: its ``compact`` span, still open until :func:`settle`.
    open_span: Span | None = None
    #: What the result kept of what it dropped (:mod:`.retention`), measured when it succeeded (a summary's:
    #: after its repair).
    retention: retention_mod.Retention | None = None
    #: The summary that came back, whole (None: not a summary, or none came back): its text, its head and its
    #: figures, its repair measured on the request as sent once the attempt succeeded. A new figure of the
    #: summary is a field of :class:`SummaryOutcome`, read from here (see :func:`_close_span`).
    summarized: SummaryOutcome | None = None
    #: What the summarizer's calls cost (USD; ``otel_context.compaction.cost``), None without a summarizer call
    #: or a known price.
    cost: float | None = None
    #: Why a ``discarded`` background summary was never applied (``semconv.DISCARD_*``): on its span, and on
    #: the discarded-spend counter.
    discard_reason: str | None = None

    @property
    def changed(self) -> bool:
        return self.items is not None or self.provider_done

    @property
    def summary(self) -> str:
        """The summary (as the summarizer wrote it, and the repair's block after it); empty: none."""
        return self.summarized.summary if self.summarized is not None else ""

    @property
    def summary_tokens(self) -> int:
        """The summarizer's output tokens, or the size of what the provider compacted the history to."""
        if self.summarized is not None:
            return self.summarized.summary_tokens
        return self.output_tokens if self.provider_done else 0

    @property
    def files_rehydrated(self) -> int:
        return self.summarized.files_rehydrated if self.summarized is not None else 0

    @property
    def summary_head(self) -> int:
        """Leading items of ``head`` that are the summary's (its message and the user's messages): the anchor
        of the next compaction ends there (0: no summary)."""
        return len(self.summarized.head) if self.summarized is not None else 0

    @property
    def repair(self) -> repair_mod.Repair | None:
        """A summary's repair (:mod:`.repair`): the figure before it, what it restored and what did not fit."""
        return self.summarized.repair if self.summarized is not None else None


def _context_tokens(adapter: WireFormatAdapter, body: Mapping[str, Any], items: Sequence[Item]) -> int:
    return estimate_fixed(adapter, body) + estimate_items(adapter, items)


def _reported_sizes(job: CompactionJob, before: int, after: int, calibration: float | None) -> tuple[int, int]:
    """The context before and after a summary, for the span: (input_tokens, output_tokens), same units.

    ``before``/``after`` are our padded estimates of the two requests. When the summarizer's reply carried
    the provider's count of its request (which holds the conversation), both are converted to provider
    tokens with that measured ratio: the after figure then matches what the provider reports for the
    compacted request within a few per cent.

    Scaling by ``job.estimated_tokens / before`` instead (the engine's pre-call estimate, anchored on the
    last reported usage) is only as right as that anchor: it counts the reported usage plus an estimate of
    what was appended, so any error in the appended part (or in the anchor, as when the engine once counted a
    re-sent last message twice: +77 % in the demo) goes into both figures. That ratio remains the fallback
    when nothing was measured (a custom summarizer, another summary model): it is the only figure that may
    carry the provider's count (the reactive path passes the count from the "too long" error).
    """
    if calibration is not None:
        return math.ceil(before * calibration), math.ceil(after * calibration)
    return job.estimated_tokens, int(after * job.estimated_tokens / before) if before else after


def checked(adapter: WireFormatAdapter, items: list[Item]) -> list[Item]:
    """Validate the pairing invariant; repair once; raise when still broken (the result is then unusable)."""
    if not adapter.validate(items):
        return items
    repaired = list(adapter.repair(items))
    problems = adapter.validate(repaired)
    if problems:
        raise CompactionError("invariant_violation", "; ".join(str(p) for p in problems[:3]))
    telemetry.log_once("cascade.repaired", "otel_context: a compaction result needed a pairing repair")
    return repaired


def _start_span(job: CompactionJob, strategy: str) -> Span:
    span = _open_span(job.parent, job.trigger, strategy, job.conversation_id, job.threshold, job.mode, job.links)
    span.set_attribute(semconv.COMPACTION_INPUT_TOKENS, job.estimated_tokens)
    viewers.describe_input(span, strategy, job.trigger, job.mode, job.estimated_tokens)
    if job.mode == semconv.MODE_BACKGROUND and job.links:  # the call that started it, named for any viewer
        telemetry.name_span(
            span, semconv.COMPACTION_STARTED_BY_TRACE_ID, semconv.COMPACTION_STARTED_BY_SPAN_ID, job.links[0]
        )
    return span


def start_background_span(job: CompactionJob) -> Span:
    """Open the ``compact`` span of a summary prepared in the background, on the thread of the call that
    starts it (the summary then runs elsewhere): that call names it (see ``engine.background``), and it
    names that call. :func:`run_summary` takes the span over (or ends it as ``skipped`` when the
    ``pre_compact`` hook vetoes)."""
    return _start_span(job, semconv.STRATEGY_SUMMARY)


def _open_span(
    parent: Span | None,
    trigger: str,
    strategy: str,
    conversation_id: str | None,
    threshold: int | None,
    mode: str = semconv.MODE_INLINE,
    links: Sequence[SpanContext] = (),
) -> Span:
    """A ``compact`` span under ``parent`` (the current span when None), with what is known before it runs."""
    tracer = telemetry.get().tracer
    parent_ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = tracer.start_span(
        semconv.COMPACT_SPAN, context=parent_ctx, kind=SpanKind.INTERNAL, links=[trace.Link(c) for c in links]
    )
    span.set_attribute(semconv.COMPACTION_TRIGGER_SOURCE, trigger)
    span.set_attribute(semconv.COMPACTION_STRATEGY, strategy)
    span.set_attribute(semconv.COMPACTION_MODE, mode)
    if conversation_id:
        span.set_attribute(semconv.GEN_AI_CONVERSATION_ID, conversation_id)
    if threshold is not None:
        span.set_attribute(semconv.COMPACTION_THRESHOLD_TOKENS, threshold)
    return span


def _finish(job: CompactionJob, span: Span, out: CompactionOutcome, started: float) -> CompactionOutcome:
    """Breaker, cache announcement, span attributes and metrics of one attempt; the attempt's outcome, with its
    duration and retention."""
    out = replace(out, duration_ms=(time.perf_counter() - started) * 1000.0)
    if out.outcome == semconv.OUTCOME_SUCCESS and out.items is not None:
        out = _check_retention(job, span, out)  # on the result as sent; a background one's span carries it too
    if job.deferred and out.outcome == semconv.OUTCOME_SUCCESS:
        return replace(out, open_span=span)  # settled when applied or discarded
    settle(job, span, out)
    if job.mode == semconv.MODE_INLINE and out.strategy == semconv.STRATEGY_SUMMARY and job.trigger in _WAITED:
        record_wait(out.duration_ms / 1000.0, job.trigger, job.mode)
    return out


def _check_retention(job: CompactionJob, span: Span, out: CompactionOutcome) -> CompactionOutcome:
    """What the result kept of what it dropped, on the span (after the duration: not the compaction's own
    time) and on the outcome returned; never fails the compaction."""
    items = out.items
    assert items is not None
    cut = out.cut if out.strategy == semconv.STRATEGY_SUMMARY else 0
    try:
        summarized = out.summarized
        if summarized is not None and summarized.repair is not None:  # checked, and repaired, before it was used
            # Both figures on the request as sent (the files restored after the summary count, as before).
            repair = summarized.repair.measured(retention_mod.request_text(job.adapter, job.body, items))
            retention = repair.after
            out = replace(out, summarized=replace(summarized, repair=repair), retention=retention)
            repair_mod.annotate(span, repair)
            if summarized.trail is not None:
                trail_mod.annotate(span, summarized.trail)
        else:
            retention = retention_mod.measure(job.adapter, job.body, job.items, items, out.cut, out.strategy)
            out = replace(out, retention=retention)
        retention_mod.annotate(span, retention, cut, job.settings.capture_content != "NO_CONTENT")
    except Exception:
        telemetry.log_once("cascade.retention", "otel_context: the retention check failed", exc_info=True)
    return out


#: Triggers whose inline summary the caller's request waits for (the explicit API's caller asked for it).
_WAITED = (semconv.TRIGGER_AUTO, semconv.TRIGGER_REACTIVE)


def settle(job: CompactionJob, span: Span, out: CompactionOutcome) -> None:
    """The end of one attempt: breaker, cache announcement (when it changes what is sent), span, metrics.

    A background summary is settled when it is ready (``success``, or ``discarded`` when it can never be
    applied, which does not count on the breaker); its cache break is announced by the call that applies it.
    """
    state = job.state
    if state is not None:
        if out.outcome != semconv.OUTCOME_DISCARDED:
            with state.lock:  # concurrent calls of one conversation count on one breaker
                _count_on_breaker(job, out, state)
        if out.changed and out.outcome != semconv.OUTCOME_DISCARDED and not job.deferred and state.detector is not None:
            announce(span, state, job.provider, job.model, out.output_tokens)
    shown = out.summary if job.settings.capture_content != "NO_CONTENT" else None  # message text: capture only
    _close_span(
        span,
        out,
        state,
        job.trigger,
        job.provider,
        job.model,
        timed=True,
        mode=job.mode,
        summary=shown,
        max_bytes=job.settings.capture_max_chars,
    )


def _close_span(
    span: Span,
    out: CompactionOutcome,
    state: ConversationState | None,
    trigger: str,
    provider: str,
    model: str,
    *,
    timed: bool,
    mode: str = semconv.MODE_INLINE,
    summary: str | None = None,
    max_bytes: int = 0,
) -> None:
    """The figures of an attempt on its ``compact`` span, the span ended, and the compaction metrics.

    ``timed``: whether we measured the attempt's duration (a compaction the provider did was not ours to time);
    ``summary``: the summary's text for the span's output, only with content capture on (cut to ``max_bytes``).
    """
    span.set_attribute(semconv.COMPACTION_OUTCOME, out.outcome)
    if out.discard_reason is not None:
        span.set_attribute(semconv.COMPACTION_DISCARD_REASON, out.discard_reason)
    span.set_attribute(semconv.COMPACTION_INPUT_TOKENS, out.input_tokens)  # a summary may have measured it
    span.set_attribute(semconv.COMPACTION_OUTPUT_TOKENS, out.output_tokens if out.changed else out.input_tokens)
    span.set_attribute(semconv.COMPACTION_SUMMARY_TOKENS, out.summary_tokens)
    span.set_attribute(semconv.COMPACTION_MESSAGES_COMPACTED, out.messages_compacted)
    span.set_attribute(semconv.COMPACTION_FILES_REHYDRATED, out.files_rehydrated)
    if out.strategy == semconv.STRATEGY_SUMMARY:
        _summary_figures(span, out.summarized)
    span.set_attribute(semconv.COMPACTION_DURATION_MS, out.duration_ms)
    failures = state.breaker.consecutive_failures if state is not None else int(out.outcome == semconv.OUTCOME_FAILURE)
    span.set_attribute(semconv.COMPACTION_CONSECUTIVE_FAILURES, failures)
    if state is not None:
        span.set_attribute(semconv.COMPACTION_BREAKER_OPEN, state.breaker.open)
    if out.finish_reason is not None:
        span.set_attribute(semconv.COMPACTION_FINISH_REASON, out.finish_reason)
    if out.outcome == semconv.OUTCOME_FAILURE:
        span.set_attribute(semconv.ERROR_TYPE, out.error_type or "compaction_failed")
        span.set_status(Status(StatusCode.ERROR, out.error_message or out.error_type))
    viewers.describe_input(span, out.strategy, trigger, mode, out.input_tokens)
    viewers.describe_output(
        span,
        out.outcome,
        strategy=out.strategy,
        input_tokens=out.input_tokens,
        output_tokens=out.output_tokens if out.changed else out.input_tokens,
        messages_compacted=out.messages_compacted,
        summary_tokens=out.summary_tokens,
        retention=out.retention.retention if out.retention is not None else None,
        error_type=out.error_type,
        summary=summary if out.outcome == semconv.OUTCOME_SUCCESS else None,
        max_bytes=max_bytes,
    )
    _cost_attributes(span, out, provider, model)
    span.end()
    instruments = telemetry.get().instruments
    instruments.compactions.add(1, _metric_attrs(trigger, out.strategy, out.outcome, provider, model, mode))
    if out.outcome == semconv.OUTCOME_DISCARDED and out.cost:
        _count_discarded_spend(out.cost, trigger, out.strategy, mode, out.discard_reason or semconv.DISCARD_ABANDONED)
    if timed:
        instruments.compaction_duration.record(
            out.duration_ms / 1000.0,
            {
                semconv.COMPACTION_TRIGGER_SOURCE: trigger,
                semconv.COMPACTION_STRATEGY: out.strategy,
                semconv.COMPACTION_OUTCOME: out.outcome,
            },
        )
    if out.outcome == semconv.OUTCOME_SUCCESS and out.retention is not None and out.retention.retention is not None:
        instruments.compaction_retention.record(
            out.retention.retention,
            {semconv.COMPACTION_TRIGGER_SOURCE: trigger, semconv.COMPACTION_STRATEGY: out.strategy},
        )
        # A compaction nothing repairs (microcompact) was as it is sent: its figure before is the same.
        before = out.repair.before.retention if out.repair is not None else out.retention.retention
        if before is not None:
            instruments.compaction_retention_before_repair.record(
                before, {semconv.COMPACTION_TRIGGER_SOURCE: trigger, semconv.COMPACTION_STRATEGY: out.strategy}
            )
    if out.outcome == semconv.OUTCOME_SUCCESS and out.input_tokens and mode != semconv.MODE_BACKGROUND:
        record_saved(out.input_tokens - out.output_tokens, trigger, out.strategy)


def _cost_attributes(span: Span, out: CompactionOutcome, provider: str, model: str) -> None:
    """What the compaction cost and what it saves on each following call (docs/telemetry.md, "Cost"), on its
    span: the summarizer's calls' cost, and the tokens it removed at the model's cache-read price (what a warm
    cache would have charged for them on every call that sends the result instead)."""
    if out.cost is not None:
        span.set_attribute(semconv.COMPACTION_COST, out.cost)
    if out.outcome == semconv.OUTCOME_SUCCESS and out.changed and not out.provider_done:
        found = pricing.rates(provider, model)
        if found is not None:
            span.set_attribute(
                semconv.COMPACTION_SAVING_PER_CALL, max(out.input_tokens - out.output_tokens, 0) * found.read
            )


def _count_discarded_spend(cost: float, trigger: str, strategy: str, mode: str, reason: str) -> None:
    """``otel_context.compaction.discarded_spend``: what a summary that was never applied cost, by why it was
    not (``semconv.DISCARD_*``): a summary thrown away for ``no_gain`` or ``late`` is a misjudged start, one
    ``forgotten`` or ``exit`` is the app's doing."""
    telemetry.get().instruments.compaction_discarded_spend.add(
        cost,
        {
            semconv.COMPACTION_TRIGGER_SOURCE: trigger,
            semconv.COMPACTION_STRATEGY: strategy,
            semconv.COMPACTION_MODE: mode,
            semconv.COMPACTION_DISCARD_REASON: reason,
        },
    )


def _summary_figures(span: Span, summarized: SummaryOutcome | None) -> None:
    """The summary's own figures on its ``compact`` span (``summarized`` None: none came back, nothing kept)."""
    if summarized is None:
        span.set_attribute(semconv.COMPACTION_USER_MESSAGES_KEPT, 0)
        return
    span.set_attribute(semconv.COMPACTION_USER_MESSAGES_KEPT, summarized.user_messages_kept)
    if summarized.user_messages_dropped:
        span.set_attribute(semconv.COMPACTION_USER_MESSAGES_DROPPED, summarized.user_messages_dropped)
    if summarized.parts > 1:
        span.set_attribute(semconv.COMPACTION_SUMMARY_PARTS, summarized.parts)
    if summarized.pinned_kept or summarized.pinned_dropped:
        span.set_attribute(semconv.COMPACTION_PINNED_KEPT, summarized.pinned_kept)
        span.set_attribute(semconv.COMPACTION_PINNED_DROPPED, summarized.pinned_dropped)


def record_saved(tokens: int, trigger: str, strategy: str) -> None:
    """``otel_context.compaction.tokens_saved``: what a compaction removed from a request that went out. An
    inline one counts as it ends; a summary prepared in the background counts when a call sends it, with what
    it removed from that call (see ``engine.background``): one that is never sent saved nothing."""
    telemetry.get().instruments.compaction_tokens_saved.record(
        max(0, tokens), {semconv.COMPACTION_TRIGGER_SOURCE: trigger, semconv.COMPACTION_STRATEGY: strategy}
    )


def record_provider_compaction(
    parent: Span,
    provider: str,
    model: str,
    state: ConversationState | None,
    *,
    messages_compacted: int,
    input_tokens: int,
    output_tokens: int,
    threshold: int | None = None,
    counted: bool = False,
    failure: tuple[str, str] | None = None,
) -> None:
    """A compaction the provider did (seen in a response), or one the library asked of it that did not happen
    (``failure``: error type and message): its ``compact`` span with ``trigger_source=provider`` under
    ``parent``, the cache detector told to expect the change (a success), the metrics.

    ``threshold``: the ``compact_threshold`` the library asked with (None: the app asked). ``counted``: its
    outcome counts on the conversation's breaker as an automatic compaction's does (a failure, or a success that
    leaves the context at or above ``threshold``: thrashing)."""
    precreate_counters(provider, model)
    span = _open_span(
        parent,
        semconv.TRIGGER_PROVIDER,
        semconv.STRATEGY_PROVIDER,
        state.key if state is not None else None,
        threshold,
    )
    out = CompactionOutcome(
        strategy=semconv.STRATEGY_PROVIDER,
        outcome=semconv.OUTCOME_SUCCESS if failure is None else semconv.OUTCOME_FAILURE,
        input_tokens=input_tokens,
        output_tokens=output_tokens if failure is None else input_tokens,
        messages_compacted=messages_compacted,
        provider_done=failure is None,
        error_type=failure[0] if failure is not None else None,
        error_message=failure[1] if failure is not None else None,
    )
    if state is not None:
        if counted:
            above = threshold is not None and out.output_tokens >= threshold
            with state.lock:  # concurrent calls of one conversation count on one breaker
                _count_attempt(state, out, model, state.key, above)
        if failure is None and state.detector is not None:
            announce(span, state, provider, model, output_tokens)
    _close_span(span, out, state, semconv.TRIGGER_PROVIDER, provider, model, timed=False)


def record_discarded(
    parent: Span,
    provider: str,
    model: str,
    state: ConversationState | None,
    trigger: str,
    published_by: SpanContext | None,
    threshold: int | None,
    reason: str,
    cost: float | None = None,
) -> None:
    """A summary prepared in the background (by this worker, or by another one that published it), dropped
    unapplied for ``reason`` (``semconv.DISCARD_*``: its history was edited below its cut, a newer compaction
    covered it, ...): a ``compact`` span under ``parent`` with ``mode=background``, ``outcome=discarded``, the
    reason and a link to the ``compact`` span that prepared it, and the counter. That span ended when the
    summary was ready (so that it is exported, and never stays open across processes), so the drop is a record
    of its own; no summarizer call, nothing on the breaker, no cache break (nothing was sent). ``cost``: what
    the summary cost (its span said it), when this worker knows (a summary another worker published: its
    spend is that worker's)."""
    span = _open_span(
        parent,
        trigger,
        semconv.STRATEGY_SUMMARY,
        state.key if state is not None else None,
        threshold,
        semconv.MODE_BACKGROUND,
    )
    if published_by is not None:
        try:
            span.add_link(published_by)
        except Exception:
            telemetry.log_once("cascade.link", "otel_context: could not link a compaction", exc_info=True)
        telemetry.name_span(
            span, semconv.COMPACTION_DISCARDED_TRACE_ID, semconv.COMPACTION_DISCARDED_SPAN_ID, published_by
        )
    out = CompactionOutcome(outcome=semconv.OUTCOME_DISCARDED, cost=cost, discard_reason=reason)
    _close_span(span, out, state, trigger, provider, model, timed=False, mode=semconv.MODE_BACKGROUND)


def _count_on_breaker(job: CompactionJob, out: CompactionOutcome, state: ConversationState) -> None:
    """The breaker's bookkeeping of one attempt (called with the conversation's lock held)."""
    breaker = state.breaker
    if job.trigger == semconv.TRIGGER_MANUAL:
        # The app asked for it and reads its outcome (CompactionResult.error): a failure is not counted on the
        # breaker, which stops the compactions nobody asked for; a summary that succeeds closes it (it shows
        # the summarizer works again; a microcompaction shows nothing of the summarizer).
        if out.outcome == semconv.OUTCOME_SUCCESS and out.strategy == semconv.STRATEGY_SUMMARY and breaker.reset():
            _breaker_closed(state)
    elif out.outcome == semconv.OUTCOME_FAILURE or (
        out.outcome == semconv.OUTCOME_SUCCESS and out.strategy == semconv.STRATEGY_SUMMARY
    ):
        above = job.budget is not None and out.output_tokens >= job.budget.auto_threshold
        _count_attempt(state, out, job.model, job.conversation_id, above)


def _count_attempt(
    state: ConversationState, out: CompactionOutcome, model: str, conversation_id: str | None, above: bool
) -> None:
    """An automatic attempt on the breaker (the conversation's lock held): a failure, or a success (``above``:
    it left the context at or above the threshold, which counts as thrashing)."""
    breaker = state.breaker
    if out.outcome == semconv.OUTCOME_FAILURE:
        opened = breaker.record_failure()
    else:
        was_open = breaker.open
        opened = breaker.record_success(still_above_threshold=above)
        if was_open and not breaker.open:
            _breaker_closed(state)
    if opened:
        state.breaker_model = model
        telemetry.get().instruments.breakers_open.add(1, {semconv.GEN_AI_REQUEST_MODEL: model})
        alerts.breaker_opened(conversation_id, model, breaker.consecutive_failures, MAX_CONSECUTIVE_FAILURES)


def _breaker_closed(state: ConversationState) -> None:
    telemetry.get().instruments.breakers_open.add(-1, {semconv.GEN_AI_REQUEST_MODEL: state.breaker_model or ""})
    alerts.breaker_closed(state.key, state.breaker_model)


def announce(span: Span, state: ConversationState, provider: str, model: str, rewritten: int | None = None) -> None:
    """Tell the cache detector the prefix changes on purpose, and record the intentional break (its cost: the
    compacted context, ``rewritten`` tokens, written again by the next call)."""
    try:
        from otel_context import cache

        detector = state.detector
        if detector is None:  # its callers check first: nothing to announce
            return
        ttl = detector.ttl_seconds
        expected = detector.announce_compaction()
        cache.record_intentional_break(span, expected, provider, model, rewritten, ttl)
    except Exception:  # cache bookkeeping must never fail a compaction
        telemetry.log_once(
            "cascade.announce", "otel_context: could not announce a compaction to the cache detector", exc_info=True
        )


#: ``clear_at_least`` that no history reaches: only the oversized-result cap applies.
_NEVER = 10**15


def microcompacted(job: CompactionJob) -> list[Item] | None:
    """What a microcompaction of ``job`` would send (its items cleared and capped), without running it as a
    compaction (no span, nothing adopted): None when it would change nothing. For the engine's choice of
    whether clearing repays what it breaks (``engine/economics.py``)."""
    done = _microcompact(job, job.items)
    return done[0] if done is not None else None


def _microcompact(job: CompactionJob, items: Sequence[Item], clear: bool = True) -> tuple[list[Item], int] | None:
    """Run the rule-based layer; (new items, results changed) or None when it changes nothing.

    ``clear=False``: only cap single oversized tool results (head/tail), clear nothing.
    """
    settings = job.settings
    if job.budget is not None:
        # "clear at least" is 5,000 tokens, or 2.5 % of the window when that is smaller.
        floor = max(1, job.budget.window * 25 // 1000)
        if floor < settings.microcompact_clear_at_least:
            settings = dataclasses.replace(settings, microcompact_clear_at_least=floor)
        # A single result may never take more than half of the usable window (25,000 tokens is more than a
        # whole small window).
        half = max(1, job.budget.effective // 2)
        if settings.max_tool_result_tokens > half:
            settings = dataclasses.replace(settings, max_tool_result_tokens=half)
    if not clear:
        settings = dataclasses.replace(settings, microcompact_clear_at_least=_NEVER)
    result = microcompact_items(job.adapter, items, settings)
    if list(result.items) == list(items):
        return None
    return list(result.items), result.messages_compacted


def run_microcompact(job: CompactionJob, *, clear: bool = True) -> CompactionOutcome:
    """The rule-based layer as one compaction attempt with its own ``compact`` span (no LLM call).

    ``clear=False`` (microcompact disabled, but the context is over the threshold): only the cap of single
    oversized tool results applies, the last resort against one result that fills the window by itself.
    """
    started = time.perf_counter()
    out = CompactionOutcome(strategy=semconv.STRATEGY_MICROCOMPACT, input_tokens=job.estimated_tokens)
    try:
        done = _microcompact(job, job.items, clear)
    except Exception as exc:  # a bug in a rule must not cost the user's turn
        telemetry.log_once("cascade.micro", "otel_context: microcompact failed", exc_info=True)
        # Nothing to clear: no span (nothing changed, nothing failed that the user can act on).
        return replace(out, error_type=type(exc).__qualname__)
    if done is None:
        return out  # nothing to clear: no span
    span = _start_span(job, semconv.STRATEGY_MICROCOMPACT)
    try:
        new_items = checked(job.adapter, done[0])
        saved = estimate_items(job.adapter, job.items) - estimate_items(job.adapter, new_items)
        out = replace(
            out,
            items=new_items,
            cut=len(job.items),
            messages_compacted=done[1],
            output_tokens=max(0, job.estimated_tokens - saved),
            outcome=semconv.OUTCOME_SUCCESS,
        )
    except CompactionError as exc:
        out = _failed(job, out, exc)
    return _finish(job, span, out, started)


def summarizer_function(fn: Callable[..., Any]) -> Callable[[SummaryRequest], Any]:
    """``fn(request_body) -> str | SummaryResult`` (``Settings.summarizer``, or the function given to a
    ``Compactor``) as a summarizer: exceptions and answers that are not a non-empty string become failed
    results. An ``async def`` function (or an object whose ``__call__`` is one) gives an awaitable result;
    the caller that cannot await one (transparent mode's sync path) treats it as a failure."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        # iscoroutinefunction(obj) is False for an object with an async __call__ before Python 3.12: taking
        # the sync path would summarize with an unawaited coroutine.

        async def send_async(request: SummaryRequest) -> SummaryResult:
            try:
                answer = await fn(dict(request.body))
            except Exception as exc:
                return SummaryResult(error=exc)
            return _summary_answer(answer)

        return send_async

    def send(request: SummaryRequest) -> SummaryResult:
        try:
            answer = fn(dict(request.body))
        except Exception as exc:
            return SummaryResult(error=exc)
        if inspect.isawaitable(answer):
            close = getattr(answer, "close", None)
            if close is not None:
                close()
            return SummaryResult(error=TypeError("Settings.summarizer must be a synchronous function here"))
        return _summary_answer(answer)

    return send


def _summary_answer(answer: Any) -> SummaryResult:
    """A summarize function's answer as a result: a failure unless it is a non-empty string (or a result)."""
    if isinstance(answer, SummaryResult) and answer.error is not None:
        return answer
    text = answer.text if isinstance(answer, SummaryResult) else answer
    if not isinstance(text, str) or not text.strip():
        # str(None) would be "None": a history replaced by four letters and reported as a success.
        shown = repr(text) if isinstance(text, str) else type(text).__name__
        return SummaryResult(error=TypeError(f"Settings.summarizer must return a non-empty string, got {shown}"))
    return answer if isinstance(answer, SummaryResult) else SummaryResult(text=text)


def run_summary(
    job: CompactionJob, span: Span | None = None
) -> Generator[SummaryRequest, SummaryResult, CompactionOutcome]:
    """The summary layer as one compaction attempt: hooks, summarizer, invariant check, span and metrics.
    Never raises for a failed summary: the outcome says ``failure`` (and why), the span and metrics too.
    ``span``: its ``compact`` span when open already (a background summary's: see :func:`start_background_span`),
    which it takes over."""
    started = time.perf_counter()
    out = CompactionOutcome(strategy=semconv.STRATEGY_SUMMARY, input_tokens=job.estimated_tokens)
    vetoed, instructions = _pre_compact(job)
    if vetoed:
        reason = "vetoed by the pre_compact hook"
        count_skipped(job.trigger, job.provider, job.model)
        if span is not None:  # a background summary's, opened when a call started it (and named there)
            _end_skipped(span, reason)
        return replace(out, skipped_reason=reason)
    span = span if span is not None else _start_span(job, semconv.STRATEGY_SUMMARY)
    spend = _Spend()
    try:
        _note_fallback(job, span)
        asked = replace(job, instructions=instructions)
        try:
            result = yield from _summarized(asked, span, spend)
        except CompactionError as exc:
            if not _falls_back(job, span, exc):
                raise
            result = yield from _summarized(asked, span, spend)  # now with the call's own model
        out = _adopt_summary(job, out, result)
    except CompactionError as exc:
        out = _failed(job, out, exc)
    except GeneratorExit:  # abandoned mid-summary (the caller went away): close the span, propagate
        _abandoned(job, span, spend)
        raise
    except Exception as exc:  # an adapter or hook bug: fail this compaction, never the call
        telemetry.log_once("cascade.summary", "otel_context: compaction failed unexpectedly", exc_info=True)
        error_type = type(exc).__module__ + "." + type(exc).__qualname__
        out = replace(out, items=None, outcome=semconv.OUTCOME_FAILURE, error_type=error_type, error_message=str(exc))
    return _finish(job, span, replace(out, cost=spend.cost), started)


def _failed(job: CompactionJob, out: CompactionOutcome, error: CompactionError) -> CompactionOutcome:
    """``out`` as a failed attempt (what it knew of the summary stays: its figures go on the span), warned."""
    alerts.compaction_failed(job, error)
    return replace(
        out,
        items=None,
        outcome=semconv.OUTCOME_FAILURE,
        error_type=error.kind,
        error_message=str(error),
        finish_reason=error.finish_reason or out.finish_reason,
    )


def _falls_back(job: CompactionJob, span: Span, error: CompactionError) -> bool:
    """Whether a summary that failed because the provider does not know the configured summary model is to be
    asked again of the call's own model: a mistyped ``OTEL_CONTEXT_SUMMARY_MODEL`` must not cost the app its
    compactions (they would all fail, the breaker open, and the provider end the conversation as too long).
    The model is remembered as unknown to that provider (no conversation tries it again) and said once."""
    if job.settings.summarizer is not None or not alerts.unknown_model(error):
        return False
    configured = configured_summary_model(job.settings, job.adapter.provider, job.model)
    if configured == job.model:
        return False  # the call's own model: nothing to fall back to
    if reject_summary_model(job.adapter.provider, configured):
        alerts.summary_model_rejected(job.adapter.provider, configured, error)
    _note_fallback(job, span)
    return True


def _note_fallback(job: CompactionJob, span: Span) -> None:
    """The span attribute and the count of a summary made with the call's own model because the provider
    rejected the configured one."""
    if job.settings.summarizer is not None:
        return
    provider = job.adapter.provider
    configured = configured_summary_model(job.settings, provider, job.model)
    if configured == summary_model_for(job.settings, provider, job.model):
        return
    span.set_attribute(semconv.COMPACTION_SUMMARY_MODEL_REJECTED, configured)
    telemetry.get().instruments.summary_model_fallbacks.add(
        1, {semconv.GEN_AI_PROVIDER_NAME: job.provider, semconv.GEN_AI_REQUEST_MODEL: job.model}
    )


def _pre_compact(job: CompactionJob) -> tuple[bool, str | None]:
    """The app's ``pre_compact`` hook: whether it vetoed the summary, and the instructions for it (the job's
    and the hook's)."""
    decision = hooks_mod.run_pre_compact(
        job.settings.pre_compact,
        hooks_mod.PreCompactEvent(
            trigger=job.trigger,
            wire_format=job.adapter.name,
            model=job.model,
            conversation_id=job.conversation_id,
            messages=tuple(job.items),
            estimated_tokens=job.estimated_tokens,
        ),
    )
    return decision.veto, "\n".join(x for x in (job.instructions, decision.instructions) if x) or None


def _summarized(
    job: CompactionJob, span: Span, spend: _Spend
) -> Generator[SummaryRequest, SummaryResult, SummaryOutcome]:
    """The summary itself, its requests made under the ``compact`` span (the summarizer's call is its child):
    through the call's client, or through the app's own ``Settings(summarizer=fn)`` (the app, a test or the
    alert demo answers the requests)."""
    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        steps = _priced(job, spend, summarize(job))
        custom = job.settings.summarizer
        if custom is not None:
            return drive(steps, perform_with(summarizer_function(custom)))
        return (yield from steps)


class _Spend:
    """What one summary's summarizer calls cost so far (USD), each reply priced as it comes (:func:`_priced`):
    a running tally kept beside the attempt's steps (its records are frozen), so that a summary that fails or
    is abandoned midway still says what it spent."""

    def __init__(self) -> None:
        self.amount = 0.0
        #: Whether a reply was priced (``amount`` then says what the compaction cost; else it is unknown).
        self.priced = False

    def add(self, amount: float) -> None:
        self.amount += amount
        self.priced = True

    @property
    def cost(self) -> float | None:
        return self.amount if self.priced else None


def _priced(
    job: CompactionJob, spend: _Spend, steps: Generator[SummaryRequest, SummaryResult, SummaryOutcome]
) -> Generator[SummaryRequest, SummaryResult, SummaryOutcome]:
    """``steps``, each reply priced as it comes back and added to ``spend``: the compaction's own cost is
    what its summarizer's calls cost (every attempt and part, a failed one's too), at the rates the reply says
    applied, for the model the request named (the summary model). A reply without usage (a custom summarizer
    that reports none, an error) costs nothing known."""
    try:
        request = next(steps)
        while True:
            try:
                result = yield request
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as exc:  # the driver's error goes to the summary's steps, as without us
                request = steps.throw(exc)
                continue
            if result.usage is not None:
                model = request.body.get("model")
                cost = pricing.cost(
                    job.provider, model if isinstance(model, str) else job.model, result.usage, result.price_context
                )
                if cost is not None:
                    spend.add(cost.amount)
            request = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _adopt_summary(job: CompactionJob, out: CompactionOutcome, result: SummaryOutcome) -> CompactionOutcome:
    """The summary as the compaction's result: what the app's ``post_compact`` hook adds after it, the
    pairing checked, the figures. A failure (``no_progress``, with the summary's figures) when the result is
    not smaller than what it replaced (it would only be sent and compacted again)."""
    head = list(result.head)
    extra = hooks_mod.run_post_compact(
        job.settings.post_compact,
        hooks_mod.PostCompactEvent(
            trigger=job.trigger,
            wire_format=job.adapter.name,
            model=job.model,
            conversation_id=job.conversation_id,
            summary=result.summary,
            messages=tuple([*head, *job.items[result.cut :]]),
        ),
    )
    head += [job.adapter.make_user_item(m) if isinstance(m, str) else m for m in extra]
    new_items = checked(job.adapter, [*head, *job.items[result.cut :]])
    out = replace(
        out,
        items=new_items,
        cut=result.cut,
        # The repair pass may have touched the head; recompute where the kept part starts.
        head=tuple(new_items[: len(head)]) if new_items[: len(head)] == head else tuple(head),
        finish_reason=result.finish_reason,
        messages_compacted=result.cut - job.min_index,
        summarized=result,
    )
    before = _context_tokens(job.adapter, job.body, job.items)
    after = _context_tokens(job.adapter, job.body, new_items)
    if after >= before:
        error = CompactionError(
            "no_progress", f"the result (~{after} tokens) is not smaller than the input (~{before})"
        )
        return _failed(job, out, error)
    input_tokens, output_tokens = _reported_sizes(job, before, after, result.calibration)
    return replace(out, input_tokens=input_tokens, output_tokens=output_tokens, outcome=semconv.OUTCOME_SUCCESS)


def _end_skipped(span: Span, reason: str) -> None:
    """End an open ``compact`` span whose compaction did not run (no figures, no metric: counted as skipped)."""
    span.set_attribute(semconv.COMPACTION_OUTCOME, semconv.OUTCOME_SKIPPED)
    span.set_attribute(semconv.CONTEXT_COMPACTION_SKIPPED_REASON, reason)
    viewers.describe_output(span, semconv.OUTCOME_SKIPPED, error_type=reason)
    span.end()


def _abandoned(job: CompactionJob, span: Span, spend: _Spend) -> None:
    """The summary was abandoned midway (uninstrumented, cancelled): its span ends, as ``discarded`` for a
    background summary (dropped, not a failure), else as ``failure``; no metric."""
    if span.is_recording():  # else the interpreter's exit ended it (see engine.background.end_at_exit)
        background = job.mode == semconv.MODE_BACKGROUND
        outcome = semconv.OUTCOME_DISCARDED if background else semconv.OUTCOME_FAILURE
        span.set_attribute(semconv.COMPACTION_OUTCOME, outcome)
        if background:
            span.set_attribute(semconv.COMPACTION_DISCARD_REASON, semconv.DISCARD_ABANDONED)
        viewers.describe_output(span, outcome, error_type="abandoned")
        if spend.cost is not None:
            span.set_attribute(semconv.COMPACTION_COST, spend.cost)
            if background and spend.cost:
                _count_discarded_spend(
                    spend.cost, job.trigger, semconv.STRATEGY_SUMMARY, job.mode, semconv.DISCARD_ABANDONED
                )
        span.end()
