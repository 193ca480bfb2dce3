"""Conversation state that many workers share: one small interface, an in-process and a Redis store.

Why: consecutive turns of one conversation land on different processes of a fleet. When each process keeps
its own state, each one summarizes on its own (N workers pay N summaries, and the model sees a different
summary of its own past depending on who answered, which also breaks the provider's prompt cache). A store
that every worker reads and writes makes the fleet behave like one process.

The interface (:class:`StateStore`) stores one JSON-able dict per ``(conversation key, part)``, with:

* ``get`` / ``aget`` -> :class:`Loaded` (the value or None, and where it came from: ``memory``, ``store``
  or ``fallback``), ``put`` / ``aput`` and ``put_later`` (written by a background thread, so the caller
  never waits for the store after its response); a write may ``renew`` the expiry of other parts of the
  same conversation in the same round trip, so a part written rarely (the summaries) lives as long as the
  part written on every call;
* a lock with a lease (``SET NX PX``): ``acquire`` / ``release``, so that one worker summarizes a
  threshold crossing while the others ``wait_for`` its result, a bounded time. A lock whose holder is
  unknown (a value that is not one of our tokens) is not waited for, and one a waiter of this process
  already waited out is not waited for again (its holder is slow or gone: see :meth:`StateStore.wait_for`).

The store is never on the app's failure path. A failed operation (server down, slow, full, or a value that
is not ours) returns the fallback answer (``Loaded(None, "fallback")``, ``False``, a non-exclusive lease),
counts ``otel_context.state_store.errors``, logs one warning per outage (never a value, a key or a
password), and skips the store for a short back-off before trying it again. Timeouts are tens of
milliseconds and redis-py's retries are off, so a stalled server costs a call at most one timeout.

Every value carries a schema version (a worker that reads a version it does not know ignores it), values
above a size cap are not stored (said once), keys have a prefix (default ``otel_context:``) and an expiry
(default a day), and every key of one conversation shares one Redis Cluster hash slot (``{...}`` tag).
Keys are hashes of the conversation key, so an app's explicit conversation ids do not show in the store.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import logging
import os
import secrets
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from otel_context import semconv, telemetry
from otel_context.conversation.sealing import Sealer
from otel_context.fork_safe import new_condition, new_lock
from otel_context.store_spec import StateStoreConfigError, split_url, validate_spec

log = logging.getLogger("otel_context")

__all__ = [
    "SCHEMA_VERSION",
    "InProcessStore",
    "Lease",
    "Loaded",
    "RedisStore",
    "StateStore",
    "StateStoreConfigError",
    "open_store",
    "validate_spec",
]

Source = Literal["memory", "store", "fallback"]
Predicate = Callable[[Mapping[str, Any]], bool]

#: Version of the values the engine writes; bump it when their shape changes incompatibly.
SCHEMA_VERSION: Final = 3
DEFAULT_PREFIX: Final = "otel_context:"
DEFAULT_TTL_SECONDS: Final = 86_400.0
DEFAULT_TIMEOUT_SECONDS: Final = 0.05
DEFAULT_MAX_VALUE_BYTES: Final = 1 << 20
DEFAULT_RETRY_AFTER_SECONDS: Final = 1.0
DEFAULT_LEASE_SECONDS: Final = 30.0
#: How long a value a newer one supersedes is kept (``put_later(..., retire=...)``): a state named after a
#: history, once the conversation moved on (calls still under way on that history read it before then).
RETIRE_SECONDS: Final = 900.0
#: Between two warnings of a flapping store (the first outage always warns).
WARN_INTERVAL_SECONDS: Final = 300.0
#: How often a waiter looks for the value another worker is writing.
POLL_SECONDS: Final = 0.005
#: Locks of one process given up on (see :meth:`StateStore.wait_for`): at most this many remembered.
GIVEN_UP_LOCKS: Final = 1_024
#: At the interpreter's normal exit, how long the ``put_later`` values still queued may hold the exit up.
EXIT_FLUSH_SECONDS: Final = 1.0

#: A lease's token: this many hex characters (a lock value of another shape is not one of ours).
_TOKEN_CHARS: Final = 16
_HEX: Final = frozenset("0123456789abcdef")
_RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
#: Delete a value only if its field ARGV[1] still holds ARGV[2] (one script: atomic, so one caller wins).
_REMOVE_IF_SCRIPT = """
local raw = redis.call('get', KEYS[1])
if not raw then return 0 end
local ok, value = pcall(cjson.decode, raw)
if ok and type(value) == 'table' and type(value['d']) == 'table' and value['d'][ARGV[1]] == ARGV[2] then
  return redis.call('del', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class Loaded:
    """A value read from a store (None when absent, unreadable or of another schema) and its origin."""

    value: dict[str, Any] | None
    source: Source


@dataclass(frozen=True)
class Lease:
    """A held lock. ``exclusive`` is False when the store failed and the caller goes on alone."""

    name: str
    token: str
    source: Source

    @property
    def exclusive(self) -> bool:
        return self.source != semconv.STATE_SOURCE_FALLBACK


_FALLBACK: Final = Loaded(None, "fallback")


@lru_cache(maxsize=4096)
def _store_key(prefix: str, key: str, part: str) -> str:
    """``prefix{hash}:part``: one Cluster slot per conversation, and no app id in the store (remembered:
    a call names two or three keys of its conversation, each a SHA-256 of its key otherwise)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{prefix}{{{digest}}}:{part}"


class _Retired(str):
    """A name among the ``renew`` names of a write whose expiry is shortened to :data:`RETIRE_SECONDS`
    instead of renewed (a ``str``, so it travels with the others through the writer)."""


def _count(operation: str, error_type: str) -> None:
    telemetry.get().instruments.state_store_errors.add(
        1, {semconv.STATE_STORE_OPERATION: operation, semconv.ERROR_TYPE: error_type}
    )


class StateStore(ABC):
    """Get/put of versioned JSON dicts per conversation, a leased lock, and a bounded wait for a value.

    Subclasses implement the raw operations on encoded bytes; encoding, the schema version, the size cap
    and the error accounting live here, so both stores behave the same.
    """

    #: What a successful read reports as its source.
    source: Source = "memory"
    #: How many operations failed so far (a caller that wrote something once, and not on every call,
    #: writes it again after a failure that may have lost it).
    failures = 0

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        schema_version: int = SCHEMA_VERSION,
        keys: Sequence[bytes] | None = None,
    ) -> None:
        if ttl_seconds <= 0 or max_value_bytes <= 0:
            raise StateStoreConfigError("ttl_seconds and max_value_bytes must be positive")
        #: With ``keys`` (``OTEL_CONTEXT_STATE_STORE_KEY``): every value is sealed (AES-256-GCM) on its way
        #: in and opened on its way out, in :meth:`_encode` / :meth:`_decode` only (see
        #: :mod:`otel_context.conversation.sealing`).
        self._sealer = Sealer(keys) if keys else None
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.max_value_bytes = max_value_bytes
        self.schema_version = schema_version
        self._said: set[str] = set()
        #: Lock name -> the holder's token a waiter of this process waited out (see :meth:`wait_for`).
        self._given_up: OrderedDict[str, Any] = OrderedDict()

    # --- the interface ------------------------------------------------------------------------------------
    @property
    def sealed(self) -> bool:
        """Whether values are encrypted before they are stored (the store was given keys)."""
        return self._sealer is not None

    def key(self, key: str, part: str = "state") -> str:
        """The store's name for ``part`` of conversation ``key``."""
        return _store_key(self.prefix, key, part)

    def get(self, key: str, part: str = "state") -> Loaded:
        """The value of ``part`` of conversation ``key``, never raising."""
        name = self.key(key, part)
        raw = self._get_raw(name)
        return raw if isinstance(raw, Loaded) else self._decode(raw, name)

    async def aget(self, key: str, part: str = "state") -> Loaded:
        """:meth:`get` for async callers: never blocks the event loop."""
        name = self.key(key, part)
        raw = await self._aget_raw(name)
        return raw if isinstance(raw, Loaded) else self._decode(raw, name)

    def put(self, key: str, value: Mapping[str, Any], part: str = "state", *, renew: Sequence[str] = ()) -> bool:
        """Store ``value`` (a JSON-able dict, encoded now); False when it was not stored.

        ``renew``: other parts of conversation ``key`` whose expiry starts again (same round trip).
        """
        name = self.key(key, part)
        payload = self._encode(value, name)
        return payload is not None and self._put_raw(name, payload, self._renewed(key, renew))

    async def aput(self, key: str, value: Mapping[str, Any], part: str = "state", *, renew: Sequence[str] = ()) -> bool:
        """:meth:`put` for async callers."""
        name = self.key(key, part)
        payload = self._encode(value, name)
        return payload is not None and await self._aput_raw(name, payload, self._renewed(key, renew))

    def put_later(
        self,
        key: str,
        value: Mapping[str, Any],
        part: str = "state",
        *,
        renew: Sequence[str] = (),
        retire: Sequence[str] = (),
    ) -> None:
        """Store ``value`` without waiting for the store (it is encoded now: later changes do not count).

        Writes of one process reach the store in the order they were given (the newest of a key replaces
        a pending older one of the same key), so a part written before another is there when the other is.
        ``retire``: parts this value supersedes, kept :data:`RETIRE_SECONDS` more (same round trip).
        """
        name = self.key(key, part)
        payload = self._encode(value, name)
        if payload is not None:
            retired = tuple(_Retired(self.key(key, other)) for other in retire if other != part)
            self._put_later_raw(name, payload, self._renewed(key, renew) + retired)

    def acquire(self, key: str, name: str = "summary", lease_seconds: float = DEFAULT_LEASE_SECONDS) -> Lease | None:
        """The lock ``name`` of conversation ``key`` for ``lease_seconds``, or None when another holds it.

        When the store fails the answer is a non-exclusive lease (``lease.exclusive`` is False): the
        caller goes on as a single process would.
        """
        lease = Lease(self.key(key, "lock:" + name), secrets.token_hex(_TOKEN_CHARS // 2), self.source)
        return self._acquire_raw(lease, lease_seconds)

    async def aacquire(
        self, key: str, name: str = "summary", lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Lease | None:
        """:meth:`acquire` for async callers."""
        lease = Lease(self.key(key, "lock:" + name), secrets.token_hex(_TOKEN_CHARS // 2), self.source)
        return await self._aacquire_raw(lease, lease_seconds)

    def release(self, lease: Lease) -> None:
        """Give the lock back if it is still ours (an expired lease that another took stays theirs)."""
        if lease.exclusive:
            self._release_raw(lease)

    async def arelease(self, lease: Lease) -> None:
        """:meth:`release` for async callers."""
        if lease.exclusive:
            await self._arelease_raw(lease)

    def remove_if(self, key: str, part: str, field: str, expected: str) -> bool:
        """Remove ``part`` of conversation ``key`` only if its value's ``field`` still equals ``expected``.

        Atomic in the store: of several workers that remove the same value, exactly one is told True (so
        one of them reports it). False when it was absent, replaced by another value, or the store failed.
        A sealed value cannot be read by the store: it is read here and removed only if its bytes are still
        the same (one more round trip, on this rare path only).
        """
        name = self.key(key, part)
        if self._sealer is None:
            return self._remove_if_raw(name, field, expected)
        raw = self._get_raw(name)
        if not self._holds(raw, name, field, expected):
            return False
        assert isinstance(raw, bytes)
        return self._remove_exact_raw(name, raw)

    async def aremove_if(self, key: str, part: str, field: str, expected: str) -> bool:
        """:meth:`remove_if` for async callers."""
        name = self.key(key, part)
        if self._sealer is None:
            return await self._aremove_if_raw(name, field, expected)
        raw = await self._aget_raw(name)
        if not self._holds(raw, name, field, expected):
            return False
        assert isinstance(raw, bytes)
        return await asyncio.to_thread(self._remove_exact_raw, name, raw)

    def _holds(self, raw: bytes | Loaded | None, name: str, field: str, expected: str) -> bool:
        if not isinstance(raw, bytes):
            return False
        value = self._decode(raw, name).value
        return value is not None and value.get(field) == expected

    def wait_for(
        self,
        key: str,
        until: Predicate,
        timeout: float,
        part: str = "state",
        lock: str | None = "summary",
    ) -> Loaded:
        """Wait at most ``timeout`` seconds for a value of ``part`` that satisfies ``until``.

        For the worker that found the lock taken: it waits for the holder's result. It returns early when
        the lock ``lock`` is free again (the holder finished or gave up) or the store fails. The value in
        the answer is None unless it satisfies ``until``.

        A lock is not waited for when its holder is unknown (its value is not a token of ours: another
        writer's key under our prefix), nor when a wait of this process already ran out on that very holder
        (same token: it is slow, or gone and its lease not yet run out); the caller goes on at once.
        """
        deadline = time.monotonic() + timeout
        name, lock_name = self.key(key, part), self.key(key, "lock:" + lock) if lock else None
        while True:
            raw, holder = self._poll_raw(name, lock_name)
            held = self._waits_on(lock_name, holder)
            done = self._judge(raw, until, held, deadline, name)
            if done is not None:
                return self._waited(lock_name, holder, held, done)
            self._sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    async def await_for(
        self,
        key: str,
        until: Predicate,
        timeout: float,
        part: str = "state",
        lock: str | None = "summary",
    ) -> Loaded:
        """:meth:`wait_for` for async callers."""
        deadline = time.monotonic() + timeout
        name, lock_name = self.key(key, part), self.key(key, "lock:" + lock) if lock else None
        while True:
            raw, holder = await self._apoll_raw(name, lock_name)
            held = self._waits_on(lock_name, holder)
            done = self._judge(raw, until, held, deadline, name)
            if done is not None:
                return self._waited(lock_name, holder, held, done)
            await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait (bounded) until the values given to :meth:`put_later` are written; True when they are."""
        return True

    def close(self) -> None:
        """Write what is pending (bounded) and let go of connections."""
        self.flush(0.5)

    # --- shared mechanics ---------------------------------------------------------------------------------
    def _renewed(self, key: str, parts: Sequence[str]) -> tuple[str, ...]:
        return tuple(self.key(key, part) for part in parts)

    def _waits_on(self, lock_name: str | None, holder: Any) -> bool:
        """Whether a waiter waits on the lock ``lock_name`` held by ``holder`` (its value, None: free)."""
        if lock_name is None or holder is None:
            return False
        token = holder.decode("ascii", "replace") if isinstance(holder, bytes) else holder
        if not (isinstance(token, str) and len(token) == _TOKEN_CHARS and set(token) <= _HEX):
            return False  # not a lease of ours: nobody will publish a result and let it go
        return bool(self._given_up.get(lock_name) != holder)

    def _waited(self, lock_name: str | None, holder: Any, held: bool, done: Loaded) -> Loaded:
        """The answer of a wait; one that ran out on a held lock remembers its holder (not waited on again)."""
        if held and lock_name is not None and done.value is None and done.source != semconv.STATE_SOURCE_FALLBACK:
            self._given_up[lock_name] = holder
            self._given_up.move_to_end(lock_name)
            while len(self._given_up) > GIVEN_UP_LOCKS:
                self._given_up.popitem(last=False)
        return done

    def _judge(
        self, raw: bytes | Loaded | None, until: Predicate, held: bool, deadline: float, name: str
    ) -> Loaded | None:
        loaded = raw if isinstance(raw, Loaded) else self._decode(raw, name)
        if loaded.source == semconv.STATE_SOURCE_FALLBACK:
            return loaded
        if loaded.value is not None and until(loaded.value):
            return loaded
        if not held or time.monotonic() >= deadline:
            return Loaded(None, loaded.source)
        return None

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _say_once(self, what: str, message: str, *args: Any) -> None:
        if what not in self._said:
            self._said.add(what)
            log.warning(message, *args)

    def _encode(self, value: Mapping[str, Any], name: str) -> bytes | None:
        """The bytes stored for ``value`` under ``name``: versioned JSON, sealed when the store has keys."""
        try:
            payload = json.dumps(
                {"v": self.schema_version, "d": value}, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError) as exc:
            _count("put", "unencodable")
            self._say_once(
                "unencodable", "otel-context state store: a value is not JSON (%s); not stored", type(exc).__name__
            )
            return None
        if len(payload) > self.max_value_bytes:
            _count("put", "too_large")
            self._say_once(
                "too_large",
                "otel-context state store: a value of %d bytes is above the cap of %d bytes; such values are "
                "not stored (this process keeps them)",
                len(payload),
                self.max_value_bytes,
            )
            return None
        return payload if self._sealer is None else self._sealer.seal(name, payload)

    def _decode(self, raw: bytes | None, name: str) -> Loaded:
        """The value stored as ``raw`` under ``name`` (see :meth:`_encode`); a value that does not open with
        the store's keys is ignored as one that is not ours."""
        if raw is None:
            return Loaded(None, self.source)
        if self._sealer is not None:
            opened = self._sealer.open(name, raw)
            if opened is None:
                _count("get", "garbage")
                self._say_once(
                    "unsealed",
                    "otel-context state store: a value does not authenticate with the store's keys (another key, "
                    "written in clear, or altered); ignored",
                )
                return _FALLBACK
            raw = opened
        try:
            envelope = json.loads(raw)
            version, value = envelope["v"], envelope["d"]
            if not isinstance(value, dict) or not isinstance(version, int):
                raise TypeError(type(value).__name__)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            _count("get", "garbage")
            self._say_once(
                "garbage", "otel-context state store: a value is not one of ours (%s); ignored", type(exc).__name__
            )
            return _FALLBACK
        if version != self.schema_version:
            log.debug("otel-context state store: ignored a value of schema version %s", version)
            return Loaded(None, self.source)
        return Loaded(value, self.source)

    # --- what a store implements (raw bytes; a Loaded return is a fallback answer) ------------------------
    @abstractmethod
    def _get_raw(self, name: str) -> bytes | Loaded | None: ...

    @abstractmethod
    async def _aget_raw(self, name: str) -> bytes | Loaded | None: ...

    @abstractmethod
    def _put_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool: ...

    @abstractmethod
    async def _aput_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool: ...

    @abstractmethod
    def _put_later_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> None: ...

    @abstractmethod
    def _acquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None: ...

    @abstractmethod
    async def _aacquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None: ...

    @abstractmethod
    def _release_raw(self, lease: Lease) -> None: ...

    @abstractmethod
    async def _arelease_raw(self, lease: Lease) -> None: ...

    @abstractmethod
    def _remove_if_raw(self, name: str, field: str, expected: str) -> bool: ...

    @abstractmethod
    def _remove_exact_raw(self, name: str, raw: bytes) -> bool:
        """Remove ``name`` only if it still holds exactly ``raw`` (atomic)."""

    @abstractmethod
    async def _aremove_if_raw(self, name: str, field: str, expected: str) -> bool: ...

    @abstractmethod
    def _poll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        """The value ``name`` and the value of the lock ``lock_name`` (None: free, or no lock named)."""

    @abstractmethod
    async def _apoll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]: ...


class InProcessStore(StateStore):
    """The default: a bounded LRU with idle expiry in this process. Nothing to install.

    Values are kept encoded, so that the in-process store has the Redis store's semantics (a caller never
    shares an object with the store, oversized and non-JSON values are refused the same way).
    """

    source: Source = "memory"

    def __init__(
        self,
        *,
        max_entries: int = 4_096,
        idle_seconds: float = 3_600.0,
        clock: Callable[[], float] = time.monotonic,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.max_entries = max(1, max_entries)
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._values: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._locks: dict[str, tuple[str, float]] = {}
        self._cond = new_condition(self, "_cond")

    def __len__(self) -> int:
        return len(self._values)

    def _get_raw(self, name: str) -> bytes | None:
        now = self._clock()
        with self._cond:
            entry = self._values.get(name)
            if entry is None:
                return None
            if now - entry[1] > min(self.idle_seconds, self.ttl_seconds):
                del self._values[name]
                return None
            self._values[name] = (entry[0], now)
            self._values.move_to_end(name)
            return entry[0]

    async def _aget_raw(self, name: str) -> bytes | None:
        return self._get_raw(name)

    def _put_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        now = self._clock()
        with self._cond:
            limit = min(self.idle_seconds, self.ttl_seconds)
            for other in renew:
                kept = self._values.get(other)
                if kept is not None and isinstance(other, _Retired):
                    self._values[other] = (kept[0], min(kept[1], now - max(0.0, limit - RETIRE_SECONDS)))
                elif kept is not None:
                    self._values[other] = (kept[0], now)
                    self._values.move_to_end(other)
            self._values[name] = (payload, now)
            self._values.move_to_end(name)
            while self._values:
                oldest, (_, seen) = next(iter(self._values.items()))
                if len(self._values) > self.max_entries or now - seen > limit:
                    del self._values[oldest]
                else:
                    break
            self._cond.notify_all()
        return True

    async def _aput_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        return self._put_raw(name, payload, renew)

    def _put_later_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> None:
        self._put_raw(name, payload, renew)

    def _held(self, name: str, now: float) -> bool:
        holder = self._locks.get(name)
        if holder is not None and holder[1] <= now:
            del self._locks[name]
            return False
        return holder is not None

    def _acquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        now = self._clock()
        with self._cond:
            if self._held(lease.name, now):
                return None
            self._locks[lease.name] = (lease.token, now + lease_seconds)
        return lease

    async def _aacquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        return self._acquire_raw(lease, lease_seconds)

    def _release_raw(self, lease: Lease) -> None:
        with self._cond:
            holder = self._locks.get(lease.name)
            if holder is not None and holder[0] == lease.token:
                del self._locks[lease.name]
            self._cond.notify_all()

    async def _arelease_raw(self, lease: Lease) -> None:
        self._release_raw(lease)

    def _remove_if_raw(self, name: str, field: str, expected: str) -> bool:
        with self._cond:
            entry = self._values.get(name)
            if entry is None:
                return False
            try:
                value = json.loads(entry[0]).get("d")
            except (ValueError, AttributeError, UnicodeDecodeError):
                return False
            if not isinstance(value, dict) or value.get(field) != expected:
                return False
            del self._values[name]
            return True

    async def _aremove_if_raw(self, name: str, field: str, expected: str) -> bool:
        return self._remove_if_raw(name, field, expected)

    def _remove_exact_raw(self, name: str, raw: bytes) -> bool:
        with self._cond:
            entry = self._values.get(name)
            if entry is None or entry[0] != raw:
                return False
            del self._values[name]
            return True

    def _poll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | None, str | None]:
        raw = self._get_raw(name)
        with self._cond:
            if lock_name is None or not self._held(lock_name, self._clock()):
                return raw, None
            return raw, self._locks[lock_name][0]

    async def _apoll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | None, str | None]:
        return self._poll_raw(name, lock_name)

    def _sleep(self, seconds: float) -> None:
        # Woken by a put or a release instead of polling (same process).
        with self._cond:
            self._cond.wait(seconds)


class _Writer:
    """One daemon thread that writes ``put_later`` values, newest per key (a burst coalesces), in batches: what
    is queued when the thread is free goes out in one round trip (up to :attr:`BATCH` values, in order).

    A daemon thread dies with the interpreter wherever it is, so what is still queued at a normal exit is
    written first (at most :data:`EXIT_FLUSH_SECONDS`): a worker stopped by a deployment right after its last
    call does not lose that conversation's last state (the next worker would take an older one). Batches are
    what make that deadline hold under load: one round trip per value, 2,000 values queued at exit took more
    than the second on a loaded 2-core machine, and the rest were lost with the thread.

    A fork's child starts with an empty queue and no thread: what was queued at the fork is the parent's to
    write (the child writing it too could overwrite a newer value the parent wrote since), and the child's exit
    does not wait for it.
    """

    MAX_PENDING = 10_000
    #: Most values written in one round trip (a few hundred KB at most of the usual small values).
    BATCH = 256

    def __init__(self, write: Callable[[Sequence[tuple[str, bytes, tuple[str, ...]]]], bool]) -> None:
        self._write = write
        self._cond = new_condition(self, "_cond")
        self._start_empty()
        _writers.add(self)

    def _start_empty(self) -> None:
        self._pending: OrderedDict[str, tuple[bytes, tuple[str, ...]]] = OrderedDict()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, name: str, payload: bytes, renew: tuple[str, ...]) -> None:
        with self._cond:
            self._pending[name] = (payload, renew)
            self._pending.move_to_end(name)
            while len(self._pending) > self.MAX_PENDING:
                self._pending.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="otel-context-state-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch: list[tuple[str, bytes, tuple[str, ...]]] = []
                while self._pending and len(batch) < self.BATCH:
                    name, (payload, renew) = self._pending.popitem(last=False)
                    batch.append((name, payload, renew))
                self._busy = True
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


#: Every writer of this process, for the exit's flush and a fork's child (see :class:`_Writer`).
_writers: weakref.WeakSet[_Writer] = weakref.WeakSet()


def _flush_at_exit() -> None:
    """The interpreter exits normally: write what every writer still has queued, within one deadline."""
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    for writer in list(_writers):
        writer.flush(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    """A fork's child: every writer starts empty, with no thread (see :class:`_Writer`; its lock is renewed
    by :mod:`otel_context.fork_safe`)."""
    for writer in list(_writers):
        writer._start_empty()


atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Connections:
    """Connections of the store's own for its two commands of every call: the ``GET`` before the request
    and the writer's ``SET`` after it.

    Why not redis-py's pool: it checks every connection it hands out for unread data (a non-blocking read:
    two ``settimeout`` calls, a ``recv`` and an exception per command), about a third of a ``GET`` on
    loopback. A connection of ours can never hold unread data: one that failed in any way (a timeout in the
    middle of a reply included) is closed before it goes back, and reconnects when next used. What the
    pool's check also finds, a connection the server closed while it was idle (a restart), shows here as a
    connection error of a reused connection: the idle ones are dropped and the commands (a ``GET``, a
    ``SET``, ``PEXPIRE``s: all idempotent) sent once more on a new connection.
    """

    def __init__(self, pool: Any, connection_error: type[Exception]) -> None:
        self._make = partial(pool.connection_class, **pool.connection_kwargs)
        self._connection_error = connection_error
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def run(self, *commands: tuple[Any, ...]) -> list[Any]:
        """The replies of ``commands``, sent in one write (raises what redis-py raises)."""
        if self._pid != os.getpid():  # a fork's child: the parent's sockets are not ours
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()  # atomic: no lock
        except IndexError:
            return self._send(self._make(), commands)
        try:
            return self._send(conn, commands)
        except self._connection_error:
            stale, self._idle = self._idle, []
            for old in stale:
                old.disconnect()
            return self._send(self._make(), commands)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()

    def _send(self, conn: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
        try:
            if len(commands) == 1:
                conn.send_command(*commands[0])
            else:
                conn.send_packed_command(conn.pack_commands(commands))
            replies = [conn.read_response() for _ in commands]
        except BaseException:
            conn.disconnect()
            raise
        self._idle.append(conn)
        return replies


def _safe_address(url: str) -> str:
    """host:port/db of a URL, never its credentials (for log lines)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


class RedisStore(StateStore):
    """A Redis (or Valkey, or any Redis-protocol server) store shared by every worker; ``pip install
    'otel-context[redis]'``.

    From a URL (``redis://``, ``rediss://`` for TLS, credentials in the URL, ``unix://``): the store makes
    its own clients with short timeouts and no retries, a sync one and one asyncio client per event loop.
    From a ``redis.Redis`` client: that client is used as it is (give it a ``socket_timeout`` and
    ``retry=Retry(NoBackoff(), 0)``), and async callers reach it through a worker thread.
    """

    source: Source = "store"

    def __init__(
        self,
        client: Any,
        *,
        url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retry_after: float = DEFAULT_RETRY_AFTER_SECONDS,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._client = client
        self._url = url
        self.timeout = timeout
        self.retry_after = retry_after
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._down_until = 0.0
        self._last_warning = -WARN_INTERVAL_SECONDS
        self._outage_errors = 0
        self._health = new_lock(self, "_health")
        self._writer = _Writer(self._put_many_raw)
        self.address = _safe_address(url) if url else type(client).__name__
        from redis import exceptions

        self._exceptions = exceptions
        pool = getattr(client, "connection_pool", None)
        # Only for a client made here from a URL: an app's client is used as it is configured.
        self._conns = _Connections(pool, exceptions.ConnectionError) if url is not None and pool is not None else None
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if url is None and kwargs.get("socket_timeout") is None:
            self._say_once(
                "no_timeout",
                "otel-context state store: the Redis client given has no socket_timeout; a stalled server would "
                "stall LLM calls (pass a URL, or a client with socket_timeout=%s)",
                timeout,
            )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """A store on the server ``url`` names; our options may also come from its query string."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        bare, ours = split_url(url)
        if "timeout_ms" in ours:
            options.setdefault("timeout", ours.pop("timeout_ms") / 1000)
        for name, value in ours.items():
            options.setdefault(name, value)
        timeout = options.get("timeout", DEFAULT_TIMEOUT_SECONDS)
        client = redis.Redis.from_url(bare, **_client_kwargs(timeout), retry=Retry(NoBackoff(), 0))
        return cls(client, url=bare, **options)

    # --- health: one warning per outage, a back-off, a counter --------------------------------------------
    def _available(self) -> bool:
        return self._down_until == 0.0 or time.monotonic() >= self._down_until

    def _failed(self, operation: str, exc: BaseException) -> None:
        errors = self._exceptions
        if isinstance(exc, errors.ResponseError) and str(exc).startswith("WRONGTYPE"):
            # Someone else's key under our name: garbage of that key, not a failing store.
            _count(operation, "garbage")
            self._say_once("wrongtype", "otel-context state store: a key holds another type than ours; ignored")
            return
        if isinstance(exc, (errors.TimeoutError, TimeoutError, asyncio.TimeoutError)):
            kind = "timeout"
        elif isinstance(exc, (errors.ConnectionError, OSError)):
            kind = "unavailable"
        elif isinstance(exc, getattr(errors, "OutOfMemoryError", ())) or str(exc).startswith("OOM"):
            kind = "full"
        else:
            kind = "response"
        _count(operation, kind)
        now = time.monotonic()
        with self._health:
            starting = self._down_until == 0.0
            self._down_until = now + self.retry_after
            self._outage_errors += 1
            self.failures += 1
            warn = starting and now - self._last_warning >= WARN_INTERVAL_SECONDS
            if warn:
                self._last_warning = now
        if warn:
            log.warning(
                "otel-context state store %s failed (%s: %s); calls use this process's state and retry the store "
                "every %.1fs",
                self.address,
                operation,
                kind,
                self.retry_after,
            )
        elif starting:
            log.debug("otel-context state store %s failed again (%s: %s)", self.address, operation, kind)

    def _answered(self) -> None:
        if self._down_until == 0.0:
            return
        with self._health:
            errors, self._down_until, self._outage_errors = self._outage_errors, 0.0, 0
        if errors:
            log.info("otel-context state store %s answers again (after %d failed operations)", self.address, errors)

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        if not self._available():
            return False, None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._failed(operation, exc)
            return False, None
        self._answered()
        return True, result

    async def _acall(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        if not self._available():
            return False, None
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:
            self._failed(operation, exc)
            return False, None
        self._answered()
        return True, result

    def _aclient(self) -> Any:
        """This loop's asyncio client (a client's connections belong to the loop that made them)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            assert self._url is not None
            client = redis.asyncio.Redis.from_url(
                self._url, **_client_kwargs(self.timeout), retry=Retry(NoBackoff(), 0)
            )
            self._aclients[loop] = client
        return client

    # --- raw operations ---------------------------------------------------------------------------------
    def _get_raw(self, name: str) -> bytes | Loaded | None:
        if self._conns is not None:
            ok, replies = self._call("get", self._conns.run, ("GET", name))
            return replies[0] if ok else _FALLBACK
        ok, raw = self._call("get", self._client.get, name)
        return raw if ok else _FALLBACK

    async def _aget_raw(self, name: str) -> bytes | Loaded | None:
        if self._url is None:
            return await asyncio.to_thread(self._get_raw, name)
        ok, raw = await self._acall("get", self._aclient().get, name)
        return raw if ok else _FALLBACK

    def _put_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        ttl = int(self.ttl_seconds * 1000)
        if self._conns is not None:
            commands = [("SET", name, payload, "PX", ttl), *(("PEXPIRE", other, _ttl(other, ttl)) for other in renew)]
            ok, _ = self._call("put", self._conns.run, *commands)
            return ok
        if not renew:
            ok, _ = self._call("put", self._client.set, name, payload, px=ttl)
            return ok
        # One round trip (not a transaction: a renewal of a part that is gone does nothing).
        pipe = self._client.pipeline(transaction=False)
        pipe.set(name, payload, px=ttl)
        for other in renew:
            pipe.pexpire(other, _ttl(other, ttl))
        ok, _ = self._call("put", pipe.execute)
        return ok

    def _put_many_raw(self, values: Sequence[tuple[str, bytes, tuple[str, ...]]]) -> bool:
        """The writer's batch: every value (and its renewals) in one round trip, in order."""
        if len(values) == 1:
            return self._put_raw(*values[0])
        ttl = int(self.ttl_seconds * 1000)
        if self._conns is not None:
            commands = [
                command
                for name, payload, renew in values
                for command in (
                    ("SET", name, payload, "PX", ttl),
                    *(("PEXPIRE", other, _ttl(other, ttl)) for other in renew),
                )
            ]
            ok, _ = self._call("put", self._conns.run, *commands)
            return ok
        pipe = self._client.pipeline(transaction=False)
        for name, payload, renew in values:
            pipe.set(name, payload, px=ttl)
            for other in renew:
                pipe.pexpire(other, _ttl(other, ttl))
        ok, _ = self._call("put", pipe.execute)
        return ok

    async def _aput_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        if self._url is None:
            return await asyncio.to_thread(self._put_raw, name, payload, renew)
        ttl = int(self.ttl_seconds * 1000)
        if not renew:
            ok, _ = await self._acall("put", self._aclient().set, name, payload, px=ttl)
            return ok
        pipe = self._aclient().pipeline(transaction=False)
        pipe.set(name, payload, px=ttl)
        for other in renew:
            pipe.pexpire(other, _ttl(other, ttl))
        ok, _ = await self._acall("put", pipe.execute)
        return ok

    def _put_later_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> None:
        if self._available():
            self._writer.submit(name, payload, renew)

    def _acquired(self, ok: bool, won: Any, lease: Lease) -> Lease | None:
        if not ok:
            return Lease(lease.name, lease.token, "fallback")
        return lease if won else None

    def _acquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        ok, won = self._call("lock", self._client.set, lease.name, lease.token, nx=True, px=int(lease_seconds * 1000))
        return self._acquired(ok, won, lease)

    async def _aacquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        if self._url is None:
            return await asyncio.to_thread(self._acquire_raw, lease, lease_seconds)
        ok, won = await self._acall(
            "lock", self._aclient().set, lease.name, lease.token, nx=True, px=int(lease_seconds * 1000)
        )
        return self._acquired(ok, won, lease)

    def _release_raw(self, lease: Lease) -> None:
        self._call("release", self._client.eval, _RELEASE_SCRIPT, 1, lease.name, lease.token)

    async def _arelease_raw(self, lease: Lease) -> None:
        if self._url is None:
            await asyncio.to_thread(self._release_raw, lease)
            return
        await self._acall("release", self._aclient().eval, _RELEASE_SCRIPT, 1, lease.name, lease.token)

    def _remove_if_raw(self, name: str, field: str, expected: str) -> bool:
        ok, removed = self._call("remove", self._client.eval, _REMOVE_IF_SCRIPT, 1, name, field, expected)
        return bool(ok and removed)

    def _remove_exact_raw(self, name: str, raw: bytes) -> bool:
        ok, removed = self._call("remove", self._client.eval, _RELEASE_SCRIPT, 1, name, raw)
        return bool(ok and removed)

    async def _aremove_if_raw(self, name: str, field: str, expected: str) -> bool:
        if self._url is None:
            return await asyncio.to_thread(self._remove_if_raw, name, field, expected)
        ok, removed = await self._acall("remove", self._aclient().eval, _REMOVE_IF_SCRIPT, 1, name, field, expected)
        return bool(ok and removed)

    def _polled(self, ok: bool, found: Any, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        if not ok:
            return _FALLBACK, None
        return found[0], found[1] if lock_name is not None else None

    def _poll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        # One round trip for the value and the lock: MGET works on Cluster too (one hash slot).
        ok, found = self._call("wait", self._client.mget, [name, lock_name or name])
        return self._polled(ok, found, lock_name)

    async def _apoll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        if self._url is None:
            return await asyncio.to_thread(self._poll_raw, name, lock_name)
        ok, found = await self._acall("wait", self._aclient().mget, [name, lock_name or name])
        return self._polled(ok, found, lock_name)

    def flush(self, timeout: float = 1.0) -> bool:
        return self._writer.flush(timeout)

    def close(self) -> None:
        self.flush(0.5)
        if self._conns is not None:
            self._conns.close()
        if self._url is not None:
            self._client.close()


def _ttl(name: str, ttl_ms: int) -> int:
    """The expiry a write gives one of its ``renew`` names: the store's, or a short one for a retired name
    (never longer than the store's: ``PEXPIRE`` would extend it)."""
    return min(ttl_ms, int(RETIRE_SECONDS * 1000)) if isinstance(name, _Retired) else ttl_ms


def _client_kwargs(timeout: float) -> dict[str, Any]:
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout}


def open_store(spec: Any = None, **options: Any) -> StateStore:
    """The store ``spec`` names (see :func:`validate_spec`), with ``options`` for the store's constructor."""
    spec = validate_spec(spec)
    if spec is None:
        return InProcessStore(**options)
    if isinstance(spec, StateStore):
        return spec
    if isinstance(spec, str):
        return RedisStore.from_url(spec, **options)
    return RedisStore(spec, **options)
