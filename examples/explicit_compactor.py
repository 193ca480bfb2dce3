"""The explicit Compactor API, for apps that manage their own history.

    python examples/explicit_compactor.py

Here the app decides when to compact (``should_compact``) and replaces its own list with the compacted
one (``Compactor.compact`` returns a new list; the old one is untouched). The instrumentation runs in
``observe`` mode, so the SDK calls are traced but never rewritten: every compaction is the app's. The
``compact`` span, with the summarizer's ``chat`` span under it, is printed at the end.

Without ANTHROPIC_API_KEY it runs on the simulated provider; with the key, on the real API (about 15
short calls with a pretend window of 6,000 tokens).
"""

from __future__ import annotations

import os
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import Compactor, semconv, should_compact

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
otel_context.instrument(tracer_provider=provider, compaction="observe")

MODEL = "claude-sonnet-4-6"
WINDOW = 6_000  # pretend window, so that a few turns are enough
QUESTIONS = [
    "FACT: the service is written in Go 1.22 and deployed on Kubernetes.",
    *[
        f"Question {i}: how should we size the connection pool for {i * 50} requests per second? words:150"
        for i in range(1, 13)
    ],
]


def main(client: anthropic.Anthropic, simulated: bool) -> None:
    compactor = Compactor(client=client)
    history: list[dict[str, Any]] = []
    for question in QUESTIONS:
        if not simulated:
            question = question.split(" words:")[0]  # the simulated model's reply-length directive
        history.append({"role": "user", "content": question})
        if should_compact(history, model=MODEL, window=WINDOW):
            result = compactor.compact(history, model=MODEL, window=WINDOW)
            print(
                f"compacted: {len(history)} -> {len(result.messages)} messages, "
                f"{result.input_tokens:,} -> {result.output_tokens:,} tokens ({result.outcome})"
            )
            history = result.messages
        response = client.messages.create(model=MODEL, max_tokens=400, messages=history)
        history.append({"role": "assistant", "content": response.content[0].text})
        print(f"asked: {question[:50]!r}... history now {len(history)} messages")

    facts = [m for m in history if "FACT:" in str(m["content"])]
    print(f"the FACT line survived the compactions: {bool(facts)}")
    for span in spans.get_finished_spans():
        if span.name == semconv.COMPACT_SPAN:
            attrs = span.attributes or {}
            print(
                f"span compact: trigger={attrs.get(semconv.COMPACTION_TRIGGER_SOURCE)} "
                f"strategy={attrs.get(semconv.COMPACTION_STRATEGY)} outcome={attrs.get(semconv.COMPACTION_OUTCOME)}"
            )


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic(), simulated=False)
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.anthropic(), simulated=True)
    otel_context.uninstrument()
    provider.shutdown()
