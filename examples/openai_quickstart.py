"""OpenAI quick start: one import, Chat Completions and Responses, one span per call.

    python examples/openai_quickstart.py

Without OPENAI_API_KEY it talks to otel-context's simulated provider (a local HTTP server that speaks the
OpenAI API: free, offline); with the key set it calls the real API (two short requests).
"""

from __future__ import annotations

import json
import os

import openai
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

MODEL = "gpt-4.1"


def main(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You answer in one sentence."},
            {"role": "user", "content": "What does OpenTelemetry give an LLM app?"},
        ],
    )
    print("chat reply:", chat.choices[0].message.content)

    response = client.responses.create(model=MODEL, input="And what is a context window?")
    print("responses reply:", response.output_text)


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY"):
        main(openai.OpenAI())
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.openai())
    provider.shutdown()
