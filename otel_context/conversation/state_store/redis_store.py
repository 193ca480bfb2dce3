"""The Redis store: a server every worker shares, with short timeouts, a back-off and one warning per outage."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from otel_context.conversation.state_store import clients
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
from otel_context.conversation.state_store.connections import _ClusterConnections, _Connections
from otel_context.conversation.state_store.writer import Write, _Writer
from otel_context.fork_safe import new_lock
from otel_context.store_spec import safe_address, split_url

log = logging.getLogger("otel_context")

DEFAULT_TIMEOUT_SECONDS: Final = 0.05
DEFAULT_RETRY_AFTER_SECONDS: Final = 1.0

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


#: What each kind of failure means, in words a user can act on (the warning's middle; never a value).
_CAUSES: Final = {
    "timeout": "did not answer within the store's timeout ({timeout_ms:g} ms): check the server's load and "
    "latency, or raise timeout_ms in the URL above the store's p99 (keep it well below "
    "state_store_max_wait_seconds)",
    "unavailable": "cannot be reached (connection refused, reset or no route): check that it runs and that "
    "the URL's host and port are right",
    "auth": "refused our credentials (AUTH failed, or the ACL user lacks a command or key the store uses): "
    "check the user and password in the URL, and the ACL in docs/deploying.md",
    "tls": "failed the TLS handshake: rediss:// needs a server that speaks TLS and redis:// one that does "
    "not; for a private CA add ?ssl_ca_certs=/path/ca.pem",
    "readonly": "is a read-only replica: point the store at the primary, or let Sentinel name it "
    "(redis+sentinel://host:port/service_name)",
    "full": "is out of memory (OOM: maxmemory reached, and its maxmemory-policy made no room for the write): "
    "check it with CONFIG GET maxmemory-policy; under noeviction set volatile-lru (every key of ours expires), "
    "under an evicting one raise maxmemory, or give the store an instance of its own (another app's keys "
    "without an expiry cannot be evicted under volatile-*)",
    "cluster": "is a Redis Cluster node and the client given is not a cluster client (it answered MOVED): "
    "pass a redis.cluster.RedisCluster, or the node's URL (the store then uses a cluster client)",
    "cluster_down": "(a Redis Cluster) cannot serve this conversation's slot now (CLUSTERDOWN or TRYAGAIN: a "
    "failover or a resharding under way, or a primary gone with no replica to take over); the store comes "
    "back by itself once the slot is served",
    "response": "answered with an error ({error})",
    # Not a kind of its own on the errors metric (it counts as unavailable): only the warning says it.
    "unresolved": "cannot be reached: its host name does not resolve (DNS): check the URL's host",
}
#: The same for a Redis Cluster (the address is the node the URL names; the failure may be another node's).
_CLUSTER_CAUSES: Final = {
    "timeout": "(a Redis Cluster): a node did not answer within the store's timeout ({timeout_ms:g} ms): a "
    "primary stalled or unreachable (its replica takes over after cluster-node-timeout), or raise timeout_ms "
    "above the nodes' p99",
    "unavailable": "(a Redis Cluster): a node cannot be reached (a primary down: its replica takes over after "
    "cluster-node-timeout, and the store follows by itself)",
}


#: What resolvers say of a name they cannot resolve, where the error carries no ``socket.gaierror`` (redis-py
#: words the connection error from the message of one).
_UNRESOLVED_WORDS = ("Name or service not known", "nodename nor servname", "getaddrinfo failed", "name resolution")


def _unresolved(exc: BaseException) -> bool:
    """Whether a connection failed because its host name does not resolve (a typo in the URL's host, a DNS
    outage), rather than a refused, reset or unrouted connection."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, socket.gaierror) or any(w in str(seen) for w in _UNRESOLVED_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class RedisStore(StateStore):
    """A Redis (or Valkey, or any Redis-protocol server) store shared by every worker; ``pip install
    'otel-context[redis]'``.

    From a URL: ``redis://`` (``rediss://`` for TLS, credentials in the URL, ``unix://``) names one server
    or any node of a Redis Cluster (asked once, before the first command: a cluster's node makes the store
    use redis-py's cluster client), ``redis+sentinel://`` a primary that Sentinel names. The store makes
    its own clients (:mod:`~.clients`) with short timeouts and no retries, a sync one and one asyncio client
    per event loop. From a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client: that client is used as
    it is (give it a ``socket_timeout`` and ``retry=Retry(NoBackoff(), 0)``), and async callers reach it
    through a worker thread.
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
        self._outage_errors = 0
        self._health = new_lock(self, "_health")
        self._writer = _Writer(self._put_many_raw)
        self.address = safe_address(url) if url else type(client).__name__
        from redis import exceptions

        self._exceptions = exceptions
        #: How the store reaches its data: "server" (one), "cluster", "sentinel", or None (a redis:// URL
        #: whose node is not asked yet); "client" for a client given by the app, used through its methods.
        self.topology: str | None = "client"
        #: For a store made from a URL: what runs its commands on connections of its own (see connections.py).
        self._route: _Connections | _ClusterConnections | None = None
        self._ready = threading.Event()
        self._ready.set()
        if url is not None:
            self.topology = (
                "sentinel" if clients.is_sentinel_url(url) else "server" if url.startswith("unix:") else None
            )
            # Behind Sentinel too: the pool's connection class asks the Sentinels for the primary when it
            # connects, and turns a demoted primary's READONLY into a connection error, after which our
            # connections reconnect (to the primary the Sentinels name then) and send the commands once more.
            self._route = _Connections(client.connection_pool, exceptions.ConnectionError)
        pool = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
        kwargs = getattr(pool, "connection_kwargs", {})
        if url is None and kwargs.get("socket_timeout") is None:
            self._say_once(
                "no_timeout",
                "otel_context: state store: the Redis client given has no socket_timeout; a stalled server "
                "would stall LLM calls (pass a URL, or a client with socket_timeout=%s)",
                timeout,
            )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """A store on the server(s) ``url`` names; our options may also come from its query string."""
        bare, ours = split_url(url)
        if "timeout_ms" in ours:
            options.setdefault("timeout", ours.pop("timeout_ms") / 1000)
        for name, value in ours.items():
            options.setdefault(name, value)
        timeout = options.get("timeout", DEFAULT_TIMEOUT_SECONDS)
        make = clients.sentinel_client if clients.is_sentinel_url(bare) else clients.plain_client
        return cls(make(bare, timeout), url=bare, **options)

    # --- topology: a redis:// URL's node is asked once whether it is a Cluster's --------------------------
    def _find_topology(self) -> None:
        """Ask the node the URL names whether it is a Cluster node (one round trip; raises what a failed
        command raises, and it is asked again next time). A cluster's client is made off the caller's path
        (redis-py's reads the slot map and the command table: 0.1 to 0.7 s); until it is ready the store
        answers as a store that is not there yet (this process's state, no error counted)."""
        assert self._url is not None and self._route is not None
        if not clients.is_cluster_node(self._client):
            self.topology = "server"
            return
        self.topology = "cluster_pending"
        self._ready.clear()
        threading.Thread(target=self._make_cluster_client, name="otel-context-cluster", daemon=True).start()

    def _make_cluster_client(self) -> None:
        assert self._url is not None
        try:
            cluster = clients.cluster_client(self._url, self.timeout)
        except Exception as exc:
            self.topology = None
            self._failed("connect", exc)
        else:
            plain, self._route = self._route, _ClusterConnections(cluster, self._exceptions)
            if plain is not None:
                plain.close()
            self._client.close()
            self._client, self.topology = cluster, "cluster"
            log.debug("otel_context: state store %s is a Redis Cluster node: using a cluster client", self.address)
        finally:
            self._ready.set()

    def ready(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until the store knows how to reach its data (a Cluster's client is made); whether it
        does. For a process that wants the store before its first call (a worker's start-up)."""
        if self.topology is None and self._available():
            try:
                self._find_topology()
            except Exception as exc:
                self._failed("connect", exc)
                return False
        self._ready.wait(timeout)
        return self.topology not in (None, "cluster_pending")

    # --- health: one warning per cause, a back-off, a counter ---------------------------------------------
    def _available(self) -> bool:
        return self._down_until == 0.0 or time.monotonic() >= self._down_until

    def _cause(self, exc: BaseException) -> str:
        """What kind of failure ``exc`` is (the ``error.type`` it is counted as, and its warning)."""
        errors = self._exceptions
        if isinstance(exc, (errors.AuthenticationError, errors.NoPermissionError)):
            return "auth"
        if isinstance(exc, (errors.TimeoutError, TimeoutError, asyncio.TimeoutError)):
            return "timeout"
        if isinstance(exc, (errors.ConnectionError, OSError)):
            tls = isinstance(exc, ssl.SSLError) or isinstance(exc.__cause__ or exc.__context__, ssl.SSLError)
            return "tls" if tls or "SSL" in str(exc) else "unavailable"
        if isinstance(exc, errors.ReadOnlyError):
            return "readonly"
        if isinstance(exc, errors.OutOfMemoryError):
            return "full"
        if isinstance(exc, errors.AskError) or (
            # A cluster's redirect reached a plain client: MovedError (an AskError) from redis-py 5.0.1 on; a bare
            # ResponseError before (kept: a release outside the range that a user forces still reads right).
            isinstance(exc, errors.ResponseError) and str(exc).startswith(("MOVED ", "ASK "))
        ):
            return "cluster"
        if isinstance(exc, (errors.ClusterError, errors.TryAgainError, errors.RedisClusterException)):
            return "cluster_down"
        return "response"

    def _failed(self, operation: str, exc: BaseException) -> None:
        errors = self._exceptions
        if isinstance(exc, errors.ResponseError) and str(exc).startswith("WRONGTYPE"):
            # Someone else's key under our name: garbage of that key, not a failing store.
            _count(operation, "garbage")
            self._say_once("wrongtype", "otel_context: state store: a key holds another type than ours; ignored")
            return
        kind = self._cause(exc)
        if kind == "cluster" and self._url is not None and self.topology == "server":
            # Our plain client on a node that became a Cluster's since it was asked: ask it again.
            self.topology = None
            log.debug(
                "otel_context: state store %s answered MOVED: asking it again whether it is a cluster", self.address
            )
            return
        _count(operation, kind)
        now = time.monotonic()
        with self._health:
            starting = self._down_until == 0.0
            self._down_until = now + self.retry_after
            self._outage_errors += 1
            self.failures += 1
        causes = _CLUSTER_CAUSES if self.topology == "cluster" else _CAUSES
        said = "unresolved" if kind == "unavailable" and _unresolved(exc) else kind
        cause = causes.get(said, _CAUSES[said]).format(timeout_ms=self.timeout * 1000, error=type(exc).__name__)
        if (
            not self._warn_limited(
                kind,
                "otel_context: state store %s %s (%s failed); calls use this process's state and try the store "
                "again every %.1fs",
                self.address,
                cause,
                operation,
                self.retry_after,
            )
            and starting
        ):
            log.debug("otel_context: state store %s failed again (%s: %s)", self.address, operation, kind)

    def _answered(self) -> None:
        if self._down_until == 0.0:
            return
        with self._health:
            errors, self._down_until, self._outage_errors = self._outage_errors, 0.0, 0
        if errors:
            log.info("otel_context: state store %s answers again (after %d failed operations)", self.address, errors)

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """``fn(*args, **kwargs)`` of the app's client, never raising: (whether it answered, its answer)."""
        if not self._available():
            return False, None
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._failed(operation, exc)
            return False, None
        self._answered()
        return True, result

    def _run(self, operation: str, *commands: tuple[Any, ...]) -> tuple[bool, Any]:
        """The replies of ``commands`` on the store's own connections (a store made from a URL), never
        raising: (whether the store answered, the replies in order)."""
        if not self._available():
            return False, None
        assert self._route is not None
        try:
            if self.topology is None:
                self._find_topology()
            if self.topology == "cluster_pending":
                return False, None
            replies = self._route.run(*commands)
        except Exception as exc:
            self._failed(operation, exc)
            return False, None
        self._answered()
        return True, replies

    async def _acall(self, operation: str, command: Callable[[Any], Awaitable[Any]]) -> tuple[bool, Any]:
        """``command(client)`` with this loop's asyncio client (a store made from a URL), never raising. A
        cluster's command is bounded as a whole (redirects and a ``CLUSTERDOWN`` pause of redis-py's
        included)."""
        if not self._available():
            return False, None
        try:
            if self.topology is None:
                await asyncio.to_thread(self._find_topology)
            if self.topology == "cluster_pending":
                return False, None
            call = command(await self._aclient())
            result = await (asyncio.wait_for(call, 2 * self.timeout) if self.topology == "cluster" else call)
        except Exception as exc:
            self._failed(operation, exc)
            return False, None
        self._answered()
        return True, result

    async def _aclient(self) -> Any:
        """This loop's asyncio client (a client's connections belong to the loop that made them). A cluster's
        reads the slot map first, bounded by a few timeouts (once per loop: about 0.1 s on loopback)."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            assert self._url is not None
            if self.topology == "cluster":
                client = clients.async_cluster_client(self._url, self.timeout)
                await asyncio.wait_for(client.initialize(), 5 * self.timeout)
            elif self.topology == "sentinel":
                client = clients.sentinel_client(self._url, self.timeout, asynchronous=True)
            else:
                client = clients.async_plain_client(self._url, self.timeout)
            self._aclients[loop] = client
        return client

    # --- raw operations (a store made from a URL: its own connections, else the app's client) -----------
    def _get_raw(self, name: str) -> bytes | Loaded | None:
        if self._route is not None:
            ok, replies = self._run("get", ("GET", name))
            return replies[0] if ok else _FALLBACK
        ok, raw = self._call("get", self._client.get, name)
        return raw if ok else _FALLBACK

    async def _aget_raw(self, name: str) -> bytes | Loaded | None:
        if self._url is None:
            return await asyncio.to_thread(self._get_raw, name)
        ok, raw = await self._acall("get", lambda client: client.get(name))
        return raw if ok else _FALLBACK

    def _put_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        return self._put_many_raw(((name, payload, renew),))

    def _put_many_raw(self, values: Sequence[Write]) -> bool:
        """Every value (and its renewals) in one round trip, in order: a put's one value, or the writer's batch
        (on a Cluster: one round trip per primary the batch's conversations live on)."""
        ttl = int(self.ttl_seconds * 1000)
        if self._route is not None:
            ok, _ = self._run("put", *_put_commands(values, ttl))
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
            ok, _ = await self._acall("put", lambda client: client.set(name, payload, px=ttl))
            return ok
        values = ((name, payload, renew),)
        ok, _ = await self._acall(
            "put", lambda client: _queue_puts(client.pipeline(transaction=False), values, ttl).execute()
        )
        return ok

    def _put_later_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> None:
        if self._available():
            self._writer.submit(name, payload, renew)

    def _acquired(self, ok: bool, won: Any, lease: Lease) -> Lease | None:
        if not ok:
            return Lease(lease.name, lease.token, "fallback")
        return lease if won else None

    def _acquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        ms = int(lease_seconds * 1000)
        if self._route is not None:
            ok, replies = self._run("lock", ("SET", lease.name, lease.token, "NX", "PX", ms))
            return self._acquired(ok, ok and replies[0], lease)
        ok, won = self._call("lock", self._client.set, lease.name, lease.token, nx=True, px=ms)
        return self._acquired(ok, won, lease)

    async def _aacquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        if self._url is None:
            return await asyncio.to_thread(self._acquire_raw, lease, lease_seconds)
        ms = int(lease_seconds * 1000)
        ok, won = await self._acall("lock", lambda client: client.set(lease.name, lease.token, nx=True, px=ms))
        return self._acquired(ok, won, lease)

    def _eval(self, operation: str, script: str, name: str, *args: Any) -> tuple[bool, Any]:
        if self._route is not None:
            ok, replies = self._run(operation, ("EVAL", script, 1, name, *args))
            return ok, replies[0] if ok else None
        return self._call(operation, self._client.eval, script, 1, name, *args)

    def _release_raw(self, lease: Lease) -> None:
        self._eval("release", _RELEASE_SCRIPT, lease.name, lease.token)

    async def _arelease_raw(self, lease: Lease) -> None:
        if self._url is None:
            await asyncio.to_thread(self._release_raw, lease)
            return
        await self._acall("release", lambda client: client.eval(_RELEASE_SCRIPT, 1, lease.name, lease.token))

    def _remove_if_raw(self, name: str, field: str, expected: str) -> bool:
        ok, removed = self._eval("remove", _REMOVE_IF_SCRIPT, name, field, expected)
        return bool(ok and removed)

    def _remove_exact_raw(self, name: str, raw: bytes) -> bool:
        ok, removed = self._eval("remove", _RELEASE_SCRIPT, name, raw)
        return bool(ok and removed)

    async def _aremove_if_raw(self, name: str, field: str, expected: str) -> bool:
        if self._url is None:
            return await asyncio.to_thread(self._remove_if_raw, name, field, expected)
        ok, removed = await self._acall(
            "remove", lambda client: client.eval(_REMOVE_IF_SCRIPT, 1, name, field, expected)
        )
        return bool(ok and removed)

    def _polled(self, ok: bool, found: Any, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        if not ok:
            return _FALLBACK, None
        return found[0], found[1] if lock_name is not None else None

    def _poll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        # One round trip for the value and the lock: MGET works on Cluster too (one hash slot).
        if self._route is not None:
            ok, replies = self._run("wait", ("MGET", name, lock_name or name))
            return self._polled(ok, replies[0] if ok else None, lock_name)
        ok, found = self._call("wait", self._client.mget, [name, lock_name or name])
        return self._polled(ok, found, lock_name)

    async def _apoll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | Loaded | None, Any]:
        if self._url is None:
            return await asyncio.to_thread(self._poll_raw, name, lock_name)
        ok, found = await self._acall("wait", lambda client: client.mget([name, lock_name or name]))
        return self._polled(ok, found, lock_name)

    def flush(self, timeout: float = 1.0) -> bool:
        return self._writer.flush(timeout)

    def close(self) -> None:
        self.flush(0.5)
        if self._route is not None:
            self._route.close()
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
