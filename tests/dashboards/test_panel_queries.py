"""The compaction-mode panels compute what their titles say: promtool evaluates the dashboard's own queries on
scraped-like series (``promql_expr_test``), so a wrong label, matcher or quantile is caught, not just a typo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from otel_context import semconv

from .support import dashboard, panels, run_promtool, substitute_grafana_variables

MODE = semconv.COMPACTION_MODE.replace(".", "_")
OUTCOME = semconv.COMPACTION_OUTCOME.replace(".", "_")
STRATEGY = semconv.COMPACTION_STRATEGY.replace(".", "_")
TRIGGER = semconv.COMPACTION_TRIGGER_SOURCE.replace(".", "_")


def _exprs(title: str) -> list[str]:
    (panel,) = [p for p in panels(dashboard()) if p["title"] == title]
    return [substitute_grafana_variables(t["expr"]) for t in panel["targets"]]


def _wait_series(mode: str, per_minute: dict[str, int]) -> list[dict[str, str]]:
    """Wait-histogram buckets of one mode, each growing by ``per_minute[le]`` every minute for 10 minutes."""
    labels = f'{MODE}="{mode}", {TRIGGER}="{semconv.TRIGGER_AUTO}", job="app"'
    return [
        {"series": f'{semconv.PROM_COMPACTION_WAIT}_bucket{{le="{le}", {labels}}}', "values": f"0+{n}x10"}
        for le, n in per_minute.items()
    ]


def _compactions(mode: str, strategy: str, outcome: str, per_minute: int) -> dict[str, str]:
    labels = f'{MODE}="{mode}", {STRATEGY}="{strategy}", {OUTCOME}="{outcome}", {TRIGGER}="auto", job="app"'
    return {"series": f"{semconv.PROM_COMPACTIONS_TOTAL}{{{labels}}}", "values": f"0+{per_minute}x10"}


def _run(tmp_path: Path, series: list[dict[str, str]], checks: list[dict[str, Any]]) -> tuple[int, str]:
    (tmp_path / "empty_rules.yml").write_text("groups: []\n")
    doc = {
        "rule_files": ["empty_rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
    }
    (tmp_path / "panels_test.yml").write_text(yaml.safe_dump(doc, width=10_000))
    result = run_promtool("test", "rules", "panels_test.yml", cwd=tmp_path)
    return result.returncode, result.stdout + result.stderr


# Background: 10 callers a minute waited 0 s (the prepared summary was ready); inline: 1 a minute waited
# between 2.56 and 5.12 s (a summarizer call). Buckets are cumulative.
WAITS = _wait_series(semconv.MODE_BACKGROUND, {"0": 10, "2.56": 10, "5.12": 10, "+Inf": 10}) + _wait_series(
    semconv.MODE_INLINE, {"0": 0, "2.56": 0, "5.12": 1, "+Inf": 1}
)


def _quantile_check(expr: str, background: float, inline: float) -> dict[str, Any]:
    """The panel's query, rounded to the millisecond (interpolation leaves float noise such as 4.991999…)."""
    return {
        "expr": f"round({expr}, 0.001)",
        "eval_time": "8m",
        "exp_samples": [
            {"labels": f'{{{MODE}="{semconv.MODE_BACKGROUND}"}}', "value": background},
            {"labels": f'{{{MODE}="{semconv.MODE_INLINE}"}}', "value": inline},
        ],
    }


def test_wait_panel_gives_each_mode_its_own_quantiles(tmp_path: Path) -> None:
    p50, p95 = _exprs("Time callers waited for compaction")
    # Linear interpolation inside the (2.56, 5.12] bucket: 2.56 + 2.56 * q.
    checks = [_quantile_check(p50, 0, 3.84), _quantile_check(p95, 0, 4.992)]
    code, output = _run(tmp_path, WAITS, checks)
    assert code == 0, output


def test_wait_panel_check_can_fail(tmp_path: Path) -> None:
    """The same harness reports a wrong expectation (background callers did not wait 3.84 s)."""
    p50, _ = _exprs("Time callers waited for compaction")
    code, output = _run(tmp_path, WAITS, [_quantile_check(p50, 3.84, 3.84)])
    assert code != 0 and "FAILED" in output


