"""Grafana alert provisioning: well-formed, referring to queries and datasources that exist, and the same
conditions as the Prometheus rules."""

from __future__ import annotations

from .support import DATASOURCES, GRAFANA_ALERTS, grafana_alert_rules, load_yaml, prometheus_alert_rules

EXPRESSION_UID = "__expr__"


def test_provisioning_file_shape() -> None:
    doc = load_yaml(GRAFANA_ALERTS)
    assert doc["apiVersion"] == 1
    (group,) = doc["groups"]
    assert group["orgId"] == 1
    assert group["folder"] and group["name"]
    assert group["interval"] == "1m"
    uids = [rule["uid"] for rule in group["rules"]]
    assert len(uids) == len(set(uids))
    assert all(len(uid) <= 40 for uid in uids)


def test_rules_refer_to_existing_queries_and_datasources() -> None:
    datasource_uids = {ds["uid"] for ds in load_yaml(DATASOURCES)["datasources"]}
    for rule in grafana_alert_rules():
        ref_ids = {query["refId"] for query in rule["data"]}
        assert rule["condition"] in ref_ids, rule["title"]
        for query in rule["data"]:
            assert query["model"]["refId"] == query["refId"]
            uid = query["datasourceUid"]
            if uid == EXPRESSION_UID:
                # Server-side expressions read other queries of the same rule.
                assert query["model"]["type"] in {"threshold", "reduce", "math"}
                assert query["model"]["expression"] in ref_ids - {query["refId"]}
            else:
                assert uid in datasource_uids, f"{rule['title']}: unknown datasource {uid!r}"
                assert query["model"]["expr"].strip()
                assert query["model"]["instant"] is True
                assert query["relativeTimeRange"]["from"] > 0
        assert rule["noDataState"] == "OK"
        assert rule["execErrState"] == "Error"
        assert {"summary", "description"} <= set(rule["annotations"])


def test_same_conditions_as_the_prometheus_rules() -> None:
    grafana = {rule["title"]: rule for rule in grafana_alert_rules()}
    prometheus = {rule["alert"]: rule for rule in prometheus_alert_rules()}
    assert set(grafana) == set(prometheus)
    for name, prom_rule in prometheus.items():
        g_rule = grafana[name]
        queries = {query["refId"]: query for query in g_rule["data"]}
        condition = queries[g_rule["condition"]]["model"]
        (evaluator,) = [c["evaluator"] for c in condition["conditions"]]
        assert evaluator["type"] == "gt"
        (threshold,) = evaluator["params"]
        value = queries[condition["expression"]]["model"]["expr"]
        # Prometheus: (value) > threshold; Grafana: A = value, C = A > threshold.
        head, _, prom_threshold = prom_rule["expr"].rpartition(") > ")
        assert head == f"(\n{value}\n", name
        assert float(prom_threshold) == threshold, name
        assert g_rule["for"] == prom_rule["for"], name
        assert g_rule["labels"] == prom_rule["labels"], name


def test_value_templates_use_each_systems_syntax() -> None:
    for rule in grafana_alert_rules():
        text = rule["annotations"]["summary"] + rule["annotations"]["description"]
        assert "$value " not in text and "$value|" not in text, rule["title"]
        assert "$values.A.Value" in text, rule["title"]
    for rule in prometheus_alert_rules():
        text = rule["annotations"]["summary"] + rule["annotations"]["description"]
        assert "{{ $value | humanize" in text or '{{ $value | printf "%.0f" }}' in text, rule["alert"]
