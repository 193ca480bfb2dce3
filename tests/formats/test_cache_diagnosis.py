"""The providers' cache diagnoses as the SDKs parse them (the installed SDK's own types; on the oldest supported
releases, which do not declare the fields, the same JSON is kept as extras) and as raw JSON (issue 42)."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message
from openai.types.responses import Response

from otel_context import semconv
from otel_context.formats import for_format
from otel_context.usage import DIAGNOSTICS_NULL, CacheDiagnosis

ANTHROPIC = for_format("anthropic_messages")
RESPONSES = for_format("openai_responses")


def _message(diagnostics: Any) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "diagnostics": diagnostics,
    }


def _response(**fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_01",
        "object": "response",
        "created_at": 0,
        "model": "gpt-5",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **fields,
    }


@pytest.mark.parametrize(
    ("diagnostics", "expected"),
    [
        (
            {"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 4012}},
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "system_changed", 4012),
        ),
        (
            {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 7}},
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "messages_changed", 7),
        ),
        ({"cache_miss_reason": {"type": "previous_message_not_found"}}, CacheDiagnosis(semconv.DIAGNOSIS_NOT_FOUND)),
        ({"cache_miss_reason": {"type": "unavailable"}}, CacheDiagnosis(semconv.DIAGNOSIS_UNAVAILABLE)),
        ({"cache_miss_reason": None}, CacheDiagnosis(semconv.DIAGNOSIS_PENDING)),
        (None, DIAGNOSTICS_NULL),  # a hit or nothing, as the request asked (test_a_null_diagnosis_is_a_hit_...)
    ],
)
def test_anthropic_diagnostics(diagnostics: Any, expected: CacheDiagnosis | None) -> None:
    raw = _message(diagnostics)
    assert ANTHROPIC.response_info(raw, "anthropic").cache_diagnosis == expected
    assert ANTHROPIC.response_info(Message.model_validate(raw), "anthropic").cache_diagnosis == expected


UNKNOWN = CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN)


@pytest.mark.parametrize(
    ("diagnostics", "expected"),
    [
        ({"cache_miss_reason": "messages_changed"}, UNKNOWN),  # a bare word where an object is documented
        ({"cache_miss_reason": {"type": 42}}, UNKNOWN),
        ({"cache_miss_reason": {"cache_missed_input_tokens": 10}}, UNKNOWN),  # no type
        ({}, UNKNOWN),  # no cache_miss_reason at all (null is "pending")
        ("yes", UNKNOWN),
        # Counts that are no counts read as absent: the verdict stands, the figure does not.
        (
            {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": -5}},
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "messages_changed", None),
        ),
        (
            {"cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 2**70}},
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "messages_changed", None),
        ),
    ],
)
def test_an_anthropic_diagnosis_of_another_shape_reads_as_unknown(diagnostics: Any, expected: CacheDiagnosis) -> None:
    raw = _message(diagnostics)
    assert ANTHROPIC.response_info(raw, "anthropic").cache_diagnosis == expected
    # As the SDK builds a response it cannot validate (its own lenient construction, as from the wire).
    assert ANTHROPIC.response_info(Message.construct(**raw), "anthropic").cache_diagnosis == expected


def test_a_message_without_the_field_says_nothing_and_a_null_one_is_a_hit_only_when_asked() -> None:
    absent = _message(None)
    del absent["diagnostics"]
    for message in (absent, Message.model_validate(absent), Message.construct(**absent)):
        assert ANTHROPIC.response_info(message, "anthropic").cache_diagnosis is None
    asked: dict[str, Any] = {"model": "claude-sonnet-4-6", "diagnostics": {"previous_message_id": "msg_00"}}
    opted_in_first: dict[str, Any] = {"model": "claude-sonnet-4-6", "diagnostics": {"previous_message_id": None}}
    plain: dict[str, Any] = {"model": "claude-sonnet-4-6"}
    # No field at all: an endpoint that does not diagnose (an older API version, a gateway): unknown, not a hit.
    assert ANTHROPIC.settle_diagnosis(asked, None) == UNKNOWN
    assert ANTHROPIC.settle_diagnosis(asked, DIAGNOSTICS_NULL) == CacheDiagnosis(semconv.DIAGNOSIS_HIT)
    for body in (opted_in_first, plain):
        assert ANTHROPIC.settle_diagnosis(body, None) is None
        assert ANTHROPIC.settle_diagnosis(body, DIAGNOSTICS_NULL) is None
    miss = CacheDiagnosis(semconv.DIAGNOSIS_MISS, "tools_changed", 10)
    assert ANTHROPIC.settle_diagnosis(asked, miss) == miss


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {
                "prompt_cache_diagnostics": {
                    "type": "cache_miss",
                    "reason": "context_compacted",
                    "cache_missed_tokens": 900,
                    "comparison_reusable_tokens": 3000,
                }
            },
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "context_compacted", 900, 3000),
        ),
        ({"prompt_cache_diagnostics": {"type": "cache_hit"}}, CacheDiagnosis(semconv.DIAGNOSIS_HIT)),
        (
            {"prompt_cache_diagnostics": {"type": "comparison_response_not_found"}},
            CacheDiagnosis(semconv.DIAGNOSIS_NOT_FOUND),
        ),
        ({"prompt_cache_diagnostics": {"type": "unavailable"}}, CacheDiagnosis(semconv.DIAGNOSIS_UNAVAILABLE)),
        (
            {"prompt_cache_options": {"mode": "implicit", "ttl": "30m", "comparison_response_id": "resp_00"}},
            CacheDiagnosis(semconv.DIAGNOSIS_PENDING),
        ),
        # The echo of options the app set without a comparison (the shape of a recorded 2026 exchange).
        ({"prompt_cache_options": {"mode": "explicit", "ttl": "30m"}}, None),
        ({}, None),
    ],
)
def test_openai_responses_diagnostics(fields: dict[str, Any], expected: CacheDiagnosis | None) -> None:
    raw = _response(**fields)
    assert RESPONSES.response_info(raw, "openai").cache_diagnosis == expected
    assert RESPONSES.response_info(Response.model_validate(raw), "openai").cache_diagnosis == expected


@pytest.mark.parametrize(
    ("diagnostics", "expected"),
    [
        ({"type": "cache_maybe"}, UNKNOWN),
        ({"kind": "cache_hit"}, UNKNOWN),
        ("cache_hit", UNKNOWN),
        (
            {
                "type": "cache_miss",
                "reason": "input_changed",
                "cache_missed_tokens": -5,
                "comparison_reusable_tokens": 2**70,
            },
            CacheDiagnosis(semconv.DIAGNOSIS_MISS, "input_changed", None, None),
        ),
    ],
)
def test_an_openai_diagnosis_of_another_shape_reads_as_unknown(diagnostics: Any, expected: CacheDiagnosis) -> None:
    raw = _response(prompt_cache_diagnostics=diagnostics)
    assert RESPONSES.response_info(raw, "openai").cache_diagnosis == expected
    assert RESPONSES.response_info(Response.construct(**raw), "openai").cache_diagnosis == expected


def test_an_openai_endpoint_that_ignores_the_comparison_is_unknown_not_pending() -> None:
    asked: dict[str, Any] = {"model": "gpt-5", "prompt_cache_options": {"comparison_response_id": "resp_00"}}
    # Neither prompt_cache_diagnostics nor the options echoed: the endpoint did not take the request.
    assert RESPONSES.response_info(_response(), "openai").cache_diagnosis is None
    assert RESPONSES.settle_diagnosis(asked, None) == UNKNOWN
    assert RESPONSES.settle_diagnosis({"model": "gpt-5"}, None) is None
    pending = CacheDiagnosis(semconv.DIAGNOSIS_PENDING)  # the options echoed, no diagnosis yet
    assert RESPONSES.settle_diagnosis(asked, pending) == pending


def test_an_unknown_reason_is_kept_only_as_a_bounded_label() -> None:
    free_text = {"cache_miss_reason": {"type": "The Prompt Changed!", "cache_missed_input_tokens": 1}}
    assert ANTHROPIC.response_info(_message(free_text), "anthropic").cache_diagnosis == CacheDiagnosis(
        semconv.DIAGNOSIS_MISS, "other", 1
    )
    new_word = {"prompt_cache_diagnostics": {"type": "cache_miss", "reason": "seed_changed", "cache_missed_tokens": 5}}
    assert RESPONSES.response_info(_response(**new_word), "openai").cache_diagnosis == CacheDiagnosis(
        semconv.DIAGNOSIS_MISS, "seed_changed", 5
    )


def test_the_request_field_is_added_to_a_copy_and_never_over_the_apps() -> None:
    body: dict[str, Any] = {"model": "claude-sonnet-4-6", "messages": []}
    asked = ANTHROPIC.with_cache_comparison(body, "msg_01")
    assert asked == {**body, "diagnostics": {"previous_message_id": "msg_01"}}
    assert "diagnostics" not in body
    assert ANTHROPIC.with_cache_comparison(body, None) == {**body, "diagnostics": {"previous_message_id": None}}
    assert ANTHROPIC.with_cache_comparison({**body, "diagnostics": None}, "msg_01") is None
    own = {"model": "gpt-5", "input": "x", "prompt_cache_options": {"ttl": "12h"}}
    assert RESPONSES.with_cache_comparison(own, "resp_01") == {
        **own,
        "prompt_cache_options": {"ttl": "12h", "comparison_response_id": "resp_01"},
    }
    assert own["prompt_cache_options"] == {"ttl": "12h"}
    assert (
        RESPONSES.with_cache_comparison({**own, "prompt_cache_options": {"comparison_response_id": None}}, "r") is None
    )
    assert RESPONSES.with_cache_comparison({"model": "gpt-5", "input": "x"}, None) is None
    assert for_format("openai_chat").with_cache_comparison({"model": "gpt-5", "messages": []}, "r") is None


def test_a_reply_digest_matches_the_reply_sent_back_in_every_shape() -> None:
    response = _message(None)
    response["content"] = [
        {"type": "text", "text": "Reading "},
        {"type": "text", "text": "it."},
        {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {}},
    ]
    digest = ANTHROPIC.reply_signature(response)
    assert digest
    assert ANTHROPIC.items_reply_signature([{"role": "assistant", "content": response["content"]}]) == digest
    streamed = {"content": [{"type": "text"}, {"type": "text"}, {"type": "tool_use", "id": "toolu_01"}]}
    assert ANTHROPIC.reply_signature({**streamed, "streamed_text": "Reading it."}) == digest
    other = [{"role": "assistant", "content": [*response["content"][:2], {"type": "tool_use", "id": "toolu_02"}]}]
    assert ANTHROPIC.items_reply_signature(other) != digest
    output: list[dict[str, Any]] = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]
    digest = RESPONSES.reply_signature(_response(output=output))
    assert RESPONSES.items_reply_signature(output) == digest
    assert RESPONSES.items_reply_signature([{"role": "assistant", "content": "Done."}]) == digest


def test_a_stream_keeps_the_verdict_of_message_start_and_takes_a_later_one_for_a_pending() -> None:
    def stream(start: Any, later: Any) -> CacheDiagnosis | None:
        accumulator = ANTHROPIC.new_accumulator("anthropic")
        assert accumulator is not None
        message = {**_message(start), "content": []}
        accumulator.add({"type": "message_start", "message": message})
        accumulator.add({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "diagnostics": later})
        return accumulator.info.cache_diagnosis

    miss = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 30}}
    pending = {"cache_miss_reason": None}
    said = CacheDiagnosis(semconv.DIAGNOSIS_MISS, "tools_changed", 30)
    assert stream(miss, pending) == said  # a later null does not take the miss back
    assert stream(miss, {"cache_miss_reason": "gibberish"}) == said
    assert stream(pending, miss) == said  # a pending one is answered later
    assert stream(None, pending) == DIAGNOSTICS_NULL  # nothing diverged, said at the start
    assert stream(miss, None) == said  # a later event without the field


@pytest.mark.parametrize("count", [-5, 2**70, float("nan"), True])
def test_usage_counts_that_are_no_counts_read_as_absent(count: Any) -> None:
    raw = _message(None)
    raw["usage"] = {"input_tokens": count, "output_tokens": 2, "cache_read_input_tokens": count}
    usage = ANTHROPIC.response_info(raw, "anthropic").usage
    assert usage is not None and usage.output_tokens == 2
    assert usage.input_tokens == 0 and usage.cache_read_tokens == 0  # absent, not -5 nor 2**70
    openai_raw = _response(usage={"input_tokens": count, "output_tokens": 3, "total_tokens": 3})
    openai_usage = RESPONSES.response_info(openai_raw, "openai").usage
    assert openai_usage is not None and openai_usage.output_tokens == 3 and openai_usage.input_tokens == 0
