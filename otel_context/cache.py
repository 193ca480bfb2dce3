"""Prompt-cache fingerprints and cache-break detection (docs/telemetry.md, "Cache-break events").

A provider's prompt cache only serves a byte-identical prefix. When the cache reads of a call fall short of
what the previous call of the same conversation left in the cache, something in the prefix changed or the
entry expired. This module says which: it fingerprints every request actually sent (model, beta flags,
tools, system prompt, the conversation items and where the cache breakpoints sit) and, on a break, diffs
the fingerprint with the previous call's.

Cost model. Fingerprinting runs on every call, within a budget of 25 µs for a 200-message history, also
when the app (or its framework) rebuilds every message dict each turn. Hashing or JSON-serialising every
item costs about a millisecond, and even one C-level ``==`` of 200 rebuilt messages costs more than half the
budget on a small box, so the per-call path compares no content at all. A fingerprint holds references to
what was sent (the body's own objects, never mutated: a tuple of references is ~1 µs) plus the cheap facts
(model, beta flags, where the breakpoints are, the TTL). Content is compared only when a call's cache reads
fell and the break needs explaining: then the previous call's objects are diffed with this call's, which is
exact for apps that rebuild their history (the previous objects are no longer the app's) and, with the
snapshots below, for apps that resend the same objects.

An item edited *in place* keeps its identity, so comparing it with "itself" shows nothing. Each detector
therefore keeps a private snapshot of every item when it is first sent as new (the appended tail: two items
a turn; containers copied, leaves such as strings shared, as they are immutable) and, when diagnosing, an
item resent as the same object is compared with its snapshot.

Cache markers (Anthropic ``cache_control``, OpenAI ``prompt_cache_breakpoint``) are not cached content:
apps move the conversation breakpoint to the newest message every turn. Diffs ignore them (and treat a plain
string like one text block); the breakpoints of a request are read from the new items and from the positions
that carried one last time.

Known limits: a marker added to an old message (not among the new items, not the last one, not previously
marked) is not seen, which only affects the TTL in force; an SDK model object (e.g.
``response.content`` appended as is) is a leaf: an in-place mutation of one shows only when it is rebuilt.

Clock: gaps are measured with :func:`monotonic`; a detector given a clock (or running under
:func:`use_clock`) measures with that clock even when the engine passes ``time.monotonic()`` stamps, so that
tests and the demo can move a simulated clock past the TTL.

The engine (:mod:`otel_context.engine`) calls :meth:`CacheBreakDetector.fingerprint` on the body it sends,
:meth:`CacheBreakDetector.check` when the call ends and :meth:`CacheBreakDetector.announce_compaction`
inside a compaction.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from opentelemetry.trace import Span

from otel_context import pricing, semconv, telemetry
from otel_context.fork_safe import new_lock
from otel_context.usage import CacheDiagnosis, TokenUsage

__all__ = [
    "BREAK_MIN_FRACTION",
    "BREAK_MIN_TOKENS",
    "DEFAULT_TTL_SECONDS",
    "CacheBreak",
    "CacheBreakDetector",
    "RequestFingerprint",
    "agreement",
    "count_diagnosis",
    "diagnosis_attributes",
    "leaves_cache",
    "monotonic",
    "record_intentional_break",
    "record_unexpected_break",
    "use_clock",
]

#: A shortfall of cache reads is a break only above BOTH thresholds (docs/telemetry.md): a few hundred
#: tokens of drift (block granularity, a re-tokenised boundary) is noise, not a regression.
BREAK_MIN_FRACTION = 0.05
BREAK_MIN_TOKENS = 2_000

#: Anthropic's default ephemeral TTL; also OpenAI's in-memory retention (5 to 10 minutes of inactivity).
DEFAULT_TTL_SECONDS = 300.0

_MARKER_KEYS = frozenset({"cache_control", "prompt_cache_breakpoint"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

# --- what the detector needs from a wire format ---------------------------------------------------------------


class PromptLayoutView(Protocol):
    """Where a request puts what the prompt cache keys on (``otel_context.formats.base.PromptLayout``)."""

    @property
    def system(self) -> Sequence[Any]: ...
    @property
    def tools(self) -> Sequence[Any]: ...
    @property
    def items(self) -> Sequence[Any]: ...
    @property
    def leading_system_items(self) -> int: ...
    @property
    def ttl(self) -> Any: ...
    @property
    def whole_prompt_marker(self) -> bool: ...
    @property
    def server_state(self) -> bool: ...


class CacheFormat(Protocol):
    """The part of a wire format the detector reads (every ``otel_context.formats`` format provides it; this
    module does not import them: the engine hands the format in)."""

    @property
    def name(self) -> str: ...
    @property
    def automatic_caching(self) -> bool: ...
    def prompt_layout(self, body: Mapping[str, Any]) -> PromptLayoutView: ...


# --- the clock ------------------------------------------------------------------------------------------

_clock: Callable[[], float] = time.monotonic


def monotonic() -> float:
    """The clock cache-break detection measures gaps with: ``time.monotonic`` unless swapped.

    Detectors read it by default, and the engine should stamp calls with it, so that a test (or the demo)
    driving a simulated provider's manual clock can move the TTL logic along with :func:`use_clock`.
    """
    return _clock()


def swap_clock(clock: Callable[[], float]) -> Callable[[], float]:
    """Make :func:`monotonic` read ``clock`` until swapped back; returns the clock it replaces.

    A running :class:`otel_context.testing.SimulatedProvider` with a simulated clock swaps itself in, so
    that ``sim.clock.advance(301)`` expires the cache for the provider and for the detector alike (the
    reason is then ``ttl_expired``, not ``unknown``), with nothing more in the test.
    """
    global _clock
    previous = _clock
    _clock = clock
    return previous


def current_clock() -> Callable[[], float]:
    """The clock :func:`monotonic` reads now."""
    return _clock


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
    """What one request put in front of the provider's prompt cache.

    The sequences hold the request's own objects (references, never mutated), compared by content only
    when a break needs explaining; ``first_difference`` diffs two fingerprints. The conversation prefix up
    to a breakpoint ``b`` of ``item_breakpoints`` is ``items[: b + 1]``. A NamedTuple: it is built on every call.
    """

    wire_format: str
    model: str | None
    #: Beta flags (``anthropic-beta`` header or a ``betas`` body field), sorted.
    betas: tuple[str, ...]
    #: The system prompt's blocks (Anthropic ``system``, Responses ``instructions``).
    system: tuple[Any, ...]
    #: The tool definitions, in order.
    tools: tuple[Any, ...]
    #: The conversation items (messages, Responses input items).
    items: Sequence[Any]
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
    #: The provider caches prefixes without being asked (OpenAI): see :func:`_left_in_cache`.
    automatic_caching: bool = False

    def cached_item_limit(self) -> int:
        """How many leading conversation items this request could have written to the cache."""
        if self.caches_whole_prompt:
            return len(self.items)
        return self.item_breakpoints[-1] + 1 if self.item_breakpoints else 0

    def prefix(self, breakpoint_index: int) -> tuple[Any, ...]:
        """The conversation prefix up to and including item ``breakpoint_index``."""
        return tuple(self.items[: breakpoint_index + 1])

    def first_difference(self, other: RequestFingerprint) -> dict[str, int]:
        """Where ``other`` first differs from this fingerprint, per section (``system``, ``tools``,
        ``items``); a section absent from the result is the same. Markers are ignored. (Objects edited in
        place since are not seen here; the detector's diagnosis also checks those.)"""
        out: dict[str, int] = {}
        for name, mine, theirs in (
            ("system", self.system, other.system),
            ("tools", self.tools, other.tools),
            ("items", self.items, other.items),
        ):
            first = _first_change(mine, theirs)
            if first is not None:
                out[name] = first
        return out


class _Section:
    """What a detector remembers of one sequence (conversation items, tools or system blocks).

    ``snaps[i]``: the object first sent as new at position ``i`` and a private copy of its content then
    (leaves shared), for the in-place check; ``marks``: positions of the last request whose item carried a
    cache marker, with its TTL.
    """

    __slots__ = ("marks", "snaps")

    def __init__(self) -> None:
        self.snaps: list[tuple[Any, Any]] = []
        self.marks: dict[int, float] = {}

    def update(self, items: Sequence[Any]) -> None:
        """Per call: O(new items + marked positions), nothing proportional to the history."""
        snaps, marks = self.snaps, self.marks
        n = len(items)
        if n < len(snaps):
            del snaps[n:]
        if marks:
            for p in list(marks):  # the breakpoint usually moved on: read those positions again
                ttls: list[float] = []
                if p < n:
                    _collect_markers(items[p], ttls)
                if ttls:
                    marks[p] = min(ttls)
                else:
                    del marks[p]
        last = n - 1
        if 0 <= last < len(snaps) and last not in marks:  # a resent history marked at its end (a retry)
            ttls = []
            _collect_markers(items[last], ttls)
            if ttls:
                marks[last] = min(ttls)
        for i in range(len(snaps), n):
            item = items[i]
            ttls = []
            snaps.append((item, _freeze(item, ttls)))
            if ttls:
                marks[i] = min(ttls)

    def resnap(self, items: Sequence[Any]) -> None:
        """Snapshot every position afresh (after a diagnosis or a compaction: rare, so the cost is fine)."""
        self.snaps = [(item, _freeze(item, [])) for item in items]

    def edited_in_place(self, items: Sequence[Any], upto: int) -> int | None:
        """The first position below ``upto`` whose object is the one snapshotted but whose content changed."""
        for i, (obj, snap) in enumerate(self.snaps[:upto]):
            if i < len(items) and items[i] is obj and not _same(obj, snap):
                return i
        return None

    def breakpoints(self) -> tuple[int, ...]:
        return tuple(sorted(self.marks)) if self.marks else ()


def _scope_change(previous: RequestFingerprint, current: RequestFingerprint) -> str | None:
    """The reason when the model, tools or system prompt differ between two calls (never a compaction's doing),
    in the order of :meth:`CacheBreakDetector._diagnose`; None when they are the same."""
    if previous.wire_format != current.wire_format:
        return None
    if previous.model != current.model:
        return semconv.REASON_MODEL_CHANGED
    if _first_change(previous.tools, current.tools) is not None:
        return semconv.REASON_TOOLS_CHANGED
    if _first_change(previous.system, current.system) is not None:
        return semconv.REASON_SYSTEM_CHANGED
    return None


def _first_change(previous: Sequence[Any], current: Sequence[Any]) -> int | None:
    """The first position whose content differs (markers aside); ``min(len)`` when one sequence is a
    prefix of the other and their lengths differ; None when they are the same."""
    n = min(len(previous), len(current))
    if previous[:n] != current[:n]:  # C-level first; the walk only when that fails (e.g. a marker moved)
        for i in range(n):
            a, b = previous[i], current[i]
            if a is not b and not _same(a, b):
                return i
    return n if len(previous) != len(current) else None


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
    #: The shortest lifetime of the call's cache entries: the write price its cost is counted at.
    ttl_seconds: float = 300.0


class _Baseline(NamedTuple):
    fingerprint: RequestFingerprint
    #: None when the provider did not report cache figures: nothing to compare the next call with.
    usage: TokenUsage | None
    ended: float


class _SharedBaseline(NamedTuple):
    """The previous call's baseline as another worker left it in the shared store: figures and hashes
    (no objects to compare), enough to see a break and name its cause section by section."""

    left: int
    wire_format: str
    model: str | None
    betas: tuple[str, ...]
    system: str
    tools: str
    ttl: float
    #: When that call ended, on this process's monotonic clock.
    ended: float
    #: Whether this call's items were proven (by hashes) to continue that call's items.
    intact: bool


def _content_hash(values: Sequence[Any]) -> str:
    """A hash of content, cache markers aside (a moved marker is not a change of the prefix)."""
    text = json.dumps(
        [_unmarked(v) for v in values], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _unmarked(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _unmarked(v) for k, v in value.items() if k not in _MARKER_KEYS}
    if isinstance(value, (list, tuple)):
        return [_unmarked(v) for v in value]
    return value


class CacheBreakDetector:
    """Cache-break detection for ONE conversation: small, no SDK imports, safe to call from threads.

    ``clock`` (default :func:`monotonic`) stamps fingerprints and the calls :meth:`check` gets no times for.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock if clock is not None else monotonic
        self._lock = new_lock(self, "_lock")
        self._wire_format: str | None = None
        self._system = _Section()
        self._tools = _Section()
        self._items = _Section()
        self._resnap = False
        self._baseline: _Baseline | None = None
        self._shared: _SharedBaseline | None = None
        self._compaction_announced = False

    def shared_baseline(self) -> dict[str, Any] | None:
        """The baseline as JSON-able figures for the shared store (None without cache figures), so that a
        break between two calls served by different workers is still seen and explained."""
        with self._lock:
            baseline = self._baseline
        if baseline is None or baseline.usage is None:
            return None
        fp = baseline.fingerprint
        return {
            "left": _left_in_cache(fp, baseline.usage),
            "format": fp.wire_format,
            "model": fp.model,
            "betas": list(fp.betas),
            "system": _content_hash(fp.system),
            "tools": _content_hash(fp.tools),
            "ttl": fp.ttl_seconds,
            "ended": time.time() - max(0.0, self._clock() - baseline.ended),
        }

    def adopt_shared_baseline(self, figures: Mapping[str, Any], *, intact: bool) -> None:
        """Compare the next call with the baseline another worker left (see :meth:`shared_baseline`);
        ``intact``: this call's items continue that call's items. Values not of that shape are ignored."""
        try:
            shared = _SharedBaseline(
                int(figures["left"]),
                str(figures["format"]),
                None if figures["model"] is None else str(figures["model"]),
                tuple(str(b) for b in figures["betas"]),
                str(figures["system"]),
                str(figures["tools"]),
                float(figures["ttl"]),
                self._clock() - max(0.0, time.time() - float(figures["ended"])),
                intact,
            )
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            self._shared = shared
            self._compaction_announced = False

    def branch(self) -> CacheBreakDetector:
        """A detector for a branch of this conversation (an edited or rewound history): it starts from this
        one's baseline, so the next call is compared with the last call the branch grew from, then goes
        its own way."""
        twin = CacheBreakDetector(self._clock)
        with self._lock:
            twin._wire_format = self._wire_format
            for name in ("_system", "_tools", "_items"):
                mine, theirs = getattr(self, name), getattr(twin, name)
                theirs.snaps = list(mine.snaps)
                theirs.marks = dict(mine.marks)
            twin._resnap = self._resnap
            twin._baseline = self._baseline
            twin._compaction_announced = self._compaction_announced
        return twin

    def fingerprint(
        self,
        wire_format: CacheFormat,
        body: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        items: Sequence[Any] | None = None,
    ) -> RequestFingerprint:
        """Fingerprint the body about to be sent (never mutated).

        ``wire_format``: the body's format (``otel_context.formats.for_format(name)``), which says where the
        system prompt, tools and items sit. ``headers``: the call's extra HTTP headers, where the Anthropic SDK
        puts beta flags. ``items``: the body's conversation items as a sequence of the caller's own that nobody
        changes afterwards (the engine's private copy): kept as is, it saves copying the whole history on
        every call.
        """
        layout_of = getattr(wire_format, "prompt_layout", None)
        if layout_of is None:
            raise TypeError(
                "fingerprint() needs the body's wire format, otel_context.formats.for_format(name), "
                f"not {type(wire_format).__name__}"
            )
        if type(body) is not dict and not isinstance(body, Mapping):
            raise TypeError(f"fingerprint() needs the JSON request body as a mapping, got {type(body).__name__}")
        layout = layout_of(body)
        system, tools, sent = layout.system, layout.tools, layout.items
        extra_ttl = _parse_ttl(layout.ttl)
        if extra_ttl is None and layout.whole_prompt_marker:
            extra_ttl = DEFAULT_TTL_SECONDS
        automatic = wire_format.automatic_caching
        name = wire_format.name
        model = body.get("model")
        items_kept: Sequence[Any] = (
            items
            if items is not None
            and len(items) == len(sent)
            and (not sent or (items[0] is sent[0] and items[-1] is sent[-1]))
            else tuple(sent)
        )
        with self._lock:
            if name != self._wire_format:
                self._wire_format = name
                self._system, self._tools, self._items = _Section(), _Section(), _Section()
            sys_memo, tool_memo, item_memo = self._system, self._tools, self._items
            sys_memo.update(system)
            tool_memo.update(tools)
            item_memo.update(sent)
            if self._resnap:
                self._resnap = False
                sys_memo.resnap(system)
                tool_memo.resnap(tools)
                item_memo.resnap(sent)
            ttl = extra_ttl
            for memo in (sys_memo, tool_memo, item_memo):
                if memo.marks:
                    shortest = min(memo.marks.values())
                    ttl = shortest if ttl is None else min(ttl, shortest)
            return RequestFingerprint(
                name,
                model if isinstance(model, str) else None,
                _betas(body, headers),
                tuple(system),
                tuple(tools),
                items_kept,
                layout.leading_system_items,
                item_memo.breakpoints(),
                len(sys_memo.marks) + len(tool_memo.marks),
                automatic or extra_ttl is not None,
                DEFAULT_TTL_SECONDS if ttl is None else ttl,
                layout.server_state,
                self._clock(),
                automatic,
            )

    def check(
        self,
        fp: RequestFingerprint,
        usage: TokenUsage | None,
        started: float | None = None,
        ended: float | None = None,
    ) -> CacheBreak | None:
        """Compare this call with the previous call of the conversation, then make it the new baseline.

        The rule (docs/telemetry.md): what the previous call left in the cache (:func:`_left_in_cache`) minus this call's cache reads
        exceed 5 % of the former AND 2,000 tokens, and no compaction was announced in between (one that
        was explains the miss, unless the model, tools or system prompt changed too: :func:`_scope_change`). ``started``
        and ``ended`` are ``time.monotonic()`` stamps of this call (default: the fingerprint's time and now,
        on the detector's clock). An injected clock (``clock=`` or :func:`use_clock`) wins over the stamps
        passed in: a test moving a simulated clock wants every gap measured on it, and the engine's stamps
        come from the real one. Returns None when there is no previous call or no cache figures.
        """
        injected = self._clock_injected()
        if started is None or injected:
            started = fp.taken_at
        if ended is None or injected:
            ended = self._clock()
        reported = usage is not None and _reported(usage)
        with self._lock:
            previous = self._baseline
            announced = self._compaction_announced
            shared, self._shared = self._shared, None
            self._baseline = _Baseline(fp, usage if reported else None, ended)
            self._compaction_announced = False
            if shared is not None and not announced and usage is not None and reported:
                lost = shared.left - usage.cache_read_tokens
                if lost <= shared.left * BREAK_MIN_FRACTION or lost <= BREAK_MIN_TOKENS:
                    return None
                return CacheBreak(_diagnose_shared(shared, fp, started - shared.ended), lost, fp.ttl_seconds)
            if previous is None or previous.usage is None or usage is None or not reported:
                return None
            # A compaction explains a miss of the messages, never one of the model, tools or system prompt: a
            # change of those that came with a compaction (the summary made for the old tools no longer
            # applies, so the call compacts anew) is still reported, with its own reason.
            scope = _scope_change(previous.fingerprint, fp) if announced else None
            if announced and scope is None:
                return None
            left_in_cache = _left_in_cache(previous.fingerprint, previous.usage)
            lost = left_in_cache - usage.cache_read_tokens
            if lost <= left_in_cache * BREAK_MIN_FRACTION or lost <= BREAK_MIN_TOKENS:
                return None
            reason = scope or self._diagnose(previous.fingerprint, fp, started - previous.ended)
            return CacheBreak(reason, lost, fp.ttl_seconds)

    @property
    def compaction_pending(self) -> bool:
        """Whether a compaction was announced since the last :meth:`check` (the next check explains its miss):
        read before that check, it says the call's prefix changed on purpose."""
        return self._compaction_announced

    def nothing_cached(self) -> bool:
        """Whether the previous call left nothing in the cache (or there was none) and no other worker's
        baseline waits. Then this call cannot break a cache, so its fingerprint is needed only when it leaves
        something in the cache itself, which its response says: the engine takes it then (see
        :meth:`forget_uncached`), and a conversation that does not cache skips the fingerprint and the check."""
        baseline = self._baseline  # one read of a reference: no lock needed
        return self._shared is None and (
            baseline is None or baseline.usage is None or _left_in_cache(baseline.fingerprint, baseline.usage) == 0
        )

    def forget_uncached(self) -> None:
        """What :meth:`check` would leave after a call that left nothing in the cache, without its fingerprint:
        no baseline (the next call has nothing to lose), and no compaction pending announcement."""
        if self._baseline is None and not self._compaction_announced:
            return  # most calls of a conversation that does not cache: already so (a racing writer wins)
        with self._lock:
            self._baseline = None
            self._compaction_announced = False

    def _clock_injected(self) -> bool:
        return self._clock is not monotonic or _clock is not time.monotonic

    def announce_compaction(self) -> int | None:
        """A compaction is about to change the prefix: what the last call left in the cache (see
        :func:`_left_in_cache`), which the compaction discards; None when that call left nothing there (no
        cache figures, or all zero: a conversation that never used the cache has no cache to break).

        The next :meth:`check` reports nothing and only sets the new baseline, so the miss that follows a
        compaction is never taken for a regression.
        """
        with self._lock:
            self._compaction_announced = True
            self._resnap = True  # the history is about to be rewritten: fresh snapshots for the new one
            baseline, shared = self._baseline, self._shared
        if shared is not None:
            return shared.left or None
        if baseline is None or baseline.usage is None:
            return None
        return _left_in_cache(baseline.fingerprint, baseline.usage) or None

    @property
    def ttl_seconds(self) -> float:
        """The lifetime of what the last call left in the cache (its shortest; 5 minutes when unknown): the
        write price a compaction's cache break is counted at."""
        baseline, shared = self._baseline, self._shared
        if shared is not None:
            return shared.ttl
        return baseline.fingerprint.ttl_seconds if baseline is not None else 300.0

    def _diagnose(self, previous: RequestFingerprint, current: RequestFingerprint, gap: float) -> str:
        """Why the cache was not read: the first change in prefix order, else expiry, else unknown.

        The only place content is compared: the previous call's objects with this call's, and objects
        resent as themselves with their snapshots (edited in place).
        """
        if previous.wire_format != current.wire_format:
            return semconv.REASON_UNKNOWN
        if previous.model != current.model:
            return semconv.REASON_MODEL_CHANGED
        if (
            _first_change(previous.tools, current.tools) is not None
            or self._in_place(self._tools, current.tools, len(current.tools)) is not None
        ):
            return semconv.REASON_TOOLS_CHANGED
        if (
            _first_change(previous.system, current.system) is not None
            or self._in_place(self._system, current.system, len(current.system)) is not None
        ):
            return semconv.REASON_SYSTEM_CHANGED
        changed = _first_change(previous.items, current.items)
        first = min(len(previous.items), len(current.items)) if changed is None else changed
        edited = self._in_place(self._items, current.items, first)
        if edited is not None:
            first = edited
        if first < max(previous.leading_system_items, current.leading_system_items):
            return semconv.REASON_SYSTEM_CHANGED
        if not (previous.server_state or current.server_state) and first < previous.cached_item_limit():
            return semconv.REASON_MESSAGES_CHANGED
        if gap > previous.ttl_seconds:
            return semconv.REASON_TTL_EXPIRED
        if previous.betas != current.betas:
            return semconv.REASON_BETAS_CHANGED
        return semconv.REASON_UNKNOWN  # tool_choice, thinking settings, server-side eviction

    def _in_place(self, section: _Section, items: Sequence[Any], upto: int) -> int | None:
        """An object edited in place below ``upto``; the snapshots are renewed when one is found, so the
        same edit is not reported again."""
        edited = section.edited_in_place(items, upto)
        if edited is not None:
            self._resnap = True
        return edited


def _diagnose_shared(previous: _SharedBaseline, current: RequestFingerprint, gap: float) -> str:
    """:meth:`CacheBreakDetector._diagnose` against a baseline of hashes, in the same order of causes."""
    if previous.wire_format != current.wire_format:
        return semconv.REASON_UNKNOWN
    if previous.model != current.model:
        return semconv.REASON_MODEL_CHANGED
    if previous.tools != _content_hash(current.tools):
        return semconv.REASON_TOOLS_CHANGED
    if previous.system != _content_hash(current.system):
        return semconv.REASON_SYSTEM_CHANGED
    if not previous.intact and not current.server_state:
        return semconv.REASON_MESSAGES_CHANGED
    if gap > previous.ttl:
        return semconv.REASON_TTL_EXPIRED
    if previous.betas != current.betas:
        return semconv.REASON_BETAS_CHANGED
    return semconv.REASON_UNKNOWN


#: OpenAI caches a prompt automatically once it has this many tokens (and reports no cache writes).
AUTOMATIC_CACHE_MIN_TOKENS = 1024


def _reported(usage: TokenUsage) -> bool:
    """Whether the provider reported cache figures for the call (else it says nothing about the cache)."""
    return bool(usage.reported_cache or usage.cache_read_tokens or usage.cache_write_tokens)


def leaves_cache(automatic_caching: bool, usage: TokenUsage) -> bool:
    """Whether a call with this usage left anything in the cache, as :meth:`CacheBreakDetector.check` counts
    it: cache figures reported, and something left (see :func:`_left_in_cache`)."""
    return _reported(usage) and _left(automatic_caching, usage) > 0


def _left_in_cache(fp: RequestFingerprint, usage: TokenUsage) -> int:
    return _left(fp.automatic_caching, usage)


def _left(automatic_caching: bool, usage: TokenUsage) -> int:
    """What a call left in the cache: its cache reads + writes. OpenAI's automatic caching reports no
    writes, so there the call's whole input counts once it was long enough to be cached: without that, a
    changing system prompt (a timestamp) was seen only when the previous call had itself read the cache."""
    left = usage.cache_read_tokens + usage.cache_write_tokens
    if automatic_caching and not usage.cache_write_tokens and usage.input_tokens >= AUTOMATIC_CACHE_MIN_TOKENS:
        left = max(left, usage.input_tokens)
    return left


# --- telemetry ----------------------------------------------------------------------------------------------


def record_unexpected_break(
    span: Span, brk: CacheBreak, provider: str, model: str, diagnosis: Mapping[str, Any] | None = None
) -> None:
    """The ``otel_context.cache_break`` event (intentional=false) on the chat span, and its count;
    ``diagnosis``: the provider's side of the same call (:func:`diagnosis_attributes`), on the event too."""
    attributes: dict[str, Any] = {
        semconv.CACHE_BREAK_INTENTIONAL: False,
        semconv.CACHE_BREAK_REASON: brk.reason,
        semconv.CACHE_BREAK_LOST_TOKENS: brk.lost_tokens,
    }
    cost = _break_cost(provider, model, brk.lost_tokens, brk.ttl_seconds)
    if cost is not None:
        attributes[semconv.CACHE_BREAK_COST] = cost
    if diagnosis:
        attributes.update(diagnosis)
    telemetry.emit_event(span, semconv.CACHE_BREAK_EVENT, attributes)
    _count(False, brk.reason, provider, model, cost)


def _break_cost(provider: str, model: str, tokens: int, ttl_seconds: float) -> float | None:
    """What a break that makes the provider write ``tokens`` again costs (docs/telemetry.md, "Cost"): None when
    the model's price is unknown."""
    found = pricing.rates(provider, model)
    return pricing.rewrite_cost(found, tokens, ttl_seconds) if found is not None else None


# --- the provider's own diagnosis, against the detector's -------------------------------------------------------

#: Which of the detector's reasons each provider reason confirms. The providers' vocabularies differ from ours
#: and from each other: OpenAI folds the instructions into ``input_changed`` and has ``context_compacted``;
#: a compaction (ours, intentional) rewrites the messages, so the provider sees ``messages_changed`` /
#: ``input_changed`` / ``context_compacted``; what the detector does not fingerprint (a prompt cache key, the
#: text format, reasoning effort, verbosity, the service tier) is the detector's ``unknown``.
_CONFIRMS: dict[str, frozenset[str]] = {
    semconv.REASON_MODEL_CHANGED: frozenset({semconv.REASON_MODEL_CHANGED}),
    semconv.REASON_SYSTEM_CHANGED: frozenset({semconv.REASON_SYSTEM_CHANGED}),
    semconv.REASON_TOOLS_CHANGED: frozenset({semconv.REASON_TOOLS_CHANGED}),
    semconv.REASON_MESSAGES_CHANGED: frozenset({semconv.REASON_MESSAGES_CHANGED, semconv.REASON_COMPACTION}),
    "context_compacted": frozenset({semconv.REASON_COMPACTION, semconv.REASON_MESSAGES_CHANGED}),
    "input_changed": frozenset(
        {semconv.REASON_MESSAGES_CHANGED, semconv.REASON_SYSTEM_CHANGED, semconv.REASON_COMPACTION}
    ),
}
#: With nothing diverged in the prompt, the detector is right to see no break, or an expired entry.
_HIT_CONFIRMS = frozenset({semconv.DETECTOR_NONE, semconv.REASON_TTL_EXPIRED})


def agreement(detector_reason: str, diagnosis: CacheDiagnosis) -> str:
    """Whether the detector's reason for a call (a ``cache_break`` reason, ``compaction`` for an intentional
    break announced for it, ``none``) is what the provider's diagnosis says (docs/telemetry.md, "The provider's
    cache diagnosis"): ``agree``, ``disagree``, or ``unknown`` when the provider gave no verdict.

    A miss the provider reports that the detector did not see is a disagreement, unless the provider puts its
    cost at no more than :data:`BREAK_MIN_TOKENS` (below the detector's floor by design); a break the detector
    reported that the provider calls a hit is one too, except an expired entry (the prompt did not change).
    """
    status = diagnosis.status
    if status == semconv.DIAGNOSIS_HIT:
        return semconv.AGREEMENT_AGREE if detector_reason in _HIT_CONFIRMS else semconv.AGREEMENT_DISAGREE
    if status != semconv.DIAGNOSIS_MISS:
        return semconv.AGREEMENT_UNKNOWN
    if detector_reason == semconv.DETECTOR_NONE:
        small = diagnosis.missed_tokens is not None and diagnosis.missed_tokens <= BREAK_MIN_TOKENS
        return semconv.AGREEMENT_AGREE if small else semconv.AGREEMENT_DISAGREE
    confirms = _CONFIRMS.get(diagnosis.reason or "", frozenset({semconv.REASON_UNKNOWN}))
    return semconv.AGREEMENT_AGREE if detector_reason in confirms else semconv.AGREEMENT_DISAGREE


def diagnosis_attributes(detector_reason: str, diagnosis: CacheDiagnosis) -> dict[str, Any]:
    """The provider's diagnosis and the detector's reason side by side, with their agreement: the chat span's
    attributes, and those the call's ``cache_break`` event carries."""
    out: dict[str, Any] = {
        semconv.CACHE_DIAGNOSIS_STATUS: diagnosis.status,
        semconv.CACHE_DIAGNOSIS_DETECTOR_REASON: detector_reason,
        semconv.CACHE_DIAGNOSIS_AGREEMENT: agreement(detector_reason, diagnosis),
    }
    if diagnosis.reason is not None:
        out[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] = diagnosis.reason
    if diagnosis.missed_tokens is not None:
        out[semconv.CACHE_DIAGNOSIS_MISSED_TOKENS] = diagnosis.missed_tokens
    if diagnosis.reusable_tokens is not None:
        out[semconv.CACHE_DIAGNOSIS_REUSABLE_TOKENS] = diagnosis.reusable_tokens
    return out


def count_diagnosis(attributes: Mapping[str, Any], provider: str, model: str) -> None:
    """Count one call's diagnosis (``attributes`` from :func:`diagnosis_attributes`) on
    ``otel_context.cache_diagnoses``: the detector's reason, the provider's (its status when it names none),
    the agreement, the provider and the model; never the token figures (bounded labels)."""
    telemetry.get().instruments.cache_diagnoses.add(
        1,
        {
            semconv.CACHE_DIAGNOSIS_DETECTOR_REASON: attributes[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON],
            semconv.CACHE_DIAGNOSIS_PROVIDER_REASON: attributes.get(
                semconv.CACHE_DIAGNOSIS_PROVIDER_REASON, attributes[semconv.CACHE_DIAGNOSIS_STATUS]
            ),
            semconv.CACHE_DIAGNOSIS_AGREEMENT: attributes[semconv.CACHE_DIAGNOSIS_AGREEMENT],
            semconv.GEN_AI_PROVIDER_NAME: provider,
            semconv.GEN_AI_REQUEST_MODEL: model,
        },
    )


def record_intentional_break(
    span: Span,
    expected_lost_tokens: int | None,
    provider: str,
    model: str,
    rewritten: int | None = None,
    ttl_seconds: float = 300.0,
) -> None:
    """The ``otel_context.cache_break`` event (intentional=true, reason compaction) on the compact span, and
    its count; nothing when ``expected_lost_tokens`` is None (the last call reported no cache figures: a
    conversation that never used the cache has no cache to break). Its cost: what of the compacted context
    (``rewritten`` tokens; None: as much as was lost) the next call writes instead of reading, at most what
    was lost."""
    if expected_lost_tokens is None:
        return
    attributes: dict[str, Any] = {
        semconv.CACHE_BREAK_INTENTIONAL: True,
        semconv.CACHE_BREAK_REASON: semconv.REASON_COMPACTION,
        semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS: expected_lost_tokens,
    }
    tokens = expected_lost_tokens if rewritten is None else min(expected_lost_tokens, max(rewritten, 0))
    cost = _break_cost(provider, model, tokens, ttl_seconds)
    if cost is not None:
        attributes[semconv.CACHE_BREAK_COST] = cost
    telemetry.emit_event(span, semconv.CACHE_BREAK_EVENT, attributes)
    _count(True, semconv.REASON_COMPACTION, provider, model, cost)


def _count(intentional: bool, reason: str, provider: str, model: str, cost: float | None = None) -> None:
    attributes: dict[str, Any] = {
        semconv.CACHE_BREAK_INTENTIONAL: intentional,
        semconv.CACHE_BREAK_REASON: reason,
        semconv.GEN_AI_PROVIDER_NAME: provider,
        semconv.GEN_AI_REQUEST_MODEL: model,
    }
    instruments = telemetry.get().instruments
    instruments.cache_breaks.add(1, attributes)
    if cost:
        instruments.cache_break_cost.add(cost, attributes)
