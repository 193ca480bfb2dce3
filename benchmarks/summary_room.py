"""The summarizer's output room at the threshold (issue 31 item 1): its ``max_tokens`` against the budget's reserve.

A chat app (real ``anthropic`` / ``openai`` SDK clients, the simulated provider) grows its history turn by turn
until the first compaction; the table gives the ``max_tokens`` of the first summarizer request, the input tokens
the provider counts for it, the budget's reserve (``window - effective``) and the compaction's outcome, for
200,000 and 30,000 windows, app ``max_tokens`` 1,024 / 8,192 / 32,000, inline and background.
Run: ``.venv/bin/python benchmarks/summary_room.py`` (~1 min on 2 cores).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import engine, semconv
from otel_context.compaction.budget import budget_for
from otel_context.instrumentation import _background
from otel_context.settings import Settings
from otel_context.testing import SimulatedProvider, count_request_tokens

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}
FORMATS: dict[str, Any] = {"anthropic": "anthropic_messages", "openai": "openai_chat"}


def _question(turn: int, words: int) -> str:
    return f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(words))


def _is_summary(body: Any) -> bool:
    items = body.get("messages") or [] if isinstance(body, dict) else []
    return bool(items) and "<summary>" in json.dumps(items[-1])


def run(sdk: str, window: int, app_max: int, background: bool) -> dict[str, Any]:
    model = MODELS[sdk]
    engine.reset()
    sim = SimulatedProvider()
    sim.start()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_context.instrument(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(),
        auto_compact_window=window,
        background_compaction=background,
    )
    try:
        sim.set_window(model, window)
        client = sim.anthropic(timeout=120.0) if sdk == "anthropic" else sim.openai()
        history: list[dict[str, Any]] = []
        words = window // 60  # ~40 turns to the threshold
        for turn in range(200):
            history.append({"role": "user", "content": _question(turn, words)})
            if sdk == "anthropic":
                reply = client.messages.create(model=model, max_tokens=app_max, messages=list(history))
                text = reply.content[0].text
            else:
                answer = client.chat.completions.create(model=model, max_tokens=app_max, messages=list(history))
                text = answer.choices[0].message.content or ""
            history.append({"role": "assistant", "content": text})
            deadline = time.monotonic() + 20
            while _background.running() and time.monotonic() < deadline:
                time.sleep(0.01)
            if any(s.name == semconv.COMPACT_SPAN for s in exporter.get_finished_spans()):
                break
        summaries = [e for e in sim.exchanges if _is_summary(e.body)]
        first = summaries[0]
        cap = first.body.get("max_tokens", first.body.get("max_completion_tokens"))
        compact = next(s for s in exporter.get_finished_spans() if s.name == semconv.COMPACT_SPAN)
        budget = budget_for(model, Settings(auto_compact_window=window), max_output_tokens=app_max)
        assert budget is not None
        return {
            "max_tokens": cap,
            "input": count_request_tokens(first.body, FORMATS[sdk]),
            "reserve": budget.window - budget.effective,
            "threshold": budget.auto_threshold,
            "outcome": (compact.attributes or {}).get(semconv.COMPACTION_OUTCOME),
            "requests": len(summaries),
        }
    finally:
        otel_context.uninstrument()
        sim.stop()
        tracer_provider.shutdown()


def main() -> None:
    print(
        "| SDK | window | app max_tokens | mode | reserve | summarizer max_tokens | its input | input + max_tokens | outcome |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for sdk in ("anthropic", "openai"):
        for window in (200_000, 30_000):
            for app_max in (1_024, 8_192, 32_000):
                for background in (False, True):
                    r = run(sdk, window, app_max, background)
                    mode = "background" if background else "inline"
                    print(
                        f"| {sdk} | {window:,} | {app_max:,} | {mode} | {r['reserve']:,} | {r['max_tokens']:,} "
                        f"| {r['input']:,} | {r['input'] + r['max_tokens']:,} | {r['outcome']} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
