"""What asking for the providers' cache diagnostics costs a call (``OTEL_CONTEXT_CACHE_DIAGNOSTICS``), side by side.

Real anthropic SDK calls against the simulated provider, in one process, in alternating blocks: instrumented with
the setting off, then on (the first round is warm-up). Each block runs ten 10-turn conversations that cache
their system prompt, so every call after the first of a conversation names the previous response and gets a
diagnosis. With the setting on the simulated provider diagnoses too (in this process: on a real provider that
work is remote), so the run is repeated with the simulated provider's diagnosis switched off, which isolates
otel-context's own part: finding the previous response, the copy of the request, reading the answer, the
comparison, the attributes and the counter.

    .venv/bin/python benchmarks/cache_diagnostics.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import otel_context
from otel_context import engine
from otel_context.testing import SimulatedProvider, anthropic_api

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a careful assistant. " * 200  # ~1,200 tokens: cached


def _block(client: Any) -> list[float]:
    times: list[float] = []
    for conversation in range(10):
        history: list[dict[str, Any]] = []
        for turn in range(10):
            history.append({"role": "user", "content": f"conversation {conversation}, turn {turn} words:20"})
            started = time.perf_counter()
            reply = client.messages.create(
                model=MODEL,
                max_tokens=100,
                system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                messages=list(history),
            )
            times.append(time.perf_counter() - started)
            history.append({"role": "assistant", "content": reply.content[0].text})
    return times


def _run(rounds: int) -> dict[bool, float]:
    seen: dict[bool, list[float]] = {False: [], True: []}
    with SimulatedProvider() as sim:
        client = sim.anthropic()
        for index in range(rounds):
            for on in (False, True):
                otel_context.instrument(cache_diagnostics=on)
                times = _block(client)
                otel_context.uninstrument()
                engine.reset()
                if index:
                    seen[on].extend(times)
        client.close()
    return {on: statistics.median(times) for on, times in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="alternating block pairs (the first is warm-up)")
    args = parser.parse_args()
    trace.set_tracer_provider(TracerProvider())
    with_provider = _run(args.rounds)
    anthropic_api._diagnostics = lambda *a: None  # the simulated provider's own diagnosis off
    ours = _run(args.rounds)
    for label, medians in (("simulated provider diagnosing", with_provider), ("otel-context's part alone", ours)):
        off, on = medians[False] * 1e6, medians[True] * 1e6
        print(f"{label}: median per call {off:.0f} us off, {on:.0f} us on (+{on - off:.0f} us)")


if __name__ == "__main__":
    main()
