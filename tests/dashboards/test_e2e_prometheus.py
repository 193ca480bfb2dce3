"""End to end, on loopback: the alert example (an instrumented agent whose summarizer keeps failing) serves
/metrics, a real Prometheus (Debian's binary) scrapes it with the shipped rules, and each alert the example
documents fires: compaction failing, then the circuit breaker open (its ``for: 5m`` shortened to seconds in
the test's copy of the rules, the expressions and texts unchanged). The example runs as a user runs it, until
Ctrl-C, and lives through what the breaker alert is about (histories that outgrow the model's window, made
small here so that this happens within the minute): it stops cleanly, with no traceback.

Then the same scrape answers the other question: every metric name the dashboards and rules query is one
the app actually emits (older GenAI names are allowed only as the right-hand side of an ``or``).

Both processes bind 127.0.0.1 on free ports and are stopped by pid, whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_context import semconv

from .support import REPO, RULES, every_promql, require_prometheus_binary

EXAMPLE = REPO / "examples" / "failing_summarizer_metrics.py"
ALERT = "OtelContextCompactionFailing"
BREAKER_ALERT = "OtelContextCircuitBreakerOpen"
STARTUP_TIMEOUT = 30.0
ALERT_TIMEOUT = 75.0
#: The simulated model's window for the example: small, so a conversation whose breaker is open outgrows it soon.
MODEL_WINDOW = "14000"
#: Metrics of older GenAI instrumentations: queried only as ``current or legacy``, never emitted by default.
LEGACY_PROM_NAMES = (
    semconv.PROM_LEGACY_OPERATION_DURATION,
    semconv.PROM_LEGACY_TOKEN_USAGE,
    semconv.PROM_LEGACY_TIME_TO_FIRST_CHUNK,
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str, timeout: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode()


def _wait_for(url: str, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            _get(url)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer {url} within {STARTUP_TIMEOUT:.0f}s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class App:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def example_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    """The example app as a user runs it (until Ctrl-C), serving /metrics on 127.0.0.1."""
    port = _free_port()
    log = tmp_path_factory.mktemp("app") / "app.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # no OTLP export from the test
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", str(port), "--pace", "0.1", "--model-window", MODEL_WINDOW],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        _wait_for(url, proc, "the example app", log)
        yield App(url, proc, log)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def app(example_app: App) -> str:
    """The example app's /metrics URL."""
    return example_app.url