def test_mode_panel_counts_summaries_per_second_by_mode_and_outcome(tmp_path: Path) -> None:
    (expr,) = _exprs("Summary compactions by mode")
    series = [
        _compactions(semconv.MODE_BACKGROUND, semconv.STRATEGY_SUMMARY, semconv.OUTCOME_SUCCESS, 6),
        _compactions(semconv.MODE_BACKGROUND, semconv.STRATEGY_SUMMARY, semconv.OUTCOME_DISCARDED, 3),
        _compactions(semconv.MODE_INLINE, semconv.STRATEGY_SUMMARY, semconv.OUTCOME_SUCCESS, 3),
        # Microcompaction is inline by nature and makes no LLM call: not part of background vs inline.
        _compactions(semconv.MODE_INLINE, semconv.STRATEGY_MICROCOMPACT, semconv.OUTCOME_SUCCESS, 60),
    ]

    def sample(mode: str, outcome: str, value: float) -> dict[str, Any]:
        return {"labels": f'{{{MODE}="{mode}", {OUTCOME}="{outcome}"}}', "value": value}

    check = {
        "expr": expr,
        "eval_time": "8m",
        "exp_samples": [
            sample(semconv.MODE_BACKGROUND, semconv.OUTCOME_SUCCESS, 0.1),
            sample(semconv.MODE_BACKGROUND, semconv.OUTCOME_DISCARDED, 0.05),
            sample(semconv.MODE_INLINE, semconv.OUTCOME_SUCCESS, 0.05),
        ],
    }
    code, output = _run(tmp_path, series, [check])
    assert code == 0, output


PURPOSE = semconv.CALL_PURPOSE.replace(".", "_")


def test_cost_panel_counts_only_the_summarizers_tokens_next_to_the_tokens_saved(tmp_path: Path) -> None:
    summarizer_in, summarizer_out, saved = _exprs("Compaction cost vs tokens saved")
    app = 'gen_ai_provider_name="anthropic", gen_ai_request_model="m", job="app"'
    series = [
        # The app's calls: 6,000 input and 600 output tokens a minute; the summarizer's: 1,200 and 120.
        {"series": f"{semconv.PROM_USAGE_INPUT_TOKENS_TOTAL}{{{app}}}", "values": "0+6000x10"},
        {"series": f"{semconv.PROM_USAGE_OUTPUT_TOKENS_TOTAL}{{{app}}}", "values": "0+600x10"},
        {
            "series": f'{semconv.PROM_USAGE_INPUT_TOKENS_TOTAL}{{{app}, {PURPOSE}="compaction"}}',
            "values": "0+1200x10",
        },
        {
            "series": f'{semconv.PROM_USAGE_OUTPUT_TOKENS_TOTAL}{{{app}, {PURPOSE}="compaction"}}',
            "values": "0+120x10",
        },
        # One compaction a minute removing 9,000 context tokens.
        {
            "series": f'{semconv.PROM_COMPACTION_TOKENS_SAVED}_sum{{{STRATEGY}="summary", {TRIGGER}="auto", job="app"}}',
            "values": "0+9000x10",
        },
    ]
    checks = [
        {"expr": f"round({expr}, 0.001)", "eval_time": "8m", "exp_samples": [{"labels": "{}", "value": value}]}
        for expr, value in ((summarizer_in, 20), (summarizer_out, 2), (saved, 150))
    ]
    code, output = _run(tmp_path, series, checks)
    assert code == 0, output


