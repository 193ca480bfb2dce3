"""Anthropic quick start: one import, one call, one span.

    python examples/anthropic_quickstart.py

Without ANTHROPIC_API_KEY it talks to otel-context's simulated provider (a local HTTP server that speaks
the Anthropic API: free, offline); with the key set it calls the real API (one short request).

Your app configures OpenTelemetry as it already does (here: print each finished span to the terminal);
``import otel_context.auto`` then instruments the anthropic SDK with those providers. For a signal your app
has no provider for, the import sets one up from the standard OTEL_* variables (OTLP by default, e.g. to
OTEL_EXPORTER_OTLP_ENDPOINT; OTEL_TRACES_EXPORTER/OTEL_METRICS_EXPORTER=none turn a signal off).
"""

from __future__ import annotations

import json
import os

import anthropic
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

provider = TracerProvider()
provider.add_span_processor(
    SimpleSpanProcessor(
        ConsoleSpanExporter(formatter=lambda s: f"span: {s.name} {json.dumps(dict(s.attributes or {}))}\n")
    )
)
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider())  # add a metric reader/exporter here to ship the metrics

import otel_context.auto  # noqa: E402,F401  (the one import: after your own OpenTelemetry setup)

MODEL = "claude-sonnet-4-6"


def main(client: anthropic.Anthropic) -> None:
    response = client.messages.create(
        model=MODEL,
        max_tokens=200,
        system="You answer in one sentence.",
        messages=[{"role": "user", "content": "What does OpenTelemetry give an LLM app?"}],
    )
    print("reply:", response.content[0].text)
    print("usage:", response.usage.input_tokens, "in /", response.usage.output_tokens, "out")


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic())
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.anthropic())
    provider.shutdown()
