"""Fixtures of the state-store tests: a real redis-server on loopback (never a fake), and the stores.

Without the ``redis-server`` binary the Redis tests skip with the install command, except in CI
(``OTEL_CONTEXT_REQUIRE_SERVERS=1``, exported by .ci/run), where they fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_context import semconv
from otel_context.conversation.state_store import MemoryStateStore, RedisStore, StateStore, open_store
from otel_context.testing.redis_server import RedisServer
from tests.servers import require_binary


def require_redis_binary() -> str:
    """The redis-server path; skip without it, or fail when the environment requires the servers."""
    return require_binary("redis-server", "apt-get install -y --no-install-recommends redis-server")


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    """One server for the tests that do not break it."""
    with RedisServer(require_redis_binary()) as server:
        yield server


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The shared server's URL, emptied first."""
    assert shared_redis.command("FLUSHALL") == "+OK"
    return shared_redis.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of this test alone, to stop, restart, pause or fill."""
    with RedisServer(require_redis_binary()) as server:
        yield server


@pytest.fixture
def make_store() -> Iterator[Callable[..., StateStore]]:
    """``make_store(spec, **options)``; every store made is closed after the test."""
    made: list[StateStore] = []

    def make(spec: Any = None, **options: Any) -> StateStore:
        store = open_store(spec, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def any_store(store_kind: str, request: pytest.FixtureRequest, make_store: Callable[..., StateStore]) -> StateStore:
    """Each contract test runs on both stores."""
    if store_kind == "memory":
        return make_store(None)
    return make_store(request.getfixturevalue("redis_url"))


def errors(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    """``otel_context.state_store.errors`` by (operation, error.type), summed over collections so far."""
    found: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != semconv.METRIC_STATE_STORE_ERRORS:
                    continue
                for point in metric.data.data_points:
                    attrs = point.attributes or {}
                    key = (str(attrs[semconv.STATE_STORE_OPERATION]), str(attrs[semconv.ERROR_TYPE]))
                    found[key] = found.get(key, 0) + int(point.value)  # type: ignore[union-attr]
    return found


__all__ = ["MemoryStateStore", "RedisStore", "errors", "require_redis_binary"]
