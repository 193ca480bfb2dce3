"""The viewing stacks: docker-compose.yml is valid YAML with the expected profiles, ports and mounts, and every
file it mounts exists and lands where the provisioning files say. (Docker does not run here: nothing claims
the stack was started.)"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from .support import (
    COMPOSE,
    DASHBOARD_JSON,
    DASHBOARD_PROVIDER,
    DASHBOARDS,
    DATASOURCES,
    GRAFANA_ALERTS,
    LGTM_PROMETHEUS,
    RULES,
    load_yaml,
)

LGTM_PROVISIONING = PurePosixPath("/otel-lgtm/grafana/conf/provisioning")


def _services() -> dict[str, Any]:
    services: dict[str, Any] = load_yaml(COMPOSE)["services"]
    return services


def _mounts(service: str) -> dict[str, str]:
    """Host path (relative to dashboards/) -> container path, for the service's bind mounts."""
    mounts = {}
    for volume in _services()[service].get("volumes", []):
        source, target, *mode = volume.split(":")
        assert mode == ["ro"], f"{volume}: mount read-only"
        mounts[source] = target
    return mounts


def _published(port: object, env: dict[str, str] | None = None) -> tuple[str, str, str]:
    """(host address, host port, container port) of a ``ports`` entry, its ``${VAR:-default}`` resolved as
    compose resolves it (from ``env``, else the default)."""

    def value(match: re.Match[str]) -> str:
        return (env or {}).get(match.group(1)) or match.group(2)

    address, host, container = re.sub(r"\$\{(\w+):-([^}]*)\}", value, str(port)).rsplit(":", 2)
    return address, host, container


def _ports(service: str) -> set[str]:
    return {_published(port)[2] for port in _services()[service]["ports"]}


def test_profiles_and_images() -> None:
    services = _services()
    assert set(services) == {"lgtm", "jaeger"}
    assert services["lgtm"]["profiles"] == ["lgtm"]
    assert services["jaeger"]["profiles"] == ["jaeger"]
    assert "grafana/otel-lgtm:" in services["lgtm"]["image"]
    assert "jaegertracing/jaeger:" in services["jaeger"]["image"]
    assert ":${JAEGER_VERSION:-2." in services["jaeger"]["image"], "Jaeger v2"


def test_ports() -> None:
    assert _ports("lgtm") == {"3000", "4317", "4318", "9090", "3200"}
    assert _ports("jaeger") == {"16686", "4317", "4318"}
    for service in ("lgtm", "jaeger"):
        for port in _services()[service]["ports"]:
            address, host, container = _published(port)
            assert host == container, f"{service}: the README documents the standard ports"
            # Grafana is an anonymous admin and the collector takes anything: this machine only, by default.
            assert address == "127.0.0.1", f"{service}: {port} must be published on 127.0.0.1 by default"
            assert _published(port, {"OTEL_CONTEXT_BIND": "0.0.0.0"})[0] == "0.0.0.0"


def test_every_mounted_file_exists() -> None:
    for service in _services():
        for source in _mounts(service):
            assert (DASHBOARDS / source).is_file(), f"{service} mounts missing {source}"


def test_lgtm_mounts_our_dashboard_rules_and_provisioning() -> None:
    mounts = {(DASHBOARDS / source).resolve(): PurePosixPath(target) for source, target in _mounts("lgtm").items()}
    assert mounts[DASHBOARD_PROVIDER].parent == LGTM_PROVISIONING / "dashboards"
    assert mounts[DATASOURCES].parent == LGTM_PROVISIONING / "datasources"
    assert mounts[GRAFANA_ALERTS].parent == LGTM_PROVISIONING / "alerting"
    # otel-lgtm starts Prometheus with --config.file=./prometheus.yaml from /otel-lgtm.
    assert mounts[LGTM_PROMETHEUS] == PurePosixPath("/otel-lgtm/prometheus.yaml")

    # The dashboard lands in the folder the provider reads, and is the home dashboard.
    (provider,) = load_yaml(DASHBOARD_PROVIDER)["providers"]
    assert mounts[DASHBOARD_JSON].parent == PurePosixPath(provider["options"]["path"])
    home = _services()["lgtm"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert PurePosixPath(home) == mounts[DASHBOARD_JSON]

    # Prometheus loads the rules from where they are mounted.
    assert load_yaml(LGTM_PROMETHEUS)["rule_files"] == [str(mounts[RULES.resolve()])]


def test_datasource_uids_match_what_dashboards_and_alerts_use() -> None:
    datasources = {ds["uid"]: ds for ds in load_yaml(DATASOURCES)["datasources"]}
    assert datasources["prometheus"]["type"] == "prometheus"
    assert datasources["tempo"]["type"] == "tempo"
    assert [ds["uid"] for ds in datasources.values() if ds.get("isDefault")] == ["prometheus"]
