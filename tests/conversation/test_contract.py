"""What every store promises, run on the in-process store and on a real Redis."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_context.conversation.state_store import SCHEMA_VERSION, StateStore

from .conftest import errors


def test_round_trip_and_absent(any_store: StateStore) -> None:
    value = {"memo": [{"prefix_len": 3, "prefix_hash": "ab" * 32, "replacement": [{"role": "user", "content": "é"}]}]}
    assert any_store.put("conv-1", value)
    loaded = any_store.get("conv-1")
    assert loaded.value == value
    assert loaded.source == any_store.source
    assert any_store.get("conv-1", part="breaker").value is None
    absent = any_store.get("conv-2")
    assert absent.value is None and absent.source == any_store.source


def test_never_shares_objects_with_the_caller(any_store: StateStore) -> None:
    value = {"items": [1, 2]}
    any_store.put("c", value)
    value["items"].append(3)  # a later change of the caller's dict is not stored
    got = any_store.get("c").value
    assert got == {"items": [1, 2]}
    got["items"].append(4)  # nor does a change of what get returned
    assert any_store.get("c").value == {"items": [1, 2]}


def test_unknown_schema_version_is_ignored(any_store: StateStore) -> None:
    any_store.schema_version = SCHEMA_VERSION + 1  # a newer worker writes...
    assert any_store.put("c", {"new": "shape"})
    assert any_store.get("c").value == {"new": "shape"}
    any_store.schema_version = SCHEMA_VERSION  # ...and this one does not know its version
    loaded = any_store.get("c")
    assert loaded.value is None
    assert loaded.source == any_store.source  # ignored, not an error


def test_oversized_and_unencodable_are_refused_once(
    any_store: StateStore, metric_reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    any_store.max_value_bytes = 1_000
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        assert not any_store.put("c", {"text": "x" * 2_000})
        assert not any_store.put("c", {"text": "secret words " * 200})
        any_store.put_later("c", {"text": "y" * 2_000})
        assert not any_store.put("c", {"bad": object()})
    assert any_store.flush()
    assert any_store.get("c").value is None
    assert errors(metric_reader) == {("put", "too_large"): 3, ("put", "unencodable"): 1}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert not any("secret" in m or "xxx" in m for m in messages)


def test_lock_is_exclusive_until_released(any_store: StateStore) -> None:
    lease = any_store.acquire("c")
    assert lease is not None and lease.exclusive
    assert any_store.acquire("c") is None
    other_conversation = any_store.acquire("d")
    assert other_conversation is not None
    any_store.release(lease)
    again = any_store.acquire("c")
    assert again is not None and again.token != lease.token


def test_lease_expires(any_store: StateStore) -> None:
    lease = any_store.acquire("c", lease_seconds=0.1)
    assert lease is not None
    assert any_store.acquire("c", lease_seconds=0.1) is None
    time.sleep(0.15)
    second = any_store.acquire("c", lease_seconds=5)
    assert second is not None
    any_store.release(lease)  # the expired holder's release must not free the second holder's lock
    assert any_store.acquire("c") is None


def test_wait_for_the_holders_result(any_store: StateStore) -> None:
    lease = any_store.acquire("c")
    assert lease is not None

    def holder() -> None:
        time.sleep(0.1)
        any_store.put("c", {"summary_for": "h1"})
        any_store.release(lease)

    thread = threading.Thread(target=holder)
    started = time.monotonic()
    thread.start()
    loaded = any_store.wait_for("c", lambda v: v.get("summary_for") == "h1", timeout=5)
    thread.join()
    assert loaded.value == {"summary_for": "h1"}
    assert time.monotonic() - started < 2


def test_wait_for_is_bounded_and_stops_when_the_lock_is_free(any_store: StateStore) -> None:
    any_store.put("c", {"summary_for": "old"})
    lease = any_store.acquire("c")
    assert lease is not None
    started = time.monotonic()
    loaded = any_store.wait_for("c", lambda v: v.get("summary_for") == "new", timeout=0.2)
    assert loaded.value is None
    assert 0.19 <= time.monotonic() - started < 1.5
    any_store.release(lease)  # the holder gave up: a waiter does not wait out its timeout
    started = time.monotonic()
    assert any_store.wait_for("c", lambda v: v.get("summary_for") == "new", timeout=5).value is None
    assert time.monotonic() - started < 1


async def test_async_surface(any_store: StateStore) -> None:
    assert await any_store.aput("c", {"n": 1})
    assert (await any_store.aget("c")).value == {"n": 1}
    lease = await any_store.aacquire("c")
    assert lease is not None and await any_store.aacquire("c") is None

    async def holder() -> None:
        await asyncio.sleep(0.05)
        await any_store.aput("c", {"n": 2})
        await any_store.arelease(lease)

    task = asyncio.create_task(holder())
    loaded = await any_store.await_for("c", lambda v: v["n"] == 2, timeout=5)
    await task
    assert loaded.value == {"n": 2}
    assert await any_store.aacquire("c") is not None


def test_put_later_is_written(any_store: StateStore) -> None:
    for n in range(50):
        any_store.put_later("c", {"n": n})
    assert any_store.flush(5)
    assert any_store.get("c").value == {"n": 49}


def test_remove_if_removes_only_that_value_and_one_caller_wins(any_store: StateStore) -> None:
    any_store.put("c", {"id": "one", "x": 1}, "prepared")
    assert not any_store.remove_if("c", "prepared", "id", "two")  # another value: kept
    assert not any_store.remove_if("absent", "prepared", "id", "one")
    assert any_store.get("c", "prepared").value == {"id": "one", "x": 1}
    any_store.put("c", {"x": 1}, "prepared")  # no such field: kept
    assert not any_store.remove_if("c", "prepared", "id", "one")
    any_store.put("c", {"id": "one", "x": 2}, "prepared")
    barrier = threading.Barrier(8)
    won: list[bool] = []

    def remove() -> None:
        barrier.wait()
        won.append(any_store.remove_if("c", "prepared", "id", "one"))

    threads = [threading.Thread(target=remove) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(won) == [False] * 7 + [True]  # exactly one of the racing callers removed it
    assert any_store.get("c", "prepared").value is None


async def test_aremove_if(any_store: StateStore) -> None:
    await any_store.aput("c", {"id": "one"}, "prepared")
    assert not await any_store.aremove_if("c", "prepared", "id", "two")
    assert await any_store.aremove_if("c", "prepared", "id", "one")
    assert not await any_store.aremove_if("c", "prepared", "id", "one")
    assert (await any_store.aget("c", "prepared")).value is None
