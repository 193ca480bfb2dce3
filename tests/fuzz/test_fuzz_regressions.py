"""What the fuzz suite found, kept as explicit examples (each failed before its fix; see fuzz.harness.check)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from otel_context import semconv
from otel_context.conversation.memo import items_hash

from .bodies import CLAUDE, DUE_CHARS, GPT, Case, _due
from .harness import Rig, check, make_rig


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    yield from make_rig()


def _tool_loop(tail: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An Anthropic tool call whose result is over the window on its own, then ``tail``."""
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_0", "name": "read_file", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "0" * (DUE_CHARS // 2)}],
        },
        *tail,
    ]


# Content capture iterated whatever stood where a list belongs: ``True`` or ``42`` failed the whole capture
# (logged, the span had no messages at all); a dict was captured as its keys.
@pytest.mark.parametrize(
    "case",
    [
        Case(
            "anthropic", {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": 42}]}, True, False
        ),
        Case(
            "anthropic",
            {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": True}]},
            True,
            False,
        ),
        Case(
            "chat",
            {"model": GPT, "max_tokens": 64, "messages": [{"role": "assistant", "content": "x", "tool_calls": True}]},
            True,
            False,
        ),
        Case("responses", {"model": GPT, "input": [{"role": "user", "content": 42}]}, True, False),
        Case("responses", {"model": GPT, "input": [{"type": "reasoning", "id": "rs_1", "summary": 7}]}, True, False),
    ],
    ids=["anthropic-int", "anthropic-bool", "chat-tool_calls-bool", "responses-int", "responses-summary-int"],
)
def test_odd_content_is_still_captured(rig: Rig, case: Case) -> None:
    check(rig, case, "sync")


# Anthropic rejects empty content and blank text blocks (except in a final assistant message). Such a history
# over the threshold was compacted, and the provider then rejected OUR request, at an index of ours.
@pytest.mark.parametrize(
    "tail",
    [
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": []}],
        [{"role": "user", "content": [{"type": "text", "text": " \n"}]}],
        [{"role": "user", "content": ""}, {"role": "user", "content": "next"}],
    ],
    ids=["empty-string", "empty-list", "blank-text-block", "empty-then-more"],
)
@pytest.mark.parametrize("mode", ["sync", "async_stream"])
def test_empty_anthropic_content_is_sent_unchanged(rig: Rig, tail: list[dict[str, Any]], mode: str) -> None:
    case = Case("anthropic", {"model": CLAUDE, "max_tokens": 64, "messages": _tool_loop(tail)}, True, True)
    check(rig, case, mode)


def test_an_empty_final_assistant_prefill_is_not_malformed(rig: Rig) -> None:
    tail = [{"role": "user", "content": "go on"}, {"role": "assistant", "content": ""}]
    case = Case("anthropic", {"model": CLAUDE, "max_tokens": 64, "messages": _tool_loop(tail)}, False, True)
    check(rig, case, "sync")
    spans = rig.exporter.get_finished_spans()
    (chat,) = [s for s in spans if s.parent is None]
    assert semconv.CONTEXT_COMPACTION_SKIPPED_REASON not in (chat.attributes or {})
    assert [s.name for s in spans if s.name == semconv.COMPACT_SPAN]  # compacted, not left alone


# The SDKs refuse to serialize inf and nan (ValueError: "Out of range float values are not JSON compliant").
# A history over the threshold holding one was compacted, the number summarized away, and the call succeeded:
# the app's bug was hidden. Now such a history is not understood, so the SDK raises as it does without us.
@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")], ids=repr)
@pytest.mark.parametrize("fmt", ["anthropic", "chat", "responses"])
def test_a_number_json_cannot_carry_is_not_summarized_away(rig: Rig, fmt: str, number: float) -> None:
    filler = "0" * (DUE_CHARS // 2)
    odd = {"type": "text", "text": "see", "x_extra": number}
    if fmt == "anthropic":
        history: list[dict[str, Any]] = [
            {"role": "user", "content": [odd]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": filler},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "go on"},
        ]
        case = Case(fmt, {"model": CLAUDE, "max_tokens": 64, "messages": history}, True, True)
    elif fmt == "chat":
        history = [
            {"role": "user", "content": [odd]},
            {"role": "user", "content": filler},
            {"role": "user", "content": "go"},
        ]
        case = Case(fmt, {"model": GPT, "max_tokens": 64, "messages": history}, True, True)
    else:
        odd = {"type": "input_text", "text": "see", "x_extra": number}
        history = [
            {"role": "user", "content": [odd]},
            {"role": "user", "content": filler},
            {"role": "user", "content": "go"},
        ]
        case = Case(fmt, {"model": GPT, "max_output_tokens": 64, "input": history}, True, True)
    check(rig, case, "sync")


# A lone surrogate (valid in a Python str) cannot be encoded: the SDKs raise UnicodeEncodeError. Over the
# threshold, microcompact cleared old tool results and the memo's content hash raised on the surrogate: the
# engine gave up on the call (logged). Hashing it would have been worse: with the surrogate cleared away the
# call would have succeeded, hiding the app's bug. Now such a history is not understood and is sent unchanged.
@pytest.mark.parametrize("fmt", ["anthropic", "chat"])
def test_a_lone_surrogate_is_not_compacted_away(rig: Rig, fmt: str) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "read them \ud800"}]
    for i in range(6):
        if fmt == "anthropic":
            use = {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {}}
            result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "0" * 6_000}
            history += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
        else:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            history += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "0" * 6_000},
            ]
    history.append({"role": "user" if fmt == "chat" else "assistant", "content": "go on"})
    model = CLAUDE if fmt == "anthropic" else GPT
    check(rig, Case(fmt, {"model": model, "max_tokens": 64, "messages": history}, True, True), "sync")


def test_the_memo_hash_takes_a_lone_surrogate() -> None:
    assert items_hash([{"content": "\ud800"}]) != items_hash([{"content": "\udfff"}])


# The generator called a history "due" from its repr, where a character Python does not print (U+D7FC) takes
# six: 8,000 of them looked over the window, the engine (rightly) estimated 2,700 tokens of 8,000 and the
# check asked for a skipped reason that no compaction had cause to give.
def test_due_measures_the_text_not_its_repr() -> None:
    assert not _due([{"role": "assistant", "content": [{"type": "text", "text": "\ud7fc" * 8_000}]}])
    assert _due([{"role": "assistant", "content": [{"type": "text", "text": "\ud7fc" * DUE_CHARS}]}])
    assert _due([{"role": "user", "content": "x" * DUE_CHARS}])
