"""The Prometheus alert rules: promtool accepts them, their unit tests pass, and every alert is tested both ways."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from .support import RULE_TESTS, RULES, load_yaml, prometheus_alert_rules, run_promtool

RULE_TEST_FILES = sorted(RULE_TESTS.glob("*_test.yml"))
ALERT_NAMES = [rule["alert"] for rule in prometheus_alert_rules()]


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in result.stdout


def test_the_alerts_the_issue_asks_for() -> None:
    assert ALERT_NAMES == [
        "OtelContextCompactionFailing",
        "OtelContextCircuitBreakerOpen",
        "OtelContextUnexpectedCacheBreaks",
        "OtelContextCacheBreakSpend",
        "OtelContextUtilizationNearLimit",
        "OtelContextCompactionLosesMuch",
        "OtelContextLLMErrorRatio",
    ]


@pytest.mark.parametrize("rule", prometheus_alert_rules(), ids=ALERT_NAMES)
def test_every_alert_tells_on_call_what_to_do(rule: dict[str, object]) -> None:
    annotations = rule["annotations"]
    assert isinstance(annotations, dict)
    assert annotations["summary"]
    assert "What to do" in annotations["description"]
    assert rule["labels"] == {"severity": "warning"}


@pytest.mark.parametrize("test_file", RULE_TEST_FILES, ids=[p.name for p in RULE_TEST_FILES])
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    result = run_promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_firing_case_and_a_quiet_case() -> None:
    fires: dict[str, int] = defaultdict(int)
    quiet: dict[str, int] = defaultdict(int)
    for test_file in RULE_TEST_FILES:
        doc = load_yaml(test_file)
        assert doc["rule_files"] == ["../rules.yml"], f"{test_file.name} must test the shipped rules"
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (fires if check["exp_alerts"] else quiet)[check["alertname"]] += 1
    for name in ALERT_NAMES:
        assert fires[name] > 0, f"no promtool test where {name} fires"
        assert quiet[name] > 0, f"no promtool test where {name} must stay quiet"


def test_compaction_alert_is_tested_with_a_series_born_at_one() -> None:
    """A series whose first sample is already 1 (``_`` = no sample yet) must be among the firing cases."""
    doc = load_yaml(RULE_TESTS / "compaction_failing_test.yml")
    born_at_one = [
        case
        for case in doc["tests"]
        if any(s["values"].split()[0] == "_" and "failure" in s["series"] for s in case["input_series"])
        and any(c["exp_alerts"] for c in case.get("alert_rule_test", []))
    ]
    assert born_at_one


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The promtool harness can fail: an alert expected where none fires is reported."""
    (tmp_path / "rules.yml").write_text(RULES.read_text())
    (tmp_path / "wrong_test.yml").write_text(
        """
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'otel_context_compactions_total{job="app", otel_context_compaction_trigger_source="auto", otel_context_compaction_outcome="failure"}'
        values: '0x10'
    alert_rule_test:
      - eval_time: 5m
        alertname: OtelContextCompactionFailing
        exp_alerts:
          - exp_labels: {severity: warning, job: app, otel_context_compaction_trigger_source: auto}
"""
    )
    result = run_promtool("test", "rules", "wrong_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr
