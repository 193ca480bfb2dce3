"""Cost of content capture on the app's thread: reading a request's messages and capping them to the size limit.

Run on demand (never in the test suite):

    .venv/bin/python benchmarks/capture.py            # the table
    .venv/bin/python benchmarks/capture.py --quick    # fewer runs

Target: under 20 ms for a 6,000-message history (issue 14; the quadratic cap took 21.9 s there).

Method. An Anthropic Messages request of N messages: user questions, assistant answers and, every third turn,
a tool call with its result, ~400 characters per item, a fifth of them CJK (3 UTF-8 bytes a character).
Timed (``perf_counter``, garbage collection off while timing): ``Capture(...)`` on the body (the per-format
reader) plus ``fit_json`` of its messages at the default cap of 16,384 bytes, which is what the
instrumentation runs when a call ends with capture on. Median and 90th percentile over the runs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from otel_context.instrumentation._content import Capture, fit_json

CAP = 16_384
TARGET_MS = 20.0


def history(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    i = 0
    while len(messages) < n:
        text = ("上下文压缩测试" * 19) if i % 5 == 0 else ("lorem ipsum dolor sit amet " * 15)
        messages.append({"role": "user", "content": f"question {i}: {text}"})
        if i % 3 == 2:
            messages.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {"path": "a"}}],
                }
            )
            messages.append(
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}]}
            )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}: {text}"}]})
        i += 1
    return {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": messages[:n]}


def time_once(body: dict[str, Any]) -> float:
    gc.disable()
    try:
        started = time.perf_counter()
        capture = Capture("SPAN_ONLY", CAP, "anthropic_messages", body)
        text = fit_json(capture.input, CAP).text
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    assert len(text.encode("utf-8")) <= CAP
    return elapsed * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    args = parser.parse_args()
    runs = 5 if args.quick else 25
    print(f"{'messages':>9} {'median ms':>10} {'p90 ms':>8}")
    worst = 0.0
    for n in (100, 1_000, 2_000, 6_000):
        body = history(n)
        times = sorted(time_once(body) for _ in range(runs))
        median = statistics.median(times)
        p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
        print(f"{n:>9} {median:>10.2f} {p90:>8.2f}")
        if n == 6_000:
            worst = median
    verdict = "meets" if worst < TARGET_MS else "MISSES"
    print(f"6,000 messages: median {worst:.2f} ms, {verdict} the {TARGET_MS:.0f} ms target")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
