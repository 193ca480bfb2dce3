"""The demo with background compaction and a slow simulated model: the summary is prepared before the
threshold, applied without the caller running the summarizer, and the summary table says how long callers
waited for compactions, by mode."""

from __future__ import annotations

import pytest

from otel_context import semconv
from otel_context.demo import DemoOptions, DemoResult, run
from otel_context.demo.report import summary_rows
from otel_context.demo.stats import KIND_AUTO
from tests.demo.support import plain_report_text


@pytest.fixture(scope="module")
def background_run() -> DemoResult:
    return run(DemoOptions(background=True, latency=0.02))


def test_a_summary_is_prepared_then_applied_without_running_the_summarizer_inline(
    background_run: DemoResult,
) -> None:
    result = background_run
    assert result.stats.failed_turns == 0
    prepared = [t.turn for t in result.stats.turns if t.prepared]
    applied = [t.turn for t in result.stats.turns if t.applied]
    assert prepared and applied
    assert applied[0] >= prepared[0]
    autos = [c for c in result.stats.compactions if c.kind == KIND_AUTO and c.outcome == semconv.OUTCOME_SUCCESS]
    assert autos and all(c.mode == semconv.MODE_BACKGROUND for c in autos)
    # The background summarizer's calls are not counted as the agent's (their compact span ends later).
    agent_calls = [c for c in result.stats.calls if not c.summarizer]
    assert all(0 < c.input_tokens <= result.options.window for c in agent_calls)
    assert result.facts_kept == result.facts_total == 2


def test_waits_by_mode_come_from_the_metric_and_agree_with_the_spans(background_run: DemoResult) -> None:
    result = background_run
    count, _seconds = result.waits[semconv.MODE_BACKGROUND]
    applied = sum(t.applied for t in result.stats.turns)
    assert count == applied
    # Discarded summaries (settled after the last turn included) are compactions the counter also saw.
    assert result.metrics[semconv.METRIC_COMPACTIONS] == len(result.stats.compactions)
    row = next(r for r in summary_rows(result) if r.label == "compaction wait")
    assert f"{semconv.MODE_BACKGROUND}: {count} request" in row.note
    assert row.value.endswith(" s")


def test_the_turn_lines_mark_prepared_and_applied(background_run: DemoResult) -> None:
    result = background_run
    text = plain_report_text(result)
    assert "summaries prepared in the background" in text and "model latency 0.02 s" in text
    lines = {int(line.split()[1].split("/")[0]): line for line in text.splitlines() if line.startswith("turn ")}
    for turn in result.stats.turns:
        assert ("| summary prepared" in lines[turn.turn]) == bool(turn.prepared)
        assert ("| summary applied" in lines[turn.turn]) == bool(turn.applied)
    assert "compaction wait" in text


def test_inline_by_default_and_latency_is_checked() -> None:
    assert DemoOptions().background is False
    result = run(DemoOptions(turns=3))
    assert not any(t.prepared or t.applied for t in result.stats.turns)
    assert semconv.MODE_BACKGROUND not in result.waits
    with pytest.raises(ValueError, match="--latency"):
        run(DemoOptions(latency=-1))
    with pytest.raises(ValueError, match="--latency"):
        run(DemoOptions(latency=0.5, live=True))
