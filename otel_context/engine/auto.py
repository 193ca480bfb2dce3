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
from otel_context.engine import background, pacing
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
    if call.estimated_tokens < budget.auto_threshold and not due:
        if prepare and pacing.watching(call, budget):
            yield from background.maybe_start(span, call, budget)
        return
    state = call.state
    reason = cascade.not_understood_reason(call.adapter, call.body, call.sent_items, budget)
    if reason:
        skip(span, reason)
        return
    if state.breaker.open:
        if call.estimated_tokens >= budget.auto_threshold:
            cascade.count_skipped(semconv.TRIGGER_AUTO, call.request.provider, call.model)
        return
    if due or call.request.settings.max_tool_result_tokens:
        # Disabled microcompact still caps a single oversized tool result once the threshold is reached.
        job = call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens)
        _adopt(call, cascade.run_microcompact(job, clear=due))
    if call.estimated_tokens < budget.auto_threshold:
        if prepare:
            yield from background.maybe_start(span, call, budget)
        return
    if prepare and (yield from background.at_threshold(span, call, budget)):
        return
    # With a shared store, one summary per threshold crossing across the fleet (without one, just the summary).
    yield from call.sync.once(span, call, budget, _summary(span, call))
    if state.breaker.open:
        call.attributes[semconv.COMPACTION_BREAKER_OPEN] = True


def _summary(span: Span, call: CallState) -> Generator[SummaryRequest, SummaryResult, None]:
    out = yield from cascade.run_summary(call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens))
    _adopt(call, out)


def _adopt(call: CallState, out: cascade.CompactionOutcome) -> None:
    """Send an automatic compaction's result; the estimate (which the summary step is gated on) is now its size."""
    if call.adopt(out):
        call.compacted(out.output_tokens)
