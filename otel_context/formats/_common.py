"""Small helpers shared by the wire-format modules (never mutating what they read)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from otel_context import semconv
from otel_context.formats.base import Item
from otel_context.usage import (
    TokenUsage,
    field_getter,
    first_count,
    first_count_of,
    first_present,
    get_field,
    or_zero,
)

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


#: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` without building the encoder on each call.
_COMPACT_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_json_str: Callable[[str], str] = json.encoder.encode_basestring  # what that encoder writes a string with


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (for estimates and transcripts); ``str()`` for what JSON cannot encode.

    A value nested near the interpreter's recursion limit (an app's tool input, say) is encoded with its deep
    part elided: the request must still be planned and sent, never fail in our walk (issue 14).
    """
    try:
        if type(value) is dict:
            # A tool call's arguments, mostly: the encoder's own output for a flat dict of strings, built
            # without its per-call setup (~1.5 µs, the bulk of a short call's text), in one loop over it (the
            # retention check and the estimates read every call of a long span).
            parts: list[str] = []
            for key, item in value.items():
                if type(key) is not str or type(item) is not str:
                    break
                parts.append(_json_str(key) + ":" + _json_str(item))
            else:
                return "{" + ",".join(parts) + "}"
        return _COMPACT_ENCODER.encode(value)
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


def as_field_list(value: Any) -> list[Any]:
    """A body field as a list of entries; absent values (None, the SDKs' ``omit``/``NOT_GIVEN``) are empty."""
    if isinstance(value, list):
        return value
    if value is None:
        return []
    if isinstance(value, (str, Mapping)):
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return []


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


# --- the response side: span attributes, usage, content capture ----------------------------------------------

_FINISH = semconv.FINISH_REASON_MAP


def finish_reason(reason: Any) -> str | None:
    """A provider's stop/finish reason in the GenAI semconv vocabulary (unknown ones as they are)."""
    if reason is None:
        return None
    text = str(reason)
    return _FINISH.get(text, text)


def output_cap(body: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    """The output cap a body sets: the first of ``keys`` (each format, and each API generation, names it
    differently) that holds an int."""
    for key in keys:
        value = body.get(key)
        if type(value) is int or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return None


def with_cap(body: Mapping[str, Any], keys: tuple[str, ...], default: str, max_tokens: int) -> dict[str, Any]:
    """A copy of ``body`` capped at ``max_tokens`` under the first of ``keys`` it already uses (its place in
    the body kept), else under ``default``; the other spellings are dropped (a request may carry only one)."""
    present = [k for k in keys if k in body]
    out = {k: v for k, v in body.items() if k not in present[1:]}
    out[present[0] if present else default] = max_tokens
    return out


def sampling_attributes(body: Mapping[str, Any], max_keys: tuple[str, ...]) -> dict[str, Any]:
    """Max tokens (see :func:`output_cap`), temperature and top_p, when the body sets them to numbers."""
    attrs: dict[str, Any] = {}
    cap = output_cap(body, max_keys)
    if cap is not None:
        attrs[semconv.GEN_AI_REQUEST_MAX_TOKENS] = cap
    temperature, top_p = body.get("temperature"), body.get("top_p")  # mostly absent: no loop for them
    if temperature is not None and isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        attrs[semconv.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)
    if top_p is not None and isinstance(top_p, (int, float)) and not isinstance(top_p, bool):
        attrs[semconv.GEN_AI_REQUEST_TOP_P] = float(top_p)
    return attrs


def text_parts(content: Any, kinds: Iterable[str]) -> str:
    """The ``text`` of the parts of ``content`` whose type is one of ``kinds``, concatenated as a stream's
    deltas would be (a string content is its own text)."""
    if isinstance(content, str):
        return content
    wanted = frozenset(kinds)
    return "".join(
        t
        for part in (content if isinstance(content, (list, tuple)) else ())
        if get_field(part, "type") in wanted and isinstance(t := get_field(part, "text"), str)
    )


def captured_text(content: Any) -> str:
    """Captured text of a tool result's content: the string, or every part's ``text`` concatenated."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(t for b in content if isinstance(t := get_field(b, "text"), str))
    return ""


def captured_arguments(raw: Any) -> Any:
    """A tool call's arguments for capture: parsed when they are a JSON string, plain data when an SDK model."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    if hasattr(raw, "model_dump"):
        return raw.model_dump(mode="json")
    return raw


def openai_usage(
    u: Any,
    *,
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    input_details: tuple[str, ...],
    output_details: tuple[str, ...],
) -> TokenUsage:
    """The OpenAI family's usage (Chat Completions, Responses, compatibles): input totals already include
    cached tokens; each spelling lists the names of one figure, preferred first."""
    get = field_getter(u)  # one type decision for every read below (this runs on every call)
    input_tokens = first_count_of(get, *input_names)
    output_tokens = first_count_of(get, *output_names)
    cache_read = cache_write = reasoning = None
    details = first_present(get, input_details)
    if details is not None:
        read = field_getter(details)
        cache_read = first_count_of(read, "cached_tokens", "cache_read_tokens")
        cache_write = first_count_of(read, "cache_write_tokens", "cache_creation_tokens")
    out_details = first_present(get, output_details)
    if out_details is not None:
        reasoning = first_count(out_details, "reasoning_tokens")
    return TokenUsage(
        input_tokens=or_zero(input_tokens),
        output_tokens=or_zero(output_tokens),
        cache_read_tokens=or_zero(cache_read),
        cache_write_tokens=or_zero(cache_write),
        reasoning_tokens=or_zero(reasoning),
        reported_cache=cache_read is not None or cache_write is not None,
        reported_reasoning=reasoning is not None,
    )


# --- the provider's cache diagnostics ---------------------------------------------------------------------------

#: The longest provider reason (or status) kept as it was spelled; anything else is ``other`` (bounded labels).
_MAX_REASON = 40


def provider_reason(value: Any) -> str | None:
    """A provider's reason of a cache miss as it spelled it, when it is a short snake_case word (a metric label:
    what another shape sends is ``other``, never free text); None when absent."""
    if value is None:
        return None
    if (
        isinstance(value, str)
        and 0 < len(value) <= _MAX_REASON
        and value.replace("_", "").isalnum()
        and value.islower()
    ):
        return value
    return "other"


def reply_digest(texts: Iterable[str], ids: Iterable[str]) -> str:
    """The digest of a model's reply: its text (concatenated, in order) and its tool-call ids. Two replies of
    two conversations have the same digest only when they said the same words and called no tool (tool-call
    ids are unique); "" for an empty reply, which proves nothing."""
    text = "".join(texts)
    called = sorted(ids)
    if not text and not called:
        return ""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    for call_id in called:
        digest.update(b"\0" + call_id.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]
