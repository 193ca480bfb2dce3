"""Provider usage -> one :class:`TokenUsage`.

Every provider reports tokens differently (Anthropic excludes cache reads/writes from ``input_tokens``,
OpenAI includes cached tokens in ``prompt_tokens``, DeepSeek has its own hit/miss fields). Everything
downstream (span attributes, metrics, cache-break detection, the compaction budget) reads this one shape.

The extraction functions are pure and total: they accept the SDK's pydantic objects or plain JSON-shaped
dicts (a decoded body, an SSE ``data:`` payload), and never raise. Recorded responses from 2024 lack whole
groups of fields, newer ones add fields the installed SDK types do not declare, and a stream can end before
its usage arrives: a missing or null field counts as 0, and a number the provider reported under another
name (an older or a compatible API's spelling) is picked up rather than read as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple
from urllib.parse import urlsplit


@dataclass(frozen=True, init=False)
class TokenUsage:
    """Token figures of one response, normalized.

    ``input_tokens`` INCLUDES cache reads and writes (GenAI semconv): for Anthropic it is
    ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Anthropic's split of cache writes by TTL (5-minute and 1-hour breakpoints).
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    #: Server-side compaction iterations reported inside the usage (Anthropic ``usage.iterations``).
    compaction_input_tokens: int = 0
    compaction_output_tokens: int = 0
    #: Which fields the provider actually reported (so a real 0 is not confused with "not reported").
    reported_cache: bool = False
    reported_reasoning: bool = False
    #: How many ``usage.iterations`` entries of type ``compaction`` the response carried: > 0 means the
    #: provider compacted the context server side during this call (``gen_ai.conversation.compacted``).
    compaction_iterations: int = 0

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_write_5m_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
        reasoning_tokens: int = 0,
        compaction_input_tokens: int = 0,
        compaction_output_tokens: int = 0,
        reported_cache: bool = False,
        reported_reasoning: bool = False,
        compaction_iterations: int = 0,
    ) -> None:
        # Same fields and order as the generated __init__; one dict update instead of a frozen
        # dataclass's per-field object.__setattr__ (five times faster; this runs on every instrumented call).
        self.__dict__.update(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            cache_write_5m_tokens=cache_write_5m_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
            reasoning_tokens=reasoning_tokens,
            compaction_input_tokens=compaction_input_tokens,
            compaction_output_tokens=compaction_output_tokens,
            reported_cache=reported_cache,
            reported_reasoning=reported_reasoning,
            compaction_iterations=compaction_iterations,
        )

    @property
    def context_tokens(self) -> int:
        """Tokens this exchange leaves in the context: everything sent plus what the model wrote."""
        return self.input_tokens + self.output_tokens

    @property
    def hit_ratio(self) -> float:
        """Cache-read tokens / input tokens (0 when there was no input)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0


# --- field access that works on SDK models and on dicts ------------------------------------------------------


_MAPPING, _PYDANTIC, _OBJECT = 0, 1, 2
#: How to read fields from instances of each type seen: decided once per type, since this runs for every
#: instrumented call (an ABC ``isinstance`` and pydantic's ``__getattr__`` for absent fields are slow).
_KINDS: dict[type, int] = {dict: _MAPPING}


def _kind(cls: type) -> int:
    kind = _KINDS.get(cls)
    if kind is None:
        if issubclass(cls, Mapping):
            kind = _MAPPING
        elif isinstance(getattr(cls, "__pydantic_fields__", None), dict):
            kind = _PYDANTIC
        else:
            kind = _OBJECT
        if len(_KINDS) < 1024:  # bounded, whatever the caller passes
            _KINDS[cls] = kind
    return kind


def _get(obj: Any, name: str) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` otherwise; None when absent or when ``obj`` is None.

    SDK models keep fields their types do not declare (newer API) as extras, so those are seen too.
    """
    if obj is None:
        return None
    kind = _kind(type(obj))
    if kind == _MAPPING:
        return obj.get(name)
    if kind == _PYDANTIC:
        fields = getattr(obj, "__dict__", None)
        value = fields.get(name) if fields is not None else None
        if value is None:
            extra = getattr(obj, "__pydantic_extra__", None)
            if extra:
                value = extra.get(name)
        return value
    try:
        return getattr(obj, name, None)
    except Exception:  # a property of a foreign object may raise: treat as absent
        return None


