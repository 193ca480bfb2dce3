"""Fingerprints, diffs and the break rule of ``otel_context.cache`` on plain request bodies.

No SDK and no server here: the detector works on JSON-shaped bodies and TokenUsage, so its rules are tested
directly; tests/cache/test_end_to_end.py runs the same scenarios through the real SDKs.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from otel_context import semconv
from otel_context.cache import CacheBreak, CacheBreakDetector, RequestFingerprint, use_clock
from otel_context.formats import ANTHROPIC_MESSAGES as ANTHROPIC
from otel_context.formats import OPENAI_CHAT as CHAT
from otel_context.formats import OPENAI_RESPONSES as RESPONSES
from otel_context.usage import TokenUsage

EPHEMERAL = {"type": "ephemeral"}
SYSTEM = "You are a careful assistant. " * 200
TOOLS = [
    {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}},
    {"name": "grep", "description": "Search", "input_schema": {"type": "object"}},
]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"question {i}"})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    out.append({"role": "user", "content": f"question {turns}"})
    return out


def with_last_marked(messages: list[dict[str, Any]], ttl: str | None = None) -> list[dict[str, Any]]:
    """A rebuilt list whose last message carries the conversation breakpoint (what apps do every turn)."""
    marker = dict(EPHEMERAL, ttl=ttl) if ttl else dict(EPHEMERAL)
    out = [copy.deepcopy(m) for m in messages]
    last = out[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": marker}
    out[-1] = {**last, "content": blocks}
    return out


def body(messages: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": dict(EPHEMERAL)}],
        "tools": TOOLS,
        "messages": messages,
    }
    out.update(overrides)
    return out


def usage(read: int, write: int = 0, fresh: int = 50) -> TokenUsage:
    return TokenUsage(
        input_tokens=read + write + fresh,
        output_tokens=20,
        cache_read_tokens=read,
        cache_write_tokens=write,
        reported_cache=True,
    )


def call(detector: CacheBreakDetector, request: dict[str, Any], result: TokenUsage | None) -> CacheBreak | None:
    fp = detector.fingerprint(ANTHROPIC, request)
    return detector.check(fp, result)


def warmed(clock: Clock | None = None) -> CacheBreakDetector:
    """A detector that has seen one call writing 10,000 tokens to the cache."""
    detector = CacheBreakDetector(clock=clock or Clock())
    assert call(detector, body(with_last_marked(history(2))), usage(0, 10_000)) is None
    return detector


# --- the break rule ----------------------------------------------------------------------------------------


def test_first_call_and_stable_growing_conversation_report_nothing() -> None:
    detector = CacheBreakDetector(clock=Clock())
    cached = 0
    for turn in range(1, 8):
        written = 600
        assert call(detector, body(with_last_marked(history(turn))), usage(cached, written)) is None
        cached += written


def test_system_prompt_change_is_reported_with_lost_tokens() -> None:
    detector = warmed()
    changed = body(with_last_marked(history(3)), system=[{"type": "text", "text": SYSTEM + " Time: 12:01"}])
    brk = call(detector, changed, usage(0, 10_500))
    assert brk == CacheBreak(semconv.REASON_SYSTEM_CHANGED, 10_000)


def test_every_call_with_a_timestamped_system_prompt_is_a_break() -> None:
    detector = CacheBreakDetector(clock=Clock())
    reasons = []
    for turn in range(1, 6):
        request = body(with_last_marked(history(turn)), system=f"{SYSTEM} now={turn}")
        reasons.append(call(detector, request, usage(0, 9_000 + turn)))
    assert reasons[0] is None
    assert [r.reason for r in reasons[1:] if r] == [semconv.REASON_SYSTEM_CHANGED] * 4


def test_tool_definition_change_is_tools_changed() -> None:
    detector = warmed()
    tools = [TOOLS[0], {**TOOLS[1], "description": "Search the repo"}]
    brk = call(detector, body(with_last_marked(history(3)), tools=tools), usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_TOOLS_CHANGED


def test_model_switch_is_model_changed() -> None:
    detector = warmed()
    brk = call(detector, body(with_last_marked(history(3)), model="claude-haiku-4-5"), usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_MODEL_CHANGED


def test_edited_earlier_message_in_a_rebuilt_history_is_messages_changed() -> None:
    detector = warmed()
    messages = history(3)
    messages[1] = {"role": "assistant", "content": [{"type": "text", "text": "answer 0, edited"}]}
    brk = call(detector, body(with_last_marked(messages)), usage(1_000, 9_500))
    assert brk == CacheBreak(semconv.REASON_MESSAGES_CHANGED, 9_000)


def test_message_edited_in_place_is_found_despite_the_identity_memo() -> None:
    """The app resends the SAME objects and edits one of them in place: identity says unchanged, content
    does not; the break must still be explained by the edit."""
    detector = CacheBreakDetector(clock=Clock())
    messages = history(3)
    request = body(messages, cache_control=dict(EPHEMERAL))
    assert call(detector, request, usage(0, 10_000)) is None
    messages[2]["content"] = "question 1, rewritten"
    brk = call(detector, request, usage(500, 9_600))
    assert brk is not None and brk.reason == semconv.REASON_MESSAGES_CHANGED


def test_edit_after_the_last_breakpoint_does_not_explain_a_break() -> None:
    """With breakpoints only on the tools/system, messages were never cached: an edit there is not the
    reason cache reads fell."""
    detector = CacheBreakDetector(clock=Clock())
    assert call(detector, body(history(2)), usage(0, 10_000)) is None
    messages = history(3)
    messages[0] = {"role": "user", "content": "question 0, edited"}
    brk = call(detector, body(messages), usage(0, 10_000))
    assert brk is not None and brk.reason == semconv.REASON_UNKNOWN


def test_gap_past_the_ttl_is_ttl_expired() -> None:
    clock = Clock()
    detector = warmed(clock)
    clock.now += 301
    brk = call(detector, body(with_last_marked(history(3))), usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED


def test_one_hour_breakpoints_keep_a_ten_minute_gap_unexplained() -> None:
    clock = Clock()
    detector = CacheBreakDetector(clock=clock)
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    request = body(
        with_last_marked(history(2), ttl="1h"), system=[{"type": "text", "text": SYSTEM, "cache_control": one_hour}]
    )
    assert call(detector, request, usage(0, 10_000)) is None
    clock.now += 600
    request = body(
        with_last_marked(history(3), ttl="1h"), system=[{"type": "text", "text": SYSTEM, "cache_control": one_hour}]
    )
    brk = call(detector, request, usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_UNKNOWN
    clock.now += 3_601
    brk = call(detector, request, usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED


def test_injected_clock_wins_over_the_stamps_passed_in() -> None:
    """The engine stamps calls with time.monotonic(); a test moving a manual clock must still see the gap."""
    clock = Clock()
    detector = CacheBreakDetector(clock=clock)
    fp = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(2))))
    assert detector.check(fp, usage(0, 10_000), started=1.0, ended=1.5) is None
    clock.now += 1_000
    fp = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(3))))
    brk = detector.check(fp, usage(0, 10_400), started=2.0, ended=2.5)
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED


def test_use_clock_moves_default_detectors() -> None:
    clock = Clock()
    with use_clock(clock):
        detector = CacheBreakDetector()
        assert call(detector, body(with_last_marked(history(2))), usage(0, 10_000)) is None
        clock.now += 400
        brk = call(detector, body(with_last_marked(history(3))), usage(0, 10_400))
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED


def test_explicit_stamps_measure_the_gap_with_the_default_clock() -> None:
    detector = CacheBreakDetector()
    fp = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(2))))
    detector.check(fp, usage(0, 10_000), started=100.0, ended=101.0)
    fp = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(3))))
    brk = detector.check(fp, usage(0, 10_400), started=500.0, ended=501.0)
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED


def test_nothing_changed_and_no_expiry_is_unknown() -> None:
    detector = warmed()
    brk = call(detector, body(with_last_marked(history(3))), usage(0, 10_400))
    assert brk == CacheBreak(semconv.REASON_UNKNOWN, 10_000)


@pytest.mark.parametrize(
    ("left", "read", "expected"),
    [
        (10_000, 8_000, None),  # 2,000 lost: not MORE than 2,000
        (10_000, 7_999, 2_001),
        (100_000, 95_500, None),  # 4,500 lost is 4.5 %: under 5 %
        (100_000, 94_999, 5_001),
        (1_500, 0, None),  # a small cache can never lose more than 2,000
    ],
)
def test_thresholds_are_five_percent_and_two_thousand_tokens(left: int, read: int, expected: int | None) -> None:
    detector = CacheBreakDetector(clock=Clock())
    call(detector, body(with_last_marked(history(2))), usage(0, left))
    brk = call(detector, body(with_last_marked(history(2))), usage(read, 0))
    assert (brk.lost_tokens if brk else None) == expected


def test_reads_plus_writes_of_the_previous_call_are_what_it_left() -> None:
    detector = CacheBreakDetector(clock=Clock())
    call(detector, body(with_last_marked(history(2))), usage(8_000, 4_000))
    assert call(detector, body(with_last_marked(history(3))), usage(11_500, 300)) is None
    brk = call(detector, body(with_last_marked(history(4))), usage(8_000, 300))
    assert brk is not None and brk.lost_tokens == 11_800 - 8_000


def test_announced_compaction_suppresses_exactly_the_next_check() -> None:
    detector = CacheBreakDetector(clock=Clock())
    call(detector, body(with_last_marked(history(2))), usage(0, 10_000))
    call(detector, body(with_last_marked(history(3))), usage(10_000, 400))
    assert detector.announce_compaction() == 10_400  # what the last call left in the cache: reads + writes
    compacted = body(with_last_marked([{"role": "user", "content": "summary of everything so far"}]))
    assert call(detector, compacted, usage(0, 3_000)) is None  # the miss after a compaction is expected
    grown = with_last_marked([{"role": "user", "content": "summary of everything so far"}, *history(1)[1:]])
    assert call(detector, body(grown), usage(3_000, 200)) is None
    brk = call(detector, body(grown, model="claude-haiku-4-5"), usage(0, 3_300))
    assert brk is not None and brk.reason == semconv.REASON_MODEL_CHANGED


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"tools": [*TOOLS, {"name": "write_file", "input_schema": {"type": "object"}}]}, semconv.REASON_TOOLS_CHANGED),
        ({"system": "Another system prompt."}, semconv.REASON_SYSTEM_CHANGED),
        ({"model": "claude-haiku-4-5"}, semconv.REASON_MODEL_CHANGED),
    ],
    ids=["tools", "system", "model"],
)
def test_a_compaction_does_not_hide_a_change_of_tools_system_or_model(change: dict[str, Any], reason: str) -> None:
    """A compaction explains a miss of the messages, never one of the tools (an MCP server connected in the call
    that compacts, or that compacts anew because the summary made for the old tools no longer applies)."""
    detector = CacheBreakDetector(clock=Clock())
    call(detector, body(with_last_marked(history(2))), usage(0, 10_000))
    call(detector, body(with_last_marked(history(3))), usage(10_000, 400))
    assert detector.announce_compaction() == 10_400
    compacted = with_last_marked([{"role": "user", "content": "summary of everything so far"}])
    brk = call(detector, body(compacted, **change), usage(0, 3_000))
    assert brk is not None and brk.reason == reason and brk.lost_tokens == 10_400


def test_announce_before_any_call_has_nothing_to_lose() -> None:
    """None: no cache figures yet, so no intentional break is reported (not an event saying 0)."""
    assert CacheBreakDetector().announce_compaction() is None


def test_announce_after_calls_without_cache_figures_has_nothing_to_lose() -> None:
    detector = CacheBreakDetector(clock=Clock())
    call(detector, body(history(2)), TokenUsage(input_tokens=10_000, output_tokens=5))
    assert detector.announce_compaction() is None


def test_usage_without_cache_figures_is_never_judged() -> None:
    detector = warmed()
    silent = TokenUsage(input_tokens=10_000, output_tokens=5)
    assert call(detector, body(with_last_marked(history(3))), silent) is None
    # ... and it is no baseline either: the next call has nothing to be compared with.
    assert call(detector, body(with_last_marked(history(4))), usage(0, 100)) is None
    assert call(detector, body(with_last_marked(history(2)), model="x"), None) is None


def test_beta_flags_are_fingerprinted_and_a_change_is_betas_changed() -> None:
    detector = CacheBreakDetector(clock=Clock())
    request = body(with_last_marked(history(2)))
    fp = detector.fingerprint(ANTHROPIC, request, headers={"anthropic-beta": "b2, a1"})
    assert fp.betas == ("a1", "b2")
    detector.check(fp, usage(0, 10_000))
    fp = detector.fingerprint(ANTHROPIC, request, headers={"anthropic-beta": "a1"})
    brk = detector.check(fp, usage(0, 10_000))
    assert brk is not None and brk.reason == semconv.REASON_BETAS_CHANGED


# --- fingerprints ------------------------------------------------------------------------------------------


def test_moving_the_conversation_breakpoint_keeps_the_prefix() -> None:
    detector = CacheBreakDetector(clock=Clock())
    first = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(3))))
    second = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(4))))
    assert first.item_breakpoints == (6,) and second.item_breakpoints == (8,)
    # Only the appended items differ: the marker that moved off item 6 is not a change.
    assert first.first_difference(second) == {"items": 7}


def test_rebuilt_objects_are_compared_by_content() -> None:
    """Content, not identity: deep copies, tuples and JSON round trips (new strings) are the same request."""
    detector = CacheBreakDetector(clock=Clock())
    messages = history(5)
    request = body(messages, cache_control=dict(EPHEMERAL))
    a = detector.fingerprint(ANTHROPIC, request)
    for other in (
        copy.deepcopy(request),
        {**request, "messages": tuple(copy.deepcopy(messages))},
        json.loads(json.dumps(request)),
    ):
        assert a.first_difference(detector.fingerprint(ANTHROPIC, other)) == {}


def test_moving_breakpoint_over_a_history_loaded_from_json() -> None:
    """Nothing shared by identity (every string is new): content still decides."""
    detector = CacheBreakDetector(clock=Clock())
    first = detector.fingerprint(ANTHROPIC, json.loads(json.dumps(body(with_last_marked(history(3))))))
    second = detector.fingerprint(ANTHROPIC, json.loads(json.dumps(body(with_last_marked(history(4))))))
    assert first.first_difference(second) == {"items": 7} and second.item_breakpoints == (8,)
    edited = json.loads(json.dumps(body(with_last_marked(history(5)))))
    edited["messages"][6]["content"] = "question 3?"
    third = detector.fingerprint(ANTHROPIC, edited)
    assert first.first_difference(third) == {"items": 6}


def test_differences_per_section() -> None:
    detector = CacheBreakDetector(clock=Clock())
    messages = history(5)
    a = detector.fingerprint(ANTHROPIC, body(messages))
    edited = copy.deepcopy(messages)
    edited[4]["content"] = "question 2, edited"
    tools = [TOOLS[0], {**TOOLS[1], "description": "changed"}]
    b = detector.fingerprint(ANTHROPIC, body(edited, tools=tools, system="other"))
    assert a.first_difference(b) == {"system": 0, "tools": 1, "items": 4}
    shorter = detector.fingerprint(ANTHROPIC, body(messages[:3]))
    assert a.first_difference(shorter) == {"items": 3}


def test_ttl_in_force_is_the_shortest_breakpoint_lifetime() -> None:
    detector = CacheBreakDetector(clock=Clock())
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    fp = detector.fingerprint(
        ANTHROPIC, body(history(1), system=[{"type": "text", "text": "s", "cache_control": one_hour}])
    )
    assert fp.ttl_seconds == 3_600 and fp.cached_item_limit() == 0
    fp = detector.fingerprint(
        ANTHROPIC,
        body(with_last_marked(history(1)), system=[{"type": "text", "text": "s", "cache_control": one_hour}]),
    )
    assert fp.ttl_seconds == 300 and fp.cached_item_limit() == 3
    fp = detector.fingerprint(ANTHROPIC, body(history(1), system="s", cache_control={"type": "ephemeral", "ttl": "1h"}))
    assert fp.ttl_seconds == 3_600 and fp.caches_whole_prompt and fp.cached_item_limit() == 3


def test_fingerprint_never_mutates_the_body() -> None:
    request = body(with_last_marked(history(3)))
    before = copy.deepcopy(request)
    detector = CacheBreakDetector()
    detector.fingerprint(ANTHROPIC, request)
    detector.fingerprint(ANTHROPIC, body(with_last_marked(history(4))))
    detector.fingerprint(ANTHROPIC, request)
    assert request == before


def test_sdk_sentinels_and_missing_fields_are_empty() -> None:
    class Omit:
        def __bool__(self) -> bool:
            return False

    fp = CacheBreakDetector().fingerprint(
        ANTHROPIC, {"model": "m", "messages": [], "system": Omit(), "tools": Omit(), "cache_control": Omit()}
    )
    assert fp.system == () and fp.tools == () and fp.items == () and not fp.caches_whole_prompt


def test_bad_input_is_rejected_with_a_clear_message() -> None:
    detector = CacheBreakDetector()
    with pytest.raises(
        TypeError, match=r"needs the body's wire format, otel_context.formats.for_format\(name\), not str"
    ):
        detector.fingerprint("anthropic_messages", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping"):
        detector.fingerprint(ANTHROPIC, [("model", "m")])  # type: ignore[arg-type]


def test_openai_chat_leading_system_message_and_edits() -> None:
    detector = CacheBreakDetector(clock=Clock())

    def chat(system: str, turns: int, edit: bool = False) -> RequestFingerprint:
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for i in range(turns):
            question = "q0, edited" if edit and i == 0 else f"q{i}"
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": f"a{i}"}]
        messages.append({"role": "user", "content": "next"})
        return detector.fingerprint(CHAT, {"model": "gpt-5", "messages": messages})

    fp = chat(SYSTEM, 2)
    assert fp.leading_system_items == 1 and fp.caches_whole_prompt
    detector.check(fp, usage(8_000))
    brk = detector.check(chat(SYSTEM + " v2", 3), usage(0))
    assert brk is not None and brk.reason == semconv.REASON_SYSTEM_CHANGED
    detector.check(chat(SYSTEM + " v2", 4), usage(8_000))
    # OpenAI caches the whole previous prompt automatically: an edited message inside it explains a miss.
    brk = detector.check(chat(SYSTEM + " v2", 5, edit=True), usage(0))
    assert brk is not None and brk.reason == semconv.REASON_MESSAGES_CHANGED


def test_openai_responses_instructions_and_server_state() -> None:
    detector = CacheBreakDetector(clock=Clock())
    first = {"model": "gpt-5", "instructions": SYSTEM, "input": "hello", "prompt_cache_options": {"ttl": "30m"}}
    fp = detector.fingerprint(RESPONSES, first)
    assert fp.ttl_seconds == 1_800 and len(fp.system) == 1 and len(fp.items) == 1
    detector.check(fp, usage(9_000))
    chained = {
        "model": "gpt-5",
        "instructions": SYSTEM,
        "input": [{"role": "user", "content": "more"}],
        "previous_response_id": "resp_1",
    }
    brk = detector.check(detector.fingerprint(RESPONSES, chained), usage(0))
    # Only the new items are sent when chaining: their difference explains nothing.
    assert brk is not None and brk.reason == semconv.REASON_UNKNOWN
    detector.check(detector.fingerprint(RESPONSES, first), usage(9_000))
    brk = detector.check(detector.fingerprint(RESPONSES, {**first, "instructions": "other"}), usage(0))
    assert brk is not None and brk.reason == semconv.REASON_SYSTEM_CHANGED


def test_switching_wire_format_starts_a_new_memo() -> None:
    detector = CacheBreakDetector(clock=Clock())
    detector.check(detector.fingerprint(ANTHROPIC, body(history(2))), usage(0, 9_000))
    fp = detector.fingerprint(CHAT, {"model": "gpt-5", "messages": history(2)})
    brk = detector.check(fp, usage(0))
    assert brk is not None and brk.reason == semconv.REASON_UNKNOWN


def test_an_edit_where_the_breakpoint_was_is_still_an_edit() -> None:
    detector = CacheBreakDetector(clock=Clock())
    first = detector.fingerprint(ANTHROPIC, body(with_last_marked(history(3))))
    messages = history(4)
    messages[6] = {"role": "user", "content": "question 3, edited after the fact"}
    second = detector.fingerprint(ANTHROPIC, body(with_last_marked(messages)))
    assert first.first_difference(second) == {"items": 6}
    assert second.item_breakpoints == (8,)


def test_sdk_model_objects_in_the_history_are_compared_as_they_are() -> None:
    """Apps often append ``response.content`` (SDK model objects) to their history as is."""
    from anthropic.types import TextBlock

    detector = CacheBreakDetector(clock=Clock())
    reply = [TextBlock(type="text", text="answer 0")]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "question 0"},
        {"role": "assistant", "content": reply},
    ]
    a = detector.fingerprint(ANTHROPIC, body([*messages, {"role": "user", "content": "q1"}]))
    rebuilt = [dict(m) for m in messages]
    b = detector.fingerprint(ANTHROPIC, body([*rebuilt, {"role": "user", "content": "q1"}]))
    assert a.first_difference(b) == {}
    rebuilt[1] = {"role": "assistant", "content": [TextBlock(type="text", text="answer 0, regenerated")]}
    c = detector.fingerprint(ANTHROPIC, body([*rebuilt, {"role": "user", "content": "q1"}]))
    assert a.first_difference(c) == {"items": 1}


def test_in_place_edits_are_reported_once_and_tools_too() -> None:
    clock = Clock()
    detector = CacheBreakDetector(clock=clock)
    messages = history(3)
    tools = copy.deepcopy(TOOLS)
    request = body(messages, tools=tools, cache_control=dict(EPHEMERAL))
    assert call(detector, request, usage(0, 10_000)) is None
    messages[2]["content"] = "question 1, rewritten"
    brk = call(detector, request, usage(500, 9_600))
    assert brk is not None and brk.reason == semconv.REASON_MESSAGES_CHANGED
    clock.now += 400  # the same (already reported) edit must not explain the next break
    brk = call(detector, request, usage(0, 10_100))
    assert brk is not None and brk.reason == semconv.REASON_TTL_EXPIRED
    tools[1]["description"] = "edited in place"
    brk = call(detector, request, usage(0, 10_100))
    assert brk is not None and brk.reason == semconv.REASON_TOOLS_CHANGED
