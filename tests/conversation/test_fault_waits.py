"""Every wait of a call for the shared store, or for a summary another worker makes, is bounded by
``state_store_max_wait_seconds`` whatever the store holds: a real redis-server is killed, restarted empty,
stalled (``DEBUG SLEEP``), flushed, filled (``maxmemory`` with ``allkeys-lru`` and with ``noeviction``), or
holds a lock of a worker killed mid-summary, another writer's lock with a 10-minute expiry, garbage or
values of a future schema.

Each call goes over the blocking limit of a conversation, so it is the call that would wait for a lock
holder's summary (one that still fits goes out unchanged). The store given is the Redis store with every
operation timed (a public ``StateStore``: what a call spends on the store, waits included); each test
prints its figures (the time in the store and the added wall time per call, p50 / p99 / max, against the
same calls on a healthy store) and asserts the largest against the bound.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import otel_context
from otel_context import Settings
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures
from otel_context.testing.redis_server import RedisServer
from tests.compaction.conftest import _fresh_engine

from .conftest import require_redis_binary
from .fault_support import HOLDER, MODEL, SUMMARIZER, WINDOW, TimedStore, over_blocking_limit, plant_garbage

__all__ = ["_fresh_engine"]

#: The documented default: every test runs with it.
BOUND = Settings().state_store_max_wait_seconds
#: The waiter's summarizer budget: without the bound a waiter waited up to its lease (2 x 2 s + 5 s = 9 s).
SUMMARIZER_TIMEOUT = 2.0
#: Conversations per test, each one call over the blocking limit (and one more call after it).
CONVERSATIONS = 3


HISTORY = over_blocking_limit()


class Run:
    """One test: a real anthropic client, instrumented with the timed store on its own redis-server."""

    def __init__(self, sim: SimulatedProvider, server: RedisServer, background: bool, bound: float = BOUND) -> None:
        self.sim, self.server, self.bound = sim, server, bound
        sim.summarizer = SUMMARIZER
        store = TimedStore.from_url(server.url)
        assert isinstance(store, TimedStore)
        self.store = store
        self.client = redis.Redis.from_url(server.url)
        settings = {} if bound == BOUND else {"state_store_max_wait_seconds": bound}  # the default, unless given
        otel_context.instrument(
            auto_compact_window=WINDOW,
            background_compaction=background,
            summarizer_timeout_seconds=SUMMARIZER_TIMEOUT,
            state_store=self.store,
            **settings,
        )
        self.anthropic = sim.anthropic()

    def call(self, conversation: str, edited: bool = False) -> tuple[float, float]:
        """One call of ``conversation`` over the blocking limit (``edited``: its first message edited, so that
        no summary made before applies and it crosses again): (seconds in the store, wall seconds)."""
        messages = list(HISTORY)
        if edited:
            messages[0] = {"role": "user", "content": "Edited. " + str(messages[0]["content"])}
        self.store.spent()
        began = time.perf_counter()
        with otel_context.conversation(conversation):
            response = self.anthropic.messages.create(model=MODEL, max_tokens=256, messages=messages)
        wall = time.perf_counter() - began
        assert response.content
        return self.store.spent(), wall

    def lock(self, conversation: str, name: str, value: bytes, seconds: float = 600.0) -> None:
        """A lock of ``conversation`` another worker holds (as ``value``) for ``seconds``."""
        self.client.set(self.store.key(conversation, "lock:" + name), value, px=int(seconds * 1000))

    def close(self) -> None:
        otel_context.uninstrument()
        self.store.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _figures(fault: str, bound: float, store: list[float], added: list[float]) -> str:
    def ms(values: list[float]) -> str:
        return "/".join(f"{1000 * f(values):.0f}" for f in (statistics.median, lambda v: _percentile(v, 0.99), max))

    return f"{fault}: bound {1000 * bound:.0f} ms; per call (p50/p99/max ms): store {ms(store)}, added {ms(added)}"


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    with RedisServer(require_redis_binary()) as server:
        yield server


@pytest.fixture
def run(
    simulated_provider: SimulatedProvider, own_server: RedisServer, request: pytest.FixtureRequest
) -> Iterator[Run]:
    background, bound = getattr(request, "param", (False, BOUND))
    started = Run(simulated_provider, own_server, background, bound)
    yield started
    started.close()


def _measure(
    run: Run,
    fault: str,
    inject: Callable[[Run, list[str]], None],
    between: Callable[[Run, int], None] | None = None,
    record: Callable[[str, object], None] | None = None,
) -> list[float]:
    """Calls on a healthy store (the reference), then the same calls after ``inject`` (``between`` runs
    before each): asserts that the time in the store per call stays within the bound; returns it."""
    healthy = [run.call(f"healthy-{n}") for n in range(CONVERSATIONS)]
    reference = statistics.median(wall for _, wall in healthy)
    conversations = [f"{fault}-{n}" for n in range(CONVERSATIONS)]
    inject(run, conversations)
    measured: list[tuple[float, float]] = []
    for n, conversation in enumerate(conversations):
        if between is not None:
            between(run, n)
        measured.append(run.call(conversation))
        measured.append(run.call(conversation, edited=True))  # it crosses the threshold again
    store = [s for s, _ in measured]
    added = [max(0.0, wall - reference) for _, wall in measured]
    line = _figures(fault, run.bound, store, added)
    print("\n" + line)  # shown with -s / -rP
    if record is not None:
        record("fault_waits", line)
    assert max(store) <= run.bound, line
    return store


def _no_inject(run: Run, conversations: list[str]) -> None:
    del run, conversations


def _live_holder(run: Run, conversations: list[str]) -> None:
    """Each conversation's summary lock held by a worker of ours (a token of our shape) for 10 minutes."""
    for n, conversation in enumerate(conversations):
        run.lock(conversation, "summary", f"{n:016x}".encode())