@pytest.fixture
def prometheus(app: str, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the app every second with the shipped rules; yields its base URL.

    The rules are the shipped file with each ``for:`` hold cut to seconds (5m -> 5s): what fires, and the
    text it shows, is the shipped rules'."""
    binary = require_prometheus_binary("prometheus")
    port = _free_port()
    target = app.removeprefix("http://").removesuffix("/metrics")
    rules = tmp_path / "rules.yml"
    shipped = RULES.read_text()
    shortened = re.sub(r"(?m)^(\s+for: )(\d+)m$", r"\g<1>\g<2>s", shipped)
    assert shortened.count("for: 5s") == shipped.count("for: 5m") > 0
    rules.write_text(shortened)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [{"job_name": "agent", "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(f"{base}/-/ready", proc, "prometheus", log)
        yield base
    finally:
        _stop(proc)


def test_each_alert_the_example_documents_fires_in_a_real_prometheus(prometheus: str, example_app: App) -> None:
    deadline = time.monotonic() + ALERT_TIMEOUT
    seen: list[dict[str, Any]] = []
    firing: dict[str, dict[str, Any]] = {}
    refused = False
    while time.monotonic() < deadline:
        seen = json.loads(_get(f"{prometheus}/api/v1/alerts"))["data"]["alerts"]
        firing.update({a["labels"]["alertname"]: a for a in seen if a["state"] == "firing"})
        # The breaker is open and a history outgrew the window: the provider refused it, the agent went on.
        refused = refused or "coding agent: the provider refused the call (400, prompt is too long" in (
            example_app.log.read_text()
        )
        if ALERT in firing and BREAKER_ALERT in firing and refused:
            break
        assert example_app.proc.poll() is None, example_app.log.read_text()[-3000:]
        time.sleep(0.5)
    else:
        rules = json.loads(_get(f"{prometheus}/api/v1/rules"))
        targets = json.loads(_get(f"{prometheus}/api/v1/targets"))
        pytest.fail(
            f"after {ALERT_TIMEOUT:.0f}s: firing {sorted(firing)}, refusal seen {refused}; alerts: {seen}; "
            f"targets: {[t['health'] for t in targets['data']['activeTargets']]}; rules: {rules}"
        )
    labels = firing[ALERT]["labels"]
    assert labels["job"] == "agent"
    assert labels["severity"] == "warning"
    assert labels[semconv.COMPACTION_TRIGGER_SOURCE.replace(".", "_")] == semconv.TRIGGER_AUTO
    description = firing[ALERT]["annotations"]["description"]
    assert re.match(r"\d+ compaction\(s\) failed in the last 10 minutes", description), description
    breaker = firing[BREAKER_ALERT]
    assert breaker["labels"][semconv.GEN_AI_REQUEST_MODEL.replace(".", "_")] == "claude-haiku-4-5"
    assert re.match(
        r"Auto-compaction stopped for \d+ conversation\(s\) of claude-haiku-4-5 on agent$",
        (breaker["annotations"]["summary"]),
    ), breaker["annotations"]["summary"]
    # The app's log says it too: the failure's cause, and the breaker.
    log = example_app.log.read_text()
    assert "otel_context: a compaction failed" in log and "the summarization service is unreachable" in log
    assert "otel_context: the compaction circuit breaker opened" in log


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]")
_NAME_SELECTOR = re.compile(r'__name__=~"([^"]+)"')
_NAMED_SELECTOR = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\{")


def _emitted_names(exposition: str) -> set[str]:
    return {m.group(1) for line in exposition.splitlines() if (m := _LINE.match(line))}


def _problems(queries: list[tuple[str, str]], names: set[str]) -> list[str]:
    """What is wrong with ``queries`` given the emitted ``names`` (empty when every query reads real metrics)."""
    problems = []
    for where, expr in queries:
        if _NAMED_SELECTOR.search(expr):
            problems.append(f"{where}: select metrics by __name__ regex only: {expr}")
        matched_current = False
        for pattern in _NAME_SELECTOR.findall(expr):
            canonical = pattern.split("|")[0]
            if any(re.fullmatch(pattern, n) for n in names):
                matched_current = True
            elif canonical.startswith(LEGACY_PROM_NAMES):
                # A documented alternate: allowed only when the query also reads the current name with `or`.
                if "\nor\n" not in expr:
                    problems.append(f"{where}: legacy name {canonical} queried without `or`")
            else:
                problems.append(f"{where}: nothing emitted matches {canonical}")
        if not matched_current:
            problems.append(f"{where}: reads no emitted metric")
    return problems


def test_the_name_check_reports_what_nothing_emits() -> None:
    names = {semconv.PROM_COMPACTIONS_TOTAL}
    ok = ("ok", f'sum({{__name__=~"{semconv.PROM_COMPACTIONS_TOTAL}|otel_context_compactions"}})')
    typo = ("typo", 'sum({__name__=~"otel_context_compaction_total"})')
    legacy_alone = ("legacy", f'sum({{__name__=~"{semconv.PROM_LEGACY_OPERATION_DURATION}_count"}})')
    bare = ("bare", f'sum({semconv.PROM_COMPACTIONS_TOTAL}{{job="a"}})')
    assert _problems([ok], names) == []
    assert _problems([typo], names) == [
        "typo: nothing emitted matches otel_context_compaction_total",
        "typo: reads no emitted metric",
    ]
    assert "legacy: legacy name" in _problems([legacy_alone], names)[0]
    assert _problems([bare], names)[0].startswith("bare: select metrics by __name__ regex only")


def test_every_metric_the_dashboards_and_rules_query_is_emitted(app: str) -> None:
    # Let the agents run until every kind of event has happened (failures, microcompaction, cache breaks, a
    # caller waiting for a compaction).
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        names = _emitted_names(_get(app))
        wanted = (
            semconv.PROM_BREAKERS_OPEN,
            semconv.PROM_COMPACTION_TOKENS_SAVED + "_count",
            semconv.PROM_COMPACTION_WAIT + "_count",
            semconv.PROM_COMPACTION_RETENTION + "_count",
        )
        if all(name in names for name in wanted):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    problems = _problems(every_promql(), names)
    assert not problems, "\n".join(problems) + f"\n\nemitted: {sorted(names)}"


def test_the_example_stops_cleanly_on_ctrl_c(example_app: App) -> None:
    """Last in this file: the example, alive after everything above, ends on Ctrl-C without a traceback."""
    assert example_app.proc.poll() is None, example_app.log.read_text()[-3000:]
    example_app.proc.send_signal(signal.SIGINT)
    assert example_app.proc.wait(timeout=30) == 0
    log = example_app.log.read_text()
    assert "Traceback" not in log and "Error" not in log.replace("error_", ""), log[-3000:]
