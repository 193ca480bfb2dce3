"""The quickstart (``import otel_context.auto``) on a laptop with no collector running, a collector that
accepts and never answers, and exporter settings that are no such thing.

Run in a subprocess, as a user runs it: at most one clear warning line, and an exit that export retries do
not hold up (before: six "Transient error ... Connection refused" lines and ~13 s to exit after the calls;
25 s with a collector that never answers). The bounds are generous (a loaded CI machine must not flake); the
retries they catch take ten seconds and more.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests import otlp_collector

SCRIPT = """
import time
import otel_context.auto
from otel_context.testing import SimulatedProvider

with SimulatedProvider() as sim:
    client = sim.anthropic()
    for _ in range(3):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=[{"role": "user", "content": "Hi"}])
print("calls done at", time.time(), flush=True)
"""

#: Seconds between the last call and the process exit that count as "not held up" (retries take ~10 s).
EXIT_BOUND = 4.0


def _run(endpoint: str, **variables: str) -> tuple[float, list[str]]:
    """(seconds from the last call to the exit, stderr lines) of the quickstart sending to ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env.update(variables)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    exited = time.time()
    assert proc.returncode == 0, proc.stderr
    done = float(proc.stdout.split("calls done at", 1)[1].split()[0])
    return exited - done, [line for line in proc.stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_no_collector_one_warning_line_and_a_prompt_exit(protocol: str) -> None:
    endpoint = f"http://127.0.0.1:{otlp_collector.closed_port()}"
    delay, stderr = _run(endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    assert len(stderr) <= 1, stderr
    assert stderr and endpoint in stderr[0] and "OTEL_TRACES_EXPORTER=console" in stderr[0], stderr
    assert delay < EXIT_BOUND, f"exit held up {delay:.1f} s after the last call"


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        _Collector.received.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Collector.received = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_listening_collector_still_receives_traces_and_metrics(collector: str) -> None:
    delay, stderr = _run(collector)
    assert stderr == []
    assert "/v1/traces" in _Collector.received and "/v1/metrics" in _Collector.received
    assert delay < EXIT_BOUND


@pytest.fixture
def silent_collector() -> Iterator[str]:
    with otlp_collector.silent_collector() as url:
        yield url


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_collector_that_never_answers_holds_the_exit_two_seconds(silent_collector: str, protocol: str) -> None:
    delay, stderr = _run(silent_collector, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    assert len(stderr) == 1, stderr
    assert f"the OpenTelemetry collector at {silent_collector} did not answer within 2 s of the exit" in stderr[0]
    assert delay < EXIT_BOUND + 2, f"exit held up {delay:.1f} s after the last call"  # was 25 s


def test_a_bad_protocol_is_said_once(collector: str) -> None:
    _, stderr = _run(collector, OTEL_EXPORTER_OTLP_PROTOCOL="bogus")
    assert stderr == [
        "otel_context: OTEL_EXPORTER_OTLP_PROTOCOL='bogus' is not supported; use one of http/protobuf, grpc; using "
        "the default (http/protobuf) instead"
    ]
    assert "/v1/traces" in _Collector.received and "/v1/metrics" in _Collector.received


@pytest.mark.parametrize(
    ("endpoint", "protocol"),
    [("notaurl", "http/protobuf"), ("localhost:4318", "http/protobuf"), ("http://[::1", "grpc"), ("ftp://x", "grpc")],
)
def test_an_endpoint_that_is_no_url_is_one_line_with_what_would_do(endpoint: str, protocol: str) -> None:
    delay, stderr = _run(endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    example = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    assert stderr == [
        f"otel_context: OTEL_EXPORTER_OTLP_ENDPOINT={endpoint!r} is not an OTLP endpoint: with {protocol} it is the "
        f"collector's URL, such as {example}; nothing is sent there"
    ]
    assert delay < EXIT_BOUND
