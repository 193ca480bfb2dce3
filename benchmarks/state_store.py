"""State-store benchmark (not a test): per-operation latency of the Redis store on loopback next to the
in-process store, in one run, on a redis-server this script starts (no persistence) and stops.

Operations, each on a value the size of a conversation's state (a memo holding one summary of ~``--kb``
KB): ``get``, ``put``, ``put_later`` (what the caller waits for: encoding and a hand-off to the writer
thread), ``acquire+release`` (the lock a threshold crossing takes), and ``aget`` from an event loop. The
engine-level per-call figure (and the 4-worker table) come with the engine wiring.

Run: ``.venv/bin/python benchmarks/state_store.py`` (``--markdown FILE`` writes the table).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from otel_context.conversation.state_store import StateStore, open_store
from otel_context.testing.redis_server import RedisServer


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2_000, help="samples per operation")
    parser.add_argument("--kb", type=int, default=8, help="size of the summary in the value, KB")
    parser.add_argument("--markdown", help="write the table to this file")
    args = parser.parse_args()
    value = _state(args.kb)
    with RedisServer() as server:
        memory = measure(open_store(None), value, args.n)
        redis_store = open_store(server.url)
        redis_results = measure(redis_store, value, args.n)
        redis_store.close()
    size = len(open_store(None)._encode(value) or b"")
    lines = [
        f"Value: {size:,} bytes encoded; {args.n} samples per operation; median (p90), wall clock.",
        "",
        "| operation | in-process | Redis (loopback) |",
        "|---|---|---|",
    ]
    lines += [f"| {op} | {_fmt(memory[op])} | {_fmt(redis_results[op])} |" for op in memory]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
