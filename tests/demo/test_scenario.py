"""The scripted session."""

from __future__ import annotations

import re

import pytest

from otel_context.demo.scenario import FACTS, build_script


def test_any_number_of_turns_and_deterministic_per_seed() -> None:
    assert len(build_script(1, 7)) == 1
    assert len(build_script(120, 7)) == 120
    assert build_script(80, 7) == build_script(80, 7)
    assert build_script(80, 7) != build_script(80, 8)
    with pytest.raises(ValueError, match="at least 1"):
        build_script(0, 7)


def test_the_user_rules_come_early() -> None:
    texts = [t.message() for t in build_script(50, 7)]
    for fact in FACTS:
        assert any(fact in text for text in texts[:15])


def test_no_user_message_looks_like_a_summary_request() -> None:
    """The simulated provider answers any user message mentioning summary/summarize with a summary."""
    summary = re.compile(r"<summary>|\bsummar(?:y|ize|ise|ies)\b", re.IGNORECASE)
    for seed in (1, 7, 42):
        for turn in build_script(150, seed):
            assert not summary.search(turn.message()), turn.text


def test_live_messages_carry_no_directives() -> None:
    for turn in build_script(60, 7):
        live = turn.message(live=True)
        assert "tool:" not in live and "words:" not in live
        assert f"words:{turn.words}" in turn.message()


def test_one_turn_connects_the_late_tool() -> None:
    script = build_script(50, 7)
    late = [i for i, turn in enumerate(script, 1) if turn.new_tools]
    assert late == [46] and script[45].new_tools == ("write_file",)
    assert 'tool:write_file{"path":"docs/review-notes.md"' in script[45].message()
    assert not any(turn.new_tools for turn in build_script(9, 7))
