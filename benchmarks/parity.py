"""Background against inline compaction, side by side (issue 49 item 4): summarizer calls, cost, cache reads,
waits. Not a test: a report.

Two workloads, each run inline and in the background in one process, one after the other:

- **the demo** (``otel-context demo``'s 50-turn session, 24,000-token window, microcompaction on), on both
  providers, at simulated model latencies 0, 0.05 and 0.2 s (the summarizer takes 6x as long);
- **a tool-heavy loop** (``tests/engine/agents.py``: 60 turns, one 1,600-token file read a turn, 120 calls),
  at several windows, microcompaction on and off, model latency 0.05 s (summarizer 0.3 s).

Per run: summarizer calls, estimated cost (the price source, ``otel_context.pricing``: Anthropic Sonnet 4.6,
cache writes 1.25x and reads 0.1x input; OpenAI GPT-4.1, reads 0.25x), cache reads as a share of input, and the longest a
requests waited for compactions in all (``otel_context.compaction.wait``, both modes). The targets: background at
most one summarizer call more than inline, cost within 3 %, cache-read share within 1 point; micro on at most
1.03x micro off in either mode (the loop).

Run: ``python benchmarks/parity.py [--part demo|loop|all] [--windows 12000,16000,20000] [--provider ...]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import engine, pricing, semconv
from otel_context.instrumentation import _background
from otel_context.testing import SimulatedProvider
from otel_context.testing.scripted import summary_pattern
from otel_context.usage import TokenUsage
from tests.engine import agents

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}
LOOP_TURNS = 60
LOOP_LATENCY = 0.05
SUMMARY_FACTOR = 6
DEMO_LATENCIES = (0.0, 0.05, 0.2)
LOOP_WINDOWS = (12_000, 16_000, 20_000, 30_000)


@dataclass(frozen=True)
class Figures:
    """One run's figures."""

    summarizer_calls: int
    cost: float
    cache_read_share: float
    waited: float
    calls: int
    #: Summaries prepared in the background and dropped unsent, and what their summarizer calls cost.
    discarded: int = 0
    discarded_cost: float = 0.0

    def row(self) -> str:
        return (
            f"{self.summarizer_calls:>4} {self.discarded:>4} {self.discarded_cost:>7.4f} {self.cost:>9.4f}"
            f" {100 * self.cache_read_share:>6.1f}% {self.waited:>6.2f}"
        )


def _discards(spans: Sequence[ReadableSpan]) -> tuple[int, float]:
    """(summaries discarded, their summarizer's spend in USD) from the run's ``compact`` spans."""
    count, spend = 0, 0.0
    for span in spans:
        attrs = span.attributes or {}
        if attrs.get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_DISCARDED:
            count += 1
            spend += float(attrs.get(semconv.COMPACTION_COST) or 0.0)  # type: ignore[arg-type]
    return count, spend


