"""Compaction done by the provider itself, read from a response: Anthropic ``compaction`` blocks,
``usage.iterations`` and context-editing ``applied_edits``, OpenAI ``compaction`` items, and the
``responses.compact`` endpoint. Reported like ours (a ``compact`` span, the counter, the cache detector
told to expect the change) with ``trigger_source=provider``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv
from otel_context.compaction import cascade
from otel_context.conversation import ConversationState
from otel_context.usage import TokenUsage, is_mapping


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
) -> bool:
    """Report a compaction the provider did, if the response shows one (``force``: the whole call was one,
    ``responses.compact``); the chat span is marked ``gen_ai.conversation.compacted``. True when reported."""
    found = _provider_compaction(usage, response)
    if found is None and not force:
        return False
    items, tokens_in, tokens_out = found or (0, 0, 0)
    if force and usage is not None and not tokens_in:
        # ``responses.compact``: the whole call is the compaction; its input is the context before, its
        # output the compacted context.
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    cascade.record_provider_compaction(
        span, provider, model, state, messages_compacted=items, input_tokens=tokens_in, output_tokens=tokens_out
    )
    span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)
    return True
