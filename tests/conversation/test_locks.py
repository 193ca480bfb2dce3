"""One summary per threshold crossing across the fleet: the lock, raced by threads and by processes on a
real redis-server. In every round exactly one contender wins."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

from otel_context.conversation.state_store import StateStore, open_store

ROUNDS = 40


def _race(store: StateStore, barrier: Any, rounds: int) -> list[bool]:
    """For each round: wait for the other contenders, then try the round's lock once."""
    won = []
    for round_ in range(rounds):
        barrier.wait()
        lease = store.acquire(f"conversation-{round_}", lease_seconds=30)
        won.append(lease is not None and lease.exclusive)
    return won


def test_threads_race_for_one_lock(any_store: StateStore) -> None:
    contenders = 4
    barrier = threading.Barrier(contenders)
    results: list[list[bool]] = []

    def contender() -> None:
        results.append(_race(any_store, barrier, ROUNDS))

    threads = [threading.Thread(target=contender) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == contenders
    assert [sum(r[i] for r in results) for i in range(ROUNDS)] == [1] * ROUNDS


def _process_contender(url: str, barrier: Any, rounds: int, out: Any) -> None:
    store = open_store(url)
    try:
        out.put(_race(store, barrier, rounds))
    finally:
        store.close()


def test_processes_race_for_one_lock(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    processes = [ctx.Process(target=_process_contender, args=(redis_url, barrier, ROUNDS, out)) for _ in range(2)]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert [a + b for a, b in zip(*results, strict=True)] == [1] * ROUNDS
