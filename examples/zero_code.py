"""Zero-code instrumentation: this file never imports otel_context's instrumentation.

    opentelemetry-instrument --traces_exporter console --metrics_exporter none python examples/zero_code.py

``opentelemetry-instrument`` loads every installed instrumentor, otel-context's included (entry points
``otel_context_anthropic`` and ``otel_context_openai``), and, with ``opentelemetry-distro`` installed,
configures OpenTelemetry from the standard OTEL_* variables or its flags. Run it with
``python examples/zero_code.py`` and nothing is traced.

Without ANTHROPIC_API_KEY it talks to the simulated provider; with the key, to the real API (one call).
"""

from __future__ import annotations

import os

import anthropic


def main(client: anthropic.Anthropic) -> None:
    response = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=200,
        messages=[{"role": "user", "content": "Say hello to the OpenTelemetry collector."}],
    )
    print("reply:", response.content[0].text)


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic())
    else:
        from otel_context.testing import SimulatedProvider  # a local fake API, not instrumentation

        with SimulatedProvider() as sim:
            main(sim.anthropic())
