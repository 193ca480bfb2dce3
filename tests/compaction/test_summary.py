"""Summary compaction on plain data: cut points, the summarizer's overflow, rehydration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_context import semconv
from otel_context.compaction.budget import budget_for
from otel_context.compaction.job import CompactionJob
from otel_context.compaction.prompt import CONTINUED_PART_PREFIX
from otel_context.compaction.summary import (
    CompactionError,
    choose_cut,
    drop_oldest_rounds,
    rehydrate_files,
    summarize,
)
from otel_context.flow import drive, perform_with
from otel_context.formats import for_format
from otel_context.formats.too_long import overflow_gap
from otel_context.settings import Settings
from tests.compaction.support import FakeSummarizer, anthropic_agent, openai_chat_agent

A = for_format("anthropic_messages")
C = for_format("openai_chat")


def test_cut_keeps_at_least_six_items_and_the_last_user_turn_at_a_boundary() -> None:
    items = anthropic_agent(10)
    cut = choose_cut(A, items, keep_recent=6)
    assert cut is not None
    assert len(items) - cut >= 6
    assert cut in A.round_boundaries(items)
    assert A.validate(items[cut:]) == []
    # The last user turn (index 36 = the last genuine user message) is kept whole.
    assert cut <= 36


def test_cut_never_splits_openai_tool_calls() -> None:
    items = openai_chat_agent(10)
    for keep in range(1, 12):
        cut = choose_cut(C, items, keep_recent=keep)
        assert cut is not None
        assert C.validate(items[cut:]) == []


def test_one_giant_turn_is_cut_inside_at_a_boundary() -> None:
    items = anthropic_agent(1)
    # A single turn: keeping the whole last user turn leaves nothing, so the cut falls inside it.
    cut = choose_cut(A, items, keep_recent=6)
    assert cut is not None and 0 < cut < len(items)
    assert A.validate(items[cut:]) == []


def test_min_index_forces_progress_past_an_earlier_head() -> None:
    items = anthropic_agent(3)
    assert choose_cut(A, items, keep_recent=6, min_index=len(items) - 1) is None


def test_overflow_gap_parses_provider_messages() -> None:
    assert overflow_gap("prompt is too long: 212,230 tokens > 200000 maximum") == 12_230
    assert overflow_gap("context_length_exceeded") is None


def test_drop_oldest_rounds_drops_whole_rounds() -> None:
    items = anthropic_agent(6)
    shorter = drop_oldest_rounds(A, items, 3_000)
    assert shorter is not None and len(shorter) < len(items)
    assert A.validate(shorter) == []
    newest_only = drop_oldest_rounds(A, items, 10**9)
    assert newest_only is not None and len(newest_only) < 4
    assert drop_oldest_rounds(A, items[-1:], 10) is None


def _job(body: dict[str, Any], settings: Settings, window: int, trigger: str) -> CompactionJob:
    """A job of the summary alone: the model's budget at ``window``, nothing measured (estimate 0)."""
    model = "claude-sonnet-4-6"
    budget = budget_for(model, settings, max_output_tokens=body["max_tokens"], window=window)
    return CompactionJob(A, body, A.items(body), settings, "anthropic", model, trigger, budget, 0)


def _run(items: list[dict[str, Any]], summarizer: FakeSummarizer, **settings: Any) -> Any:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "system": "sys", "messages": items}
    # Reactive: the plain request only (a rejected request is not resent whole).
    return drive(
        summarize(_job(body, Settings(**settings), 30_000, semconv.TRIGGER_REACTIVE)), perform_with(summarizer)
    )


def test_summarize_builds_a_no_tools_request_with_the_prompt_last() -> None:
    fake = FakeSummarizer()
    out = _run(anthropic_agent(10), fake)
    request = fake.requests[0]
    assert "tools" not in request
    last = request["messages"][-1]
    text = last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
    assert "<summary>" in text and "Do not call any tool" in text
    assert out.summary.startswith("1. Primary request")
    assert "<analysis>" not in str(out.head)
    assert out.summary_tokens == 120


def test_summarizer_overflow_summarizes_in_parts_and_reads_every_round() -> None:
    """A request the provider finds too long is cut in two, oldest half first, each half anchored on the
    summary before it: no round goes unread (before, the oldest rounds were dropped), at most three cuts."""
    fake = FakeSummarizer(too_long=2)
    items = anthropic_agent(10)
    out = _run(items, fake)
    assert out.parts == 3 and out.attempts == 5  # whole (too long), first half (too long), its halves, second half
    sizes = [len(r["messages"]) for r in fake.requests]
    assert sizes[0] > sizes[1] > sizes[2]
    answered = fake.requests[2:]
    # The parts together hold every message up to the cut.
    sent = json.dumps(answered)
    assert all(json.dumps(text)[1:-1] in sent for text in A.user_text_items(items[: out.cut]))
    assert "<previous_summary>" not in str(answered[0]["messages"][-1]["content"])
    assert all("<previous_summary>" in str(r["messages"][-1]["content"]) for r in answered[1:])
    assert all(CONTINUED_PART_PREFIX in str(r["messages"][-1]["content"]) for r in answered[1:])
    assert CONTINUED_PART_PREFIX not in str(answered[0]["messages"][-1]["content"])

    fake = FakeSummarizer(too_long=10)
    with pytest.raises(CompactionError) as info:
        _run(anthropic_agent(10), fake)
    assert info.value.kind == "summary_too_long"
    assert fake.calls == 4  # the first try and three cuts


