"""``python -m otel_context.testing``: bad arguments are one-line usage errors, never tracebacks."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "99999"], "argument --port: 99999 is out of range: it must be between 0 and 65535"),
        (["--port", "abc"], "argument --port: 'abc' is not a whole number"),
        (["--latency", "-1"], "argument --latency: -1 is out of range: it must be at least 0"),
        (["--default-window", "0"], "argument --default-window: 0 is out of range"),
        (["--window", "gpt-4o=0"], "argument --window: expected MODEL=TOKENS"),
        (["--host", "192.0.2.1"], "cannot listen on 192.0.2.1:0"),  # TEST-NET-1: never this machine's address
    ],
)
def test_bad_arguments_are_clear_errors(args: list[str], says: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "otel_context.testing", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr
