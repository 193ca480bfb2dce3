"""The Redis store: a server every worker shares, with short timeouts, a back-off and one warning per outage."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from otel_context.conversation.state_store.base import (
    _FALLBACK,
    RETIRE_SECONDS,
    Lease,
    Loaded,
    Source,
    StateStore,
    _count,
    _Retired,
)
from otel_context.conversation.state_store.connections import _Connections
from otel_context.conversation.state_store.writer import Write, _Writer
from otel_context.fork_safe import new_lock
from otel_context.store_spec import split_url

log = logging.getLogger("otel_context")

DEFAULT_TIMEOUT_SECONDS: Final = 0.05
DEFAULT_RETRY_AFTER_SECONDS: Final = 1.0
#: Between two warnings of a flapping store (the first outage always warns).
WARN_INTERVAL_SECONDS: Final = 300.0

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
        return self._put_many_raw(((name, payload, renew),))

    def _put_many_raw(self, values: Sequence[Write]) -> bool:
        """Every value (and its renewals) in one round trip, in order: a put's one value, or the writer's batch."""
        ttl = int(self.ttl_seconds * 1000)
        if self._conns is not None:
            ok, _ = self._call("put", self._conns.run, *_put_commands(values, ttl))
        elif len(values) == 1 and not values[0][2]:
            name, payload, _ = values[0]
            ok, _ = self._call("put", self._client.set, name, payload, px=ttl)
        else:
            ok, _ = self._call("put", _queue_puts(self._client.pipeline(transaction=False), values, ttl).execute)
        return ok

    async def _aput_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        if self._url is None:
            return await asyncio.to_thread(self._put_raw, name, payload, renew)
        ttl = int(self.ttl_seconds * 1000)
        if not renew:
            ok, _ = await self._acall("put", self._aclient().set, name, payload, px=ttl)
            return ok
        pipe = _queue_puts(self._aclient().pipeline(transaction=False), ((name, payload, renew),), ttl)
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


def _put_commands(values: Sequence[Write], ttl_ms: int) -> list[tuple[Any, ...]]:
    """The commands that write ``values``, in order: each one's ``SET`` and its renewals' ``PEXPIRE``."""
    return [
        command
        for name, payload, renew in values
        for command in (
            ("SET", name, payload, "PX", ttl_ms),
            *(("PEXPIRE", other, _ttl(other, ttl_ms)) for other in renew),
        )
    ]


def _queue_puts(pipe: Any, values: Sequence[Write], ttl_ms: int) -> Any:
    """``pipe`` (a redis-py pipeline, sync or asyncio) with the commands of :func:`_put_commands` queued: one
    round trip, and not a transaction (a renewal of a part that is gone does nothing)."""
    for name, payload, renew in values:
        pipe.set(name, payload, px=ttl_ms)
        for other in renew:
            pipe.pexpire(other, _ttl(other, ttl_ms))
    return pipe


def _client_kwargs(timeout: float) -> dict[str, Any]:
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout}
