"""How the Redis store reaches its data: one server, a Redis Cluster, or a primary that Sentinel names.

Why one module: the store makes its clients itself from a URL (short timeouts, no retries, an asyncio client
per event loop), and each topology needs its own kind of client from redis-py. What the store does with them
(the commands, the back-off, the warnings) does not depend on the topology and lives in
:mod:`~.redis_store`.

* ``redis://`` / ``rediss://`` name one node. Whether it is a Cluster node is asked once (``INFO cluster``,
  see :func:`is_cluster_node`) before the first command, so a user names a cluster as any Redis.
* ``redis+sentinel://`` / ``rediss+sentinel://`` name Sentinels and a service (see
  :func:`otel_context.store_spec.parse_sentinel_url`); the primary is asked of them on every new connection,
  so after a failover the next connection reaches the new primary.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from otel_context.store_spec import SentinelTarget, parse_sentinel_url


def _timeouts(timeout: float) -> dict[str, Any]:
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout}


def plain_client(url: str, timeout: float) -> Any:
    """A ``redis.Redis`` on the one server ``url`` names."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(url, **_timeouts(timeout), retry=Retry(NoBackoff(), 0))


def async_plain_client(url: str, timeout: float) -> Any:
    import redis.asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return redis.asyncio.Redis.from_url(url, **_timeouts(timeout), retry=Retry(NoBackoff(), 0))


def _cluster_url(url: str) -> str:
    """``url`` without its db: a Redis Cluster has only db 0 (redis-py's cluster client refuses another)."""
    return urlunsplit(urlsplit(url)._replace(path=""))


def cluster_client(url: str, timeout: float) -> Any:
    """redis-py's ``RedisCluster`` seeded with the node ``url`` names (it reads the slot map at once:
    raises what a failed connection raises). Not every slot need be served (a failover under way)."""
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    return RedisCluster.from_url(
        _cluster_url(url), **_timeouts(timeout), retry=Retry(NoBackoff(), 0), require_full_coverage=False
    )


def async_cluster_client(url: str, timeout: float) -> Any:
    """redis-py's asyncio ``RedisCluster`` (it reads the slot map on its first command)."""
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return RedisCluster.from_url(
        _cluster_url(url), **_timeouts(timeout), retry=Retry(NoBackoff(), 0), require_full_coverage=False
    )


def _sentinel_kwargs(target: SentinelTarget, timeout: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what the Sentinels are reached with, what the primary is reached with)."""
    sentinels: dict[str, Any] = {**_timeouts(timeout), **target.sentinel_auth}
    primary: dict[str, Any] = {**_timeouts(timeout), "db": target.db, **target.auth}
    if target.tls:
        sentinels["ssl"] = primary["ssl"] = True
    primary.update(target.options)
    return sentinels, primary


def sentinel_client(url: str, timeout: float, *, asynchronous: bool = False) -> Any:
    """A ``redis.Redis`` (``redis.asyncio.Redis`` with ``asynchronous``) on the primary of the service the
    Sentinels of ``url`` name (no connection yet)."""
    from redis.backoff import NoBackoff

    retry: Any
    sentinel_class: Any
    if asynchronous:
        from redis.asyncio.retry import Retry as AsyncRetry
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        retry, sentinel_class = AsyncRetry(NoBackoff(), 0), AsyncSentinel
    else:
        from redis.retry import Retry
        from redis.sentinel import Sentinel

        retry, sentinel_class = Retry(NoBackoff(), 0), Sentinel
    target = parse_sentinel_url(url)
    sentinels, primary = _sentinel_kwargs(target, timeout)
    manager = sentinel_class(target.sentinels, sentinel_kwargs=sentinels, **_timeouts(timeout))
    return manager.master_for(target.service, retry=retry, **primary)


def is_sentinel_url(url: str) -> bool:
    return urlsplit(url).scheme.endswith("+sentinel")


def is_cluster_node(client: Any) -> bool:
    """Whether the server ``client`` (a ``redis.Redis``) reaches is a Redis Cluster node (raises what
    redis-py raises when it cannot tell: not reachable, auth refused, ...)."""
    from redis.exceptions import ResponseError

    try:
        info = client.info("cluster")
    except ResponseError as exc:
        # A URL with a db other than 0 makes redis-py SELECT it on connect, which a Cluster node refuses.
        if "cluster mode" in str(exc).lower():
            return True
        if str(exc).upper().startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
            raise
        return False  # a Redis-protocol server without INFO sections (a proxy): one server to us
    return bool(info.get("cluster_enabled"))
