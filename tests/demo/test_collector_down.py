"""``otel-context demo`` pointed at a collector that is not there yet (the README's Grafana/Jaeger command run
before the stack is up), at one that accepts and never answers, and at an endpoint that is no URL.

The console script in a subprocess, as a user runs it. Before: 35 s instead of 2 s, fifteen "Transient error
... retrying" and five "Failed to export" lines, and a closing note blaming the metrics. Now one line, as
``import otel_context.auto`` says it (both share :func:`otel_context.sdk_setup.guarded`), and an end the
exporter's retries do not hold up. The bounds are generous (a loaded machine must not flake): the retries
they catch take ten seconds per signal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import otlp_collector

SCRIPT = Path(sys.executable).parent / "otel-context"
#: Seconds from the last turn line to the exit that count as "not held up" (the summary, the flush, the exit).
END_BOUND = 6.0


@pytest.fixture
def silent_collector() -> Iterator[str]:
    with otlp_collector.silent_collector() as url:
        yield url


def _demo(endpoint: str, protocol: str, turns: int = 6) -> tuple[int, list[str], list[str], float]:
    """(exit status, stdout lines, stderr lines, seconds from the last turn line to the exit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    proc = subprocess.Popen(
        [str(SCRIPT), "demo", "--plain", "--turns", str(turns)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    last_turn = time.monotonic()
    out: list[str] = []
    for line in proc.stdout:
        out.append(line.rstrip("\n"))
        if line.startswith(f"turn {turns}/{turns}"):
            last_turn = time.monotonic()
    err = [line for line in proc.stderr.read().splitlines() if line.strip()]
    status = proc.wait(timeout=120)
    return status, out, err, time.monotonic() - last_turn


def _note(out: list[str]) -> str:
    """The closing "Telemetry: ..." note, its lines joined."""
    start = max(i for i, line in enumerate(out) if line.startswith("Telemetry:"))
    return " ".join(out[start:])


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_no_collector_yet_one_line_and_a_prompt_end(protocol: str) -> None:
    endpoint = f"http://127.0.0.1:{otlp_collector.closed_port()}"
    status, out, err, end = _demo(endpoint, protocol)
    assert status == 0, err
    assert len(err) == 1, err
    assert f"no OpenTelemetry collector listens at {endpoint}" in err[0]
    assert "start it first, or leave OTEL_EXPORTER_OTLP_ENDPOINT unset" in err[0]
    note = _note(out)
    assert f"no collector listened at {endpoint}" in note, note
    assert "the spans and metrics were dropped" in note and "OTEL_METRICS_EXPORTER" not in note  # metrics not blamed
    assert end < END_BOUND, f"the end took {end:.1f} s after the last turn"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_collector_that_never_answers_costs_the_end_two_seconds(silent_collector: str, protocol: str) -> None:
    status, out, err, end = _demo(silent_collector, protocol)
    assert status == 0, err
    assert len(err) == 1, err
    assert "did not answer within 2 s of the exit" in err[0]
    assert f"the collector at {silent_collector} did not answer within 2 s of the end" in _note(out)
    assert end < END_BOUND + 2, f"the end took {end:.1f} s after the last turn"


@pytest.mark.parametrize(
    ("endpoint", "protocol", "said"),
    [
        ("notaurl", "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT='notaurl' is not an OTLP endpoint"),
        ("http://localhost:4318", "bogus", "OTEL_EXPORTER_OTLP_PROTOCOL='bogus' is not supported"),
    ],
)
def test_settings_that_are_no_such_thing_stop_the_demo_with_one_line(endpoint: str, protocol: str, said: str) -> None:
    status, out, err, _ = _demo(endpoint, protocol)
    assert status == 2 and out == []
    assert len(err) == 1 and err[0].startswith(f"otel-context demo: {said}"), err
