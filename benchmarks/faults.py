"""Added latency per call while the shared store misbehaves: p50 / p99 / max, per fault.

Why: a median hides what a fault costs. A call that finds another worker's summary lock (a foreign value, or
the lease of a worker that died mid-summary) used to wait for it up to its lease; this shows, per fault, what
a call adds now, against the bound ``state_store_max_wait_seconds``.

Each fault runs on a redis-server of its own (started here, no persistence); a real anthropic client,
instrumented with that store, calls a simulated provider. Every call is over the blocking limit of its
conversation (the call that would wait for a lock holder): per conversation, one call and one more after its
first message was edited (it crosses again, and finds the same lock). Added latency: the call's wall time
less the median of the same calls on a healthy store; "in store": the time the call spent in store
operations (waits included), measured by timing the store's public methods.

    .venv/bin/python benchmarks/faults.py                  # 20 conversations per fault (~1 min)
    .venv/bin/python benchmarks/faults.py --conversations 50
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

import otel_context
from otel_context import Settings
from otel_context.testing import SimulatedProvider
from otel_context.testing.redis_server import RedisServer
from tests.conversation.fault_support import (
    HOLDER,
    MODEL,
    SUMMARIZER,
    WINDOW,
    TimedStore,
    over_blocking_limit,
    plant_garbage,
)

HISTORY = over_blocking_limit()


class Bench:
    def __init__(self, sim: SimulatedProvider, server: RedisServer, background: bool) -> None:
        self.sim, self.server = sim, server
        sim.summarizer = SUMMARIZER
        store = TimedStore.from_url(server.url)
        assert isinstance(store, TimedStore)
        self.store = store
        self.client = redis.Redis.from_url(server.url)
        otel_context.instrument(
            auto_compact_window=WINDOW,
            background_compaction=background,
            summarizer_timeout_seconds=2.0,
            state_store=self.store,
        )
        self.anthropic = sim.anthropic()

    def call(self, conversation: str, edited: bool = False) -> tuple[float, float]:
        messages = list(HISTORY)
        if edited:
            messages[0] = {"role": "user", "content": "Edited. " + str(messages[0]["content"])}
        self.store.spent()
        began = time.perf_counter()
        with otel_context.conversation(conversation):
            self.anthropic.messages.create(model=MODEL, max_tokens=256, messages=messages)
        return self.store.spent(), time.perf_counter() - began

    def lock(self, conversation: str, name: str, value: bytes) -> None:
        self.client.set(self.store.key(conversation, "lock:" + name), value, px=600_000)

    def close(self) -> None:
        otel_context.uninstrument()
        self.store.close()


def live_holder(bench: Bench, conversations: list[str]) -> None:
    for n, conversation in enumerate(conversations):
        bench.lock(conversation, "summary", f"{n:016x}".encode())


def foreign_lock(bench: Bench, conversations: list[str]) -> None:
    for conversation in conversations:
        bench.lock(conversation, "summary", b"lock-of-another-app")


def prepare_lock(bench: Bench, conversations: list[str]) -> None:
    for n, conversation in enumerate(conversations):
        bench.lock(conversation, "prepare", f"{n:016x}".encode())


def garbage(bench: Bench, conversations: list[str]) -> None:
    plant_garbage(bench, conversations)


def maxmemory(policy: str) -> Callable[[Bench, list[str]], None]:
    def inject(bench: Bench, conversations: list[str]) -> None:
        live_holder(bench, conversations)
        used = int(bench.client.info("memory")["used_memory"])
        bench.client.config_set("maxmemory-policy", policy)
        bench.client.config_set("maxmemory", str(used + 300_000))
        for n in range(40):
            try:
                bench.client.set(f"filler:{n}", b"x" * 20_000)
            except redis.exceptions.OutOfMemoryError:
                break

    return inject


def killed_worker(bench: Bench, conversations: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script, history = Path(tmp) / "holder.py", Path(tmp) / "history.json"
        script.write_text(HOLDER)
        history.write_text(json.dumps(HISTORY))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_TRACES_EXPORTER"] = env["OTEL_METRICS_EXPORTER"] = env["OTEL_LOGS_EXPORTER"] = "none"
        bench.sim.summary_latency = 5.0
        argv = [sys.executable, str(script), bench.sim.base_url, bench.server.url, str(WINDOW), MODEL, str(history)]
        holder = subprocess.Popen([*argv, *conversations], env=env, stdout=subprocess.DEVNULL)
        try:
            names = [bench.store.key(c, "lock:summary") for c in conversations]
            deadline = time.monotonic() + 60
            while not all(bench.client.exists(name) for name in names) and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
        bench.sim.summary_latency = 0.0


def nothing(bench: Bench, conversations: list[str]) -> None:
    del bench, conversations


SLEEPERS: list[threading.Thread] = []


def pause_every_fifth(bench: Bench, n: int, total: int) -> None:
    if n % 5 == 0:
        SLEEPERS.append(bench.server.pause(1.0))


def flush_every_time(bench: Bench, n: int, total: int) -> None:
    bench.client.flushall()


def kill_then_restart(bench: Bench, n: int, total: int) -> None:
    if n == total // 3:
        bench.server.stop()
    elif n == 2 * total // 3:
        bench.server.start()


#: name -> (inject, before each conversation's calls, background compaction)
FAULTS: dict[str, tuple[Callable[[Bench, list[str]], None], Callable[[Bench, int, int], None] | None, bool]] = {
    "none (healthy store)": (nothing, None, False),
    "foreign lock, 10 min expiry": (foreign_lock, None, False),
    "held lock (slow or gone holder)": (live_holder, None, False),
    "held prepare lock (background)": (prepare_lock, None, True),
    "worker killed mid-summary": (killed_worker, None, False),
    "DEBUG SLEEP 1 s (every 5th conversation)": (live_holder, pause_every_fifth, False),
    "FLUSHALL before every conversation": (live_holder, flush_every_time, False),
    "redis killed, restarted empty": (live_holder, kill_then_restart, False),
    "maxmemory allkeys-lru": (maxmemory("allkeys-lru"), None, False),
    "maxmemory noeviction": (maxmemory("noeviction"), None, False),
    "garbage / future-schema values": (garbage, None, False),
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=20)
    args = parser.parse_args()
    bound = Settings().state_store_max_wait_seconds
    print(f"bound (state_store_max_wait_seconds): {1000 * bound:.0f} ms; {args.conversations} conversations x 2 calls")
    print("| fault | added p50 | added p99 | added max | in store p50 | in store max |")
    print("|---|---:|---:|---:|---:|---:|")
    with SimulatedProvider() as sim:
        for fault, (inject, between, background) in FAULTS.items():
            with RedisServer() as server:
                bench = Bench(sim, server, background)
                try:
                    healthy = [bench.call(f"healthy-{n}")[1] for n in range(10)]
                    reference = statistics.median(healthy)
                    conversations = [f"{fault}-{n}" for n in range(args.conversations)]
                    inject(bench, conversations)
                    store, added = [], []
                    for n, conversation in enumerate(conversations):
                        if between is not None:
                            between(bench, n, len(conversations))
                            bench.client = redis.Redis.from_url(server.url)
                        for edited in (False, True):
                            spent, wall = bench.call(conversation, edited)
                            store.append(spent)
                            added.append(max(0.0, wall - reference))
                finally:
                    bench.close()
                    for sleeper in SLEEPERS:  # a DEBUG SLEEP in flight ends before its server does
                        sleeper.join()
            ms = [1000 * v for v in (statistics.median(added), pct(added, 0.99), max(added))]
            ms += [1000 * statistics.median(store), 1000 * max(store)]
            print(f"| {fault} | " + " | ".join(f"{v:.1f} ms" for v in ms) + " |", flush=True)


if __name__ == "__main__":
    main()
