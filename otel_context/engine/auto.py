"""Automatic compaction of one call, triggered by its estimate: microcompact when due, then the summary.

Order (docs/compaction.md): microcompact when enabled and past half the effective window or when the
prompt cache has gone cold (clearing tool results then costs nothing); the summary when the estimate is
still at or above the auto threshold. Nothing is attempted on a history we do not understand (the reason
goes on the span) or while the conversation's breaker is open.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv
from otel_context.cache import DEFAULT_TTL_SECONDS, monotonic
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.engine import background, economics, pacing
from otel_context.engine.call import CallState, skip
from otel_context.flow import Step, SummaryRequest, SummaryResult


def micro_due(call: CallState, budget: Budget) -> bool:
    """Microcompact when enabled and either past half the effective window, or the cache has gone cold."""
    if not call.request.settings.microcompact:
        return False
    if call.estimated_tokens >= budget.effective // 2:
        return True
    ended = call.state.last_call_ended
    return ended is not None and monotonic() - ended > DEFAULT_TTL_SECONDS


def concerned(call: CallState, budget: Budget) -> bool:
    """Whether :func:`compact` can do anything for this call: most calls of a conversation are far below its
    threshold, and this plain test spares them the cascade's generator (and :func:`micro_due`, when
    microcompact is off, as it is by default)."""
    if call.estimated_tokens >= budget.auto_threshold:
        return True
    if call.request.settings.microcompact and micro_due(call, budget):
        return True
    return background.enabled(call) and pacing.watching(call, budget)


def compact(span: Span, call: CallState, budget: Budget) -> Generator[Step, Any, None]:
    """The automatic cascade for one call (threshold-triggered)."""
    due = micro_due(call, budget)
    prepare = background.enabled(call)
    above = call.estimated_tokens >= budget.auto_threshold
    if not above and not due:
        if prepare and pacing.watching(call, budget):
            yield from background.maybe_start(span, call, budget)
        return
    state = call.state
    reason = cascade.not_understood_reason(call.adapter, call.body, call.sent_items, budget)
    if reason:
        skip(span, reason)
        return
    if state.breaker.open:
        if above:
            cascade.count_skipped(semconv.TRIGGER_AUTO, call.request.provider, call.model)
        return
    alone = True  # what the clearing leaves below the threshold is enough (no summary after it)
    if due or call.request.settings.max_tool_result_tokens:
        # Disabled microcompact still caps a single oversized tool result once the threshold is reached.
        job = call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens)
        clearing = economics.clearing(call, job) if due else None
        clear, alone = _clears(call, budget, clearing, above, prepare)
        _adopt(call, cascade.run_microcompact(job, clear=clear))
        if clear and above and clearing is not None:
            economics.cleared_at_threshold(call, clearing)
    if call.estimated_tokens < budget.auto_threshold and (not above or alone):
        if prepare:
            yield from background.maybe_start(span, call, budget)
        return
    if prepare and (yield from background.at_threshold(span, call, budget)):
        return
    if prepare and call.estimated_tokens < budget.auto_threshold:
        # The clearing left it below the threshold and the summary it was to go with did not apply (it saves
        # nothing over the cleared history, say): no call waits for a summary now; the next one is prepared.
        yield from background.maybe_start(span, call, budget)
        return
    # With a shared store, one summary per threshold crossing across the fleet (without one, just the summary).
    yield from call.sync.once(span, call, budget, _summary(span, call))
    if state.breaker.open:
        call.attributes[semconv.COMPACTION_BREAKER_OPEN] = True


def _clears(
    call: CallState, budget: Budget, clearing: economics.Clearing | None, above: bool, prepare: bool
) -> tuple[bool, bool]:
    """Whether to clear old tool results on this call, and whether that is all (no summary after it), by what
    each repays (``engine/economics.py``). Below the threshold: on a cold cache (free), or on a warm one when
    the reads it saves until the threshold pay for the rewrite. At the threshold: alone, when it costs no more
    per token of room it leaves than a summary. Else the summary, which reads the history as the cache holds
    it (cleared first, the summarizer's request, which shares the call's prefix, would miss the cache), unless
    what it summarizes does not fit one summarizer request (it would be summarized in parts, each missing the
    cache): then cleared first, the summary reading less. A summary ready in the background was started because
    clearing would not do: that one is used. When none is under way in the background, this call does not wait
    for one: the clearing does (when it brings the context below the threshold), and one is prepared for the
    next. ``clearing``: what a clearing would do (None: nothing to clear, or microcompact is not due)."""
    if clearing is None:
        return False, True
    if not above:
        return (True if not economics.warm(call) else economics.repays_below_threshold(call, budget, clearing)), True
    if prepare and background.ready(call):
        return True, False  # the summary rewrites the request anyway: clearing what it keeps costs nothing more
    if (prepare and not background.underway(call)) or economics.micro_suffices(call, budget, clearing):
        return True, True
    return not economics.summary_fits(call, budget), False


def _summary(span: Span, call: CallState) -> Generator[SummaryRequest, SummaryResult, None]:
    out = yield from cascade.run_summary(call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens))
    _adopt(call, out)
    if out.outcome == semconv.OUTCOME_SUCCESS and out.items is not None:
        economics.summarized(call, out.summary_tokens)


def _adopt(call: CallState, out: cascade.CompactionOutcome) -> None:
    """Send an automatic compaction's result; the estimate (which the summary step is gated on) is now its size."""
    if call.adopt(out):
        call.compacted(out.output_tokens)
        economics.compacted(call)
