"""The provider's own compaction: engaged by the library for a history the provider holds, and read from
responses whoever asked for it.

Engaged: a call that continues a history the provider stores (OpenAI Responses ``previous_response_id`` or a
stored ``conversation``) sends only its new input, so the library has nothing to summarize; the provider can
compact what it holds. From the warning line on, such a call asks it to, on the request itself
(``context_management=[{"type": "compaction", "compact_threshold": N}]``, ``N`` the conversation's auto
threshold: the provider compacts once its own count of the context passes it, before it answers), under the
settings of the library's own compaction: mode ``auto``, no kill switch, a known window, the conversation's
breaker closed. Why on the request rather than by ``POST /responses/compact`` first: no round trip more before
the app's call, the provider counts the context itself (our estimate only decides when to ask), it serves a
stored ``conversation`` too (the standalone endpoint has no such parameter), and a stream shows it as it
happens. The app's own settings win (``context_management``, ``truncation=auto``, a ``compaction_trigger``
item: :meth:`~otel_context.formats.base.WireFormatAdapter.context_managed_by_app`). A model or endpoint that
refuses the field is remembered (per provider, server and model, until the process restarts or
``engine.reset()``), said once, and its request sent again as the app wrote it; the field is never sent there
again. A request rejected as too long that did not carry the field is sent again once with it (the reactive
path). The compaction is reported like the library's own (:func:`observe_provider_compaction`: a ``compact``
span, the intentional cache break, the metrics) and counted on the conversation's breaker.

Read: Anthropic ``compaction`` blocks, ``usage.iterations`` and context-editing ``applied_edits``, OpenAI
``compaction`` items, and the ``responses.compact`` endpoint, reported with ``trigger_source=provider``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from otel_context import process_state, semconv
from otel_context.compaction import alerts, cascade
from otel_context.compaction.budget import Budget
from otel_context.conversation import ConversationState
from otel_context.engine.call import CallState, rewrites
from otel_context.formats.too_long import error_message, error_parts
from otel_context.usage import TokenUsage, is_mapping

#: (provider, server, model) whose requests refused the field, and the provider's message: never asked again.
_refused: dict[tuple[str, str, str], str] = {}
_REFUSED_MAX = 256
# Reset: asked again (a clean slate); a fork's child: inherited (the same endpoints and models).
process_state.register(__name__, ("_refused",), on_reset=_refused.clear, in_forked_child=None)


def _key(call: CallState) -> tuple[str, str, str]:
    request = call.request
    return request.provider, request.server, call.model


def engage(span: Span, call: CallState, budget: Budget | None, automatic: bool) -> None:
    """For a call whose history the provider holds: from the warning line on, ask the provider to compact it
    (``call.body`` carries the field, ``call.engaged`` its threshold), unless the app's own settings manage it or
    the library may not (``automatic``: mode auto and no kill switch). Sets ``call.protected``: whether something
    compacts this history as it nears the window (the context state says ``error`` when nothing does)."""
    adapter, body = call.adapter, call.request.body
    if adapter.context_managed_by_app(body) is not None:
        call.protected = True  # the app's own server-side compaction or truncation: left as it is
        return
    if budget is None or not automatic:
        return
    near = call.estimated_tokens >= budget.warning_threshold
    refused = _refused.get(_key(call))
    if refused is not None:
        if near:  # on the span only: the refusal was said once already (alerts.provider_compaction_refused)
            span.set_attribute(
                semconv.CONTEXT_COMPACTION_SKIPPED_REASON,
                f"the provider refused server-side compaction for this model: {refused[:200]}",
            )
        return
    if call.state.breaker.open:
        if call.estimated_tokens >= budget.auto_threshold:
            cascade.count_skipped(
                semconv.TRIGGER_PROVIDER, call.request.provider, call.model, semconv.STRATEGY_PROVIDER
            )
        return
    asked = adapter.with_provider_compaction(call.body, budget.auto_threshold)
    if asked is None:
        return
    call.protected = True
    if near:
        call.body, call.engaged = asked, budget.auto_threshold


def after_rejection(span: Span, call: CallState, error: BaseException) -> Mapping[str, Any] | None:
    """The provider refused the field :func:`engage` added: remembered and said once (with a failed ``compact``
    span), and the body to send again, the app's own; None for any other error."""
    if call.engaged is None:
        return None
    status, body, text = error_parts(error)
    if not call.adapter.refuses_provider_compaction(status, body, text):
        return None
    message = error_message(error)
    key = _key(call)
    if len(_refused) >= _REFUSED_MAX and key not in _refused:
        _refused.clear()
    _refused[key] = message
    alerts.provider_compaction_refused(call.request.server, call.model, status, message)
    _failed(span, call, "provider_refused", message, counted=False)
    call.engaged, call.protected = None, False
    budget = call.budget
    if budget is not None:
        call.attributes[semconv.CONTEXT_STATE] = budget.state(call.estimated_tokens, compaction_available=False)
    call.resend_error_stands = True
    call.body = call.request.body
    return call.body


