"""End to end, on loopback: an instrumented agent whose summarizer keeps failing serves /metrics, a real
Prometheus (Debian's binary) scrapes it with the shipped rules, and the compaction-failure alert fires.

Then the same scrape answers the other question: every metric name the dashboards and rules query is one
the app actually emits (older GenAI names are allowed only as the right-hand side of an ``or``).

Both processes bind 127.0.0.1 on free ports and are stopped by pid, whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_context import semconv

from .support import REPO, RULES, every_promql, require_prometheus_binary

EXAMPLE = REPO / "examples" / "failing_summarizer_metrics.py"
ALERT = "OtelContextCompactionFailing"
STARTUP_TIMEOUT = 30.0
ALERT_TIMEOUT = 60.0
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


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example app, serving /metrics on 127.0.0.1; yields its /metrics URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("app") / "app.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # no OTLP export from the test
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", str(port), "--pace", "0.2", "--duration", "150"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        _wait_for(url, proc, "the example app", log)
        yield url
    finally:
        _stop(proc)


@pytest.fixture
def prometheus(app: str, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus scraping the app every second with the shipped rules; yields its base URL."""
    binary = require_prometheus_binary("prometheus")
    port = _free_port()
    target = app.removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
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


def test_compaction_failure_alert_fires_in_a_real_prometheus(prometheus: str) -> None:
    deadline = time.monotonic() + ALERT_TIMEOUT
    seen: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        seen = json.loads(_get(f"{prometheus}/api/v1/alerts"))["data"]["alerts"]
        firing = [a for a in seen if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]
        if firing:
            labels = firing[0]["labels"]
            assert labels["job"] == "agent"
            assert labels["severity"] == "warning"
            assert labels[semconv.COMPACTION_TRIGGER_SOURCE.replace(".", "_")] == semconv.TRIGGER_AUTO
            assert "compaction(s) failed" in firing[0]["annotations"]["description"]
            return
        time.sleep(0.5)
    rules = json.loads(_get(f"{prometheus}/api/v1/rules"))
    targets = json.loads(_get(f"{prometheus}/api/v1/targets"))
    pytest.fail(
        f"{ALERT} not firing after {ALERT_TIMEOUT:.0f}s; alerts: {seen}; "
        f"targets: {[t['health'] for t in targets['data']['activeTargets']]}; rules: {rules}"
    )


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
