"""Compaction benchmarks (not tests): transparent-mode overhead per call vs history length, microcompact
throughput, memory per tracked conversation, and tokens billed over the 60-turn agent with and without
compaction (Anthropic multipliers: cache write 1.25, cache read 0.1). Run: `python benchmarks/compaction.py`."""

from __future__ import annotations

import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

from compaction.support import FakeSummarizer, anthropic_agent  # noqa: E402
from otel_context import engine  # noqa: E402
from otel_context.compaction.microcompact import microcompact  # noqa: E402
from otel_context.pipeline import CallRequest, drive  # noqa: E402
from otel_context.providers import for_format  # noqa: E402
from otel_context.settings import Settings  # noqa: E402
from otel_context.usage import TokenUsage  # noqa: E402

A = for_format("anthropic_messages")
MODEL = "claude-sonnet-4-6"


def per_call_overhead(n_messages: int, calls: int = 200) -> float:
    """Mean µs of plan()+on_response() for a conversation of n messages that appends one message per call."""
    engine.reset()
    tracer = TracerProvider().get_tracer("bench")
    history = anthropic_agent(max(1, n_messages // 4), result_chars=300)[:n_messages]
    settings = Settings()
    fake = FakeSummarizer()
    span = tracer.start_span("chat")
    total = 0.0
    for i in range(calls):
        history = [*history, {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}]
        # The SDK copies containers on every call but shares the strings: do the same.
        body = {"model": MODEL, "max_tokens": 1024, "system": "s", "messages": [dict(m) for m in history]}
        start = time.perf_counter()
        plan = drive(engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, False, settings)), fake)
        plan.on_response(span, TokenUsage(input_tokens=1000 + i, output_tokens=10), None)
        total += time.perf_counter() - start
    return total / calls * 1e6


def microcompact_throughput() -> float:
    items = anthropic_agent(500, result_chars=600)  # 2,000 messages
    start = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        microcompact(A, items, keep_recent=3, clear_at_least=0)
    return rounds * len(items) / (time.perf_counter() - start)


def memory_per_conversation(n: int = 500) -> float:
    engine.reset()
    tracer = TracerProvider().get_tracer("bench")
    span = tracer.start_span("chat")
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for c in range(n):
        body = {"model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": f"conversation {c}"}]}
        plan = drive(engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, False, Settings())), FakeSummarizer())
        plan.on_response(span, TokenUsage(input_tokens=10, output_tokens=5), None)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    engine.reset()
    return size / n


def billed(compaction: bool) -> dict[str, Any]:
    """Run the 60-turn agent on the simulated provider and price its tokens (input = 1.0)."""
    import otel_context
    from engine.agents import run_anthropic_agent
    from otel_context.testing import SimulatedProvider

    engine.reset()
    window = 30_000
    with SimulatedProvider() as sim:
        sim.set_window(MODEL, window if compaction else 1_000_000)
        otel_context.instrument(auto_compact_window=window, compaction="auto" if compaction else "off")
        try:
            run_anthropic_agent(sim.anthropic(), MODEL, 60)
        finally:
            otel_context.uninstrument()
        fresh = read = write = out = 0
        for e in sim.exchanges:
            u = e.usage or {}
            fresh += u.get("input_tokens", 0)
            read += u.get("cache_read_input_tokens", 0)
            write += u.get("cache_creation_input_tokens", 0)
            out += u.get("output_tokens", 0)
        calls = len(sim.exchanges)
    return {
        "calls": calls,
        "input": fresh,
        "cache_read": read,
        "cache_write": write,
        "output": out,
        "priced_input": fresh + 1.25 * write + 0.1 * read,
    }


def main() -> None:
    print("## Compaction\n")
    print("Transparent mode, engine plan + on_response per call (history grows by one message per call):\n")
    print("| messages | µs per call |\n|---:|---:|")
    results = {}
    for n in (10, 100, 1_000, 2_000):
        results[n] = per_call_overhead(n)
        print(f"| {n:,} | {results[n]:.0f} |")
    print(f"\nratio 1,000 / 10 = {results[1_000] / results[10]:.2f} (target <= 2)\n")
    print(f"microcompact over 2,000 messages: {microcompact_throughput():,.0f} messages/s\n")
    print(f"memory per tracked conversation (engine state, tiny history): {memory_per_conversation():,.0f} bytes\n")
    on, off = billed(True), billed(False)
    print("60-turn agent, tokens billed (priced input = input + 1.25 x cache write + 0.1 x cache read):\n")
    print("| | calls | input | cache read | cache write | output | priced input |\n|---|---:|---:|---:|---:|---:|---:|")
    for name, r in (("with compaction (30K window)", on), ("without (1M window)", off)):
        print(f"| {name} | {r['calls']} | {r['input']:,} | {r['cache_read']:,} | {r['cache_write']:,} | {r['output']:,} | {r['priced_input']:,.0f} |")


if __name__ == "__main__":
    main()
