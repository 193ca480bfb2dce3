"""Per-call cost of cache-break detection: ``fingerprint`` + ``check`` on a ~200-message history.

Run on demand (never in the test suite):

    .venv/bin/python benchmarks/cache_break.py            # the table
    .venv/bin/python benchmarks/cache_break.py --quick    # fewer runs

Budget: <= 25 µs per call at 200 messages (issue 5), append-only or with message objects rebuilt every turn.

Method. A conversation of user questions, assistant answers (text blocks) and, every third turn, a tool call
with its result, ~400 characters per item; system prompt (~6 KB, one breakpoint) and 8 tool definitions (a
breakpoint on the last). Each run starts a fresh detector and feeds it the conversation growing by two items
per call, as a chat app does; the calls whose history holds 190 to 210 items are timed
(``perf_counter_ns`` around ``fingerprint`` + ``check``, nothing else). Request building happens outside
the timer, and so are garbage collections (disabled while timing: the app's own allocations, ~600 objects
per rebuilt request, make them due, and they would land in whatever code allocates next) and the freeing of
the app's previous request (the detector holds it until the next call's check, for diffing; freeing it is
the app's cost wherever it happens). Medians and
90th percentiles over every timed call of every run. Scenarios:

* ``same objects``: the app keeps its history list and resends the same dicts (the anthropic and openai SDKs
  pass them through untouched); the conversation breakpoint is top-level ``cache_control``.
* ``rebuilt dicts``: the app rebuilds every message dict (and tools, system blocks) each turn from its own
  store and moves a ``cache_control`` breakpoint to the newest message (``place_cache_breakpoints``);
  strings are the app's own, so shared.
* ``rebuilt from JSON``: the history is ``json.loads``-ed from storage each turn: every string is a new
  object too (the worst case: nothing can be settled by identity).
* ``diagnosis``: the one-off cost of explaining a break (an edited message, found by the in-place check),
  which only runs on a call whose cache reads fell.
* ``floor``: the bare C-level ``==`` of two rebuilt 200-message lists, to read the others against (it
  tracks the machine's speed at the time of the run).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from otel_context.cache import CacheBreakDetector
from otel_context.cache_control import place_cache_breakpoints
from otel_context.formats import ANTHROPIC_MESSAGES
from otel_context.usage import TokenUsage

LOW, HIGH = 190, 210
SYSTEM = "You are a careful coding agent working in a large Python repository. " * 90
TOOLS: list[dict[str, Any]] = [
    {
        "name": f"tool_{i}",
        "description": f"Tool number {i}: reads, searches or edits files of the repository. " * 4,
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "pattern": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    }
    for i in range(8)
]
TOOLS[-1] = {**TOOLS[-1], "cache_control": {"type": "ephemeral"}}


def conversation(items: int) -> list[dict[str, Any]]:
    """A deterministic history of ``items`` messages (user / assistant, tool calls every third turn)."""
    out: list[dict[str, Any]] = []
    turn = 0
    while len(out) < items:
        if turn % 3 == 2:
            out.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Let me look at module_{turn}.py first."},
                        {
                            "type": "tool_use",
                            "id": f"toolu_{turn}",
                            "name": "tool_0",
                            "input": {"path": f"module_{turn}.py"},
                        },
                    ],
                }
            )
            out.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"toolu_{turn}",
                            "content": f"def function_{turn}(x):\n    return x * {turn}\n" * 12,
                        }
                    ],
                }
            )
        else:
            out.append({"role": "user", "content": f"Turn {turn}: please explain the handler in module {turn}. " * 6})
            out.append(
                {"role": "assistant", "content": [{"type": "text", "text": f"The handler {turn} does X. " * 16}]}
            )
        turn += 1
    return out[:items]


HISTORY = conversation(HIGH + 2)
HISTORY_JSON = json.dumps(HISTORY)


def same_objects(n: int) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS,
        "messages": HISTORY[:n],
        "cache_control": {"type": "ephemeral"},
    }


def rebuilt(n: int) -> dict[str, Any]:
    def copy_message(m: dict[str, Any]) -> dict[str, Any]:
        content = m["content"]
        return {"role": m["role"], "content": content if isinstance(content, str) else [dict(b) for b in content]}

    body = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": SYSTEM,
        "tools": [dict(t) for t in TOOLS[:-1]] + [{k: v for k, v in TOOLS[-1].items() if k != "cache_control"}],
        "messages": [copy_message(m) for m in HISTORY[:n]],
    }
    return place_cache_breakpoints(body)


def from_json(n: int) -> dict[str, Any]:
    body = rebuilt(n)
    body["messages"] = place_cache_breakpoints({"messages": json.loads(HISTORY_JSON)[:n]})["messages"]
    return body


def usage(n: int) -> TokenUsage:
    cached = 3_000 + 120 * n
    return TokenUsage(input_tokens=cached + 240, cache_read_tokens=cached, cache_write_tokens=240, reported_cache=True)


def measure(build: Callable[[int], dict[str, Any]], runs: int) -> list[float]:
    """Microseconds per fingerprint + check, over the calls at LOW..HIGH items of every run."""
    samples: list[float] = []
    for _ in range(runs):
        detector = CacheBreakDetector()
        gc.collect()
        alive: list[dict[str, Any]] = []
        for n in range(2, HIGH + 1, 2):
            # The app builds its request right before the call and drops it after: freeing a request is the
            # app's cost, wherever it happens (the detector keeps the previous one until the next check, to
            # diff it on a break), so the loop holds the last two and frees them outside the timer.
            body, result = build(n), usage(n)
            alive = [*alive[-1:], body]
            gc.disable()  # a collection the app's own allocations made due would land anywhere: not ours
            start = time.perf_counter_ns()
            fp = detector.fingerprint(ANTHROPIC_MESSAGES, body)
            brk = detector.check(fp, result)
            elapsed = time.perf_counter_ns() - start
            gc.enable()
            assert brk is None, brk
            if n >= LOW:
                samples.append(elapsed / 1_000)
    return samples


def diagnosis(runs: int) -> list[float]:
    """Microseconds for the check that explains a break (edited message found by the in-place check)."""
    samples: list[float] = []
    for _ in range(runs):
        detector = CacheBreakDetector()
        history = [dict(m) for m in HISTORY[:200]]
        body = {**same_objects(200), "messages": history}
        detector.check(detector.fingerprint(ANTHROPIC_MESSAGES, body), usage(200))
        history[5]["content"] = "edited in place"  # same object: only the verification can see it
        gc.collect()
        gc.disable()
        start = time.perf_counter_ns()
        brk = detector.check(
            detector.fingerprint(ANTHROPIC_MESSAGES, body), TokenUsage(input_tokens=30_000, reported_cache=True)
        )
        samples.append((time.perf_counter_ns() - start) / 1_000)
        gc.enable()
        assert brk is not None and brk.reason == "messages_changed", brk
    return samples


def floor(runs: int) -> list[float]:
    """Microseconds for the bare C-level ``==`` of a rebuilt 200-message list with the previous one: the
    machine's speed at the time, and what no content-based check can go below."""
    previous, samples = rebuilt(200)["messages"], []
    for _ in range(runs * 10):
        current = rebuilt(200)["messages"]
        gc.disable()
        start = time.perf_counter_ns()
        equal = current[:199] == previous[:199]
        samples.append((time.perf_counter_ns() - start) / 1_000)
        gc.enable()
        assert equal
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 10 if args.quick else 60
    rows = [
        ("same objects", measure(same_objects, runs)),
        ("rebuilt dicts, moving breakpoint", measure(rebuilt, runs)),
        ("rebuilt from JSON (new strings)", measure(from_json, max(3, runs // 3))),
        ("diagnosis of a break (one-off)", diagnosis(runs)),
        ("floor: bare == of 200 rebuilt messages", floor(runs)),
    ]
    print(f"fingerprint + check per call, {LOW}-{HIGH} messages, {runs} runs")
    print("| scenario | median µs | p90 µs | calls |")
    print("|---|---:|---:|---:|")
    for name, samples in rows:
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) > 1 else samples[0]
        print(f"| {name} | {statistics.median(samples):.1f} | {p90:.1f} | {len(samples)} |")


if __name__ == "__main__":
    main()
