"""Choosing the store: OTEL_CONTEXT_STATE_STORE or the state_store setting, checked at instrument time."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis

from otel_context.conversation.state_store import MemoryStateStore, RedisStore, StateStore, open_store
from otel_context.settings import SettingsError, resolve


def test_default_is_this_process() -> None:
    assert resolve(env={}).state_store is None
    assert resolve(env={"OTEL_CONTEXT_STATE_STORE": "memory"}).state_store is None
    assert isinstance(open_store(resolve(env={}).state_store), MemoryStateStore)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://app:pw@cache.internal:6380/2", "unix:///run/redis.sock?db=1"]
)
def test_urls_are_accepted(url: str) -> None:
    assert resolve(env={"OTEL_CONTEXT_STATE_STORE": url}).state_store == url
    assert resolve({"state_store": url}, env={}).state_store == url


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("mysql://db/1", "scheme 'mysql' is not supported"),
        ("localhost:6379", "neither 'memory' nor a URL"),
        ("redis://h/0?ttl_seconds=soon", "ttl_seconds='soon' is not a float"),
    ],
)
def test_bad_values_name_the_variable(value: str, says: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        assert resolve(env={"OTEL_CONTEXT_STATE_STORE": value}).state_store is None  # this process
    (warning,) = [r.getMessage() for r in caplog.records if "OTEL_CONTEXT_STATE_STORE" in r.getMessage()]
    assert says in warning
    with pytest.raises(SettingsError, match="state_store") as info:
        resolve({"state_store": value}, env={})
    assert says in str(info.value)


def test_password_is_not_repeated_in_errors(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(SettingsError) as info:
        resolve({"state_store": "app:hunter2@cache:6379"}, env={})
    assert "hunter2" not in str(info.value)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        resolve(env={"OTEL_CONTEXT_STATE_STORE": "app:hunter2@cache:6379"})
    assert caplog.records and not any("hunter2" in r.getMessage() for r in caplog.records)


def test_a_client_or_a_store_is_kept_as_the_very_object(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.05)
    settings = resolve({"state_store": client}, env={})
    assert settings.state_store is client
    assert settings.replace(compaction="observe").state_store is client  # not deep-copied
    assert isinstance(make_store(settings.state_store), RedisStore)
    store = MemoryStateStore()
    assert resolve({"state_store": store}, env={}).state_store is store
    with pytest.raises(SettingsError, match="state_store"):
        resolve({"state_store": 42}, env={})


def test_the_bound_on_a_calls_waits(caplog: pytest.LogCaptureFixture) -> None:
    assert resolve(env={}).state_store_max_wait_seconds == 0.25
    assert resolve(env={"OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS": "0.1"}).state_store_max_wait_seconds == 0.1
    assert resolve({"state_store_max_wait_seconds": 2}, env={}).state_store_max_wait_seconds == 2.0
    for bad in ("0", "-1", "soon", "inf"):
        # From the environment: a warning naming the variable, and the default (the app still starts).
        with caplog.at_level(logging.WARNING, logger="otel_context"):
            caplog.clear()
            assert resolve(env={"OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS": bad}).state_store_max_wait_seconds == 0.25
        assert any("OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS" in r.getMessage() for r in caplog.records), bad
        # From code: an error.
        with pytest.raises(SettingsError, match="state_store_max_wait_seconds"):
            resolve({"state_store_max_wait_seconds": bad}, env={})
