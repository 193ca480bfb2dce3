"""Microcompact: the no-LLM layer of the cascade. It shrinks tool results and touches nothing else.

Old tool results are usually the bulk of an agent's context and the least useful part of it (the model
already acted on them). Two rules, both keeping every result in place so tool pairing stays valid:

- *clear*: the content of every tool result except the newest ``keep_recent`` (optionally only results of
  the tools named in ``tools``) becomes :data:`CLEARED_PLACEHOLDER`; done only when that reclaims at least
  ``clear_at_least`` tokens, because clearing changes the prompt prefix and so costs a prompt-cache write;
- *cap*: a single result above ``max_tool_result_tokens`` keeps its head (60 % of the cap) and tail (30 %)
  around a ``[... N tokens omitted ...]`` marker; applied to any tool, recent or not, since one such result
  can fill the window on its own. A capped or cleared result becomes plain text: images inside it go
  (they count :data:`~otel_context.tokens.IMAGE_TOKENS` each, so clearing them is part of the gain).

Nothing here mutates its input: changed items are new objects, untouched items are shared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context.formats import DEFAULT_WIRE_FORMAT, for_format
from otel_context.formats.base import CLEARED_PLACEHOLDER, Item, ToolResultRef, WireFormatAdapter
from otel_context.settings import Settings
from otel_context.tokens import IMAGE_TOKENS, estimate_items, estimate_text

#: Share of ``max_tool_result_tokens`` kept from the start / the end of an oversized result.
HEAD_SHARE = 0.6
TAIL_SHARE = 0.3
DEFAULT_KEEP_RECENT = 3
DEFAULT_CLEAR_AT_LEAST = 5_000
DEFAULT_MAX_TOOL_RESULT_TOKENS = 25_000


@dataclass(frozen=True)
class MicrocompactResult:
    """What microcompact did; ``items`` is the input list itself when nothing changed."""

    items: list[Item]
    #: Tool results whose content changed (cleared + capped).
    messages_compacted: int
    tokens_before: int
    tokens_after: int
    results_cleared: int = 0
    results_capped: int = 0

    @property
    def cleared(self) -> int:
        """Alias of :attr:`messages_compacted` (the name the cascade reads)."""
        return self.messages_compacted

    @property
    def tokens_saved(self) -> int:
        return self.tokens_before - self.tokens_after


def omission_marker(omitted_tokens: int) -> str:
    """The line that replaces the middle of a capped tool result."""
    return f"[... {omitted_tokens} tokens omitted ...]"


def cap_text(text: str, max_tokens: int) -> str | None:
    """``text`` cut to its head and tail around an omission marker, or None when it is within ``max_tokens``.

    Characters per token are taken from the text's own estimate, so the cut lands where the estimator (chars
    or a cached tiktoken encoding) says the 60 % / 30 % shares end.
    """
    total = estimate_text(text)
    if max_tokens <= 0 or total <= max_tokens:
        return None
    chars_per_token = len(text) / total
    head = int(max_tokens * HEAD_SHARE * chars_per_token)
    tail = int(max_tokens * TAIL_SHARE * chars_per_token)
    middle = text[head : len(text) - tail]
    return f"{text[:head]}\n\n{omission_marker(estimate_text(middle))}\n\n{text[len(text) - tail :]}"


def _check(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"microcompact: {name} must be a non-negative integer, got {value!r}")
    return value


def _result_tokens(ref: ToolResultRef) -> int:
    return estimate_text(ref.text) + IMAGE_TOKENS * ref.image_count


def microcompact(
    adapter: WireFormatAdapter,
    items: Sequence[Item],
    *,
    keep_recent: int = DEFAULT_KEEP_RECENT,
    tools: frozenset[str] | set[str] | Sequence[str] = frozenset(),
    clear_at_least: int = DEFAULT_CLEAR_AT_LEAST,
    max_tool_result_tokens: int = DEFAULT_MAX_TOOL_RESULT_TOKENS,
) -> MicrocompactResult:
    """Clear old tool results and cap oversized ones (see the module doc); never mutates ``items``.

    ``tools``: names of the tools whose results may be cleared (empty: every tool). ``max_tool_result_tokens``
    of 0 disables capping; ``keep_recent`` of 0 clears every eligible result.
    """
    _check("keep_recent", keep_recent)
    _check("clear_at_least", clear_at_least)
    _check("max_tool_result_tokens", max_tool_result_tokens)
    if isinstance(tools, str):
        raise ValueError("microcompact: tools must be a collection of tool names, not a string")
    allowed = frozenset(tools)
    source = list(items)
    before = estimate_items(adapter, source)
    refs = adapter.tool_results(source)

    eligible = [r for r in refs if not r.cleared and (not allowed or r.tool_name in allowed)]
    old = eligible[: max(0, len(eligible) - keep_recent)]
    placeholder_tokens = estimate_text(CLEARED_PLACEHOLDER)
    candidates = [r for r in old if _result_tokens(r) > placeholder_tokens]
    reclaimable = sum(_result_tokens(r) - placeholder_tokens for r in candidates)

    replacements: dict[str, str] = {}
    if candidates and reclaimable >= clear_at_least:
        replacements.update((r.call_id, CLEARED_PLACEHOLDER) for r in candidates)
    cleared = len(replacements)
    capped = 0
    for ref in refs:
        if ref.call_id in replacements or ref.cleared:
            continue
        shortened = cap_text(ref.text, max_tool_result_tokens)
        if shortened is not None:
            replacements[ref.call_id] = shortened
            capped += 1

    if not replacements:
        return MicrocompactResult(items=source, messages_compacted=0, tokens_before=before, tokens_after=before)
    new_items = adapter.with_tool_results_replaced(source, replacements)
    return MicrocompactResult(
        items=new_items,
        messages_compacted=cleared + capped,
        tokens_before=before,
        tokens_after=estimate_items(adapter, new_items),
        results_cleared=cleared,
        results_capped=capped,
    )


def microcompact_items(adapter: WireFormatAdapter, items: Sequence[Item], settings: Settings) -> MicrocompactResult:
    """:func:`microcompact` with the knobs of a :class:`~otel_context.settings.Settings` (the cascade's entry)."""
    return microcompact(
        adapter,
        items,
        keep_recent=settings.microcompact_keep_recent,
        tools=settings.microcompact_tools,
        clear_at_least=settings.microcompact_clear_at_least,
        max_tool_result_tokens=settings.max_tool_result_tokens,
    )


def microcompact_messages(
    messages: Sequence[Mapping[str, Any]], wire_format: str = DEFAULT_WIRE_FORMAT, **options: Any
) -> list[dict[str, Any]]:
    """For apps that manage their own history: a compacted copy of ``messages`` (the caller's list untouched).

    ``messages`` is Anthropic ``messages``, OpenAI chat ``messages`` (system messages included, they are left
    alone) or a Responses ``input`` list, per ``wire_format``; ``options`` are :func:`microcompact`'s keywords.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"microcompact_messages: messages must be a list of message objects, got {type(messages).__name__}"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"microcompact_messages: messages[{index}] is {type(message).__name__}, not a mapping")
    result = microcompact(for_format(wire_format), messages, **options)
    return [dict(m) if not isinstance(m, dict) else m for m in result.items]
