"""The summary prompt and the parsing of the summarizer's answer."""

from __future__ import annotations

import pytest

from otel_context.compaction.prompt import (
    NO_TOOLS_PREAMBLE,
    SummaryParseError,
    build_prompt,
    parse_summary,
    summary_message_text,
)


def test_prompt_starts_with_the_no_tools_preamble_and_has_nine_fields() -> None:
    prompt = build_prompt()
    assert prompt.startswith(NO_TOOLS_PREAMBLE)
    for n in range(1, 10):
        assert f"\n{n}. " in prompt
    assert "<analysis>" in prompt and "<summary>" in prompt
    assert "verbatim" in prompt


def test_extra_instructions_are_appended() -> None:
    assert "Keep the ticket id ABC-1" in build_prompt("Keep the ticket id ABC-1")


def test_parse_strips_analysis_and_extracts_summary() -> None:
    text = "<analysis>private notes</analysis>\n<summary>\n1. Primary request: X\n</summary>"
    assert parse_summary(text) == "1. Primary request: X"


def test_parse_keeps_a_truncated_summary() -> None:
    assert parse_summary("<analysis>a</analysis><summary>partial summ") == "partial summ"


def test_parse_untagged_answer_is_used_without_the_analysis() -> None:
    assert parse_summary("<analysis>thinking</analysis> plain summary") == "plain summary"


@pytest.mark.parametrize("text", ["", "   ", "<analysis>only thinking</analysis>", "<summary>  </summary>"])
def test_parse_fails_clearly_on_empty_output(text: str) -> None:
    with pytest.raises(SummaryParseError):
        parse_summary(text)


def test_summary_message_does_not_invite_a_new_summary() -> None:
    text = summary_message_text("S", "files")
    assert "S" in text and "files" in text
    assert "<summary>" not in text
