"""Every PromQL expression the project ships parses: promtool checks them wrapped as recording rules."""

from __future__ import annotations

from pathlib import Path

import yaml

from .support import every_promql, run_promtool


def _check_as_recording_rules(exprs: list[str], path: Path) -> tuple[int, str]:
    rules = [{"record": f"otel_context_check:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "promql-check", "rules": rules}]}))
    result = run_promtool("check", "rules", path)
    return result.returncode, result.stdout + result.stderr


def test_every_shipped_expression_parses(tmp_path: Path) -> None:
    found = every_promql()
    # 20-odd panel queries, 5 Prometheus alerts and the same 5 in Grafana.
    assert len(found) >= 30
    code, output = _check_as_recording_rules([expr for _, expr in found], tmp_path / "rules.yml")
    if code != 0:
        # Name the panel or rule: check each expression on its own.
        failures = []
        for i, (where, expr) in enumerate(found):
            one_code, one_output = _check_as_recording_rules([expr], tmp_path / f"rule_{i}.yml")
            if one_code != 0:
                failures.append(f"{where}: {one_output}")
        raise AssertionError("\n".join(failures) or output)
    assert f"SUCCESS: {len(found)} rules found" in output


def test_the_check_rejects_a_broken_expression(tmp_path: Path) -> None:
    code, output = _check_as_recording_rules(["sum(rate(otel_context_compactions_total[5m])"], tmp_path / "bad.yml")
    assert code != 0
    assert "parse error" in output