def _is_summary(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    items = body.get("messages") or body.get("input")
    return isinstance(items, list) and bool(items) and bool(summary_pattern().search(json.dumps(items[-1])))


def _billed(provider: str, usage: dict[str, Any]) -> tuple[float, int, int]:
    """(USD, input tokens, cache-read tokens) of one exchange's usage, at the price source's rates."""
    if provider == "anthropic":
        read = int(usage.get("cache_read_input_tokens") or 0)
        write = int(usage.get("cache_creation_input_tokens") or 0)
        total = int(usage.get("input_tokens") or 0) + write + read
        output = int(usage.get("output_tokens") or 0)
    else:
        total = int(usage.get("prompt_tokens") or 0)
        read = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        write, output = 0, int(usage.get("completion_tokens") or 0)
    normalized = TokenUsage(
        input_tokens=total, output_tokens=output, cache_read_tokens=read, cache_write_tokens=write, reported_cache=True
    )
    priced = pricing.cost(provider, MODELS[provider], normalized)
    if priced is None:
        raise LookupError(f"no price for {MODELS[provider]}: install genai-prices")
    return priced.amount, total, read


def figures_of(
    sim: SimulatedProvider, provider: str, reader: InMemoryMetricReader, spans: Sequence[ReadableSpan]
) -> Figures:
    """The figures of a run from what the simulated provider billed, the wait histogram and the spans."""
    cost, inputs, reads, calls = 0.0, 0, 0, 0
    summaries = 0
    for exchange in sim.exchanges:
        if exchange.usage is None:
            continue
        calls += 1
        summaries += _is_summary(exchange.body)
        dollars, tokens, read = _billed(provider, exchange.usage)
        cost, inputs, reads = cost + dollars, inputs + tokens, reads + read
    return Figures(summaries, cost, reads / inputs if inputs else 0.0, _waited(reader), calls, *_discards(spans))


def _waited(reader: InMemoryMetricReader) -> float:
    """Seconds requests waited for a compaction, in all (``otel_context.compaction.wait``, both modes)."""
    total = 0.0
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == semconv.METRIC_COMPACTION_WAIT and isinstance(metric.data, Histogram):
                    total += sum(float(point.sum) for point in metric.data.data_points)
    return total


def run_loop(
    provider: str, window: int, background: bool, micro: bool, turns: int = LOOP_TURNS, latency: float = LOOP_LATENCY
) -> Figures:
    """The tool-heavy loop once (see the module docstring)."""
    model = MODELS[provider]
    engine.reset()
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The provider's own window is left large: the compactor's window is the experiment (at 12,000 tokens the
    # loop's summaries, which list every user message, outgrow a provider window that small).
    with SimulatedProvider(latency=latency, summary_latency=latency * (SUMMARY_FACTOR - 1)) as sim:
        otel_context.instrument(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[reader]),
            auto_compact_window=window,
            background_compaction=background,
            microcompact=micro,
        )
        try:
            if provider == "anthropic":
                agents.run_anthropic_agent(sim.anthropic(), model, turns)
            else:
                agents.run_openai_chat_agent(sim.openai(), model, turns)
            _background.wait_idle(30.0)
        finally:
            otel_context.uninstrument()
        return figures_of(sim, provider, reader, exporter.get_finished_spans())


def run_demo(provider: str, latency: float, background: bool) -> Figures:
    """The demo's session once (its own telemetry and simulated provider)."""
    from otel_context.demo.run import DemoOptions, run

    result = run(DemoOptions(provider=provider, latency=latency, background=background))
    calls = result.stats.calls
    summarizer = sum(1 for c in calls if c.summarizer)
    inputs = sum(c.input_tokens for c in calls)
    reads = sum(c.cache_read for c in calls)
    waited = sum(total for _, total in result.waits.values())
    return Figures(
        summarizer,
        result.cost().actual,
        reads / inputs if inputs else 0.0,
        waited,
        len(calls),
        *_discards(result.spans),
    )


HEADER = f"{'':34}{'inline':>42}   {'background':>42}   {'calls':>6} {'cost':>7} {'reads':>7}"
_SIDE = f"{'summ':>4} {'disc':>4} {'disc $':>7} {'cost $':>9} {'reads':>7} {'wait s':>6}"
SUB = f"{'':34}{_SIDE}   {_SIDE}"


def _compare(label: str, inline: Figures, background: Figures) -> tuple[str, bool]:
    extra = background.summarizer_calls - inline.summarizer_calls
    ratio = background.cost / inline.cost if inline.cost else 0.0
    reads = 100 * (background.cache_read_share - inline.cache_read_share)
    # One-sided: background may do better than inline, never worse than the margins.
    ok = extra <= 1 and ratio <= 1.03 and reads >= -1.0
    line = f"{label:34}{inline.row()}   {background.row()}   {extra:>+6d} {ratio:>7.3f} {reads:>+6.1f}{'' if ok else '  <-'}"
    return line, ok


def demo_part(providers: Sequence[str], latencies: Sequence[float]) -> bool:
    print("The demo (50 turns, 24,000-token window, microcompaction on)")
    print(HEADER)
    print(SUB)
    ok = True
    for provider in providers:
        for latency in latencies:
            inline, background = run_demo(provider, latency, False), run_demo(provider, latency, True)
            line, good = _compare(f"{provider}, latency {latency:g} s", inline, background)
            ok &= good
            print(line, flush=True)
    return ok


def loop_part(providers: Sequence[str], windows: Sequence[int], turns: int, latency: float) -> bool:
    print(f"\nThe tool-heavy loop ({turns} turns, a ~1,600-token file read a turn, latency {latency:g} s)")
    print(HEADER + f" {'micro on/off':>14}")
    print(SUB + f" {'inline':>7} {'backgr':>7}")
    ok = True
    for provider in providers:
        for window in windows:
            runs: dict[tuple[bool, bool], Figures] = {}
            for micro in (False, True):
                for background in (False, True):
                    runs[micro, background] = run_loop(provider, window, background, micro, turns, latency)
            for micro in (False, True):
                label = f"{provider}, {window:,}, micro {'on' if micro else 'off'}"
                line, good = _compare(label, runs[micro, False], runs[micro, True])
                ok &= good
                if micro:
                    on_off = [runs[True, b].cost / runs[False, b].cost for b in (False, True)]
                    ok &= all(r <= 1.03 for r in on_off)
                    line += f" {on_off[0]:>7.3f} {on_off[1]:>7.3f}"
                print(line, flush=True)
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("demo", "loop", "all"), default="all")
    parser.add_argument("--provider", default="anthropic,openai", help="comma-separated (default: both)")
    parser.add_argument("--windows", default=",".join(str(w) for w in LOOP_WINDOWS))
    parser.add_argument("--latencies", default=",".join(f"{x:g}" for x in DEMO_LATENCIES))
    parser.add_argument("--turns", type=int, default=LOOP_TURNS)
    parser.add_argument("--loop-latencies", default=f"0,{LOOP_LATENCY:g}", help="the loop's model latencies")
    args = parser.parse_args(argv)
    providers = [p.strip() for p in args.provider.split(",") if p.strip()]
    began = time.monotonic()
    ok = True
    if args.part in ("demo", "all"):
        ok &= demo_part(providers, [float(x) for x in args.latencies.split(",")])
    if args.part in ("loop", "all"):
        for latency in (float(x) for x in args.loop_latencies.split(",")):
            ok &= loop_part(providers, [int(w) for w in args.windows.split(",")], args.turns, latency)
    print(
        "\nsumm: summarizer calls; disc, disc $: summaries discarded unsent and their summarizer's spend; reads: cache reads / input; wait: seconds requests waited for compactions, in all;"
        "\ncalls/cost/reads: background against inline (+calls, cost ratio, points); micro on/off: cost ratio."
    )
    print(f"{'every target met' if ok else 'targets NOT met (<-)'}; {time.monotonic() - began:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
