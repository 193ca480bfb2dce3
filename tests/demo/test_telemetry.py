"""Where the demo's telemetry goes: memory always, OTLP when the standard variables say so."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from otel_context.demo import DemoOptions, run
from otel_context.demo.telemetry import otlp_target


class _Collector(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP posts and remembers their paths (nothing is decoded)."""

    paths: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).paths.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[str]]]:
    paths: list[str] = []
    handler = type("Handler", (_Collector,), {"paths": paths})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", paths
    finally:
        server.shutdown()
        server.server_close()


def test_spans_and_metrics_go_to_the_otlp_endpoint(
    collector: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, paths = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    result = run(DemoOptions(turns=2))
    assert result.otlp == (endpoint, "http/protobuf")
    assert "/v1/traces" in paths and "/v1/metrics" in paths  # flushed at the end of the run
    assert result.spans  # and the in-memory copy for the terminal summary


def test_otlp_target_follows_the_standard_variables() -> None:
    assert otlp_target({}) is None
    assert otlp_target({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ("http://c:4318", "http/protobuf")
    assert otlp_target(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    ) == (
        "http://c:4317",
        "grpc",
    )
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        otlp_target({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
