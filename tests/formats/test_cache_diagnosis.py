"""The providers' cache diagnoses as the SDKs parse them (the installed SDK's own types; on the oldest supported
releases, which do not declare the fields, the same JSON is kept as extras) and as raw JSON (issue 42)."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message
from openai.types.responses import Response

from otel_context import semconv
from otel_context.formats import for_format
from otel_context.usage import CacheDiagnosis

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
        (None, None),
    ],
)
def test_anthropic_diagnostics(diagnostics: Any, expected: CacheDiagnosis | None) -> None:
    raw = _message(diagnostics)
    assert ANTHROPIC.response_info(raw, "anthropic").cache_diagnosis == expected
    assert ANTHROPIC.response_info(Message.model_validate(raw), "anthropic").cache_diagnosis == expected


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
