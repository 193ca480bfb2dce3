"""The committed dashboard and alert files are what dashboards/build.py generates, and carry what the issue asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from otel_context import semconv

from .support import DASHBOARDS, dashboard, grafana_alert_rules, load_build, panels, prometheus_alert_rules


def label(attribute: str) -> str:
    """The Prometheus label of an attribute (written out here, not taken from the generator under test)."""
    return attribute.replace(".", "_")


def test_committed_files_are_not_stale() -> None:
    build = load_build()
    stale = build.stale_files()
    assert stale == [], f"regenerate with `make dashboards` and commit: {stale}"


def test_stale_check_notices_an_edit(tmp_path: Path) -> None:
    """The staleness check compares content: a hand edit of a generated file is reported."""
    build = load_build()
    build.write(tmp_path)
    assert build.stale_files(tmp_path) == []
    edited = tmp_path / "grafana" / "llm-context.json"
    edited.write_text(edited.read_text().replace("LLM context", "LLM context (edited)"))
    assert build.stale_files(tmp_path) == ["grafana/llm-context.json"]


def test_check_mode_exit_code() -> None:
    build = load_build()
    assert build.main(["--check"]) == 0


def test_generation_is_deterministic() -> None:
    build = load_build()
    first = build.render()
    assert first == build.render()
    assert set(first) == {
        "grafana/llm-context.json",
        "prometheus/rules.yml",
        "grafana/provisioning/alerting/otel-context-alerts.yml",
    }
    assert all((DASHBOARDS / rel).is_file() for rel in first)


def test_datasource_variables_for_metrics_and_traces() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["ds_prometheus"]["type"] == "datasource"
    assert variables["ds_prometheus"]["query"] == "prometheus"
    assert variables["ds_traces"]["query"] == "tempo"
    assert variables["ds_jaeger"]["query"] == "jaeger"


def test_every_panel_reads_its_datasource_from_a_variable() -> None:
    for panel in panels(dashboard()):
        if panel["type"] == "row":
            continue
        uid = panel["datasource"]["uid"]
        assert uid.startswith("${ds_"), f"{panel['title']!r} hard-codes datasource {uid!r}"


def test_panels_the_issue_asks_for() -> None:
    titles = {panel["title"] for panel in panels(dashboard())}
    for wanted in (
        "Calls per second",
        "Error ratio",
        "Latency",
        "Time to first chunk",
        "Tokens per second",
        "Cache hit ratio",
        "Cache writes vs reads",
        "Cache breaks",
        "Compactions by trigger and outcome",
        "Compaction duration",
        "Tokens saved per compaction",
        "Summary compactions by mode",
        "Time callers waited for compaction",
        "Open circuit breakers by model",
        "Compaction retention",
        "Compaction cost vs tokens saved",
        "Spend by model",
        "Cache-write share of spend",
        "Spend lost to unexpected cache breaks",
        "Compaction's net saving",
        "Context utilization p95",
        "Recent compactions",
        "Failed compactions",
    ):
        assert wanted in titles


def test_latency_panel_shows_p50_p95_p99() -> None:
    (latency,) = [p for p in panels(dashboard()) if p["title"] == "Latency"]
    exprs = [t["expr"] for t in latency["targets"]]
    assert [e.split(",")[0] for e in exprs] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.95",
        "histogram_quantile(0.99",
    ]


def test_trace_panels_query_compact_spans_by_traceql() -> None:
    queries = {
        p["title"]: p["targets"][0]["query"]
        for p in panels(dashboard())
        if p.get("datasource", {}).get("type") == "tempo"
    }
    assert queries["Recent compactions"] == f'{{ name = "{semconv.COMPACT_SPAN}" }}'
    assert queries["Failed compactions"] == f'{{ name = "{semconv.COMPACT_SPAN}" && status = error }}'
    assert semconv.GEN_AI_CONVERSATION_COMPACTED in queries["Chat calls on compacted context"]
    assert semconv.CACHE_BREAK_EVENT in queries["Unexpected cache breaks"]


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in panels(dashboard())]
    assert len(ids) == len(set(ids))


def test_queries_read_every_name_translation_and_the_legacy_names() -> None:
    """Selectors match the underscore, unsuffixed and dotted forms; call metrics also read the older names."""
    exprs = "\n".join(t["expr"] for p in panels(dashboard()) for t in p.get("targets", []) if "expr" in t)
    for form in (
        semconv.PROM_INFERENCE_DURATION + "_bucket",
        "gen_ai_client_inference_duration_bucket",
        "gen_ai[.]client[.]inference[.]duration_seconds_bucket",
        semconv.PROM_COMPACTIONS_TOTAL,
        "otel_context_compactions|",
        semconv.PROM_LEGACY_OPERATION_DURATION + "_bucket",
        semconv.PROM_LEGACY_TOKEN_USAGE + "_sum",
        semconv.PROM_LEGACY_TIME_TO_FIRST_CHUNK + "_bucket",
    ):
        assert form in exprs, form


def test_readme_shows_the_commands_and_the_dashboard_searches() -> None:
    readme = (DASHBOARDS / "README.md").read_text()
    assert "docker compose -f dashboards/docker-compose.yml --profile lgtm up" in readme
    assert "docker compose -f dashboards/docker-compose.yml --profile jaeger up" in readme
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318" in readme
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            if "query" in target:  # TraceQL
                assert f"`{target['query']}`" in readme, target["query"]
            if target.get("queryType") == "search":  # Jaeger
                assert f"`{target['tags']}`" in readme, target["tags"]


def test_dashboard_round_trips_through_the_grafana_schema_model() -> None:
    """Parsing the JSON with the SDK's Grafana 11.6 dashboard model and writing it back loses nothing:
    every field is one the schema knows, with the type it expects."""
    import json

    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import dashboard as dashboard_model

    original = dashboard()
    parsed = dashboard_model.Dashboard.from_json(original)
    assert json.loads(json.dumps(parsed, cls=JSONEncoder)) == original


def _panel(title: str) -> dict[str, Any]:
    (found,) = [p for p in panels(dashboard()) if p["title"] == title]
    return found


def test_background_vs_inline_panel_counts_summaries_by_mode() -> None:
    (target,) = _panel("Summary compactions by mode")["targets"]
    mode, outcome, strategy = (
        label(semconv.COMPACTION_MODE),
        label(semconv.COMPACTION_OUTCOME),
        label(semconv.COMPACTION_STRATEGY),
    )
    assert target["expr"].startswith(f"sum by ({mode}, {outcome}) (rate(")
    assert semconv.PROM_COMPACTIONS_TOTAL in target["expr"]
    assert f'{strategy}="{semconv.STRATEGY_SUMMARY}"' in target["expr"]
    assert target["legendFormat"] == f"{{{{{mode}}}}} {{{{{outcome}}}}}"


def test_wait_panel_shows_p50_and_p95_of_the_wait_by_mode() -> None:
    targets = _panel("Time callers waited for compaction")["targets"]
    mode = label(semconv.COMPACTION_MODE)
    assert [t["expr"].split(",")[0] for t in targets] == ["histogram_quantile(0.5", "histogram_quantile(0.95"]
    for target in targets:
        assert semconv.PROM_COMPACTION_WAIT + "_bucket" in target["expr"]
        assert f"sum by (le, {mode})" in target["expr"]


def test_every_cache_break_reason_is_named_where_reasons_are_listed() -> None:
    """The cache-breaks panel and the alert's on-call text (both renderings) name every reason semconv has."""
    texts = {
        "panel": _panel("Cache breaks")["description"],
        "prometheus": next(
            r["annotations"]["description"]
            for r in prometheus_alert_rules()
            if r["alert"] == "OtelContextUnexpectedCacheBreaks"
        ),
        "grafana": next(
            r["annotations"]["description"]
            for r in grafana_alert_rules()
            if r["title"] == "OtelContextUnexpectedCacheBreaks"
        ),
    }
    for where, text in texts.items():
        missing = [reason for reason in semconv.CACHE_BREAK_REASONS if reason not in text]
        assert not missing, f"{where} does not name {missing}"
    assert semconv.REASON_BETAS_CHANGED in semconv.CACHE_BREAK_REASONS
