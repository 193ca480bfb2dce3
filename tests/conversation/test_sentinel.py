"""The shared store on a primary behind real Sentinels (a primary, a replica, three Sentinels on loopback),
named ``redis+sentinel://host:port,host:port,host:port/service``: 4 workers serve one conversation as one
process does, and a failover (by hand, and a primary shut down) mid-conversation fails no turn and costs
each turn at most ``state_store_max_wait_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from otel_context.conversation.state_store import StateStore
from otel_context.testing.redis_server import RedisSentinelServers
from tests.compaction.conftest import _fresh_engine

from .fault_run import BOUND, back_by_itself, run_with_fault
from .test_fleet import _conversation
from .topologies import sentinel

__all__ = ["_fresh_engine", "sentinel"]


def _flush(sentinel: RedisSentinelServers) -> None:
    sentinel.current_primary().call("FLUSHALL")


def test_a_sentinel_url_reaches_the_primary(
    sentinel: RedisSentinelServers, make_store: Callable[..., StateStore], caplog: pytest.LogCaptureFixture
) -> None:
    _flush(sentinel)
    store = make_store(sentinel.url)
    with caplog.at_level(logging.WARNING, "otel_context"):
        for n in range(20):
            assert store.put(f"conversation-{n}", {"n": n})
        assert asyncio.run(store.aget("conversation-3")).value == {"n": 3}
        lease = store.acquire("conversation-1")
        assert lease is not None and lease.exclusive
        store.release(lease)
    assert len(sentinel.current_primary().call("KEYS", "otel_context:*")) == 20
    assert not caplog.records


def test_four_workers_behind_sentinel_serve_one_conversation_as_one_process_does(
    sentinel: RedisSentinelServers,
) -> None:
    _flush(sentinel)
    one = _conversation("anthropic", 1, sentinel.url)
    _flush(sentinel)
    four = _conversation("anthropic", 4, sentinel.url)  # every call's state came from the store
    assert sentinel.current_primary().call("KEYS", "otel_context:*")
    assert one.summarizer_calls >= 2 and four.summarizer_calls == one.summarizer_calls
    assert four.summary_heads == one.summary_heads and four.distinct_heads == one.distinct_heads
    assert abs(four.cache_read_fraction - one.cache_read_fraction) <= 0.02


def test_a_failover_mid_conversation(simulated_provider: object, sentinel: RedisSentinelServers) -> None:
    _flush(sentinel)
    run, store = run_with_fault(simulated_provider, sentinel.url, "sentinel-failover", sentinel.fail_over)  # type: ignore[arg-type]
    print(
        f"Sentinel failover in {run.fault_seconds:.2f} s, worst turn in the store {max(run.store_seconds) * 1000:.1f} ms"
    )
    assert max(run.store_seconds) <= BOUND
    assert back_by_itself(store, "sentinel-failover") == "store"  # on the new primary
    store.close()


def test_a_primary_shut_down_mid_conversation(simulated_provider: object, sentinel: RedisSentinelServers) -> None:
    _flush(sentinel)
    old = sentinel.current_primary()
    run, store = run_with_fault(simulated_provider, sentinel.url, "sentinel-killed", sentinel.kill_primary)  # type: ignore[arg-type]
    print(
        f"primary killed: failover {run.fault_seconds:.2f} s, worst turn in the store {max(run.store_seconds) * 1000:.1f} ms"
    )
    assert run.failures > 0  # the turns did meet the fault
    assert max(run.store_seconds) <= BOUND
    assert back_by_itself(store, "sentinel-killed") == "store"
    store.close()
    old.start()  # it comes back as a replica of the new primary