def _num(value: Any) -> int | None:
    """A token count, or None when the value is missing or not a number (bools are not counts)."""
    if type(value) is int:
        return value
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value:  # not NaN
        return int(value)
    return None


def _none(name: str) -> None:
    return None


def _getter(obj: Any) -> Callable[[str], Any]:
    """``_get`` bound to ``obj``, decided once for several reads: ``dict.get`` for dicts and extra-free SDK models."""
    if obj is None:
        return _none
    kind = _kind(type(obj))
    if kind == _MAPPING:
        return obj.get  # type: ignore[no-any-return]
    if kind == _PYDANTIC and not getattr(obj, "__pydantic_extra__", None):
        fields = getattr(obj, "__dict__", None)
        if fields is not None:
            return fields.get  # type: ignore[no-any-return]
    return lambda name: _get(obj, name)


def _first(obj: Any, *names: str) -> int | None:
    """The first of ``names`` that ``obj`` reports as a number (the spellings of one figure)."""
    return _first_of(_getter(obj), *names)


def _first_of(get: Callable[[str], Any], *names: str) -> int | None:
    """``_first`` with the object's getter already decided."""
    for name in names:
        value = _num(get(name))
        if value is not None:
            return value
    return None


def _sequence(value: Any) -> Sequence[Any]:
    """``value`` as a list of entries, empty unless it is a real sequence (not a string)."""
    if isinstance(value, (list, tuple)):
        return value
    return ()


def _zero(value: int | None) -> int:
    return 0 if value is None else value


# --- Anthropic ----------------------------------------------------------------------------------------------


