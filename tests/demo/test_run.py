"""The demo session end to end, in process: the full default run shows every layer of the cascade."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_context import semconv
from otel_context.demo import DemoOptions, DemoResult, run
from otel_context.demo.report import cost_rows, header, legend, span_tree
from otel_context.demo.stats import KIND_AUTO, KIND_MICRO, KIND_REACTIVE, TurnStats
from tests.demo.support import plain_report_text, row_text
from tests.values import attrs_of


@pytest.fixture(scope="module")
def full_run() -> tuple[DemoResult, list[int]]:
    """The default run (50 turns, anthropic), once for the module; also records the turn callbacks."""
    seen: list[int] = []

    def on_turn(stats: TurnStats, _outcome: object) -> None:
        seen.append(stats.turn)

    return run(DemoOptions(), on_turn=on_turn), seen


def test_the_default_run_shows_micro_auto_and_reactive_compaction(full_run: tuple[DemoResult, list[int]]) -> None:
    result, seen = full_run
    assert seen == list(range(1, 51))
    assert not result.interrupted and result.stats.failed_turns == 0
    assert {KIND_MICRO, KIND_AUTO, KIND_REACTIVE} <= result.stats.kinds_seen()
    assert result.too_long_turn is not None
    reactive = [t.turn for t in result.stats.turns if KIND_REACTIVE in t.kinds]
    assert reactive == [result.too_long_turn]  # exactly one, where the provider refused the request


def test_the_app_history_grows_past_the_window_while_what_is_sent_stays_inside(
    full_run: tuple[DemoResult, list[int]],
) -> None:
    result, _ = full_run
    window = result.options.window
    assert max(result.passed_tokens) > 2 * window  # the agent's own list was never shortened
    agent_calls = [c for c in result.stats.calls if not c.summarizer]
    assert agent_calls and all(0 < c.input_tokens <= window for c in agent_calls)
    assert result.first_turn_over_window() is not None


def test_user_rules_survive_every_compaction(full_run: tuple[DemoResult, list[int]]) -> None:
    result, _ = full_run
    assert result.facts_kept == result.facts_total == 2


def test_compactions_are_intentional_cache_breaks_and_caching_still_pays(
    full_run: tuple[DemoResult, list[int]],
) -> None:
    result, _ = full_run
    successful = [c for c in result.stats.compactions if c.outcome == semconv.OUTCOME_SUCCESS]
    intentional = [b for b in result.stats.cache_breaks if b.intentional]
    assert intentional and len(intentional) <= len(successful)
    assert all(b.reason == semconv.REASON_COMPACTION for b in intentional)
    # The one unexpected break: the tool list changed when the write_file tool was connected (turn 46 of 50).
    unexpected = [(t.turn, b.reason) for t in result.stats.turns for b in t.cache_breaks if not b.intentional]
    assert [reason for _, reason in unexpected] == [semconv.REASON_TOOLS_CHANGED]
    assert unexpected[0][0] >= 46
    reads = result.stats.total("cache_read")
    assert reads > 0.5 * result.stats.total("input_tokens")
    cost = result.cost()
    assert cost.actual < cost.without_caching < cost.without_either
    assert cost.without_compaction < cost.without_either


def test_the_span_tree_shows_chat_compact_chat(full_run: tuple[DemoResult, list[int]]) -> None:
    result, _ = full_run
    tree = span_tree(result.spans)
    assert tree is not None and tree.label.startswith(f"{semconv.OP_INVOKE_AGENT} ")
    compacted_chats = [n for n in tree.children if n.label.startswith("chat ") and "compacted=true" in n.label]
    assert compacted_chats
    summaries = [n for n in compacted_chats[-1].children if n.label.startswith("compact ") and "/summary" in n.label]
    assert summaries
    assert any(n.label.startswith("chat ") for n in summaries[0].children)  # the summarizer's own call


def test_every_compaction_has_a_kind_and_reads_in_words_in_a_genai_viewer(
    full_run: tuple[DemoResult, list[int]],
) -> None:
    """What Arize Phoenix shows of a ``compact`` span (docs/viewing.md): a microcompaction and a reactive summary
    told apart by their kind and their input, the figures in the output, no message text (capture is off)."""
    result, _ = full_run
    compacts = [s for s in result.spans if s.name == semconv.COMPACT_SPAN]
    seen = set()
    for span in compacts:
        a = attrs_of(span)
        strategy, trigger = a[semconv.COMPACTION_STRATEGY], a[semconv.COMPACTION_TRIGGER_SOURCE]
        kind = semconv.OPENINFERENCE_KIND_PROMPT if strategy == "microcompact" else semconv.OPENINFERENCE_KIND_CHAIN
        assert a[semconv.OPENINFERENCE_SPAN_KIND] == kind
        assert a[semconv.INPUT_VALUE] == (
            f"{strategy} ({trigger}, {a[semconv.COMPACTION_MODE]}): {a[semconv.COMPACTION_INPUT_TOKENS]:,} tokens"
        )
        assert a[semconv.OUTPUT_VALUE].startswith(f"{a[semconv.COMPACTION_OUTPUT_TOKENS]:,} tokens (")
        assert "\n" not in a[semconv.OUTPUT_VALUE]
        seen.add((strategy, trigger))
    assert {("microcompact", "auto"), ("summary", "auto"), ("summary", "reactive")} <= seen


def test_the_plain_report_has_every_section(full_run: tuple[DemoResult, list[int]]) -> None:
    result, _ = full_run
    text = plain_report_text(result)
    turn_lines = [line for line in text.splitlines() if line.startswith("turn ")]
    assert len(turn_lines) == 50 and "cache hit" in turn_lines[-1] and "context" in turn_lines[-1]
    for needle in (
        "Summary",
        "micro",
        "auto",
        "reactive",
        "compaction wait",
        "Estimated cost",
        "without compaction",
        "compact  ",
    ):
        assert needle in text, needle
    assert "\x1b[" not in text


def test_openai_short_run_and_json_output(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "spans.json"  # type: ignore[operator]
    result = run(DemoOptions(provider="openai", turns=6, json_path=path))
    assert result.stats.failed_turns == 0 and len(result.stats.turns) == 6
    import json

    spans = json.loads(path.read_text())["spans"]
    names = {s["name"] for s in spans}
    assert "chat gpt-4.1" in names and f"{semconv.OP_INVOKE_AGENT} coding-assistant" in names
    assert any(s["name"].startswith(f"{semconv.OP_EXECUTE_TOOL} ") for s in spans)


def test_bad_options_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="--window"):
        run(DemoOptions(window=100))
    with pytest.raises(ValueError, match="--provider"):
        run(DemoOptions(provider="gemini"))


def test_the_metrics_of_the_run_agree_with_its_spans(full_run: tuple[DemoResult, list[int]]) -> None:
    result, _ = full_run
    metrics = result.metrics
    assert metrics[semconv.METRIC_COMPACTIONS] == len(result.stats.compactions)
    assert metrics[semconv.METRIC_CACHE_BREAKS] == len(result.stats.cache_breaks)
    assert metrics[semconv.METRIC_USAGE_INPUT_TOKENS] == result.stats.total("input_tokens")
    assert metrics[semconv.METRIC_USAGE_OUTPUT_TOKENS] == result.stats.total("output_tokens")


README = Path(__file__).resolve().parents[2] / "README.md"
TURN_FIGURES = re.compile(r"^turn +(\d+)/\d+ \| in +([\d,]+) \| cache hit +([\d.]+)% \| context +(\d+)% \|")
HEADER_WINDOWS = re.compile(r"context window ([\d,]+) tokens \(([\d,]+) effective: ([\d,]+) are kept for the answer\)")


def test_every_figure_of_a_turn_line_is_the_turns_last_call_against_the_window_the_header_names(
    full_run: tuple[DemoResult, list[int]],
) -> None:
    """Issue 43, item 7: in, cache hit and context % are one call's, the context % of the window named."""
    result, _ = full_run
    text = plain_report_text(result)
    header = HEADER_WINDOWS.search(" ".join(text.split()))
    assert header is not None
    window, effective, kept = (int(g.replace(",", "")) for g in header.groups())
    assert window == result.options.window and effective + kept == window
    words = " ".join(text.split())
    assert f"context = in / {effective:,} (the effective window)" in words and "the turn's last model call" in words
    lines = {int(m[1]): m for m in map(TURN_FIGURES.match, text.splitlines()) if m}
    assert sorted(lines) == list(range(1, 51))
    last_read_nothing_after_reads = []
    for turn in result.stats.turns:
        calls = [c for c in turn.calls if not c.summarizer and not c.failed]
        last = calls[-1]
        match = lines[turn.turn]
        assert int(match[2].replace(",", "")) == last.input_tokens
        assert float(match[3]) == round(100 * last.cache_read / last.input_tokens, 1)
        assert int(match[4]) == round(100 * last.input_tokens / effective)
        # The header's effective window is the one the instrumentation divided by on the span.
        assert last.utilization == pytest.approx(last.input_tokens / effective)
        if last.cache_read == 0 and any(c.cache_read for c in calls[:-1]):
            last_read_nothing_after_reads.append(turn.turn)
            assert float(match[3]) == 0.0  # the whole turn's share was not 0: the old line mixed the two
    assert last_read_nothing_after_reads  # the run has such a turn (the reactive one, for one)


