"""``otel_context.instrument()`` in a program that set no tracer provider up (a fresh interpreter: the test
process has one): it says once what is missing and what to do, and ``TokenMonitor().attach()`` says the same
kind of thing instead of a bare complaint about OpenTelemetry's placeholder provider."""

from __future__ import annotations

import os
import subprocess
import sys

from otel_context.telemetry import NO_TRACER_PROVIDER

CALLS = """
import otel_context
from otel_context.testing import SimulatedProvider

otel_context.instrument()
{before}
with SimulatedProvider() as sim:
    client = sim.anthropic()
    for _ in range(3):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{{"role": "user", "content": "Hi"}}])
{after}
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"  # read by otel_context.auto only, as the message says
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_calls_without_a_tracer_provider_say_so_once() -> None:
    proc = _run(CALLS.format(before="", after=""))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(NO_TRACER_PROVIDER) == 1, proc.stderr
    assert "import otel_context.auto" in NO_TRACER_PROVIDER and "trace.set_tracer_provider" in NO_TRACER_PROVIDER


def test_a_provider_set_after_instrument_gets_the_spans_and_no_warning() -> None:
    before = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
"""
    proc = _run(CALLS.format(before=before, after="print(len(exporter.get_finished_spans()))"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3" and "no OpenTelemetry tracer provider" not in proc.stderr


def test_the_token_monitor_without_a_tracer_provider_says_what_to_do() -> None:
    code = """
from otel_context import TokenMonitor
try:
    TokenMonitor().attach()
except RuntimeError as exc:
    print(exc)
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout
    assert "no tracer provider is set up yet" in said
    assert "Import otel_context.auto before attaching" in said and "TokenMonitor().attach(tracer_provider)" in said
