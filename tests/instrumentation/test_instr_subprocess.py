"""Zero-code paths, each in a fresh interpreter: ``opentelemetry-instrument`` and ``import otel_context.auto``.

The one-import test exports over real OTLP/HTTP to a loopback receiver (a tiny ``http.server``) and decodes
the protobuf with ``opentelemetry-proto``: what a user would see in Jaeger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from otel_context import semconv
from tests.instrumentation.instr_support import MODEL_A, MODEL_O

BIN = Path(sys.executable).parent

CALLS = """
import warnings
warnings.simplefilter("ignore")
import anthropic, openai
a = anthropic.Anthropic(base_url=BASE, api_key="k", max_retries=0)   # created BEFORE instrumenting
o = openai.OpenAI(base_url=BASE + "/v1", api_key="k", max_retries=0)
"""

DO_CALLS = f"""
a.messages.create(model="{MODEL_A}", max_tokens=50, messages=[{{"role": "user", "content": "hi"}}])
with a.messages.stream(model="{MODEL_A}", max_tokens=50, messages=[{{"role": "user", "content": "hi"}}]) as s:
    s.until_done()
o.chat.completions.create(model="{MODEL_O}", messages=[{{"role": "user", "content": "hi"}}])
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST"))}
    env.update(extra)
    return env


def test_opentelemetry_instrument_picks_up_our_entry_points(simulated_provider: Any, tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
            exporter = InMemorySpanExporter()
            provider = trace.get_tracer_provider()  # opentelemetry-instrument configured the SDK already
            assert isinstance(provider, TracerProvider), provider
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            BASE = sys.argv[1]
            """
        )
        + CALLS
        # the one import on top of opentelemetry-instrument: keeps the app's provider, does not stack
        + "from anthropic import _base_client as ab\nfrom openai import _base_client as ob\n"
        + "assert hasattr(ab.SyncAPIClient.__dict__['request'], '__wrapped__')  # by the entry point\n"
        + "assert hasattr(ob.AsyncAPIClient.__dict__['request'], '__wrapped__')\n"
        + "import otel_context.auto\nassert trace.get_tracer_provider() is provider\n"
        + "assert not hasattr(ab.SyncAPIClient.__dict__['request'].__wrapped__, '__wrapped__')  # no stacking\n"
        + DO_CALLS
        + "print(json.dumps([[s.name, s.instrumentation_scope.name] for s in exporter.get_finished_spans()]))\n"
    )
    done = subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(script), simulated_provider.base_url],
        env=_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spans = json.loads(done.stdout.strip().splitlines()[-1])
    assert spans == [
        [f"chat {MODEL_A}", "otel_context"],
        [f"chat {MODEL_A}", "otel_context"],
        [f"chat {MODEL_O}", "otel_context"],
    ]


class _Receiver(BaseHTTPRequestHandler):
    bodies: dict[str, list[bytes]]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.server.bodies.setdefault(self.path, []).append(self.rfile.read(length))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def otlp_receiver() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.bodies = {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _attr_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_attr_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def test_one_import_exports_otlp_http(simulated_provider: Any, tmp_path: Path, otlp_receiver: Any) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    script = tmp_path / "app.py"
    script.write_text("import sys\nBASE = sys.argv[1]\n" + CALLS + "import otel_context.auto\n" + DO_CALLS)
    endpoint = f"http://127.0.0.1:{otlp_receiver.server_address[1]}"
    done = subprocess.run(
        [sys.executable, str(script), simulated_provider.base_url],
        env=_env(
            OTEL_SERVICE_NAME="probe-app",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRIC_EXPORT_INTERVAL="600000",
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spans: list[tuple[str, Any]] = []
    resources = []
    for body in otlp_receiver.bodies.get("/v1/traces", []):
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            resources.append({kv.key: _attr_value(kv.value) for kv in rs.resource.attributes})
            for ss in rs.scope_spans:
                spans.extend((ss.scope.name, s) for s in ss.spans)
    assert sorted(s.name for _, s in spans) == [f"chat {MODEL_A}", f"chat {MODEL_A}", f"chat {MODEL_O}"]
    assert {scope for scope, _ in spans} == {semconv.SCOPE_NAME}
    assert resources[0]["service.name"] == "probe-app"
    assert resources[0]["deployment.environment"] == "test"
    streamed = [
        s for _, s in spans if {kv.key: _attr_value(kv.value) for kv in s.attributes}.get(semconv.GEN_AI_REQUEST_STREAM)
    ]
    assert len(streamed) == 1
    metric_names = set()
    for body in otlp_receiver.bodies.get("/v1/metrics", []):
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        metric_names |= {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert semconv.METRIC_INFERENCE_DURATION in metric_names
    assert semconv.METRIC_USAGE_INPUT_TOKENS in metric_names


def test_one_import_warns_about_bad_settings_and_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import otel_context.auto"],
        env=_env(
            OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="ALL",
            OTEL_TRACES_EXPORTER="none",
            OTEL_METRICS_EXPORTER="none",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr  # a telemetry setting never stops the app
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT='ALL'" in done.stderr and "SPAN_ONLY" in done.stderr
    assert "using the default (NO_CONTENT) instead" in done.stderr and "Traceback" not in done.stderr
