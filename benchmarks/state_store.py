"""State-store benchmark (not a test), on a redis-server this script starts (no persistence) and stops.

1. Per operation: latency of the Redis store on loopback next to the in-process store, on a value the size
   of a conversation's state (a memo holding one summary of ~``--kb`` KB): ``get``, ``put``, ``put_later``
   (what the caller waits for: encoding and a hand-off to the writer thread), ``acquire+release`` (the lock
   a threshold crossing takes), and ``aget`` from an event loop.
2. Per call, at the engine: ``plan`` + ``on_response`` of an appended turn of a compacted conversation
   (the memo replays a summary: the test summarizer's short one, and one of ``--kb`` KB), in-process
   default vs the Redis store, side by side; wall clock and the calling thread's CPU time (the writer
   thread's work is not in the CPU figure; back to back, with no request in between, it competes with the
   next call for the GIL, which the wall-clock figure shows).
   Each Redis row is measured twice in the same run: values in clear, and sealed with a key
   (``OTEL_CONTEXT_STATE_STORE_KEY``: AES-256-GCM at the store's value boundary).
3. Four workers, one conversation (``otel_context.testing.fleet``): 80 turns of a tool-using agent on a
   30,000-token window, each call served by the next of N spawned worker processes against one simulated
   provider; workers 1 vs 4, each process's own state (before) vs the Redis store (after).

Run: ``.venv/bin/python benchmarks/state_store.py`` (``--markdown FILE`` writes the tables; ``--skip-fleet``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider

from otel_context import engine
from otel_context.contract import CallRequest
from otel_context.conversation import shared
from otel_context.conversation.state_store import StateStore, open_store
from otel_context.flow import drive, perform_with
from otel_context.formats import for_format
from otel_context.settings import Settings
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, Fleet, run_agent
from otel_context.testing.redis_server import RedisServer
from otel_context.tokens import estimate_items
from tests.compaction.support import FakeSummarizer, anthropic_agent

MODEL = "claude-sonnet-4-6"
IN_PROCESS = "in-process (default)"
#: The key of the sealed runs (random: nothing here is kept).
KEYS = (os.urandom(32),)
A = for_format("anthropic_messages")


def _state(kb: int) -> dict[str, Any]:
    summary = ("The user asked for a refactor of the parser; decisions so far: … " * (kb * 20))[: kb * 1024]
    return {
        "memo": [
            {
                "prefix_len": 48,
                "prefix_hash": "ab" * 32,
                "replacement": [{"role": "user", "content": [{"type": "text", "text": summary}]}],
            }
        ],
        "breaker": {"failures": 0, "open_until": None},
        "anchor": {"items": 52, "hashes": ["cd" * 32] * 4, "input_tokens": 24_000},
        "window": 200_000,
        "estimate_factor": 1.0,
    }


def _time(op: Callable[[], Any], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        op()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def _atime(store: StateStore, n: int) -> list[float]:
    async def run() -> list[float]:
        await store.aget("conv")  # connect this loop's client first
        samples = []
        for _ in range(n):
            start = time.perf_counter_ns()
            await store.aget("conv")
            samples.append((time.perf_counter_ns() - start) / 1000)
        return samples

    return asyncio.run(run())


def measure(store: StateStore, value: dict[str, Any], n: int) -> dict[str, list[float]]:
    store.put("conv", value)
    for _ in range(50):  # warm up connections and caches
        store.get("conv")

    def lock() -> None:
        lease = store.acquire("conv")
        assert lease is not None
        store.release(lease)

    results = {
        "get": _time(lambda: store.get("conv"), n),
        "put": _time(lambda: store.put("conv", value), n),
        "put_later (caller's share)": _time(lambda: store.put_later("conv", value), n),
        "acquire + release": _time(lock, n),
        "aget (asyncio)": _atime(store, n),
    }
    store.flush(10)
    return results


def _fmt(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=100)
    return f"{statistics.median(samples):.0f} µs (p90 {q[89]:.0f})"


def per_call(
    url: str | None,
    turns: int = 300,
    n_messages: int = 60,
    summary_kb: int = 0,
    settle: bool = False,
    keys: tuple[bytes, ...] | None = None,
) -> tuple[list[float], list[float]]:
    """µs of ``plan`` + ``on_response`` for each appended turn of one compacted conversation: wall clock
    and the calling thread's CPU time (the usage the provider would report is computed outside both).

    ``settle``: wait (untimed) before each call until the store's writer thread has written the previous
    call's state, as it has after a real request (seconds); else calls come back to back and the writer
    competes with the next call for the GIL."""
    engine.reset()
    span = TracerProvider().get_tracer("bench").start_span("chat")
    fake = FakeSummarizer()
    if summary_kb:
        fake.text = (
            "<summary>"
            + ("1. The user asked for a refactor of the parser; decided so far: … " * (summary_kb * 16))[
                : summary_kb * 1024
            ]
            + "</summary>"
        )
    # A longer summary comes from a longer history (else the summary alone would fill the window). Never
    # below the 8 KB case's history: the window is the history's own size, and below ~8,000 tokens the
    # summarizer's request leaves no room for a summary (the compaction fails, the breaker opens, and every
    # call measured would be an uncompacted one).
    base = anthropic_agent(n_messages // 4 + 1, result_chars=300 + 150 * max(summary_kb, 8))[: n_messages - 1]
    settings = Settings(auto_compact_window=estimate_items(A, base), state_store=url, state_store_key=keys)
    history = list(base)
    opened = shared.store_for(settings)
    if opened is not None and hasattr(opened, "ready"):
        opened.ready(10.0)  # a Cluster's client is made before the measured calls
    store = opened if settle else None
    timings: list[float] = []
    cpu: list[float] = []
    gc.disable()
    for turn in range(turns):
        history.append({"role": "user" if len(history) % 2 == 0 else "assistant", "content": f"turn {turn}"})
        body = {"model": MODEL, "max_tokens": 64, "system": "s", "messages": list(history)}
        request = CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)
        if store is not None:
            store.flush(1)
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        plan = drive(engine.plan(span, request), perform_with(fake))
        wall, used = time.perf_counter_ns() - start, time.thread_time_ns() - start_cpu
        usage = engine_usage(plan.body)
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        plan.on_response(span, usage, None)
        timings.append((wall + time.perf_counter_ns() - start) / 1000)
        cpu.append((used + time.thread_time_ns() - start_cpu) / 1000)
        if turn % 50 == 0:
            gc.collect()
    gc.enable()
    store = shared.store_for(settings)
    if store is not None:
        store.flush(10)
    assert fake.calls >= 1, "the conversation was meant to be compacted"
    return timings[20:], cpu[20:]  # steady state: after the compaction and the connections are warm


def _stored_sizes(server: RedisServer) -> str:
    """The bytes of each key the per-call runs left (which parts a conversation has, and their sizes)."""
    import redis

    client = redis.Redis.from_url(server.url)
    names = [key.decode() if isinstance(key, bytes) else str(key) for key in client.keys("*")]
    # prefix{conversation}:part[:address]: per kind of part, how many values and their bytes
    kinds: dict[str, list[int]] = {}
    for name in names:
        kinds.setdefault(name.split("}:", 1)[-1].split(":", 1)[0], []).append(int(client.strlen(name)))
    client.close()
    return (
        ", ".join(
            f"{kind} {len(sizes)} value{'s' if len(sizes) > 1 else ''} of {statistics.median(sizes):,.0f} bytes"
            for kind, sizes in sorted(kinds.items())
        )
        or "nothing"
    )


def engine_usage(body: Any) -> Any:
    from otel_context.usage import TokenUsage

    return TokenUsage(input_tokens=estimate_items(A, A.items(body)), output_tokens=10)


def fleet_table(url: str, turns: int = 80) -> list[str]:
    """The 4-worker table: summarizer calls, distinct heads of the last 20 turns, cache reads / input."""
    model = "claude-sonnet-4-6"
    rows = []
    for label, store in (("each process's own state (before)", None), ("Redis store (after)", url)):
        for workers in (1, 4):
            settings: dict[str, Any] = {"auto_compact_window": 30_000}
            if store is not None:
                settings["state_store"] = store + "?timeout_ms=500"
            with SimulatedProvider() as sim:
                sim.set_window(model, 30_000)
                with Fleet(workers, sim.base_url, "anthropic", **settings) as fleet:
                    run_agent(fleet, model, turns)
                f = Figures.of(sim.exchanges)
            rows.append(
                f"| {label} | {workers} | {f.summarizer_calls} | {f.distinct_heads} | "
                f"{100 * f.cache_read_fraction:.1f} % | {f.rejected} |"
            )
    return [
        "| state | workers | summarizer calls | distinct heads, last 20 turns | cache reads / input | rejected |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2_000, help="samples per operation")
    parser.add_argument("--kb", type=int, default=8, help="size of the summary in the value, KB")
    parser.add_argument("--markdown", help="write the table to this file")
    parser.add_argument("--skip-fleet", action="store_true", help="leave out the 4-worker table")
    args = parser.parse_args()
    value = _state(args.kb)
    with RedisServer() as server:
        memory = measure(open_store(None), value, args.n)
        redis_store = open_store(server.url)
        redis_results = measure(redis_store, value, args.n)
        redis_store.close()
        sealed_store = open_store(server.url, keys=KEYS)
        sealed_results = measure(sealed_store, value, args.n)
        sealed_store.close()
        server.command("FLUSHALL")
        calls = {}
        for kb in (0, args.kb):
            calls[(IN_PROCESS, kb)] = per_call(None, summary_kb=kb)
            for sealed, keys in (("", None), (", sealed", KEYS)):
                calls[(f"Redis (loopback){sealed}, back to back", kb)] = per_call(server.url, summary_kb=kb, keys=keys)
                stored = _stored_sizes(server)
                server.command("FLUSHALL")  # the next run must compact, not find this run's summary
                calls[(f"Redis (loopback){sealed}, writer idle", kb)] = per_call(
                    server.url, summary_kb=kb, settle=True, keys=keys
                )
                server.command("FLUSHALL")
        server.command("FLUSHALL")
        fleet = [] if args.skip_fleet else fleet_table(server.url)
    size = len(open_store(None)._encode(value, "conv") or b"")
    lines = [
        f"Value: {size:,} bytes encoded; {args.n} samples per operation; median (p90), wall clock.",
        "",
        "| operation | in-process | Redis (loopback) | Redis (loopback), sealed |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {op} | {_fmt(memory[op])} | {_fmt(redis_results[op])} | {_fmt(sealed_results[op])} |" for op in memory
    ]
    lines += [
        "",
        "Per call at the engine (plan + on_response, an appended turn of a compacted 60-message conversation),",
        "median (p90); CPU: the calling thread's:",
        "",
        "| summary | store | wall clock | added | CPU | added |",
        "|---|---|---|---|---|---|",
    ]
    for (label, kb), (wall, cpu) in calls.items():
        base_wall, base_cpu = calls[(IN_PROCESS, kb)]
        more = "" if wall is base_wall else f"+{statistics.median(wall) - statistics.median(base_wall):.0f} µs"
        more_cpu = "" if cpu is base_cpu else f"+{statistics.median(cpu) - statistics.median(base_cpu):.0f} µs"
        summary = f"{kb} KB" if kb else "short (test summarizer)"
        lines.append(f"| {summary} | {label} | {_fmt(wall)} | {more} | {_fmt(cpu)} | {more_cpu} |")
    lines += ["", f"Stored after the (sealed) run with the {args.kb} KB summary: {stored}."]
    if fleet:
        lines += ["", "One conversation, 80 turns, 30,000-token window, each call on the next worker:", "", *fleet]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