def engage_after_too_long(span: Span, call: CallState, budget: Budget, message: str) -> Mapping[str, Any] | None:
    """A request whose history the provider holds was rejected as too long: sent again once asking the provider
    to compact (None: it asked already, and the provider's compaction did not make it fit, a failure on the
    breaker; or nothing may ask)."""
    if call.engaged is not None:
        _failed(span, call, "still_too_long", message, counted=True)
        return None
    if not rewrites(call.request.settings) or call.adapter.context_managed_by_app(call.request.body) is not None:
        return None
    if _key(call) in _refused:
        return None
    asked = call.adapter.with_provider_compaction(call.body, budget.auto_threshold)
    if asked is None:
        return None
    call.body, call.engaged = asked, budget.auto_threshold
    return asked


def _failed(span: Span, call: CallState, error_type: str, message: str, *, counted: bool) -> None:
    """The failed ``compact`` span of a compaction the library asked the provider for."""
    cascade.record_provider_compaction(
        span,
        call.request.provider,
        call.model,
        call.state,
        messages_compacted=0,
        input_tokens=call.estimated_tokens,
        output_tokens=call.estimated_tokens,
        threshold=call.engaged,
        counted=counted,
        failure=(error_type, message[:1000]),
    )


def usage_shows_compaction(usage: TokenUsage) -> bool:
    """Whether a response's usage reports a compaction the provider did (Anthropic ``usage.iterations``)."""
    return bool(usage.compaction_iterations or usage.compaction_input_tokens or usage.compaction_output_tokens)


def _provider_compaction(usage: TokenUsage | None, response: Mapping[str, Any] | None) -> tuple[int, int, int] | None:
    """(items compacted, tokens in, tokens out) when the response shows the provider compacted; else None."""
    found = usage is not None and usage_shows_compaction(usage)
    items = 0
    tokens_in = usage.compaction_input_tokens if usage is not None else 0
    tokens_out = usage.compaction_output_tokens if usage is not None else 0
    if response is not None:
        for key in ("content", "output"):
            blocks = response.get(key)
            if isinstance(blocks, list):
                n = sum(1 for b in blocks if is_mapping(b) and b.get("type") == "compaction")
                if n:
                    found = True
                    items += n
        management = response.get("context_management")
        if management is not None and isinstance(management, Mapping):
            for edit in management.get("applied_edits") or ():
                if not isinstance(edit, Mapping):
                    continue
                found = True
                items += int(edit.get("cleared_tool_uses") or 0) + int(edit.get("cleared_thinking_turns") or 0)
                tokens_in += int(edit.get("cleared_input_tokens") or 0)
    return (items, tokens_in, tokens_out) if found else None


def observe_provider_compaction(
    span: Span,
    provider: str,
    model: str,
    usage: TokenUsage | None,
    response: Mapping[str, Any] | None,
    state: ConversationState | None = None,
    *,
    force: bool = False,
    before: int = 0,
    threshold: int | None = None,
) -> bool:
    """Report a compaction the provider did, if the response shows one (``force``: the whole call was one,
    ``responses.compact``); the chat span is marked ``gen_ai.conversation.compacted``. True when reported.

    ``before``: the call's estimated context (anchored on the usage the previous response reported), the
    context before a compaction whose figures the provider does not report (OpenAI's), the one after being the
    input this response reports. ``threshold``: the library asked for it (see :func:`engage`): the span says at
    which threshold, and the outcome counts on the conversation's breaker."""
    found = _provider_compaction(usage, response)
    if found is None and not force:
        return False
    items, tokens_in, tokens_out = found or (0, 0, 0)
    if force and usage is not None and not tokens_in:
        # ``responses.compact``: the whole call is the compaction; its input is the context before, its
        # output the compacted context.
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    elif before and usage is not None and not tokens_in and not tokens_out:
        tokens_in, tokens_out = before, usage.input_tokens
    cascade.record_provider_compaction(
        span,
        provider,
        model,
        state,
        messages_compacted=items,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        threshold=threshold,
        counted=threshold is not None,
    )
    span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)
    return True