class _AnthropicFields(NamedTuple):
    """The raw Anthropic figures, None where the provider did not report them (needed to merge streams)."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read: int | None
    cache_write: int | None
    write_5m: int | None
    write_1h: int | None
    reasoning: int | None
    iterations: Sequence[Any] | None


def _anthropic_fields(u: Any) -> _AnthropicFields:
    get = _getter(u)  # one type decision for the ten reads below (this runs on every call)
    cache_creation = _getter(get("cache_creation"))
    write_5m = _num(cache_creation("ephemeral_5m_input_tokens"))
    write_1h = _num(cache_creation("ephemeral_1h_input_tokens"))
    cache_write = _num(get("cache_creation_input_tokens"))
    if cache_write is None and (write_5m is not None or write_1h is not None):
        # Only the TTL breakdown was reported: the total is its sum, not 0.
        cache_write = _zero(write_5m) + _zero(write_1h)
    iterations = get("iterations")
    return _AnthropicFields(
        input_tokens=_num(get("input_tokens")),
        output_tokens=_num(get("output_tokens")),
        cache_read=_num(get("cache_read_input_tokens")),
        cache_write=cache_write,
        write_5m=write_5m,
        write_1h=write_1h,
        # Claude reports thinking under output_tokens_details.thinking_tokens (included in output_tokens).
        reasoning=_first(get("output_tokens_details"), "thinking_tokens", "reasoning_tokens"),
        iterations=_sequence(iterations) if iterations is not None else None,
    )


def _compaction_sums(iterations: Sequence[Any] | None) -> tuple[int, int, int]:
    """(count, input incl. cache, output) of the ``compaction`` entries of ``usage.iterations``.

    With server-side compaction the top-level usage counts only the final (``message``) pass; the
    compaction pass (often a large cache write or read) is reported only here.
    """
    count = input_tokens = output_tokens = 0
    for entry in iterations or ():
        if _get(entry, "type") != "compaction":
            continue
        count += 1
        input_tokens += (
            _zero(_first(entry, "input_tokens"))
            + _zero(_first(entry, "cache_read_input_tokens"))
            + _zero(_first(entry, "cache_creation_input_tokens"))
        )
        output_tokens += _zero(_first(entry, "output_tokens"))
    return count, input_tokens, output_tokens


def _from_anthropic_fields(f: _AnthropicFields) -> TokenUsage:
    cache_read = _zero(f.cache_read)
    cache_write = _zero(f.cache_write)
    count, compaction_in, compaction_out = _compaction_sums(f.iterations)
    return TokenUsage(
        input_tokens=_zero(f.input_tokens) + cache_read + cache_write,
        output_tokens=_zero(f.output_tokens),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cache_write_5m_tokens=_zero(f.write_5m),
        cache_write_1h_tokens=_zero(f.write_1h),
        reasoning_tokens=_zero(f.reasoning),
        compaction_input_tokens=compaction_in,
        compaction_output_tokens=compaction_out,
        reported_cache=f.cache_read is not None or f.cache_write is not None,
        reported_reasoning=f.reasoning is not None,
        compaction_iterations=count,
    )


def usage_from_anthropic(u: Any) -> TokenUsage:
    """Normalize an Anthropic ``usage`` (``Usage``, ``BetaUsage``, ``MessageDeltaUsage`` or a dict).

    ``input_tokens`` becomes ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
    server-side compaction passes (``usage.iterations`` of type ``compaction``) go to the
    ``compaction_*`` fields and are NOT added to the top-level figures, which describe the final pass
    (the context the conversation now has).
    """
    return _from_anthropic_fields(_anthropic_fields(u))


def merge_stream_usage(previous: TokenUsage | None, new: Any) -> TokenUsage:
    """Fold the usage of one Anthropic stream event (``message_start`` or ``message_delta``) into ``previous``.

    ``message_delta`` usage is cumulative, not an increment: old streams send only ``output_tokens`` there,
    newer ones repeat ``input_tokens`` and the cache figures, and those can differ from ``message_start``
    (server tools, server-side compaction). So per field the later non-null value wins; ``output_tokens``
    is the last one reported (``message_start`` only carries a placeholder). ``new`` is the raw usage of the
    event (SDK object or dict); ``previous`` is what earlier events gave (None before the first).
    """
    f = _anthropic_fields(new)
    if previous is None:
        return _from_anthropic_fields(f)
    prev_raw_input = previous.input_tokens - previous.cache_read_tokens - previous.cache_write_tokens
    cache_write = f.cache_write if f.cache_write is not None else previous.cache_write_tokens
    write_5m, write_1h = f.write_5m, f.write_1h
    if write_5m is None and write_1h is None:
        if f.cache_write is None or f.cache_write == previous.cache_write_tokens:
            write_5m, write_1h = previous.cache_write_5m_tokens, previous.cache_write_1h_tokens
        else:
            # A new total without a breakdown: the old split no longer describes it.
            write_5m, write_1h = 0, 0
    merged = _AnthropicFields(
        input_tokens=f.input_tokens if f.input_tokens is not None else prev_raw_input,
        output_tokens=f.output_tokens if f.output_tokens is not None else previous.output_tokens,
        cache_read=f.cache_read if f.cache_read is not None else previous.cache_read_tokens,
        cache_write=cache_write,
        write_5m=write_5m,
        write_1h=write_1h,
        reasoning=f.reasoning if f.reasoning is not None else previous.reasoning_tokens,
        iterations=f.iterations,
    )
    result = _from_anthropic_fields(merged)
    reported_cache = previous.reported_cache or f.cache_read is not None or f.cache_write is not None
    reported_reasoning = previous.reported_reasoning or f.reasoning is not None
    if f.iterations is None:  # this event said nothing about iterations: keep what an earlier one said
        return replace(
            result,
            compaction_input_tokens=previous.compaction_input_tokens,
            compaction_output_tokens=previous.compaction_output_tokens,
            compaction_iterations=previous.compaction_iterations,
            reported_cache=reported_cache,
            reported_reasoning=reported_reasoning,
        )
    return replace(result, reported_cache=reported_cache, reported_reasoning=reported_reasoning)


# --- OpenAI and compatibles -----------------------------------------------------------------------------------


def _openai(
    u: Any,
    *,
    input_names: tuple[str, ...],
    output_names: tuple[str, ...],
    input_details: tuple[str, ...],
    output_details: tuple[str, ...],
) -> TokenUsage:
    """Shared OpenAI-family extraction: input totals already include cached tokens."""
    get = _getter(u)  # one type decision for every read below (this runs on every call)
    input_tokens = _first_of(get, *input_names)
    details = _getter(next((d for name in input_details if (d := get(name)) is not None), None))
    cache_read = _first_of(details, "cached_tokens", "cache_read_tokens")
    cache_write = _first_of(details, "cache_write_tokens", "cache_creation_tokens")
    out_details = next((d for name in output_details if (d := get(name)) is not None), None)
    reasoning = _first(out_details, "reasoning_tokens")
    return TokenUsage(
        input_tokens=_zero(input_tokens),
        output_tokens=_zero(_first_of(get, *output_names)),
        cache_read_tokens=_zero(cache_read),
        cache_write_tokens=_zero(cache_write),
        reasoning_tokens=_zero(reasoning),
        reported_cache=cache_read is not None or cache_write is not None,
        reported_reasoning=reasoning is not None,
    )


def usage_from_openai_chat(u: Any) -> TokenUsage:
    """Normalize a Chat Completions (or legacy Completions, or Embeddings) ``usage``.

    ``prompt_tokens`` already includes cached reads and writes; ``prompt_tokens_details.cached_tokens`` /
    ``cache_write_tokens`` and ``completion_tokens_details.reasoning_tokens`` where reported. A usage in
    the Responses spelling (``input_tokens``), as some compatible servers send, is read too.
    """
    return _openai(
        u,
        input_names=("prompt_tokens", "input_tokens"),
        output_names=("completion_tokens", "output_tokens"),
        input_details=("prompt_tokens_details", "input_tokens_details"),
        output_details=("completion_tokens_details", "output_tokens_details"),
    )


def usage_from_openai_responses(u: Any) -> TokenUsage:
    """Normalize a Responses API ``usage``: ``input_tokens`` includes cached tokens.

    ``input_tokens_details.cached_tokens`` / ``cache_write_tokens`` and
    ``output_tokens_details.reasoning_tokens`` where reported (older responses lack the cache-write field).
    """
    return _openai(
        u,
        input_names=("input_tokens", "prompt_tokens"),
        output_names=("output_tokens", "completion_tokens"),
        input_details=("input_tokens_details", "prompt_tokens_details"),
        output_details=("output_tokens_details", "completion_tokens_details"),
    )


def usage_from_deepseek(u: Any) -> TokenUsage:
    """Normalize a DeepSeek (OpenAI-compatible chat) ``usage``.

    DeepSeek reports cache reads as ``prompt_cache_hit_tokens`` (and misses as ``prompt_cache_miss_tokens``);
    ``prompt_tokens`` is hit + miss. When ``prompt_tokens`` is missing the input is rebuilt from hit + miss.
    """
    hit = _first(u, "prompt_cache_hit_tokens")
    miss = _first(u, "prompt_cache_miss_tokens")
    usage = _openai(
        u,
        input_names=("prompt_tokens", "input_tokens"),
        output_names=("completion_tokens", "output_tokens"),
        input_details=("prompt_tokens_details",),
        output_details=("completion_tokens_details",),
    )
    changes: dict[str, Any] = {}
    if hit is not None:
        changes["cache_read_tokens"] = hit
        changes["reported_cache"] = True
    if _first(u, "prompt_tokens", "input_tokens") is None and (hit is not None or miss is not None):
        changes["input_tokens"] = _zero(hit) + _zero(miss)
    return replace(usage, **changes) if changes else usage


def is_deepseek(base_url: Any) -> bool:
    """Whether a client's ``base_url`` (str, ``httpx2.URL`` or None) points at DeepSeek's API."""
    if base_url is None:
        return False
    text = str(base_url)
    if "://" not in text:
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return False
    if not host:
        return False
    host = host.rstrip(".").lower()
    return host == "deepseek.com" or host.endswith(".deepseek.com")


__all__ = [
    "TokenUsage",
    "is_deepseek",
    "merge_stream_usage",
    "usage_from_anthropic",
    "usage_from_deepseek",
    "usage_from_openai_chat",
    "usage_from_openai_responses",
]
