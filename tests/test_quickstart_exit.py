"""The quickstart (``import otel_context.auto``, no OTEL_* variables) on a laptop with no collector running.

Run in a subprocess, as a user runs it: at most one clear warning line, and an exit that export retries do
not hold up (before: six "Transient error ... Connection refused" lines and ~13 s to exit after the calls).
The bounds are generous (a loaded CI machine must not flake); the retries they catch take ten seconds.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

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


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends: nothing listens there


def _run(endpoint: str) -> tuple[float, list[str]]:
    """(seconds from the last call to the exit, stderr lines) of the quickstart sending to ``endpoint``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    exited = time.time()
    assert proc.returncode == 0, proc.stderr
    done = float(proc.stdout.split("calls done at", 1)[1].split()[0])
    return exited - done, [line for line in proc.stderr.splitlines() if line.strip()]


def test_no_collector_one_warning_line_and_a_prompt_exit() -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    delay, stderr = _run(endpoint)
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