def test_a_lock_of_another_writer_with_a_10_minute_expiry(
    run: Run, record_property: Callable[[str, object], None]
) -> None:
    def inject(run: Run, conversations: list[str]) -> None:
        for conversation in conversations:
            run.lock(conversation, "summary", b"lock-of-another-app")

    _measure(run, "foreign lock (10 min)", inject, record=record_property)
    # Each call summarized itself, as without a store.
    assert Figures.of(run.sim.exchanges).summarizer_calls == 3 * CONVERSATIONS


@pytest.mark.parametrize("run", [(False, BOUND), (False, 0.5)], indirect=True, ids=["default", "0.5s"])
def test_a_lock_whose_holder_is_slow_or_gone_is_waited_on_once(
    run: Run, record_property: Callable[[str, object], None]
) -> None:
    store = _measure(run, f"held lock (10 min), bound {run.bound}s", _live_holder, record=record_property)
    # The first call of each conversation waited (at most the bound); the second finds the same holder
    # and does not wait for it again.
    assert all(first > 0.5 * run.bound for first in store[0::2]), store
    assert all(second < 0.5 * run.bound for second in store[1::2]), store


@pytest.mark.parametrize("run", [(True, BOUND)], indirect=True, ids=["background"])
def test_a_prepare_lock_whose_holder_is_gone(run: Run, record_property: Callable[[str, object], None]) -> None:
    def inject(run: Run, conversations: list[str]) -> None:
        for n, conversation in enumerate(conversations):
            run.lock(conversation, "prepare", f"{n:016x}".encode())

    _measure(run, "prepare lock held (background)", inject, record=record_property)


def test_debug_sleep(run: Run, record_property: Callable[[str, object], None]) -> None:
    sleepers: list[threading.Thread] = []

    def between(run: Run, n: int) -> None:
        if n == 0:
            sleepers.append(run.server.pause(2.0))

    try:
        _measure(run, "DEBUG SLEEP 2 s", _live_holder, between, record=record_property)
    finally:
        for sleeper in sleepers:
            sleeper.join()


def test_flushall(run: Run, record_property: Callable[[str, object], None]) -> None:
    def between(run: Run, n: int) -> None:
        run.client.flushall()

    _measure(run, "FLUSHALL", _live_holder, between, record=record_property)


def test_redis_killed_then_restarted_empty(run: Run, record_property: Callable[[str, object], None]) -> None:
    def between(run: Run, n: int) -> None:
        if n == 1:
            run.server.stop()
        elif n == 2:
            run.server.start()
            run.client = redis.Redis.from_url(run.server.url)

    _measure(run, "redis killed, restarted empty", _live_holder, between, record=record_property)


@pytest.mark.parametrize("policy", ["allkeys-lru", "noeviction"])
def test_maxmemory(run: Run, policy: str, record_property: Callable[[str, object], None]) -> None:
    def inject(run: Run, conversations: list[str]) -> None:
        _live_holder(run, conversations)
        used = int(run.client.info("memory")["used_memory"])
        run.client.config_set("maxmemory-policy", policy)
        run.client.config_set("maxmemory", str(used + 300_000))
        for n in range(40):  # past the limit: evicting (lru), or refusing writes (noeviction)
            try:
                run.client.set(f"filler:{n}", b"x" * 20_000)
            except redis.exceptions.OutOfMemoryError:
                break

    _measure(run, f"maxmemory {policy}", inject, record=record_property)


def test_garbage_and_future_schema_values(run: Run, record_property: Callable[[str, object], None]) -> None:
    _measure(run, "garbage / future-schema values", plant_garbage, record=record_property)


def test_a_worker_killed_mid_summary(run: Run, tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    """Another worker takes the summary locks of the conversations and is killed (SIGKILL: no exit handler
    gives them back) while its summaries are under way; its leases (65 s) outlive it."""

    def inject(run: Run, conversations: list[str]) -> None:
        script, history = tmp_path / "holder.py", tmp_path / "history.json"
        script.write_text(HOLDER)
        history.write_text(json.dumps(HISTORY))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_TRACES_EXPORTER"] = env["OTEL_METRICS_EXPORTER"] = env["OTEL_LOGS_EXPORTER"] = "none"
        run.sim.summary_latency = 5.0  # its summaries are under way when it is killed
        argv = [sys.executable, str(script), run.sim.base_url, run.server.url, str(WINDOW), MODEL, str(history)]
        holder = subprocess.Popen([*argv, *conversations], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            names = [run.store.key(c, "lock:summary") for c in conversations]
            deadline = time.monotonic() + 60  # a generous bound against a hang
            while not all(run.client.exists(name) for name in names):
                assert holder.poll() is None and time.monotonic() < deadline, (
                    holder.stderr.read() if holder.stderr else ""
                )
                time.sleep(0.02)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
        run.sim.summary_latency = 0.0
        assert all(run.client.pttl(name) > 30_000 for name in names)  # the dead worker's leases live on

    _measure(run, "worker killed mid-summary", inject, record=record_property)
