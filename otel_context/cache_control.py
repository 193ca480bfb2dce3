"""Place Anthropic ``cache_control`` breakpoints with discipline, for apps that want the cache done right.

The cache serves the byte-identical prefix up to a breakpoint, in the order tools -> system -> messages. The
discipline (Anthropic's prompt-caching guidance, and what the telemetry keeps finding broken):

* Stable prefix first: one breakpoint at the end of the tools, one at the end of the system prompt, one at
  the end of the conversation. Each layer survives a change in the layers after it: a new turn leaves the
  tools and system entries readable, a system-prompt edit leaves the tools entry readable.
* At most the provider's limit of breakpoints (4), counting the ones the app placed itself; an app's own
  breakpoint in a section is respected and that section gets no other.
* Never a breakpoint on volatile content (a timestamp, a request id: anything that differs on every call),
  and none after it either: everything after a volatile block changes with it, so a breakpoint there would
  write the cache on every call (1.25x the input price) and never be read.

:func:`place_cache_breakpoints` returns a new body and never mutates the one given.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from otel_context import formats

__all__ = ["MAX_BREAKPOINTS", "looks_volatile", "place_cache_breakpoints"]

#: Anthropic accepts at most four cache_control breakpoints per request.
MAX_BREAKPOINTS = 4

Section = Literal["tools", "system", "messages"]
#: ``volatile(section, block)``: True when ``block`` differs between calls (no breakpoint on it or after it).
VolatilePredicate = Callable[[Section, Any], bool]

_VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}"  # ISO date-time
    r"|\b\d{1,2}:\d{2}:\d{2}\b"  # a clock time with seconds
    r"|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"  # a UUID
    r"|\b1[6-9]\d{8}(?:\d{3})?\b"  # a Unix timestamp (s or ms) from 2020 on
)
# Every pattern above contains one of these; scanning for them first is ~10x faster on long prompts.
_ANCHORS = re.compile(r":\d\d|-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-|1[6-9]\d{8}")
_UNCACHEABLE_TYPES = frozenset({"thinking", "redacted_thinking"})


@functools.lru_cache(maxsize=256)
def _volatile_text(text: str) -> bool:
    """Memoized: a stable system prompt is the same string on every call, so it is scanned once."""
    return any(_VOLATILE.search(text, max(0, m.start() - 20), m.end() + 20) for m in _ANCHORS.finditer(text))


def looks_volatile(section: Section, block: Any) -> bool:
    """The default volatility test: a system block whose text carries a time of day, a UUID or a Unix
    timestamp (the classic reasons a system prompt never hits the cache). Messages are history: what an
    app wrote into a past message stays put, so they are never volatile by default."""
    if section != "system":
        return False
    text = block if isinstance(block, str) else block.get("text") if isinstance(block, Mapping) else None
    return isinstance(text, str) and _volatile_text(text)


def place_cache_breakpoints(
    body: Mapping[str, Any],
    *,
    wire_format: str = formats.ANTHROPIC_MESSAGES.name,
    ttl: Literal["5m", "1h"] | None = None,
    max_breakpoints: int = MAX_BREAKPOINTS,
    volatile: VolatilePredicate | None = None,
) -> dict[str, Any]:
    """A copy of ``body`` (a ``messages.create`` request) with breakpoints at the end of the tools, of the
    system prompt and of the conversation, as far as the discipline above allows.

    ``ttl``: ``"1h"`` for long-lived prefixes (written at 2x, worth it when calls are minutes apart);
    default the provider's 5 minutes. ``volatile``: which blocks change between calls (default
    :func:`looks_volatile`). Only the containers on the path to a new marker are copied.
    """
    fmt = formats.for_format(wire_format) if wire_format in formats.WIRE_FORMATS else None
    if fmt is not None and not fmt.cache_control_markers and not fmt.automatic_caching:
        raise ValueError(f"place_cache_breakpoints writes cache_control markers; {wire_format!r} has none")
    if fmt is None or not fmt.cache_control_markers:
        raise ValueError(
            f"place_cache_breakpoints writes Anthropic cache_control markers; {wire_format!r} is cached by the "
            "provider automatically (keep the prompt's stable part first instead)"
        )
    if not isinstance(body, Mapping):
        raise TypeError(f"place_cache_breakpoints needs the request body as a mapping, got {type(body).__name__}")
    if not isinstance(max_breakpoints, int) or not 0 <= max_breakpoints <= MAX_BREAKPOINTS:
        raise ValueError(f"max_breakpoints must be an int from 0 to {MAX_BREAKPOINTS}, got {max_breakpoints!r}")
    if ttl not in (None, "5m", "1h"):
        raise ValueError(f"ttl must be '5m', '1h' or None, got {ttl!r}")
    is_volatile = volatile or looks_volatile
    marker: dict[str, Any] = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}

    tools = _list(body.get("tools"))
    system = body.get("system")
    system_blocks: list[Any] = [system] if isinstance(system, str) else _list(system)
    messages = _list(body.get("messages"))
    in_tools, in_system, in_messages = _count_markers(tools), _count_markers(system_blocks), _message_markers(messages)
    existing = in_tools + in_system + in_messages + isinstance(body.get("cache_control"), Mapping)
    budget = max_breakpoints - existing

    out = dict(body)
    # Walk the prefix in cache order; stop at the first volatile block: nothing after it is stable.
    tool_at, stop = _candidate("tools", list(enumerate(tools)), is_volatile)
    system_at, stop_system = (None, True) if stop else _candidate("system", list(enumerate(system_blocks)), is_volatile)
    message_at: tuple[int, int] | None = None
    if not (stop or stop_system):
        if is_volatile is looks_volatile:  # messages are never volatile by default: the last block wins
            message_at = _last_cacheable(messages)
        else:
            indexed = [((m, b), block) for m, msg in enumerate(messages) for b, block in enumerate(_content(msg))]
            message_at, _ = _candidate("messages", indexed, is_volatile)
    place_tools = tool_at is not None and budget > 0 and not in_tools
    budget -= place_tools
    place_system = system_at is not None and budget > 0 and not in_system
    budget -= place_system
    place_messages = message_at is not None and budget > 0 and not in_messages
    if ttl == "1h":
        _check_ttl_order(tools, system_blocks, place_system, place_messages)
    if place_tools and tool_at is not None:
        out["tools"] = _marked_list(tools, tool_at, marker)
    if place_system and system_at is not None:
        out["system"] = _marked_list(system_blocks, system_at, marker)
    if place_messages and message_at is not None:
        m, b = message_at
        new_messages = list(messages)
        new_messages[m] = {**messages[m], "content": _marked_list(_content(messages[m]), b, marker)}
        out["messages"] = new_messages
    return out


def _candidate(
    section: Section, blocks: Sequence[tuple[Any, Any]], is_volatile: VolatilePredicate
) -> tuple[Any | None, bool]:
    """The position of the last block that can carry a breakpoint before the first volatile one, and
    whether a volatile block was met (then later sections get no breakpoint)."""
    found = None
    for position, block in blocks:
        if is_volatile(section, block):
            return found, True
        if _cacheable(block):
            found = position
    return found, False


def _last_cacheable(messages: Sequence[Any]) -> tuple[int, int] | None:
    for m in range(len(messages) - 1, -1, -1):
        blocks = _content(messages[m])
        for b in range(len(blocks) - 1, -1, -1):
            if _cacheable(blocks[b]):
                return m, b
    return None


def _cacheable(block: Any) -> bool:
    """Whether the API accepts cache_control on this block (not on thinking blocks, nor on empty text)."""
    if isinstance(block, str):
        return bool(block)
    if not isinstance(block, Mapping):
        return False
    if block.get("type") in _UNCACHEABLE_TYPES:
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def _marked_list(blocks: Sequence[Any], index: int, marker: Mapping[str, Any]) -> list[Any]:
    out = list(blocks)
    block = out[index]
    base = {"type": "text", "text": block} if isinstance(block, str) else dict(block)
    base["cache_control"] = dict(marker)
    out[index] = base
    return out


def _content(message: Any) -> list[Any]:
    if not isinstance(message, Mapping):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return _list(content)


def _list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return []  # absent, None, or the SDK's omit/NOT_GIVEN sentinels


def _markers(value: Any) -> list[Mapping[str, Any]]:
    """Every cache_control marker inside ``value`` (blocks, messages, nested tool_result content)."""
    found: list[Mapping[str, Any]] = []
    if isinstance(value, Mapping):
        marker = value.get("cache_control")
        if isinstance(marker, Mapping):
            found.append(marker)
        for key, item in value.items():
            if key != "cache_control" and isinstance(item, (list, tuple, Mapping)):
                found.extend(_markers(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(_markers(item))
    return found


def _count_markers(value: Any) -> int:
    return len(_markers(value))


def _message_markers(messages: Sequence[Any]) -> int:
    """Markers in a conversation; a flat scan of the places a marker can sit (content blocks and the blocks
    nested in tool results), because this runs on every call over the whole history."""
    count = 0
    for message in messages:
        content = message.get("content") if type(message) is dict or isinstance(message, Mapping) else None
        if not isinstance(content, (list, tuple)):
            continue
        for block in content:
            if type(block) is not dict and not isinstance(block, Mapping):
                continue
            if block.get("cache_control") is not None:
                count += 1
            nested = block.get("content")
            if type(nested) is list:
                count += sum(1 for b in nested if isinstance(b, Mapping) and b.get("cache_control") is not None)
    return count


def _check_ttl_order(tools: list[Any], system: list[Any], place_system: bool, place_messages: bool) -> None:
    """Anthropic requires 1-hour breakpoints to come before 5-minute ones: refuse to add one after the
    app's own 5-minute breakpoint rather than send a request the API rejects."""

    def short(section: list[Any]) -> bool:
        return any(m.get("ttl", "5m") != "1h" for m in _markers(section))

    if (place_system and short(tools)) or (place_messages and (short(tools) or short(system))):
        raise ValueError(
            "ttl='1h' breakpoints must come before 5-minute ones, and the body already has a 5-minute "
            "cache_control breakpoint earlier in the prompt; remove it, or call place_cache_breakpoints without ttl"
        )
