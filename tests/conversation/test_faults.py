"""The store is never on the app's failure path: a real redis-server shut down, restarted, stalled, filled,
or holding garbage. No exception, one warning, the metric counts, and the store is used again once back."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import pytest
import redis
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_context.conversation.state_store import RedisStore, StateStore
from otel_context.testing.redis_server import RedisServer

from .conftest import errors

#: A call may cost at most one timeout (50 ms) when the store fails: generous, to catch a hang or retries.
CALL_BOUND = 0.3


def _every_operation(store: StateStore) -> None:
    """One of each operation, none of which may raise or take long."""
    for operation in (
        lambda: store.get("c"),
        lambda: store.put("c", {"n": 1}),
        lambda: store.acquire("c"),
        lambda: store.wait_for("c", lambda v: False, timeout=0.1),
        lambda: store.put_later("c", {"n": 2}),
    ):
        started = time.monotonic()
        operation()
        assert time.monotonic() - started < CALL_BOUND


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_shut_down_then_restarted(
    own_redis: RedisServer,
    make_store: Callable[..., StateStore],
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_store(own_redis.url, retry_after=0.2)
    assert isinstance(store, RedisStore)
    assert store.put("c", {"n": 0})
    caplog.set_level(logging.INFO, logger="otel_context")
    own_redis.stop()
    for _ in range(3):  # a conversation goes on while the store is down
        assert store.get("c") == store.get("c")  # fallback, twice, no exception
        assert store.get("c").source == "fallback"
        assert not store.put("c", {"n": 1})
        lease = store.acquire("c")
        assert lease is not None and not lease.exclusive  # go on alone
        store.release(lease)
        _every_operation(store)
        time.sleep(0.25)  # past the back-off: the store is tried (and fails) again
    counted = errors(metric_reader)
    assert sum(counted.values()) >= 3
    assert set(counted) <= {(op, "unavailable") for op in ("get", "put", "lock", "wait")}
    assert len(_warnings(caplog)) == 1, _warnings(caplog)

    own_redis.start()
    time.sleep(0.25)
    assert store.put("c", {"n": 5})  # back to the store (an empty one: no persistence)
    assert store.get("c").value == {"n": 5}
    assert store.get("c").source == "store"
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert len(_warnings(caplog)) == 1


def test_paused_server_costs_a_call_one_timeout(
    own_redis: RedisServer,
    make_store: Callable[..., StateStore],
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_store(own_redis.url, retry_after=0.3)
    assert store.put("c", {"n": 1})
    sleeper = own_redis.pause(1.0)
    started = time.monotonic()
    assert store.get("c").source == "fallback"
    first = time.monotonic() - started
    assert first < CALL_BOUND  # one timeout, no retries
    started = time.monotonic()
    for _ in range(100):  # during the back-off the store is not even tried
        assert store.get("c").source == "fallback"
    assert time.monotonic() - started < 0.05
    sleeper.join()
    time.sleep(0.3)
    assert store.get("c").value == {"n": 1}
    assert errors(metric_reader) == {("get", "timeout"): 1}
    assert len(_warnings(caplog)) == 1


def test_garbage_is_ignored_counted_and_overwritten(
    redis_url: str,
    make_store: Callable[..., StateStore],
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_store(redis_url)
    store.put("c", {"n": 1})
    client = redis.Redis.from_url(redis_url)
    key = store.key("c")
    for garbage in (b"\x00\xff not json", b'{"v": 1}', b'{"v": 1, "d": [1, 2]}', b'"a string"', b"secret text"):
        client.set(key, garbage)
        loaded = store.get("c")
        assert loaded.value is None and loaded.source == "fallback"
        assert store.wait_for("c", lambda v: True, timeout=0.1).source == "fallback"
    assert store.put("c", {"n": 2})
    assert store.get("c").value == {"n": 2}
    assert errors(metric_reader) == {("get", "garbage"): 10}
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "secret" not in warnings[0]


def test_a_key_of_another_type_is_garbage_of_that_key_only(
    redis_url: str, make_store: Callable[..., StateStore], metric_reader: InMemoryMetricReader
) -> None:
    store = make_store(redis_url)
    store.put("d", {"n": 0})
    redis.Redis.from_url(redis_url).hset(store.key("c"), "f", "v")
    assert store.get("c").source == "fallback"
    assert store.get("d").value == {"n": 0}  # no back-off: the store is fine, one key is not ours
    assert store.put("c", {"n": 1})  # SET replaces the hash
    assert store.get("c").value == {"n": 1}
    assert errors(metric_reader) == {("get", "garbage"): 1}


def test_a_host_that_does_not_resolve_is_said_as_such(
    make_store: Callable[..., StateStore], metric_reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo in the URL's host reads "its host name does not resolve", not "connection refused, reset or no
    route" (issue 51 item 9); it counts as unavailable like any unreachable server."""
    store = make_store("redis://no-such-host.invalid:6379/0")
    assert store.get("c").source == "fallback"
    assert not store.put("c", {"n": 1})
    (warning,) = _warnings(caplog)
    assert (
        "state store redis://no-such-host.invalid:6379/0 cannot be reached: its host name does not resolve" in warning
    )
    assert "refused" not in warning
    assert set(errors(metric_reader)) <= {("get", "unavailable"), ("put", "unavailable")}


def test_full_server(
    own_redis: RedisServer,
    make_store: Callable[..., StateStore],
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make_store(own_redis.url, retry_after=0.05)
    assert store.put("c", {"n": 1})
    client = redis.Redis.from_url(own_redis.url)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(used + 200_000))
    with contextlib.suppress(redis.exceptions.OutOfMemoryError):
        client.set("filler", b"x" * 400_000)  # refused or not, the server is full after it
    assert not store.put("d", {"text": "y" * 1_000})
    assert errors(metric_reader).get(("put", "full")) == 1
    assert store.get("c").value is None or store.get("c").source == "fallback"
    time.sleep(0.06)
    assert store.get("c").value == {"n": 1}  # reads still work on a full server
    client.config_set("maxmemory", "0")
    assert store.put("d", {"n": 2})
    (warning,) = _warnings(caplog)
    # Whatever the policy (noeviction here; under an evicting one the write can still find no room), the
    # warning says what to check rather than naming one it did not read.
    assert "is out of memory" in warning and "CONFIG GET maxmemory-policy" in warning
