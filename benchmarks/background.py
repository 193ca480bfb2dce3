"""Background vs inline compaction (not a test): the 60-turn tool-using agent of tests/engine/agents.py on a
30,000-token window, against the simulated provider with a model that answers in 0.5 s and a summarizer
that takes 3 s. Both modes run side by side in one process, on one machine, with the same agent.

Reported per mode: the largest latency any call added on top of the model's own 0.5 s, how many calls
waited for a summary (added more than 0.25 s), summarizer calls, and tokens billed (Anthropic multipliers:
cache write 1.25, cache read 0.1). Run: ``python benchmarks/background.py [--turns 60]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider

import otel_context
from otel_context import engine
from otel_context.instrumentation import _background
from otel_context.testing import SimulatedProvider
from tests.engine import agents

MODEL = "claude-sonnet-4-6"
WINDOW = 30_000
MODEL_LATENCY = 0.5
SUMMARIZER_LATENCY = 3.0
WAITED = 0.25


def _is_summary(body: Any) -> bool:
    items = body.get("messages") if isinstance(body, dict) else None
    if not items:
        return False
    return "<summary>" in str(items[-1])


def run(mode: str, turns: int) -> dict[str, float]:
    engine.reset()
    sim = SimulatedProvider(latency=MODEL_LATENCY, summary_latency=SUMMARIZER_LATENCY - MODEL_LATENCY).start()
    sim.set_window(MODEL, WINDOW)
    otel_context.instrument(
        tracer_provider=TracerProvider(),
        auto_compact_window=WINDOW,
        background_compaction=mode == "background",
    )
    added: list[float] = []
    client = sim.anthropic()
    create = client.messages.create

    def timed(**kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return create(**kwargs)
        finally:
            added.append(time.perf_counter() - began - MODEL_LATENCY)

    client.messages.create = timed  # type: ignore[method-assign]
    try:
        agents.run_anthropic_agent(client, MODEL, turns)
        while _background.running():
            time.sleep(0.05)
    finally:
        otel_context.uninstrument()
        sim.stop()
    summaries = [e for e in sim.exchanges if _is_summary(e.body)]
    billed = 0.0
    for exchange in sim.exchanges:
        usage = exchange.usage or {}
        billed += usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        billed += 1.25 * usage.get("cache_creation_input_tokens", 0) + 0.1 * usage.get("cache_read_input_tokens", 0)
    return {
        "calls": len(added),
        "max_added_s": max(added),
        "waited": sum(1 for a in added if a > WAITED),
        "summarizer_calls": len(summaries),
        "billed": billed,
        "rejected": sum(1 for e in sim.exchanges if e.status != 200),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    results = {mode: run(mode, args.turns) for mode in ("inline", "background")}
    print(
        f"{args.turns}-turn agent, {WINDOW:,}-token window, model {MODEL_LATENCY} s, summarizer {SUMMARIZER_LATENCY} s"
    )
    print(f"{'':28}{'inline':>14}{'background':>14}")
    rows = [
        ("agent calls", "calls", "{:.0f}"),
        ("largest added latency (s)", "max_added_s", "{:.2f}"),
        (f"calls that waited (>{WAITED} s)", "waited", "{:.0f}"),
        ("summarizer calls", "summarizer_calls", "{:.0f}"),
        ("tokens billed", "billed", "{:,.0f}"),
        ("rejected requests", "rejected", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        print(f"{label:28}{fmt.format(results['inline'][key]):>14}{fmt.format(results['background'][key]):>14}")
    ratio = results["background"]["billed"] / results["inline"]["billed"]
    print(f"tokens billed, background / inline: {ratio:.3f}")


if __name__ == "__main__":
    main()
