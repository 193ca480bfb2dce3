"""The demo with background compaction and a slow simulated model: the summary is prepared before the
threshold, applied without the caller running the summarizer, and the summary table says how long callers
waited for compactions, by mode."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry import trace

from otel_context import semconv
from otel_context.demo import DemoOptions, DemoResult, run
from otel_context.demo.report import compaction_rows, summary_rows
from otel_context.demo.stats import KIND_AUTO
from tests.demo.support import plain_report_text, turn_texts
from tests.values import attrs_of


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


#: What the OpenTelemetry SDK logged during the module's background run (it warns about a span ended after
#: its processor shut down).
_sdk_log = _Records()


@pytest.fixture(scope="module")
def background_run() -> DemoResult:
    sdk = logging.getLogger("opentelemetry")
    sdk.addHandler(_sdk_log)
    try:
        return run(DemoOptions(background=True, latency=0.02))
    finally:
        sdk.removeHandler(_sdk_log)


def test_the_run_ends_with_every_span_exported_whole_and_no_sdk_warning(background_run: DemoResult) -> None:
    """Issue 49 item 5: the summaries still in flight at the end land before the providers shut down."""
    spans = background_run.spans
    ids = {s.context.span_id for s in spans}
    assert [s.name for s in spans if s.parent is not None and s.parent.span_id not in ids] == []
    compacts = [s for s in spans if s.name == semconv.COMPACT_SPAN]
    assert compacts and all(semconv.COMPACTION_OUTCOME in (s.attributes or {}) for s in compacts)
    assert [m for m in _sdk_log.messages if "shutdown" in m.lower()] == []


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
    lines = turn_texts(text)
    for turn in result.stats.turns:
        assert ("summary prepared" in lines[turn.turn]) == bool(turn.prepared)
        assert ("summary applied" in lines[turn.turn]) == bool(turn.applied)
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


def test_the_figures_count_only_the_summaries_that_were_sent_and_add_up(background_run: DemoResult) -> None:
    """A summary prepared and never sent saved nothing: the turn lines, the Compactions table and the
    tokens-saved histogram count a background summary when a call sends it, and the metrics row says how the
    compactions counter (one per compact span) adds up to that."""
    result = background_run
    stats = result.stats
    ready = [c for c in stats.compactions if c.deferred and c.outcome == semconv.OUTCOME_SUCCESS]
    assert len(ready) >= len(stats.applications) > 0
    # A summary is sent only when it makes the request smaller (not over a microcompaction that left less).
    assert all(a.output_tokens < a.input_tokens for a in stats.applications), stats.applications
    rows = compaction_rows(result)
    text = plain_report_text(result)
    last_turn = [line for line in text.splitlines() if line.startswith("turn ")][-1]
    assert f"compactions {sum(row[1] for row in rows)}" in last_turn.replace("compactions  ", "compactions ")
    # Saved: the inline compactions' own figures plus what each sent summary removed from its call.
    inline = sum(c.tokens_saved for c in stats.compactions if c.outcome == semconv.OUTCOME_SUCCESS and not c.deferred)
    sent = sum(a.tokens_saved for a in stats.applications)
    assert sum(row[3] for row in rows) == inline + sent == result.metrics[semconv.METRIC_COMPACTION_TOKENS_SAVED]
    metrics = next(r for r in summary_rows(result) if r.label == "metrics")
    assert metrics.value == "agree with the spans"
    discarded = sum(1 for c in stats.compactions if c.outcome == semconv.OUTCOME_DISCARDED)
    unsent = len(ready) - len(stats.applications)
    if unsent or discarded:  # this run's timing decides whether a summary went unsent (it usually does)
        parts = f"{sum(row[1] for row in rows)} sent + {unsent} prepared and never sent + {discarded} discarded"
        assert parts in " ".join(metrics.note.split())
    assert sum(row[1] for row in rows) + unsent + discarded == result.metrics[semconv.METRIC_COMPACTIONS]


def _hex(context: Any) -> tuple[str, str]:
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


def _named(attrs: dict[str, Any], trace_key: str, span_key: str) -> tuple[str, str] | None:
    return (attrs[trace_key], attrs[span_key]) if trace_key in attrs else None


def test_a_background_summary_and_the_calls_around_it_name_each_others_traces(background_run: DemoResult) -> None:
    """A viewer that stores no span links (Arize Phoenix) still leads from the turn to the summary's trace and
    back (docs/viewing.md): the ids of the span links are attributes too."""
    spans = {_hex(s.context): s for s in background_run.spans}
    summaries = [
        s
        for s in background_run.spans
        if s.name == semconv.COMPACT_SPAN
        and s.parent is None
        and s.links
        and _hex(s.links[0].context) in spans
        and spans[_hex(s.links[0].context)].name.startswith(f"{semconv.OP_CHAT} ")
    ]
    assert summaries
    applied = 0
    for summary in summaries:
        a = attrs_of(summary)
        assert a[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
        # The compact span names the call that started it, and that call names the compact span.
        starter = spans[_hex(summary.links[0].context)]
        assert _named(a, semconv.COMPACTION_STARTED_BY_TRACE_ID, semconv.COMPACTION_STARTED_BY_SPAN_ID) == _hex(
            starter.context
        )
        assert _named(
            attrs_of(starter), semconv.COMPACTION_STARTED_TRACE_ID, semconv.COMPACTION_STARTED_SPAN_ID
        ) == _hex(summary.context)
        # The call that sends it names it (and links to it); a summary never sent has a discarded record that does.
        for s in background_run.spans:
            if not any(_hex(link.context) == _hex(summary.context) for link in s.links):
                continue
            if s.name == semconv.COMPACT_SPAN:
                keys = (semconv.COMPACTION_DISCARDED_TRACE_ID, semconv.COMPACTION_DISCARDED_SPAN_ID)
            else:
                keys = (semconv.COMPACTION_APPLIED_TRACE_ID, semconv.COMPACTION_APPLIED_SPAN_ID)
                applied += 1
            assert _named(attrs_of(s), *keys) == _hex(summary.context), s.name
    assert applied
    # The other way round, with attributes alone: every id named is a span of the run, in another trace.
    for s in background_run.spans:
        for keys in (
            (semconv.COMPACTION_STARTED_TRACE_ID, semconv.COMPACTION_STARTED_SPAN_ID),
            (semconv.COMPACTION_APPLIED_TRACE_ID, semconv.COMPACTION_APPLIED_SPAN_ID),
            (semconv.COMPACTION_STARTED_BY_TRACE_ID, semconv.COMPACTION_STARTED_BY_SPAN_ID),
            (semconv.COMPACTION_DISCARDED_TRACE_ID, semconv.COMPACTION_DISCARDED_SPAN_ID),
        ):
            named = _named(attrs_of(s), *keys)
            if named is not None:
                assert named in spans and named[0] != _hex(s.context)[0], (s.name, keys)
