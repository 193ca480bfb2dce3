"""The shared store on a real Redis Cluster (3 primaries, 3 replicas, on loopback), named as any Redis is:
``redis://<one node>``. The store finds out it is a cluster and spreads conversations over the primaries;
4 workers serve one conversation as one process does; a primary shut down, a slot migrated and a replica
promoted mid-conversation fail no turn, and cost each turn at most ``state_store_max_wait_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from otel_context.conversation.state_store import RedisStore, StateStore
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Fleet, run_agent
from otel_context.testing.redis_server import RedisClusterServers
from tests.compaction.conftest import _fresh_engine

from .fault_run import BOUND, back_by_itself, run_with_fault
from .test_fleet import MODELS, SLOW_MACHINE, WINDOW, _conversation
from .topologies import cluster

__all__ = ["_fresh_engine", "cluster"]


def _our_keys(cluster: RedisClusterServers) -> dict[int, int]:
    """Keys of ours per primary (by port)."""
    return {node.port: len(node.call("KEYS", "otel_context:*")) for node in cluster.primaries()}


def _flush(cluster: RedisClusterServers) -> None:
    for node in cluster.primaries():
        node.call("FLUSHALL")


def test_a_node_url_is_found_to_be_a_cluster(
    cluster: RedisClusterServers, make_store: Callable[..., StateStore], caplog: pytest.LogCaptureFixture
) -> None:
    _flush(cluster)
    store = make_store(cluster.url)
    with caplog.at_level(logging.WARNING, "otel_context"):
        assert store.get("first").source == "fallback"  # the cluster's client is being made, off this path
        assert isinstance(store, RedisStore) and store.ready(10.0)
        for n in range(60):
            assert store.put(f"conversation-{n}", {"n": n}, renew=["memo"])
        assert [store.get(f"conversation-{n}").value for n in range(60)] == [{"n": n} for n in range(60)]
        lease = store.acquire("conversation-1")
        assert lease is not None and lease.exclusive and store.acquire("conversation-1") is None
        store.release(lease)
        for n in range(60):
            store.put_later(f"later-{n}", {"n": n})  # the writer's batches span the primaries
        assert store.flush(2.0)
        assert all(store.get(f"later-{n}").value == {"n": n} for n in range(60))

        async def from_a_loop() -> list[Any]:
            assert await store.aput("async-1", {"a": 1}, renew=["memo"])
            taken = await store.aacquire("async-1")
            assert taken is not None
            await store.arelease(taken)
            return [(await store.aget(f"conversation-{n}")).value for n in range(10)]

        assert asyncio.run(from_a_loop()) == [{"n": n} for n in range(10)]
    assert getattr(store, "topology", None) == "cluster"
    assert all(keys > 0 for keys in _our_keys(cluster).values())  # on every primary
    assert not caplog.records  # a healthy cluster: no store warning


def test_a_healthy_cluster_sends_each_command_to_its_key_s_primary_at_once(
    cluster: RedisClusterServers, make_store: Callable[..., StateStore]
) -> None:
    """No command of ours comes back ``MOVED`` from a cluster whose slots stay put: the lock, its release
    (a script, whose key is not its second word), the reads and the writes each reach the primary of its key's
    slot first (a redirect costs a round trip and a new connection, on every call)."""
    _flush(cluster)

    def moved() -> int:
        total = 0
        for node in cluster.primaries():
            stat = node.info("errorstats").get("errorstat_MOVED", "count=0")
            total += int(stat.split("count=")[1].split(",")[0])
        return total

    store = make_store(cluster.url)
    assert isinstance(store, RedisStore) and store.ready(10.0)
    before = moved()
    for n in range(40):
        lease = store.acquire(f"routed-{n}")
        assert lease is not None and lease.exclusive
        assert store.put(f"routed-{n}", {"n": n}, renew=["memo"])
        assert store.get(f"routed-{n}").value == {"n": n}
        store.release(lease)
        assert store.acquire(f"routed-{n}") is not None  # released: free again
    assert moved() == before


def test_a_cluster_client_from_code_works(cluster: RedisClusterServers, make_store: Callable[..., StateStore]) -> None:
    client = RedisCluster.from_url(cluster.url, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    store = make_store(client)
    for n in range(20):
        assert store.put(f"given-{n}", {"n": n})
    assert [store.get(f"given-{n}").value for n in range(20)] == [{"n": n} for n in range(20)]
    assert asyncio.run(store.aget("given-3")).value == {"n": 3}
    client.close()


def test_a_plain_client_on_a_cluster_node_says_so(
    cluster: RedisClusterServers, make_store: Callable[..., StateStore], caplog: pytest.LogCaptureFixture
) -> None:
    node = cluster.primaries()[0]
    client = redis.Redis(port=node.port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    store = make_store(client, retry_after=0.0)
    with caplog.at_level(logging.WARNING, "otel_context"):
        answers = [store.get(f"plain-{n}").source for n in range(30)]  # most slots are another node's
    assert "fallback" in answers  # never raised: the call goes on with this process's state
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # once per cause, however often it happens
    assert warnings[0].startswith("otel_context: state store ")
    assert "is a Redis Cluster node and the client given is not a cluster client" in warnings[0]
    assert "redis.cluster.RedisCluster" in warnings[0]
    client.close()


def test_four_workers_on_a_cluster_serve_one_conversation_as_one_process_does(cluster: RedisClusterServers) -> None:
    _flush(cluster)
    one = _conversation("anthropic", 1, cluster.url)
    _flush(cluster)
    four = _conversation("anthropic", 4, cluster.url)  # every call's state came from the store
    assert sum(_our_keys(cluster).values()) > 0  # the state is in the cluster
    assert one.summarizer_calls >= 2
    assert four.summarizer_calls == one.summarizer_calls
    assert four.summary_heads == one.summary_heads and four.distinct_heads == one.distinct_heads
    assert abs(four.cache_read_fraction - one.cache_read_fraction) <= 0.02


def test_four_workers_go_on_when_a_primary_is_shut_down_mid_run(cluster: RedisClusterServers) -> None:
    _flush(cluster)
    killed: list[Any] = []

    def kill_one(turn: int) -> None:
        if turn == 6:
            killed.append(cluster.primaries()[0])
            cluster.kill(killed[0])

    with SimulatedProvider() as sim:
        sim.set_window(MODELS["anthropic"], WINDOW)
        with Fleet(
            4, sim.base_url, "anthropic", auto_compact_window=WINDOW, state_store=cluster.url + SLOW_MACHINE
        ) as f:
            run_agent(f, MODELS["anthropic"], 16, 250, before_turn=kill_one)  # raises on a failed call
        assert killed and f.sources[-4:] == ["store"] * 4  # back on the store by itself
    cluster.restart(killed[0])


def _conversation_slot(cluster: RedisClusterServers) -> int:
    """The slot of the one conversation whose keys the cluster holds (every key of it has that slot)."""
    slots = {
        int(node.call("CLUSTER", "KEYSLOT", key)) for node in cluster.primaries() for key in node.call("KEYS", "*")
    }
    assert len(slots) == 1, slots
    return slots.pop()


def test_a_primary_shut_down_mid_conversation(
    simulated_provider: SimulatedProvider, cluster: RedisClusterServers
) -> None:
    _flush(cluster)
    killed: list[Any] = []

    def kill() -> None:
        killed.append(cluster.primary_of_slot(_conversation_slot(cluster)))
        cluster.kill(killed[0])

    run, store = run_with_fault(simulated_provider, cluster.url, "killed-primary", kill)
    print(
        f"primary killed: failover {run.fault_seconds:.2f} s, worst turn in the store {max(run.store_seconds) * 1000:.1f} ms"
    )
    assert run.failures > 0  # the turns did meet the fault
    assert max(run.store_seconds) <= BOUND
    assert back_by_itself(store, "killed-primary") == "store"  # this store reads its own key too
    assert cluster.primary_of_slot(_conversation_slot(cluster)) is not killed[0]
    store.close()
    cluster.restart(killed[0])


def test_a_slot_migrated_mid_conversation(simulated_provider: SimulatedProvider, cluster: RedisClusterServers) -> None:
    _flush(cluster)
    moved: list[tuple[int, Any]] = []

    def migrate() -> None:
        slot = _conversation_slot(cluster)
        source = cluster.primary_of_slot(slot)
        target = next(node for node in cluster.primaries() if node is not source)
        moved.append((slot, target))
        cluster.migrate_slot(slot, target, pause_between_keys=0.3)  # turns meet ASK meanwhile

    run, store = run_with_fault(simulated_provider, cluster.url, "migrated-slot", migrate)
    print(f"slot migrated in {run.fault_seconds:.2f} s, worst turn in the store {max(run.store_seconds) * 1000:.1f} ms")
    assert max(run.store_seconds) <= BOUND
    assert run.failures == 0  # MOVED and ASK are followed, not failures
    slot, target = moved[0]
    assert cluster.primary_of_slot(slot) is target and _conversation_slot(cluster) == slot
    assert target.call("CLUSTER", "GETKEYSINSLOT", slot, 100)  # its state moved with it
    store.close()


def test_a_replica_promoted_mid_conversation(
    simulated_provider: SimulatedProvider, cluster: RedisClusterServers
) -> None:
    _flush(cluster)
    promoted: list[tuple[int, Any]] = []

    def promote() -> None:
        slot = _conversation_slot(cluster)
        replica = cluster.replicas_of(cluster.primary_of_slot(slot))[0]
        promoted.append((slot, replica))
        cluster.fail_over(replica)

    run, store = run_with_fault(simulated_provider, cluster.url, "promoted-replica", promote)
    print(
        f"replica promoted in {run.fault_seconds:.2f} s, worst turn in the store {max(run.store_seconds) * 1000:.1f} ms"
    )
    assert max(run.store_seconds) <= BOUND
    slot, replica = promoted[0]
    assert cluster.primary_of_slot(slot) is replica
    assert back_by_itself(store, "promoted-replica") == "store"
    store.close()
