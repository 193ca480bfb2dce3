"""The interface every store implements (:class:`StateStore`), what it answers (:class:`Loaded`,
:class:`Lease`), and how a conversation's parts are named in a store.

Encoding, the schema version, the size cap, the error accounting and the bounded wait for a value live here,
so both stores behave the same; a store implements only the raw operations on encoded bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final, Literal, TypeGuard

from otel_context import semconv, telemetry
from otel_context.conversation.sealing import Sealer
from otel_context.store_spec import StateStoreConfigError

log = logging.getLogger("otel_context")

Source = Literal["memory", "store", "fallback"]
Predicate = Callable[[Mapping[str, Any]], bool]

#: Version of the values the engine writes; bump it when their shape changes incompatibly.
SCHEMA_VERSION: Final = 3
DEFAULT_PREFIX: Final = "otel_context:"
DEFAULT_TTL_SECONDS: Final = 86_400.0
DEFAULT_MAX_VALUE_BYTES: Final = 1 << 20
DEFAULT_LEASE_SECONDS: Final = 30.0
#: How long a value a newer one supersedes is kept (``put_later(..., retire=...)``): a state named after a
#: history, once the conversation moved on (calls still under way on that history read it before then).
RETIRE_SECONDS: Final = 900.0
#: How often a waiter looks for the value another worker is writing.
POLL_SECONDS: Final = 0.005
#: Between two warnings of one cause (a flapping store, a bound hit on every crossing): the first always warns.
WARN_INTERVAL_SECONDS: Final = 300.0
#: Locks of one process given up on (see :meth:`StateStore.wait_for`): at most this many remembered.
GIVEN_UP_LOCKS: Final = 1_024

#: A lease's token: this many hex characters (a lock value of another shape is not one of ours).
_TOKEN_CHARS: Final = 16
_HEX: Final = frozenset("0123456789abcdef")


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


def _pause(deadline: float) -> float:
    """How long a waiter sleeps before it polls again: :data:`POLL_SECONDS`, or what is left until ``deadline``."""
    return min(POLL_SECONDS, max(0.0, deadline - time.monotonic()))


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
        #: Cause -> when it was last warned about (see :meth:`_warn_limited`).
        self._warned_at: dict[str, float] = {}
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
        return self._loaded(self._get_raw(name), name)

    async def aget(self, key: str, part: str = "state") -> Loaded:
        """:meth:`get` for async callers: never blocks the event loop."""
        name = self.key(key, part)
        return self._loaded(await self._aget_raw(name), name)

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
        return self._acquire_raw(self._new_lease(key, name), lease_seconds)

    async def aacquire(
        self, key: str, name: str = "summary", lease_seconds: float = DEFAULT_LEASE_SECONDS
    ) -> Lease | None:
        """:meth:`acquire` for async callers."""
        return await self._aacquire_raw(self._new_lease(key, name), lease_seconds)

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
        return self._holds(raw, name, field, expected) and self._remove_exact_raw(name, raw)

    async def aremove_if(self, key: str, part: str, field: str, expected: str) -> bool:
        """:meth:`remove_if` for async callers."""
        name = self.key(key, part)
        if self._sealer is None:
            return await self._aremove_if_raw(name, field, expected)
        raw = await self._aget_raw(name)
        return self._holds(raw, name, field, expected) and await asyncio.to_thread(self._remove_exact_raw, name, raw)

    def _holds(self, raw: bytes | Loaded | None, name: str, field: str, expected: str) -> TypeGuard[bytes]:
        """Whether ``raw`` (read from ``name``) is a value of ours whose ``field`` equals ``expected``."""
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
        name, lock_name = self._wait_names(key, part, lock)
        while True:
            raw, holder = self._poll_raw(name, lock_name)
            done = self._answer(raw, holder, until, deadline, name, lock_name)
            if done is not None:
                return done
            self._sleep(_pause(deadline))

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
        name, lock_name = self._wait_names(key, part, lock)
        while True:
            raw, holder = await self._apoll_raw(name, lock_name)
            done = self._answer(raw, holder, until, deadline, name, lock_name)
            if done is not None:
                return done
            await asyncio.sleep(_pause(deadline))

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait (bounded) until the values given to :meth:`put_later` are written; True when they are."""
        return True

    def close(self) -> None:
        """Write what is pending (bounded) and let go of connections."""
        self.flush(0.5)

    # --- shared mechanics (of each sync method and its async twin, written once) ---------------------------
    def _renewed(self, key: str, parts: Sequence[str]) -> tuple[str, ...]:
        return tuple(self.key(key, part) for part in parts)

    def _loaded(self, raw: bytes | Loaded | None, name: str) -> Loaded:
        """What a raw read of ``name`` answers (a Loaded from the store is already a fallback answer)."""
        return raw if isinstance(raw, Loaded) else self._decode(raw, name)

    def _new_lease(self, key: str, name: str) -> Lease:
        """The lease an acquire of the lock ``name`` of conversation ``key`` asks for, with a new token."""
        return Lease(self.key(key, "lock:" + name), secrets.token_hex(_TOKEN_CHARS // 2), self.source)

    def _wait_names(self, key: str, part: str, lock: str | None) -> tuple[str, str | None]:
        """The names a wait polls: the value ``part`` and the lock ``lock`` (None: no lock)."""
        return self.key(key, part), self.key(key, "lock:" + lock) if lock else None

    def _answer(
        self,
        raw: bytes | Loaded | None,
        holder: Any,
        until: Predicate,
        deadline: float,
        name: str,
        lock_name: str | None,
    ) -> Loaded | None:
        """What one poll of a wait means: its answer, or None to poll again."""
        held = self._waits_on(lock_name, holder)
        done = self._judge(raw, until, held, deadline, name)
        return None if done is None else self._waited(lock_name, holder, held, done)

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
            self._warn_limited(
                "wait_bound",
                "otel_context: state store: a call waited the most it may (state_store_max_wait_seconds, "
                "OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS) for a summary another worker is making, which did "
                "not come in time; it went on without it (it summarizes itself). Raise the bound if summaries "
                "take longer and such calls may wait that long",
            )
            self._given_up[lock_name] = holder
            self._given_up.move_to_end(lock_name)
            while len(self._given_up) > GIVEN_UP_LOCKS:
                self._given_up.popitem(last=False)
        return done

    def _judge(
        self, raw: bytes | Loaded | None, until: Predicate, held: bool, deadline: float, name: str
    ) -> Loaded | None:
        loaded = self._loaded(raw, name)
        if loaded.source == semconv.STATE_SOURCE_FALLBACK:
            return loaded
        if loaded.value is not None and until(loaded.value):
            return loaded
        if not held or time.monotonic() >= deadline:
            return Loaded(None, loaded.source)
        return None

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _warn_limited(self, cause: str, message: str, *args: Any) -> bool:
        """Log ``message`` unless ``cause`` was warned about less than :data:`WARN_INTERVAL_SECONDS` ago;
        whether it was logged. The arguments name the store, the cause and the setting to change, never a
        value, a key or a password."""
        now = time.monotonic()
        last = self._warned_at.get(cause)
        if last is not None and now - last < WARN_INTERVAL_SECONDS:
            return False
        self._warned_at[cause] = now
        log.warning(message, *args)
        return True

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
                "unencodable", "otel_context: state store: a value is not JSON (%s); not stored", type(exc).__name__
            )
            return None
        if len(payload) > self.max_value_bytes:
            _count("put", "too_large")
            self._say_once(
                "too_large",
                "otel_context: state store: a value of %d bytes is above the cap of %d bytes; such values are "
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
                    "otel_context: state store: a value does not authenticate with the store's keys (another key, "
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
                "garbage", "otel_context: state store: a value is not one of ours (%s); ignored", type(exc).__name__
            )
            return _FALLBACK
        if version != self.schema_version:
            log.debug("otel_context: state store: ignored a value of schema version %s", version)
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
