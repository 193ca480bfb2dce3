"""The demo's last line says where the telemetry went by what the collector answered: a traces-only
endpoint (Arize Phoenix answers /v1/metrics with 405) is not reported as having received the metrics."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from otel_context.demo import DemoOptions, run
from otel_context.demo.report import telemetry_note


class _TracesOnly(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP traces; refuses metrics with 405, as a traces-only viewer does."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200 if self.path == "/v1/traces" else 405)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def traces_only() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TracesOnly)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_refused_metrics_are_not_called_exported(traces_only: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", traces_only)
    note = telemetry_note(run(DemoOptions(turns=2)))
    assert f"spans exported to {traces_only} over OTLP" in note
    assert "metrics exported" not in note and "spans and metrics" not in note
    # Every metric export failed (the flush and the shutdown each send one).
    assert re.search(
        rf"(\d+) of \1 metric exports to {re.escape(traces_only)} over OTLP \(http/protobuf\) failed", note
    )
    assert "OTEL_METRICS_EXPORTER=none" in note


def test_metrics_none_sends_traces_only(traces_only: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", traces_only)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    note = telemetry_note(run(DemoOptions(turns=2)))
    assert f"spans exported to {traces_only} over OTLP (http/protobuf)" in note and "failed" not in note
