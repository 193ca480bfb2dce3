"""The budget: model table, effective window, thresholds, overrides from code and from env."""

from __future__ import annotations

import logging

import pytest

from otel_context.compaction.budget import budget_for, lookup_model
from otel_context.settings import Settings, SettingsError, resolve


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-5", 200_000),
        ("claude-sonnet-4-5-20250929", 200_000),
        ("claude-3-5-haiku-latest", 200_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4.1-mini-2025-04-14", 1_047_576),
        ("gpt-4o", 128_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-5", 400_000),
        ("gpt-5-mini", 400_000),
        ("o3", 200_000),
        ("o4-mini", 200_000),
        ("gpt-4", 8_192),
        ("deepseek-chat", 128_000),
    ],
)
def test_model_table(model: str, window: int) -> None:
    spec = lookup_model(model)
    assert spec is not None and spec.window == window


def test_unknown_model_has_no_budget_unless_overridden() -> None:
    assert lookup_model("my-local-llama") is None
    assert budget_for("my-local-llama", Settings()) is None
    budget = budget_for("my-local-llama", Settings(auto_compact_window=50_000))
    assert budget is not None and budget.window == 50_000 and budget.overridden


def test_claude_200k_thresholds_match_production_constants() -> None:
    budget = budget_for("claude-sonnet-4-5", Settings())
    assert budget is not None
    assert (budget.window, budget.effective) == (200_000, 180_000)
    assert budget.auto_threshold == 167_000
    assert budget.warning_threshold == budget.error_threshold == 160_000
    assert budget.blocking_limit == 177_000


def test_1m_beta_header_selects_the_1m_window() -> None:
    budget = budget_for("claude-sonnet-4-5", Settings(), headers={"anthropic-beta": "foo, context-1m-2025-08-07"})
    assert budget is not None and budget.window == 1_000_000
    # A model without the 1M variant keeps 200K.
    other = budget_for("claude-3-5-haiku", Settings(), headers={"anthropic-beta": "context-1m-2025-08-07"})
    assert other is not None and other.window == 200_000


def test_the_calls_max_tokens_sets_the_summary_reserve() -> None:
    budget = budget_for("claude-sonnet-4-5", Settings(), max_output_tokens=4_096)
    assert budget is not None and budget.effective == 200_000 - 4_096


def test_small_windows_scale_the_buffers() -> None:
    budget = budget_for("claude-sonnet-4-5", Settings(auto_compact_window=30_000), max_output_tokens=1_000)
    assert budget is not None
    assert budget.effective == 29_000
    assert budget.auto_threshold == 29_000 - 1_950
    assert budget.warning_threshold == 29_000 - 3_000
    assert budget.blocking_limit == 29_000 - 450
    assert 0 < budget.warning_threshold < budget.auto_threshold < budget.blocking_limit < budget.effective


def test_pct_override_only_lowers() -> None:
    low = budget_for("claude-sonnet-4-5", Settings(autocompact_pct_override=50))
    assert low is not None and low.auto_threshold == 90_000
    high = budget_for("claude-sonnet-4-5", Settings(autocompact_pct_override=99))
    assert high is not None and high.auto_threshold == 167_000


def test_blocking_override() -> None:
    budget = budget_for("gpt-4o", Settings(blocking_limit_override=100_000))
    assert budget is not None and budget.blocking_limit == 100_000


@pytest.mark.parametrize(
    ("var", "value", "field", "expected"),
    [
        ("OTEL_CONTEXT_AUTO_COMPACT_WINDOW", "50000", "auto_compact_window", 50_000),
        ("OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE", "60", "autocompact_pct_override", 60.0),
        ("OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE", "90000", "blocking_limit_override", 90_000),
    ],
)
def test_budget_knobs_from_env_reach_the_budget(var: str, value: str, field: str, expected: object) -> None:
    settings = resolve(env={var: value})
    assert getattr(settings, field) == expected
    budget = budget_for("claude-sonnet-4-5", settings)
    assert budget is not None
    if field == "auto_compact_window":
        assert budget.window == 50_000
    elif field == "autocompact_pct_override":
        assert budget.auto_threshold == 108_000
    else:
        assert budget.blocking_limit == 90_000


def test_code_wins_over_env() -> None:
    settings = resolve({"auto_compact_window": 40_000}, env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "50000"})
    budget = budget_for("gpt-4o", settings)
    assert budget is not None and budget.window == 40_000


def test_a_text_setting_given_as_none_from_code_is_unset() -> None:
    # instrument(summary_model=os.environ.get("...")) with the variable missing: the summarizer is the call's
    # model, not a model named "None".
    assert resolve({"summary_model": None}, env={}).summary_model is None
    assert resolve({"summary_model": " claude-haiku-4-5 "}, env={}).summary_model == "claude-haiku-4-5"


def test_bad_env_value_names_the_variable(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        assert resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "lots"}).auto_compact_window is None
    assert any("OTEL_CONTEXT_AUTO_COMPACT_WINDOW='lots'" in r.getMessage() for r in caplog.records)
    with pytest.raises(SettingsError, match="auto_compact_window"):
        resolve({"auto_compact_window": "lots"}, env={})


def test_states() -> None:
    budget = budget_for("claude-sonnet-4-5", Settings())
    assert budget is not None
    assert budget.state(10_000, compaction_available=True) == "ok"
    assert budget.state(161_000, compaction_available=True) == "warning"
    assert budget.state(161_000, compaction_available=False) == "error"
    assert budget.state(178_000, compaction_available=True) == "blocking"
