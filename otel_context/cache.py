"""Prompt-cache fingerprints and cache-break detection (TELEMETRY.md §3).

A provider's prompt cache only serves a byte-identical prefix. When the cache reads of a call fall short of
what the previous call of the same conversation left in the cache, something in the prefix changed or the
entry expired. This module says which: it fingerprints every request actually sent (model, beta flags,
tools, system prompt, the conversation items and where the cache breakpoints sit) and, on a break, diffs
the fingerprint with the previous call's.

Cost model. Fingerprinting runs on every call, within a budget of 25 µs for a 200-message history.
JSON-serialising and hashing every item would cost about a millisecond, so each detector memoizes per
position instead: the object last sent there, a private snapshot of its content taken when that content was
first seen (containers copied, leaves such as strings shared: they are immutable, so sharing is safe and
cheap), and a content id. A new request is checked with ONE C-level ``==`` of its item list against the
memo: it resolves by identity when the app resends the same objects, and by value (leaves still shared, so
mostly by identity again) when the app or SDK rebuilds its dicts every turn. Only positions that differ are
looked at one by one, and only the appended tail is copied. Items whose content is unchanged keep their
id, so a fingerprint is a few tuples of ids and diffing two fingerprints is exact.

An item edited *in place* keeps its identity and fools the identity check; that is why, when a break needs
explaining, the memo is verified against the snapshots first (:meth:`_Positions.verify`): cheap on the
common path, exact when it matters.

Cache markers (Anthropic ``cache_control``, OpenAI ``prompt_cache_breakpoint``) are not cached content:
apps move the conversation breakpoint to the newest message every turn. Positions that carried a marker are
settled first, by comparing the new item with the marked item's pre-computed unmarked forms (one C-level
``==``); any other item that differs from the memo is compared again ignoring markers (and a plain string
equal to one text block) before it counts as changed.

Known limit: an SDK model object (e.g. ``response.content`` appended as is) is a leaf; if the app mutates
one in place, only a rebuilt object shows the change.

Clock: gaps are measured with :func:`monotonic`; a detector given a clock (or running under
:func:`use_clock`) measures with that clock even when the engine passes ``time.monotonic()`` stamps, so that
tests and the demo can move a simulated clock past the TTL.

The engine (:mod:`otel_context.engine`) calls :meth:`CacheBreakDetector.fingerprint` on the body it sends,
:meth:`CacheBreakDetector.check` when the call ends and :meth:`CacheBreakDetector.announce_compaction`
inside a compaction (ENGINE_API.md).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.usage import TokenUsage

__all__ = [
    "BREAK_MIN_FRACTION",
    "BREAK_MIN_TOKENS",
    "DEFAULT_TTL_SECONDS",
    "CacheBreak",
    "CacheBreakDetector",
    "RequestFingerprint",
    "monotonic",
    "record_intentional_break",
    "record_unexpected_break",
    "use_clock",
]

#: A shortfall of cache reads is a break only above BOTH thresholds (TELEMETRY.md §3): a few hundred
#: tokens of drift (block granularity, a re-tokenised boundary) is noise, not a regression.
BREAK_MIN_FRACTION = 0.05
BREAK_MIN_TOKENS = 2_000

#: Anthropic's default ephemeral TTL; also OpenAI's in-memory retention (5 to 10 minutes of inactivity).
DEFAULT_TTL_SECONDS = 300.0

_MARKER_KEYS = frozenset({"cache_control", "prompt_cache_breakpoint"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_OPENAI_SYSTEM_ROLES = frozenset({"system", "developer"})
_WIRE_FORMATS = ("anthropic_messages", "openai_chat", "openai_responses")

_ids = itertools.count(1)

# --- the clock ------------------------------------------------------------------------------------------

_clock: Callable[[], float] = time.monotonic


def monotonic() -> float:
    """The clock cache-break detection measures gaps with: ``time.monotonic`` unless swapped.

    Detectors read it by default, and the engine should stamp calls with it, so that a test (or the demo)
    driving a simulated provider's manual clock can move the TTL logic along with :func:`use_clock`.
    """
    return _clock()


@contextmanager
def use_clock(clock: Callable[[], float]) -> Iterator[None]:
    """Make :func:`monotonic` (and every detector built without its own clock) read ``clock`` for a while."""
    global _clock
    previous = _clock
    _clock = clock
    try:
        yield
    finally:
        _clock = previous


# --- fingerprints ----------------------------------------------------------------------------------------


class RequestFingerprint(NamedTuple):
    """What one request put in front of the provider's prompt cache, as content ids.

    Two fingerprints from the same detector have equal ids at a position exactly when the content there is
    unchanged (cache markers aside). ``prefix(b)`` for ``b`` in ``item_breakpoints`` is the fingerprint of
    the conversation prefix up to that breakpoint. A NamedTuple because it is built on every call.
    """

    wire_format: str
    model: str | None
    #: Beta flags (``anthropic-beta`` header or a ``betas`` body field), sorted.
    betas: tuple[str, ...]
    #: Content ids of the system prompt's blocks (Anthropic ``system``, Responses ``instructions``).
    system: tuple[int, ...]
    #: Content ids of the tool definitions, in order.
    tools: tuple[int, ...]
    #: Content ids of the conversation items (messages, Responses input items).
    items: tuple[int, ...]
    #: OpenAI chat keeps its system prompt as leading system/developer messages inside ``items``.
    leading_system_items: int
    #: Indices of the conversation items that carry a cache breakpoint.
    item_breakpoints: tuple[int, ...]
    #: Breakpoints on tools and system blocks.
    prefix_breakpoints: int
    #: The provider caches up to the end of the prompt without a marker on the last item: Anthropic's
    #: top-level ``cache_control`` (applied to the last block), OpenAI's automatic prefix caching.
    caches_whole_prompt: bool
    #: The shortest lifetime among the request's cache entries, in seconds.
    ttl_seconds: float
    #: Responses API chaining (``previous_response_id`` / ``conversation``): the prefix lives server side,
    #: the items sent are not the whole conversation and cannot be diffed.
    server_state: bool
    #: The detector's clock when the fingerprint was taken (just before the request went out).
    taken_at: float

    def cached_item_limit(self) -> int:
        """How many leading conversation items this request could have written to the cache."""
        if self.caches_whole_prompt:
            return len(self.items)
        return self.item_breakpoints[-1] + 1 if self.item_breakpoints else 0

    def prefix(self, breakpoint_index: int) -> tuple[int, ...]:
        """The fingerprint of the conversation prefix up to and including item ``breakpoint_index``."""
        return self.items[: breakpoint_index + 1]


class _Positions:
    """Per-position memo of one sequence (conversation items, tools or system blocks) of one detector.

    ``seen[i]``: the object last sent at position ``i`` (compared by identity, else by value);
    ``snaps[i]``: a private copy of its content, taken when that content was first seen (leaves shared);
    ``ids[i]``: its content id; ``marks``: positions whose item carries a cache marker, with its TTL.
    """

    __slots__ = ("_ids_tuple", "ids", "marks", "seen", "snaps", "unmarked")

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.snaps: list[Any] = []
        self.ids: list[int] = []
        self.marks: dict[int, float] = {}
        #: For marked positions: the item's content without its markers, as the app will most likely send
        #: it next time (the breakpoint moved on), so that the common case is one C-level comparison.
        self.unmarked: dict[int, tuple[Any, ...]] = {}
        self._ids_tuple: tuple[int, ...] | None = ()

    def update(self, items: list[Any]) -> None:
        """Bring the memo in line with ``items``: one C-level comparison, plus work for what differs."""
        seen = self.seen
        n = len(items)
        if n < len(seen):
            self._truncate(n)
        # Positions that carried a marker last time are where the next request usually differs (the app
        # moved its conversation breakpoint on): settle them first, so that the bulk comparison succeeds.
        if self.marks:
            for p in [p for p in self.marks if p < len(seen)]:
                if p >= len(seen):
                    continue
                item = items[p]
                if item is seen[p] or item == seen[p]:
                    continue
                if any(item == form for form in self.unmarked.get(p, ())):
                    seen[p] = item  # the breakpoint moved on; same content, no marker left here
                    del self.marks[p]
                    del self.unmarked[p]
                else:
                    self._revisit(p, item)
        known = len(seen)
        if known and (items[:known] if n > known else items) != seen:
            lo = 0
            while lo < known:
                i = _first_mismatch(items, seen, lo, known)
                if i is None:
                    break
                self._revisit(i, items[i])
                known = len(seen)
                lo = i + 1
        for i in range(len(seen), n):
            self._append(items[i])

    def id_tuple(self) -> tuple[int, ...]:
        if self._ids_tuple is None:
            self._ids_tuple = tuple(self.ids)
        return self._ids_tuple

    def verify(self) -> int | None:
        """The first position whose object was edited in place since its content was first seen, if any.

        The memo is corrected (from that position on, everything counts as new content). Only runs when a
        break needs explaining.
        """
        for i, (item, snap) in enumerate(zip(self.seen, self.snaps, strict=True)):
            if item != snap and not _same(item, snap):
                self._truncate(i)
                return i
        return None

    def _revisit(self, i: int, item: Any) -> None:
        """Position ``i`` holds another object: the same content with other markers, or a real change."""
        if _same(item, self.snaps[i]):
            # Same content, other markers: the snapshot stays valid (comparisons with it ignore markers).
            self.seen[i] = item
            ttls: list[float] = []
            _collect_markers(item, ttls)
            self._mark(i, ttls, item)
        else:
            self._truncate(i)  # the content from here on is new: the cached prefix ends here

    def _truncate(self, n: int) -> None:
        del self.seen[n:]
        del self.snaps[n:]
        del self.ids[n:]
        for p in [p for p in self.marks if p >= n]:
            del self.marks[p]
            self.unmarked.pop(p, None)
        self._ids_tuple = None

    def _append(self, item: Any) -> None:
        ttls: list[float] = []
        snap = _freeze(item, ttls)
        self.seen.append(item)
        self.snaps.append(snap)
        self.ids.append(next(_ids))
        self._ids_tuple = None
        if ttls:
            self._mark(len(self.seen) - 1, ttls, snap)

    def _store(self, i: int, item: Any, content_id: int) -> None:
        ttls: list[float] = []
        self.seen[i] = item
        self.snaps[i] = _freeze(item, ttls)
        if self.ids[i] != content_id:
            self.ids[i] = content_id
            self._ids_tuple = None
        self._mark(i, ttls, self.snaps[i])

    def _mark(self, i: int, ttls: list[float], content: Any) -> None:
        if ttls:
            self.marks[i] = min(ttls)
            self.unmarked[i] = _unmarked_forms(content)
        else:
            self.marks.pop(i, None)
            self.unmarked.pop(i, None)


def _first_mismatch(a: list[Any], b: list[Any], lo: int, hi: int) -> int | None:
    """The first index in ``[lo, hi)`` where ``a`` and ``b`` differ, by bisection with C-level slices."""
    if a[lo:hi] == b[lo:hi]:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] != b[lo:mid]:
            hi = mid
        else:
            lo = mid
    return lo


def _freeze(value: Any, ttls: list[float]) -> Any:
    """A private copy of a JSON-shaped value: dicts, lists and tuples copied, everything else shared.

    Leaves (str, numbers, SDK model objects) are shared: they are immutable in practice, and sharing them
    keeps copies cheap. Collects the TTL of every cache marker met on the way. (``type() is`` tests first:
    an ``isinstance`` against an ABC costs more than the copy itself.)
    """
    kind = type(value)
    if kind is str:
        return value
    if kind is dict or (kind is not list and kind is not tuple and isinstance(value, Mapping)):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if key in _MARKER_KEYS and item is not None:
                ttls.append(_marker_ttl(item))
            out[key] = item if type(item) is str else _freeze(item, ttls)
        return out
    if kind is list:
        return [item if type(item) is str else _freeze(item, ttls) for item in value]
    if kind is tuple:
        return tuple(item if type(item) is str else _freeze(item, ttls) for item in value)
    return value


def _unmarked_forms(value: Any) -> tuple[Any, ...]:
    """``value`` without cache markers; for a message whose content is one text block, also with that
    content as a plain string (the form an app's history holds before it adds the breakpoint)."""
    plain = _drop_markers(value)
    forms: tuple[Any, ...] = (plain,)
    if type(plain) is dict:
        content = plain.get("content")
        if type(content) is list and len(content) == 1:
            block = content[0]
            if type(block) is dict and block.keys() == {"type", "text"} and block["type"] == "text":
                forms += ({**plain, "content": block["text"]},)
    return forms


def _drop_markers(value: Any) -> Any:
    if type(value) is dict or (type(value) not in (list, tuple, str) and isinstance(value, Mapping)):
        return {k: _drop_markers(v) for k, v in value.items() if k not in _MARKER_KEYS}
    if type(value) is list:
        return [_drop_markers(v) for v in value]
    if type(value) is tuple:
        return tuple(_drop_markers(v) for v in value)
    return value


def _collect_markers(value: Any, ttls: list[float]) -> None:
    """The TTLs of the cache markers inside ``value`` (what :func:`_freeze` collects, without the copy)."""
    kind = type(value)
    if kind is dict or (kind is not list and kind is not tuple and kind is not str and isinstance(value, Mapping)):
        for key, item in value.items():
            if key in _MARKER_KEYS and item is not None:
                ttls.append(_marker_ttl(item))
            elif type(item) is not str:
                _collect_markers(item, ttls)
    elif kind is list or kind is tuple:
        for item in value:
            if type(item) is not str:
                _collect_markers(item, ttls)


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same content as the provider caches it: cache markers ignored, tuples
    equal to lists, a plain string equal to one text block (both render to the same prompt, and apps switch
    between the two when they move a breakpoint). C-level ``==`` first; the walk only where that fails."""
    if a is b or a == b:
        return True
    ta, tb = type(a), type(b)
    if ta is str or tb is str:
        return ta is not tb and _same(_as_block(a), _as_block(b))
    if (ta is dict or isinstance(a, Mapping)) and (tb is dict or isinstance(b, Mapping)):
        if len(a) - _markers_in(a) != len(b) - _markers_in(b):
            return False
        for key, x in a.items():
            if key in _MARKER_KEYS:
                continue
            if key not in b:
                return False
            y = b[key]
            if x is y:
                continue
            if key == "content" and (type(x) is str) is not (type(y) is str):
                x, y = _as_blocks(x), _as_blocks(y)
            if not _same(x, y):
                return False
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):  # noqa: SIM110  (a loop: all() + generator costs more here)
            if x is not y and not _same(x, y):
                return False
        return True
    return False


def _markers_in(mapping: Any) -> int:
    return ("cache_control" in mapping) + ("prompt_cache_breakpoint" in mapping)


def _as_block(value: Any) -> Any:
    return {"type": "text", "text": value} if type(value) is str else value


def _as_blocks(value: Any) -> Any:
    return [{"type": "text", "text": value}] if type(value) is str else value


def _parse_ttl(value: Any) -> float | None:
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _UNITS[match.group(2)]
    return None


def _marker_ttl(marker: Any) -> float:
    """The lifetime a cache marker asks for: its ``ttl`` ("5m", "1h", "30m", "12h"), else the default."""
    ttl = _parse_ttl(marker.get("ttl")) if isinstance(marker, Mapping) else None
    return ttl if ttl is not None else DEFAULT_TTL_SECONDS


def _as_list(value: Any) -> list[Any]:
    """A body field as a list of items; absent values (None, the SDKs' ``omit``/``NOT_GIVEN``) are empty."""
    if isinstance(value, list):
        return value
    if isinstance(value, (str, Mapping)):
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return []


def _betas(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> tuple[str, ...]:
    flags: set[str] = set()
    if headers:
        for name, value in headers.items():
            if isinstance(value, str) and name.lower() == "anthropic-beta":
                flags.update(f.strip() for f in value.split(",") if f.strip())
    body_betas = body.get("betas")
    if isinstance(body_betas, (list, tuple)):
        flags.update(str(b) for b in body_betas)
    return tuple(sorted(flags)) if flags else ()


# --- breaks ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheBreak:
    """An unexpected cache break: why (``semconv.REASON_*``) and how many cached tokens were not read."""

    reason: str
    lost_tokens: int


class _Baseline(NamedTuple):
    fingerprint: RequestFingerprint
    #: None when the provider did not report cache figures: nothing to compare the next call with.
    usage: TokenUsage | None
    ended: float


class CacheBreakDetector:
    """Cache-break detection for ONE conversation: small, no SDK imports, safe to call from threads.

    ``clock`` (default :func:`monotonic`) stamps fingerprints and the calls :meth:`check` gets no times for.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock if clock is not None else monotonic
        self._lock = threading.Lock()
        self._wire_format: str | None = None
        self._system = _Positions()
        self._tools = _Positions()
        self._items = _Positions()
        self._baseline: _Baseline | None = None
        self._compaction_announced = False

    def fingerprint(
        self, wire_format: str, body: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> RequestFingerprint:
        """Fingerprint the body about to be sent (never mutated).

        ``headers``: the call's extra HTTP headers, where the Anthropic SDK puts beta flags.
        """
        if wire_format not in _WIRE_FORMATS:
            raise ValueError(f"unknown wire format {wire_format!r}; expected one of {', '.join(_WIRE_FORMATS)}")
        if not isinstance(body, Mapping):
            raise TypeError(f"fingerprint() needs the JSON request body as a mapping, got {type(body).__name__}")
        extra_ttl: float | None = None
        server_state = False
        leading_system = 0
        if wire_format == "anthropic_messages":
            system, items = _as_list(body.get("system")), _as_list(body.get("messages"))
            top = body.get("cache_control")
            if isinstance(top, Mapping):
                extra_ttl = _marker_ttl(top)
        else:
            options = body.get("prompt_cache_options")
            if isinstance(options, Mapping):
                extra_ttl = _parse_ttl(options.get("ttl"))
            if wire_format == "openai_chat":
                system, items = [], _as_list(body.get("messages"))
                for item in items:
                    if not (isinstance(item, Mapping) and item.get("role") in _OPENAI_SYSTEM_ROLES):
                        break
                    leading_system += 1
            else:
                system, items = _as_list(body.get("instructions")), _as_list(body.get("input"))
                server_state = isinstance(body.get("previous_response_id"), str) or isinstance(
                    body.get("conversation"), (str, Mapping)
                )
        tools = _as_list(body.get("tools"))
        model = body.get("model")
        with self._lock:
            if wire_format != self._wire_format:
                self._wire_format = wire_format
                self._system, self._tools, self._items = _Positions(), _Positions(), _Positions()
            sys_memo, tool_memo, item_memo = self._system, self._tools, self._items
            sys_memo.update(system)
            tool_memo.update(tools)
            item_memo.update(items)
            ttl = extra_ttl
            for memo in (sys_memo, tool_memo, item_memo):
                if memo.marks:
                    shortest = min(memo.marks.values())
                    ttl = shortest if ttl is None else min(ttl, shortest)
            return RequestFingerprint(
                wire_format,
                model if isinstance(model, str) else None,
                _betas(body, headers),
                sys_memo.id_tuple(),
                tool_memo.id_tuple(),
                item_memo.id_tuple(),
                leading_system,
                tuple(sorted(item_memo.marks)) if item_memo.marks else (),
                len(sys_memo.marks) + len(tool_memo.marks),
                wire_format != "anthropic_messages" or extra_ttl is not None,
                DEFAULT_TTL_SECONDS if ttl is None else ttl,
                server_state,
                self._clock(),
            )

    def check(
        self,
        fp: RequestFingerprint,
        usage: TokenUsage | None,
        started: float | None = None,
        ended: float | None = None,
    ) -> CacheBreak | None:
        """Compare this call with the previous call of the conversation, then make it the new baseline.

        The rule (TELEMETRY.md §3): the previous call's cache reads + writes minus this call's cache reads
        exceed 5 % of the former AND 2,000 tokens, and no compaction was announced in between. ``started``
        and ``ended`` are ``time.monotonic()`` stamps of this call (default: the fingerprint's time and now,
        on the detector's clock). An injected clock (``clock=`` or :func:`use_clock`) wins over the stamps
        passed in: a test moving a simulated clock wants every gap measured on it, and the engine's stamps
        come from the real one. Returns None when there is no previous call or no cache figures.
        """
        if started is None or self._clock_injected():
            started = fp.taken_at
        if ended is None or self._clock_injected():
            ended = self._clock()
        reported = usage is not None and bool(
            usage.reported_cache or usage.cache_read_tokens or usage.cache_write_tokens
        )
        with self._lock:
            previous = self._baseline
            announced = self._compaction_announced
            self._baseline = _Baseline(fp, usage if reported else None, ended)
            self._compaction_announced = False
            if announced or previous is None or previous.usage is None or usage is None or not reported:
                return None
            left_in_cache = previous.usage.cache_read_tokens + previous.usage.cache_write_tokens
            lost = left_in_cache - usage.cache_read_tokens
            if lost <= left_in_cache * BREAK_MIN_FRACTION or lost <= BREAK_MIN_TOKENS:
                return None
            return CacheBreak(self._diagnose(previous.fingerprint, fp, started - previous.ended), lost)

    def _clock_injected(self) -> bool:
        return self._clock is not monotonic or _clock is not time.monotonic

    def announce_compaction(self) -> int:
        """A compaction is about to change the prefix: the cache reads it will cost (those of the last call).

        The next :meth:`check` reports nothing and only sets the new baseline, so the miss that follows a
        compaction is never taken for a regression.
        """
        with self._lock:
            self._compaction_announced = True
            baseline = self._baseline
        return baseline.usage.cache_read_tokens if baseline is not None and baseline.usage is not None else 0

    def _diagnose(self, previous: RequestFingerprint, current: RequestFingerprint, gap: float) -> str:
        """Why the cache was not read: the first change in prefix order, else expiry, else unknown."""
        if previous.wire_format != current.wire_format:
            return semconv.REASON_UNKNOWN
        if previous.model != current.model:
            return semconv.REASON_MODEL_CHANGED
        # Only now pay for the check the identity memo skipped: was something edited in place?
        edited_tools = self._tools.verify()
        edited_system = self._system.verify()
        edited_item = self._items.verify()
        if previous.tools != current.tools or edited_tools is not None:
            return semconv.REASON_TOOLS_CHANGED
        first = _first_difference(previous.items, current.items)
        if edited_item is not None:
            first = min(first, edited_item)
        system_items = max(previous.leading_system_items, current.leading_system_items)
        if previous.system != current.system or edited_system is not None or first < system_items:
            return semconv.REASON_SYSTEM_CHANGED
        if not (previous.server_state or current.server_state) and first < previous.cached_item_limit():
            return semconv.REASON_MESSAGES_CHANGED
        if gap > previous.ttl_seconds:
            return semconv.REASON_TTL_EXPIRED
        return semconv.REASON_UNKNOWN  # beta flags, tool_choice, thinking settings, server-side eviction


def _first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The first index where the id tuples differ (``min(len)`` when one is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


# --- telemetry ----------------------------------------------------------------------------------------------


def record_unexpected_break(span: Span, brk: CacheBreak, provider: str, model: str) -> None:
    """The ``otel_context.cache_break`` event (intentional=false) on the chat span, and its count."""
    telemetry.emit_event(
        span,
        semconv.CACHE_BREAK_EVENT,
        {
            semconv.CACHE_BREAK_INTENTIONAL: False,
            semconv.CACHE_BREAK_REASON: brk.reason,
            semconv.CACHE_BREAK_LOST_TOKENS: brk.lost_tokens,
        },
    )
    _count(False, brk.reason, provider, model)


def record_intentional_break(span: Span, expected_lost_tokens: int, provider: str, model: str) -> None:
    """The ``otel_context.cache_break`` event (intentional=true, reason compaction) on the compact span."""
    telemetry.emit_event(
        span,
        semconv.CACHE_BREAK_EVENT,
        {
            semconv.CACHE_BREAK_INTENTIONAL: True,
            semconv.CACHE_BREAK_REASON: semconv.REASON_COMPACTION,
            semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS: expected_lost_tokens,
        },
    )
    _count(True, semconv.REASON_COMPACTION, provider, model)


def _count(intentional: bool, reason: str, provider: str, model: str) -> None:
    telemetry.get().instruments.cache_breaks.add(
        1,
        {
            semconv.CACHE_BREAK_INTENTIONAL: intentional,
            semconv.CACHE_BREAK_REASON: reason,
            semconv.GEN_AI_PROVIDER_NAME: provider,
            semconv.GEN_AI_REQUEST_MODEL: model,
        },
    )