def test_retention_panel_gives_each_strategy_its_quantiles(tmp_path: Path) -> None:
    p50, p10, raw50, raw10 = _exprs("Compaction retention")

    def buckets(
        strategy: str, per_minute: dict[str, int], metric: str = semconv.PROM_COMPACTION_RETENTION
    ) -> list[dict[str, str]]:
        labels = f'{STRATEGY}="{strategy}", {TRIGGER}="auto", job="app"'
        return [
            {"series": f'{metric}_bucket{{le="{le}", {labels}}}', "values": f"0+{n}x10"} for le, n in per_minute.items()
        ]

    # Summaries: all between 0.9 and 0.95 as sent, between 0.5 and 0.6 as written (before the repair);
    # microcompaction: all between 0.1 and 0.2 (nothing repairs it: the same figure twice).
    before = semconv.PROM_COMPACTION_RETENTION_BEFORE_REPAIR
    series = (
        buckets(semconv.STRATEGY_SUMMARY, {"0.9": 0, "0.95": 10, "1.0": 10, "+Inf": 10})
        + buckets(semconv.STRATEGY_MICROCOMPACT, {"0.1": 0, "0.2": 10, "1.0": 10, "+Inf": 10})
        + buckets(semconv.STRATEGY_SUMMARY, {"0.5": 0, "0.6": 10, "1.0": 10, "+Inf": 10}, before)
        + buckets(semconv.STRATEGY_MICROCOMPACT, {"0.1": 0, "0.2": 10, "1.0": 10, "+Inf": 10}, before)
    )

    def check(expr: str, summary: float, micro: float) -> dict[str, Any]:
        return {
            "expr": f"round({expr}, 0.001)",
            "eval_time": "8m",
            "exp_samples": [
                {"labels": f'{{{STRATEGY}="{semconv.STRATEGY_SUMMARY}"}}', "value": summary},
                {"labels": f'{{{STRATEGY}="{semconv.STRATEGY_MICROCOMPACT}"}}', "value": micro},
            ],
        }

    # Linear interpolation inside the bucket: lower + width * q.
    checks = [check(p50, 0.925, 0.15), check(p10, 0.905, 0.11), check(raw50, 0.55, 0.15), check(raw10, 0.51, 0.11)]
    code, output = _run(tmp_path, series, checks)
    assert code == 0, output


def _diagnoses(provider: str, ours: str, theirs: str, agreement: str, per_minute: int) -> dict[str, str]:
    labels = (
        f'{semconv.GEN_AI_PROVIDER_NAME.replace(".", "_")}="{provider}", '
        f'{semconv.CACHE_DIAGNOSIS_DETECTOR_REASON.replace(".", "_")}="{ours}", '
        f'{semconv.CACHE_DIAGNOSIS_PROVIDER_REASON.replace(".", "_")}="{theirs}", '
        f'{semconv.CACHE_DIAGNOSIS_AGREEMENT.replace(".", "_")}="{agreement}", job="app"'
    )
    return {"series": f"{semconv.PROM_CACHE_DIAGNOSES_TOTAL}{{{labels}}}", "values": f"0+{per_minute}x10"}


def test_agreement_panels_share_the_verdicts_and_name_each_disagreement(tmp_path: Path) -> None:
    (agreement,) = _exprs("Cache-break detector vs the provider")
    (disagreements,) = _exprs("Detector and provider disagree")
    series = [
        # Anthropic, a minute: 6 hits and 2 system changes agreed, 1 miss we did not see, 3 pending (no verdict).
        _diagnoses("anthropic", "none", "hit", "agree", 6),
        _diagnoses("anthropic", "system_changed", "system_changed", "agree", 2),
        _diagnoses("anthropic", "none", "messages_changed", "disagree", 1),
        _diagnoses("anthropic", "none", "pending", "unknown", 3),
        # OpenAI: 4 compactions agreed.
        _diagnoses("openai", "compaction", "input_changed", "agree", 4),
    ]
    provider = semconv.GEN_AI_PROVIDER_NAME.replace(".", "_")
    ours = semconv.CACHE_DIAGNOSIS_DETECTOR_REASON.replace(".", "_")
    theirs = semconv.CACHE_DIAGNOSIS_PROVIDER_REASON.replace(".", "_")
    checks = [
        {
            "expr": f"round({agreement}, 0.001)",
            "eval_time": "8m",
            "exp_samples": [
                {"labels": f'{{{provider}="anthropic"}}', "value": round(8 / 9, 3)},
                {"labels": f'{{{provider}="openai"}}', "value": 1},
            ],
        },
        {
            "expr": f"round({disagreements} * 60, 0.001)",
            "eval_time": "8m",
            "exp_samples": [{"labels": f'{{{ours}="none", {theirs}="messages_changed"}}', "value": 1}],
        },
    ]
    code, output = _run(tmp_path, series, checks)
    assert code == 0, output


