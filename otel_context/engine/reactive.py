"""Reactive compaction: the provider rejected a call as too long; compact once and retry once.

The provider's error may state the true size and window ("prompt is too long: N tokens > M maximum"): the
conversation's estimate factor is raised when we undercounted, and a smaller window is learned for the
model (see :mod:`otel_context.engine.windows`).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.compaction import cascade
from otel_context.engine import background, economics, provider_compaction, windows
from otel_context.engine.call import CallState, rewrites, skip
from otel_context.flow import Step
from otel_context.formats.too_long import error_message, is_too_long, parse_too_long
from otel_context.tokens import estimate_fixed, estimate_items


def compact(span: Span, call: CallState, error: BaseException) -> Generator[Step, Any, Mapping[str, Any] | None]:
    """The body to retry with, or None to let the error reach the app (at most once per call)."""
    budget = call.budget
    if call.reactive_done or not rewrites(call.request.settings) or budget is None:
        return None
    if not is_too_long(call.adapter, error):
        return None
    call.reactive_done = True
    message = error_message(error)
    numbers = parse_too_long(message)
    _record_rejection(span, error, message, numbers)
    provider, state = call.request.provider, call.state
    if state.breaker.open:
        span.set_attribute(semconv.COMPACTION_BREAKER_OPEN, True)
        cascade.count_skipped(semconv.TRIGGER_REACTIVE, provider, call.model)
        return None
    if call.adapter.server_state_reason(call.request.body) is not None:
        # The history is at the provider: its own compaction is asked for (its figures are the provider's; this
        # call's items are only the new input, so no estimate factor is learned from them).
        if numbers is not None and 0 < numbers[1] < budget.window:
            windows.learn_window(provider, call.model, numbers[1])
            budget = call.budget = windows.budget_of(call.request, call.adapter, call.model) or budget
        return provider_compaction.engage_after_too_long(span, call, budget, message)
    reason = cascade.not_understood_reason(call.adapter, call.body, call.sent_items, budget)
    if reason:
        skip(span, reason)
        return None
    estimated = call.estimated_tokens
    if numbers is not None:
        actual, limit = numbers
        ours = estimate_fixed(call.adapter, call.body) + estimate_items(call.adapter, call.sent_items)
        if actual > ours > 0:
            # Our estimate undercounts this conversation's tokenizer: remember by how much.
            state.raise_estimate_factor(actual / ours)
        estimated = max(actual, estimated)
        if 0 < limit < budget.window:
            # The provider's window is smaller than the one we assumed: use it from now on.
            windows.learn_window(provider, call.model, limit)
            budget = call.budget = windows.budget_of(call.request, call.adapter, call.model) or budget
    # A prepared summary is measured against the provider's count, not the estimate it just proved low.
    call.estimated_tokens = estimated
    if (yield from background.apply_ready(span, call, budget)) and call.estimated_tokens < budget.auto_threshold:
        after = call.estimated_tokens  # a summary prepared in the background covered it: no wait
    else:
        out = yield from cascade.run_summary(call.job(span, semconv.TRIGGER_REACTIVE, estimated))
        if not call.adopt(out):
            # The summary could not help (e.g. one tool result fills the window by itself): cap results.
            job = call.job(span, semconv.TRIGGER_REACTIVE, estimated)
            out = cascade.run_microcompact(job, clear=call.request.settings.microcompact)
            if not call.adopt(out):
                return None
        after = out.output_tokens
    # One moment for the span: the estimate and the window (which the provider's error may have lowered)
    # are, like the utilization, those of the request sent after compacting.
    call.estimated_tokens = after
    economics.compacted(call)
    call.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = after
    call.attributes[semconv.CONTEXT_WINDOW] = budget.window
    call.attributes[semconv.CONTEXT_EFFECTIVE_WINDOW] = budget.effective
    span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)
    call.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] = True
    call.refingerprint()
    return call.body


#: The most characters of the provider's message kept on the rejection event.
MESSAGE_MAX_CHARS = 1000


def _record_rejection(span: Span, error: BaseException, message: str, numbers: tuple[int, int] | None) -> None:
    """The ``otel_context.request.rejected`` event on the call's span, before any retry: the retried call's
    span ends as a success, and without it nothing would show that the provider refused the first request,
    nor the sizes it stated (which may reveal a smaller window, or our estimate undercounting)."""
    attributes: dict[str, str | int] = {semconv.REQUEST_REJECTED_MESSAGE: message[:MESSAGE_MAX_CHARS]}
    if numbers is not None:
        attributes[semconv.REQUEST_REJECTED_INPUT_TOKENS] = numbers[0]
        attributes[semconv.REQUEST_REJECTED_LIMIT_TOKENS] = numbers[1]
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        attributes[semconv.HTTP_RESPONSE_STATUS_CODE] = status
    telemetry.emit_event(span, semconv.REQUEST_REJECTED_EVENT, attributes)