def test_the_cost_ratios_have_two_decimals_and_no_warning_when_compaction_paid(
    full_run: tuple[DemoResult, list[int]],
) -> None:
    result, _ = full_run
    cost = result.cost()
    assert cost.without_compaction > cost.actual
    notes = {label: note for label, _, note in cost_rows(result)}
    assert notes["without compaction"].startswith(f"{cost.without_compaction / cost.actual:.2f}x this run; ")
    assert all("cost more" not in note for note in notes.values())


def test_a_run_where_compaction_cost_more_says_so() -> None:
    """At 30 turns the session is too short for compaction to pay: the cost table says so, with both costs."""
    result = run(DemoOptions(turns=30))
    cost = result.cost()
    assert cost.without_compaction < cost.actual  # the premise: the scripted session makes it so
    text = plain_report_text(result)
    line = row_text(text, "without compaction")
    assert f"{cost.without_compaction / cost.actual:.2f}x this run" in line
    said = (
        f"{cost.without_compaction / cost.actual:.2f}x this run: compaction cost more than it saved in this run "
        f"(${cost.actual:.4f} against ${cost.without_compaction:.4f} without it)"
    )
    assert said in line
    # The README quotes this run's row.
    readme = " ".join(README.read_text().split())
    assert f'"without compaction" row (${cost.without_compaction:.4f}): "{said}"' in readme


def test_the_readme_shows_what_the_default_run_prints(full_run: tuple[DemoResult, list[int]]) -> None:
    """The README's `make demo` output (trimmed, rich's tables): its header, legend, turn lines and costs are
    the default run's."""
    result, _ = full_run
    readme = README.read_text()
    block = readme.split("```text\n$ make demo\n", 1)[1].split("```", 1)[0]
    text = plain_report_text(result)
    intro = " ".join(block.split("\n\n", 1)[0].split())
    assert intro == " ".join(f"{header(result.options)} {legend(result.options)}".split())
    shown = [line for line in block.splitlines() if line.startswith("turn ")]
    assert len(shown) > 10 and set(shown) <= set(text.splitlines())
    for label, value, note in cost_rows(result):
        row = next(line for line in block.splitlines() if f"│ {label} " in line)
        assert f"${value:.4f}" in row and note.split(";")[0] in row, label