INTENTIONAL = semconv.CACHE_BREAK_INTENTIONAL.replace(".", "_")
REASON = semconv.CACHE_BREAK_REASON.replace(".", "_")


def test_cost_panels_compute_what_their_titles_say(tmp_path: Path) -> None:
    """Spend by model, the cache-write share, the spend lost to unexpected breaks and compaction's net saving, on
    series of known rates (USD a minute), in USD per hour."""
    app = 'gen_ai_provider_name="anthropic", gen_ai_request_model="m", job="app"'
    series = [
        # The app's calls cost 10 cents a minute, 3 of them cache writes; the summarizer's 2 cents.
        {"series": f"{semconv.PROM_SPEND_TOTAL}{{{app}}}", "values": "0+0.1x10"},
        {"series": f"{semconv.PROM_SPEND_CACHE_WRITE_TOTAL}{{{app}}}", "values": "0+0.03x10"},
        {"series": f'{semconv.PROM_SPEND_TOTAL}{{{app}, {PURPOSE}="compaction"}}', "values": "0+0.02x10"},
        # Compactions saved 5 cents a minute on the calls that sent their result; their breaks cost 1 cent.
        {"series": f"{semconv.PROM_COMPACTION_SAVING_TOTAL}{{{app}}}", "values": "0+0.05x10"},
        {
            "series": f'{semconv.PROM_CACHE_BREAK_COST_TOTAL}{{{INTENTIONAL}="true", {REASON}="compaction", job="app"}}',
            "values": "0+0.01x10",
        },
        # Unexpected breaks: 0.4 cents a minute lost to a changing system prompt.
        {
            "series": f'{semconv.PROM_CACHE_BREAK_COST_TOTAL}{{{INTENTIONAL}="false", {REASON}="system_changed", job="app"}}',
            "values": "0+0.004x10",
        },
    ]
    model = '{gen_ai_provider_name="anthropic", gen_ai_request_model="m"}'
    by_model, summarizer = _exprs("Spend by model")
    (share,) = _exprs("Cache-write share of spend")
    (lost,) = _exprs("Spend lost to unexpected cache breaks")
    saved, cost, net = _exprs("Compaction's net saving")

    def check(expr: str, labels: str, value: float) -> dict[str, Any]:
        return {"expr": f"round({expr}, 0.001)", "eval_time": "8m", "exp_samples": [{"labels": labels, "value": value}]}

    checks = [
        check(by_model, model, 6.0),  # the app's own calls: 10 cents a minute, $6 an hour
        check(summarizer, model, 1.2),
        # Writes are 3 of the 12 cents all calls cost (the summarizer's included).
        check(share, model, 0.25),
        check(lost, f'{{{REASON}="system_changed"}}', 0.24),
        check(saved, "{}", 3.0),
        check(cost, "{}", 1.8),  # the summarizer's 2 cents and the breaks' 1 cent a minute
        check(net, "{}", 1.2),
    ]
    code, output = _run(tmp_path, series, checks)
    assert code == 0, output


def test_net_saving_without_compaction_is_zero_not_empty(tmp_path: Path) -> None:
    """An app that never compacted: the panel shows 0, not "No data" (each part falls back to 0)."""
    series = [{"series": f'{semconv.PROM_SPEND_TOTAL}{{job="app"}}', "values": "0+0.1x10"}]
    (net,) = _exprs("Compaction's net saving")[2:]
    checks = [{"expr": net, "eval_time": "8m", "exp_samples": [{"labels": "{}", "value": 0}]}]
    code, output = _run(tmp_path, series, checks)
    assert code == 0, output
