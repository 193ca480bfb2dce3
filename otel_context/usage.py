"""One :class:`TokenUsage` for every provider, and the field readers the wire formats parse usage with.

Every provider reports tokens differently (Anthropic excludes cache reads/writes from ``input_tokens``,
OpenAI includes cached tokens in ``prompt_tokens``, DeepSeek has its own hit/miss fields). Everything
downstream (span attributes, metrics, cache-break detection, the compaction budget) reads this one shape.
Each wire format module parses its own spelling (``otel_context.formats.anthropic_messages.usage_from_anthropic``,
``openai_chat.usage_from_openai_chat`` / ``usage_from_deepseek``, ``openai_responses.usage_from_openai_responses``)
with the readers here; this module stays low (the call contract and the cache import it) and knows no format.

The readers are pure and total: they accept the SDK's pydantic objects or plain JSON-shaped
dicts (a decoded body, an SSE ``data:`` payload), and never raise. Recorded responses from 2024 lack whole
groups of fields, newer ones add fields the installed SDK types do not declare, and a stream can end before
its usage arrives: a missing or null field counts as 0, and a number the provider reported under another
name (an older or a compatible API's spelling) is picked up rather than read as 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from otel_context import process_state


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


class CacheDiagnosis(NamedTuple):
    """The provider's own word on a call's prompt cache (Anthropic ``diagnostics.cache_miss_reason``, OpenAI
    Responses ``prompt_cache_diagnostics``), in one shape: what each wire format reads from a response.

    ``status`` is one of ``semconv.DIAGNOSIS_STATUSES``; ``reason`` the provider's reason of a miss as it
    spelled it (None otherwise); the token figures as reported (None when absent).
    """

    status: str
    reason: str | None = None
    missed_tokens: int | None = None
    reusable_tokens: int | None = None


#: What a format reads from a response whose diagnostics field is ``null`` (Anthropic: nothing diverged, or
#: nothing was asked): a hit when its request asked for a comparison, nothing otherwise. The format's
#: ``settle_diagnosis`` decides which, knowing the request; it never reaches a span as such.
DIAGNOSTICS_NULL = CacheDiagnosis("null")


# --- field access that works on SDK models and on dicts ------------------------------------------------------


_MAPPING, _PYDANTIC, _OBJECT = 0, 1, 2
#: How to read fields from instances of each type seen: decided once per type, since this runs for every
#: instrumented call (an ABC ``isinstance`` and pydantic's ``__getattr__`` for absent fields are slow).
_KINDS: dict[type, int] = {dict: _MAPPING}
# Reset and a fork's child: kept (a pure function of its key: the kind of a class).
process_state.register(__name__, ("_KINDS",), on_reset=None, in_forked_child=None)


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


def is_mapping(value: Any) -> bool:
    """Whether ``value`` is a mapping (a JSON object of a request or response), decided once per type: an ABC
    ``isinstance`` per value is a Python-level call, and the engine asks for every item of a history."""
    cls = type(value)
    kind = _KINDS.get(cls)
    return (kind if kind is not None else _kind(cls)) == _MAPPING


def get_field(obj: Any, name: str) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` otherwise; None when absent or when ``obj`` is None.

    The one field reader of the package: wire formats read SDK objects (pydantic models, stream events) and
    JSON dicts (raw bodies, SSE payloads) alike with it. SDK models keep fields their types do not declare
    (newer API) as extras, and ``getattr`` sees those too. It runs several times per streamed chunk: the
    mapping test is decided once per type (``_MAPPING`` is the only falsy kind), and there is no ``try``
    here (it cost 20 ns a read, 6 % of a chat chunk's accumulation): a property of a foreign object that
    raises goes to the caller, whose guard logs it; usage parsing reads through :func:`field_getter`, which
    treats it as absent.
    """
    if obj is None:
        return None
    cls = type(obj)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    return getattr(obj, name, None) if kind else obj.get(name)


def has_field(obj: Any, name: str) -> bool:
    """Whether ``obj`` (an SDK model or a JSON dict) carries the field ``name``, ``null`` included: an SDK model
    gives an absent field its default (None), so presence is what the response set (pydantic's
    ``model_fields_set``, or the extras of a field its type does not declare)."""
    if obj is None:
        return False
    cls = type(obj)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == _MAPPING:
        return name in obj
    if kind == _PYDANTIC:
        return name in (getattr(obj, "model_fields_set", None) or ()) or name in (
            getattr(obj, "model_extra", None) or {}
        )
    return hasattr(obj, name)


def _guarded_get(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # a property of a foreign object may raise: treat as absent
        return None


#: The largest token count read from a response as one: a thousand times the largest context window of
#: 2026. Anything above (``2**70`` overflows OTLP's 64-bit integers: the exporter logs an error and drops the
#: attribute) or below 0 is no count the provider meant, and reads as absent.
MAX_TOKEN_COUNT = 10**9


def as_count(value: Any) -> int | None:
    """A token count, or None when the value is missing, not a number (bools are not counts), negative or
    absurd (over :data:`MAX_TOKEN_COUNT`)."""
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKEN_COUNT else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value) if 0 <= value <= MAX_TOKEN_COUNT else None
    if isinstance(value, float) and math.isfinite(value) and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)  # not NaN, not infinite (int() would raise)
    return None


def _none(name: str) -> None:
    return None


def field_getter(obj: Any) -> Callable[[str], Any]:
    """:func:`get_field` bound to ``obj``, decided once for several reads: ``dict.get`` for dicts and
    extra-free SDK models (their fields live in ``__dict__``; pydantic's ``__getattr__`` for absent names is slow)."""
    if obj is None:
        return _none
    cls = type(obj)
    kind = _KINDS.get(cls)
    if kind is None:
        kind = _kind(cls)
    if kind == _MAPPING:
        return obj.get  # type: ignore[no-any-return]
    if kind == _PYDANTIC and not getattr(obj, "__pydantic_extra__", None):
        fields = getattr(obj, "__dict__", None)
        if fields is not None:
            return fields.get  # type: ignore[no-any-return]
    return lambda name: _guarded_get(obj, name)


def first_count(obj: Any, *names: str) -> int | None:
    """The first of ``names`` that ``obj`` reports as a number (the spellings of one figure)."""
    return first_count_of(field_getter(obj), *names)


def first_count_of(get: Callable[[str], Any], *names: str) -> int | None:
    """:func:`first_count` with the object's getter already decided."""
    for name in names:
        value = get(name)
        if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:  # nearly every read: no call
            return value
        if value is not None and (value := as_count(value)) is not None:
            return value
    return None


def first_present(get: Callable[[str], Any], names: tuple[str, ...]) -> Any:
    """The first of ``names`` that is present (not None), read with ``get`` (see :func:`field_getter`)."""
    for name in names:
        value = get(name)
        if value is not None:
            return value
    return None


def as_sequence(value: Any) -> Sequence[Any]:
    """``value`` as a list of entries, empty unless it is a real sequence (not a string)."""
    if isinstance(value, (list, tuple)):
        return value
    return ()


def or_zero(value: int | None) -> int:
    return 0 if value is None else value


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
    "CacheDiagnosis",
    "TokenUsage",
    "as_count",
    "as_sequence",
    "field_getter",
    "first_count",
    "first_count_of",
    "first_present",
    "get_field",
    "is_deepseek",
    "or_zero",
]
