"""Helpers shared by the dashboard/alerting tests: paths, the generator, promtool, and PromQL extraction."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.servers import require_binary

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
RULES = DASHBOARDS / "prometheus" / "rules.yml"
RULE_TESTS = DASHBOARDS / "prometheus" / "tests"
DASHBOARD_JSON = DASHBOARDS / "grafana" / "llm-context.json"
GRAFANA_ALERTS = DASHBOARDS / "grafana" / "provisioning" / "alerting" / "otel-context-alerts.yml"
DATASOURCES = DASHBOARDS / "grafana" / "provisioning" / "datasources" / "datasources.yml"
DASHBOARD_PROVIDER = DASHBOARDS / "grafana" / "provisioning" / "dashboards" / "otel-context.yml"
COMPOSE = DASHBOARDS / "docker-compose.yml"
LGTM_PROMETHEUS = DASHBOARDS / "prometheus" / "lgtm-prometheus.yml"

#: Values Grafana substitutes for its built-in variables, so promtool can parse the panel queries.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}

#: How to get promtool and prometheus: Debian's prometheus package ships both (.ci/run installs it with a
#: policy-rc.d that exits 101, so that the package does not start a server).
PROMETHEUS_INSTALL = "apt-get install -y --no-install-recommends prometheus"


def load_build() -> ModuleType:
    """``dashboards/build.py`` as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("otel_context_dashboards_build", DASHBOARDS / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_prometheus_binary(name: str) -> str:
    """The path of ``name`` (promtool, prometheus); skipped when missing, failed under CI (see servers.py)."""
    return require_binary(name, PROMETHEUS_INSTALL)


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool; the result carries stdout/stderr for assertion messages."""
    promtool = require_prometheus_binary("promtool")
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD_JSON.read_text())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside collapsed rows."""
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def prometheus_targets(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(panel title, target) for every target of a panel on the Prometheus datasource."""
    for panel in panels(board):
        if panel.get("datasource", {}).get("type") != "prometheus":
            continue
        for target in panel.get("targets", []):
            yield panel["title"], target


def grafana_alert_rules() -> list[dict[str, Any]]:
    doc = load_yaml(GRAFANA_ALERTS)
    return [rule for group in doc["groups"] for rule in group["rules"]]


def grafana_alert_promql() -> Iterator[tuple[str, str]]:
    """(rule title, PromQL) of every Prometheus query in the Grafana alert provisioning."""
    datasource_uids = {ds["uid"] for ds in load_yaml(DATASOURCES)["datasources"] if ds["type"] == "prometheus"}
    for rule in grafana_alert_rules():
        for query in rule["data"]:
            if query["datasourceUid"] in datasource_uids:
                yield rule["title"], query["model"]["expr"]


def prometheus_alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(RULES)["groups"] for rule in group["rules"]]


def substitute_grafana_variables(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    leftover = re.findall(r"\$\{?\w+", expr)
    assert not leftover, f"unknown Grafana variables {leftover} in {expr!r}"
    return expr


def every_promql() -> list[tuple[str, str]]:
    """(where, PromQL) of every expression the project ships: dashboard panels, Prometheus rules, Grafana alerts."""
    found = [
        (f"dashboard panel {title!r} {target['refId']}", substitute_grafana_variables(target["expr"]))
        for title, target in prometheus_targets(dashboard())
    ]
    found += [(f"Prometheus rule {rule['alert']}", rule["expr"]) for rule in prometheus_alert_rules()]
    found += [(f"Grafana alert {title}", expr) for title, expr in grafana_alert_promql()]
    return found
