"""Small helpers shared by the three wire-format adapters (JSON-shaped data only, never mutated)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from otel_context.providers.base import Item

#: Parameters of a too-long rejection that every provider words the same way.
_TOO_LONG_MARKERS = (
    "prompt is too long",
    "model_context_window_exceeded",
    "context_length_exceeded",
    "maximum context length",
    "exceeds the context window",
    "exceed context limit",
    "context window exceeded",
)


#: Nesting kept by :func:`compact_json` when the value is too deep for ``json.dumps`` (recursive in C).
MAX_JSON_DEPTH = 64


def _shallow(value: Any, depth: int = 0) -> Any:
    """``value`` with containers nested deeper than :data:`MAX_JSON_DEPTH` replaced by ``"..."``."""
    if isinstance(value, Mapping):
        return "..." if depth >= MAX_JSON_DEPTH else {str(k): _shallow(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return "..." if depth >= MAX_JSON_DEPTH else [_shallow(v, depth + 1) for v in value]
    return value


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (for estimates and transcripts); ``str()`` for what JSON cannot encode.

    A value nested near the interpreter's recursion limit (an app's tool input, say) is encoded with its deep
    part elided: the request must still be planned and sent, never fail in our walk (issue 14).
    """
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
    except RecursionError:
        return json.dumps(_shallow(value), ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(value)


def parse_arguments(arguments: Any) -> Mapping[str, Any] | None:
    """A call's arguments as a mapping: OpenAI sends a JSON string, Anthropic an object; ``None`` if neither."""
    if isinstance(arguments, Mapping):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def join_text(parts: Iterable[str]) -> str:
    """Non-empty parts joined by newlines."""
    return "\n".join(p for p in parts if p)


def as_list(value: Any) -> list[Any]:
    """A list for list-shaped content, ``[]`` for a string/None (callers treat strings separately)."""
    return list(value) if isinstance(value, (list, tuple)) else []


def error_fields(error_body: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """``(type, code, message)`` of a provider error body.

    Accepts the whole JSON (``{"error": {...}}``) or the inner object, which is what the OpenAI SDK puts on
    ``APIStatusError.body``; the Anthropic SDK keeps the whole JSON.
    """
    if not isinstance(error_body, Mapping):
        return "", "", ""
    inner = error_body.get("error")
    source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else error_body
    return (
        str(source.get("type") or ""),
        str(source.get("code") or ""),
        str(source.get("message") or ""),
    )


def mentions_too_long(*texts: str) -> bool:
    """Whether any text carries one of the providers' context-overflow phrasings."""
    lowered = " ".join(texts).lower()
    return any(marker in lowered for marker in _TOO_LONG_MARKERS)


def fixpoint(items: Sequence[Item], passes: Sequence[Callable[[list[Item]], list[Item]]]) -> list[Item]:
    """Apply the passes in order until none changes anything.

    Every pass only removes (blocks or items), so this terminates; a pass returning the same list object
    signals "no change".
    """
    current = list(items)
    while True:
        changed = False
        for step in passes:
            nxt = step(current)
            if nxt is not current:
                changed = True
                current = nxt
        if not changed:
            return current


def merge_text_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge consecutive same-role plain-text messages (transcripts for the summarizer alternate roles)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if out and out[-1]["role"] == msg["role"]:
            out[-1] = {"role": msg["role"], "content": f"{out[-1]['content']}\n\n{msg['content']}"}
        else:
            out.append(dict(msg))
    return out


def unsendable_item(items: Sequence[Item], where: str) -> str | None:
    """Why the first item the SDKs refuse to send is malformed, or None: a float JSON cannot carry (inf, nan:
    ``ValueError``) or a string with a lone surrogate, which UTF-8 cannot carry (``UnicodeEncodeError``).

    Compacted, such a value could be summarized or cleared away and the call succeed, hiding the app's bug.
    ``where`` names an item from its index (``"input[{}]"``). Iterative, so any nesting is fine; walked only
    when a compaction is due.
    """
    for index, item in enumerate(items):
        stack = [item]
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                if not value.isascii():
                    try:
                        value.encode("utf-8")
                    except UnicodeEncodeError:
                        return f"{where.format(index)} holds a lone surrogate, which UTF-8 cannot carry (malformed)"
            elif isinstance(value, float):
                if not math.isfinite(value):
                    return f"{where.format(index)} holds {value!r}, which JSON cannot carry (malformed)"
            elif isinstance(value, Mapping):
                stack.extend(value.values())
            elif isinstance(value, (list, tuple)):
                stack.extend(value)
    return None


#: Per block/part/item type, the fields it needs and their JSON types (what the provider itself rejects).
FieldRules = Mapping[str, tuple[tuple[str, type | tuple[type, ...]], ...]]
_OPTIONAL = type(None)


def malformed_field(entry: Mapping[str, Any], kind: str, rules: FieldRules, where: str) -> str | None:
    """Why ``entry`` (of type ``kind``) lacks a field the provider requires, or None.

    Compaction must never hide an invalid request: a malformed block that the summary would replace goes
    to the provider unchanged, so the app's own bug stays visible (the provider rejects it as it would
    without us).
    """
    for name, types in rules.get(kind, ()):
        value = entry.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            shown = "missing" if name not in entry else f"a {type(value).__name__}"
            return f"{where}.{name} is {shown} (malformed {kind!r})"
    return None
