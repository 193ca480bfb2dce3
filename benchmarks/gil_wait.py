"""How long the app's other threads wait for the GIL while a compaction's check and repair run (not a test):
``python benchmarks/gil_wait.py``.

One thread ticks (``time.sleep(0.0002)`` in a loop, each overshoot recorded) while this one runs
:func:`otel_context.compaction.repair.repair` back to back on ``benchmarks/retention.py``'s ~1,400-message
prefix (the summary that keeps half of its salient items), the remembered ranks forgotten before each.
The overshoot is the time the ticking thread waited for the interpreter; the idle row is the same with this
thread asleep instead. The waits are bounded by CPython's switch interval (``sys.getswitchinterval()``, 5 ms
by default), the app's to set, plus the longest call into C that holds the GIL.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retention import PREFIX_TOKENS, _case  # type: ignore[import-not-found]

from otel_context.compaction import repair

ROUNDS = 50
TICK = 0.0002


def waits(work: Callable[[], object]) -> tuple[float, list[float]]:
    """(ms a round of ``work``, the ticking thread's overshoots in ms, sorted)."""
    stop = threading.Event()
    found: list[float] = []

    def tick() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            time.sleep(TICK)
            found.append((time.perf_counter() - start - TICK) * 1000)

    thread = threading.Thread(target=tick)
    thread.start()
    time.sleep(0.05)
    start = time.perf_counter()
    for _ in range(ROUNDS):
        work()
    elapsed = (time.perf_counter() - start) / ROUNDS * 1000
    stop.set()
    thread.join()
    return elapsed, sorted(found)


def main() -> None:
    case = _case("anthropic_messages", PREFIX_TOKENS, 900)
    adapter, body, dropped = case["adapter"], case["body"], case["dropped"]
    summary, *kept = case["after"]

    def repaired() -> None:
        repair._sentence_priority.cache_clear()
        repair._cut_and_ranked_kept.cache_clear()
        repair.repair(adapter, body, dropped, [summary], kept, 10_000)

    took = waits(repaired)[0]
    print(f"switch interval {sys.getswitchinterval() * 1000:.1f} ms; one check + repair {took:.1f} ms wall\n")
    print("| this thread | ticks | wait p50 | p99 | max |\n|---|---:|---:|---:|---:|")
    for name, work in (("asleep", lambda: time.sleep(took / 1000)), ("check + repair", repaired)):
        _, found = waits(work)
        p50, p99 = found[len(found) // 2], found[int(len(found) * 0.99)]
        print(f"| {name} | {len(found):,} | {p50:.2f} ms | {p99:.2f} ms | {found[-1]:.2f} ms |")


if __name__ == "__main__":
    main()