def test_summarizer_failure_and_empty_answer_are_errors() -> None:
    with pytest.raises(CompactionError):
        _run(anthropic_agent(10), FakeSummarizer(fail=1))
    with pytest.raises(CompactionError) as info:
        _run(anthropic_agent(10), FakeSummarizer(text="<analysis>only</analysis>"))
    assert info.value.kind == "no_summary"


def test_summary_model_setting_selects_the_summarizer_model() -> None:
    fake = FakeSummarizer()
    _run(anthropic_agent(10), fake, summary_model="claude-haiku-4-5")
    assert fake.requests[0]["model"] == "claude-haiku-4-5"


def test_keep_recent_setting_changes_the_cut() -> None:
    few = _run(anthropic_agent(10), FakeSummarizer(), keep_recent_messages=2)
    many = _run(anthropic_agent(10), FakeSummarizer(), keep_recent_messages=12)
    assert few.cut > many.cut


def test_rehydration_restores_newest_files_within_limits() -> None:
    items = anthropic_agent(10, result_chars=60_000)
    settings = Settings()
    cut = choose_cut(A, items, keep_recent=6)
    assert cut is not None
    full = rehydrate_files(A, items, cut, settings, window=200_000)
    assert full.files == 5
    assert full.tokens <= 25_000 and all(len(p) < 5_000 * 3 + 200 for p in full.text.split("<file")[1:])
    # Newest first, and files read again in the kept part are not duplicated.
    kept_paths = {"f9.py", "f8.py"}
    assert all(f'path="{p}"' not in full.text for p in kept_paths)
    assert 'path="f7.py"' in full.text and 'path="f2.py"' not in full.text
    small = rehydrate_files(A, items, cut, settings, window=30_000)
    assert small.tokens <= 7_500


def test_rehydration_honours_tool_names_and_limits() -> None:
    items = anthropic_agent(10)
    cut = choose_cut(A, items, keep_recent=6)
    assert cut is not None
    assert rehydrate_files(A, items, cut, Settings(file_read_tools=frozenset({"cat"})), None).files == 0
    assert rehydrate_files(A, items, cut, Settings(rehydrate_max_files=2), None).files == 2


def test_deepen_cut_moves_past_a_last_turn_that_fills_the_target() -> None:
    from otel_context.compaction.summary import deepen_cut

    items = anthropic_agent(6, result_chars=9_000)
    body = {"model": "m", "max_tokens": 10, "messages": items}
    preferred = choose_cut(A, items, keep_recent=6)
    assert preferred is not None
    deeper = deepen_cut(A, body, items, preferred, target_tokens=3_000)
    assert deeper > preferred and deeper in A.round_boundaries(items) and deeper < len(items)
    assert A.validate(items[deeper:]) == []
    # Plenty of room: the policy's cut stands.
    assert deepen_cut(A, body, items, preferred, target_tokens=200_000) == preferred


def test_shared_prefix_request_keeps_the_calls_prefix_and_appends_the_prompt() -> None:
    from otel_context.compaction.summary import shared_prefix_request

    items = anthropic_agent(4)
    tools = [{"name": "read_file", "input_schema": {"type": "object"}}]
    body = {"model": "m", "max_tokens": 100, "system": "sys", "tools": tools, "messages": items, "stream": True}
    request = shared_prefix_request(A, body, items, "PROMPT <summary>", 20_000, window=200_000)
    assert request is not None
    assert request["tools"] is tools and request["system"] == "sys"
    assert request["messages"][: len(items)] == items
    assert "PROMPT" in json.dumps(request["messages"][-1])
    assert request["max_tokens"] == 20_000 and "stream" not in request
    # Unsafe or impossible: a forced tool choice, extended thinking, or no room left in the window.
    assert shared_prefix_request(A, {**body, "tool_choice": {"type": "any"}}, items, "P", 20_000, None) is None
    assert shared_prefix_request(A, {**body, "thinking": {"type": "enabled"}}, items, "P", 20_000, None) is None
    assert shared_prefix_request(A, body, items, "P", 20_000, window=3_000) is None


def test_summarize_falls_back_to_the_plain_transcript_when_the_shared_request_gets_no_text() -> None:
    answers = iter(["", FakeSummarizer.text])
    requests: list[Any] = []

    def summarizer(request: Any) -> Any:
        from otel_context.flow import SummaryResult

        requests.append(request.body)
        return SummaryResult(text=next(answers))

    items = anthropic_agent(10)
    body = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "tools": [{"name": "read_file"}], "messages": items}
    out = drive(
        summarize(_job(body, Settings(), 200_000, semconv.TRIGGER_AUTO)),
        perform_with(summarizer),
    )
    assert out.summary.startswith("1. Primary request")
    assert "tools" in requests[0] and "tools" not in requests[1]
