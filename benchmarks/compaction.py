"""Compaction benchmarks (not tests): transparent-mode overhead per call vs history length, microcompact
throughput, memory per tracked conversation, and tokens billed over the 60-turn agent with and without
compaction (Anthropic multipliers: cache write 1.25, cache read 0.1). Run: `python benchmarks/compaction.py`."""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider

from otel_context import engine
from otel_context.compaction.microcompact import microcompact
from otel_context.contract import CallRequest
from otel_context.flow import drive, perform_with
from otel_context.formats import for_format
from otel_context.settings import MIN_WINDOW_TOKENS, Settings
from otel_context.tokens import estimate_items
from otel_context.usage import TokenUsage
from tests.compaction.support import FakeSummarizer, anthropic_agent

A = for_format("anthropic_messages")
MODEL = "claude-sonnet-4-6"


def per_call_overhead(
    n_messages: int, conversations: int = 200, compacted: bool = False, copies: bool = False
) -> float | None:
    """Mean µs of ``plan`` + ``on_response`` for the call that sends ``n_messages``, in steady state; None with
    ``compacted`` when the history is under the smallest window compaction accepts (``MIN_WINDOW_TOKENS``:
    nothing to replay).

    Each conversation first sends ``n_messages - 1`` messages (untimed: it anchors the usage and, with
    ``compacted``, makes the compaction the memo then replays), then resends them plus one new message
    (timed), the way an app resends its full history every turn.

    ``copies=False``: the body holds the app's own message objects, which is what the instrumentation hands
    the engine for the anthropic SDK (its choke point runs before the SDK's deep copy, and plain-dict bodies
    are used as they are). ``copies=True``: freshly copied containers around the app's strings, which is
    what the openai SDK hands over (its ``maybe_transform`` copies the params before the request).
    """
    engine.reset()
    tracer = TracerProvider().get_tracer("bench")
    span = tracer.start_span("chat")
    fake = FakeSummarizer()
    base = anthropic_agent(max(1, n_messages // 4 + 1), result_chars=300)
    timings: list[float] = []
    gc.disable()
    for c in range(conversations):
        history = [{"role": "user", "content": f"conversation {c}"}, *base[1 : n_messages - 1]]
        history.append({"role": "user" if len(history) % 2 == 0 else "assistant", "content": "newest"})
        tokens = estimate_items(A, history)
        if compacted and tokens < MIN_WINDOW_TOKENS:
            gc.enable()
            return None
        # With ``compacted`` the window is just below the history, so the untimed call compacts.
        settings = Settings(auto_compact_window=tokens) if compacted else Settings()
        summarized = fake.calls
        for step, messages in enumerate((history[:-1], history)):
            body = {
                "model": MODEL,
                "max_tokens": 64,
                "system": "s",
                "messages": [dict(m) for m in messages] if copies else list(messages),
            }
            request = CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)
            start = time.perf_counter()
            plan = drive(engine.plan(span, request), perform_with(fake))
            elapsed = time.perf_counter() - start
            # What the provider would report: the size of what was actually sent.
            usage = TokenUsage(input_tokens=estimate_items(A, A.items(plan.body)), output_tokens=10)
            start = time.perf_counter()
            plan.on_response(span, usage, None)
            elapsed += time.perf_counter() - start
            if step == 0:
                summarized = fake.calls - summarized
                before_timed = fake.calls
            else:
                timings.append(elapsed)
                # The timed call replays the memo; it summarizes nothing (a summary there is not the figure).
                if fake.calls != before_timed:
                    raise AssertionError(f"the timed call of conversation {c} summarized")
        if compacted and summarized == 0:
            raise AssertionError(f"conversation {c}: the untimed call did not compact")
        gc.collect()  # between conversations: the app's own garbage is not the engine's cost
    gc.enable()
    # The median: this box runs other jobs, and a mean is dominated by their interruptions.
    return statistics.median(timings) * 1e6


def _timed(figure: float | None) -> float:
    assert figure is not None  # only a compacted run can have nothing to time
    return figure


def agent_loop_overhead(n_messages: int, copies: bool = False, calls: int = 41) -> float:
    """Median µs of ``plan`` + ``on_response`` over consecutive calls of ONE agent conversation around
    ``n_messages`` (from n-20 to n+20 messages, n/2 to 3n/2 for small n; one message appended per call).

    The same conversation call after call, as an agent makes them; between two calls the body is serialized
    to JSON (untimed), as the SDK does for every request, so the engine never runs on caches it warmed itself.
    ``copies``: as in :func:`per_call_overhead`.
    """
    import json

    engine.reset()
    tracer = TracerProvider().get_tracer("bench")
    span = tracer.start_span("chat")
    fake = FakeSummarizer()
    settings = Settings()
    half = min(calls // 2, n_messages // 2)
    start_at, calls = n_messages - half, 2 * half + 1
    base = anthropic_agent((start_at + calls) // 4 + 2, result_chars=300)
    history = [*base[:start_at]]
    timings: list[float] = []
    gc.disable()
    for step in range(calls + 1):
        body = {
            "model": MODEL,
            "max_tokens": 64,
            "system": "s",
            "messages": [dict(m) for m in history] if copies else list(history),
        }
        json.dumps(body)
        request = CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)
        start = time.perf_counter()
        plan = drive(engine.plan(span, request), perform_with(fake))
        elapsed = time.perf_counter() - start
        usage = TokenUsage(input_tokens=estimate_items(A, A.items(plan.body)), output_tokens=10)
        json.dumps(body)
        start = time.perf_counter()
        plan.on_response(span, usage, None)
        elapsed += time.perf_counter() - start
        if step:  # the first call of the conversation snapshots everything: not steady state
            timings.append(elapsed)
        history.append(base[len(history)])
        if step % 8 == 0:
            gc.collect()
    gc.enable()
    return statistics.median(timings) * 1e6


def sdk_request_cost(n_messages: int) -> float:
    """µs the anthropic SDK itself spends preparing and serializing the same body (for scale)."""
    from anthropic._utils._prepare import prepare_request_data, serialize_data

    history = anthropic_agent(max(1, n_messages // 4 + 1), result_chars=300)[:n_messages]
    body = {"model": MODEL, "max_tokens": 64, "messages": history}
    runs = 20
    start = time.perf_counter()
    for _ in range(runs):
        prepare_request_data(body, location="body")
        serialize_data(body, location="body")
    return (time.perf_counter() - start) / runs * 1e6


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
        plan = drive(
            engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, Settings())),
            perform_with(FakeSummarizer()),
        )
        plan.on_response(span, TokenUsage(input_tokens=10, output_tokens=5), None)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    engine.reset()
    return size / n


def memory_of_a_long_conversation(n_messages: int = 1_000, copies: bool = False) -> float:
    """Bytes the engine (and the cache detector it holds) keeps for one conversation of ``n_messages``.

    The engine keeps a reference to the previous call's items: with the app's own objects (anthropic) that
    is a list of pointers; with copied containers (openai) the copies stay alive one call longer. The
    strings are the app's own, shared, and not counted."""
    engine.reset()
    span = TracerProvider().get_tracer("bench").start_span("chat")
    history = anthropic_agent(n_messages // 4, result_chars=300)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    body = {"model": MODEL, "max_tokens": 64, "messages": [dict(m) for m in history] if copies else list(history)}
    plan = drive(
        engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, Settings())),
        perform_with(FakeSummarizer()),
    )
    plan.on_response(span, TokenUsage(input_tokens=10, output_tokens=5), None)
    del body, plan
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    engine.reset()
    return float(size)


def billed(compaction: bool) -> dict[str, Any]:
    """Run the 60-turn agent on the simulated provider and price its tokens (input = 1.0)."""
    import otel_context
    from otel_context.testing import SimulatedProvider
    from tests.engine.agents import run_anthropic_agent

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
    print("Transparent mode, engine plan + on_response of one call resending n messages (steady state):\n")
    print(
        "| messages | µs, app's objects | µs, app's objects, memo replaying a compaction "
        "| µs, copied containers | µs, copied, memo replaying | the SDK's own prepare + serialize, µs |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    own: dict[int, float] = {}
    copied: dict[int, float] = {}
    for n in (10, 100, 1_000, 2_000):
        own[n] = _timed(per_call_overhead(n))
        copied[n] = _timed(per_call_overhead(n, copies=True))
        replayed = per_call_overhead(n, compacted=True)
        replayed_copied = per_call_overhead(n, compacted=True, copies=True)
        under = f"n/a (under the {MIN_WINDOW_TOKENS:,}-token minimum window)"
        memo = under if replayed is None else f"{replayed:.0f}"
        memo_copied = under if replayed_copied is None else f"{replayed_copied:.0f}"
        print(f"| {n:,} | {own[n]:.0f} | {memo} | {copied[n]:.0f} | {memo_copied} | {sdk_request_cost(n):,.0f} |")
    print(
        f"\nratio 1,000 / 10: app's objects {own[1_000] / own[10]:.2f}, "
        f"copied containers {copied[1_000] / copied[10]:.2f} (target <= 2)\n"
    )
    print("One agent conversation, consecutive calls around n messages (plan + on_response, µs):\n")
    print("| messages | app's objects | copied containers |\n|---:|---:|---:|")
    loop: dict[int, float] = {}
    loop_copied: dict[int, float] = {}
    for n in (10, 100, 1_000, 2_000):
        loop[n], loop_copied[n] = agent_loop_overhead(n), agent_loop_overhead(n, copies=True)
        print(f"| {n:,} | {loop[n]:.0f} | {loop_copied[n]:.0f} |")
    print(
        f"\nratio 1,000 / 10: app's objects {loop[1_000] / loop[10]:.2f}, "
        f"copied containers {loop_copied[1_000] / loop_copied[10]:.2f} (target <= 2)\n"
    )
    print(f"microcompact over 2,000 messages: {microcompact_throughput():,.0f} messages/s\n")
    print(f"memory per tracked conversation (engine state, tiny history): {memory_per_conversation():,.0f} bytes\n")
    print(
        "memory of one 1,000-message conversation: app's objects "
        f"{memory_of_a_long_conversation():,.0f} bytes, copied containers "
        f"{memory_of_a_long_conversation(copies=True):,.0f} bytes\n"
    )
    on, off = billed(True), billed(False)
    print("60-turn agent, tokens billed (priced input = input + 1.25 x cache write + 0.1 x cache read):\n")
    print("| | calls | input | cache read | cache write | output | priced input |\n|---|---:|---:|---:|---:|---:|---:|")
    for name, r in (("with compaction (30K window)", on), ("without (1M window)", off)):
        print(
            f"| {name} | {r['calls']} | {r['input']:,} | {r['cache_read']:,} | {r['cache_write']:,} | {r['output']:,} | {r['priced_input']:,.0f} |"
        )


if __name__ == "__main__":
    main()
