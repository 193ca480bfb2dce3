"""Unit tests of the usage normalizers on hand-made shapes: dicts and the SDKs' own pydantic objects.

The cases are the traps the recorded responses showed (see tests/data/cassettes/SOURCES.md): fields
absent in old responses, null fields, fields newer than the SDK types, figures under another spelling,
Anthropic stream usage that is repeated and changed in the final ``message_delta``, and server-side
compaction usage that lives only in ``usage.iterations``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic.types import MessageDeltaUsage, Usage
from anthropic.types.beta import BetaMessageDeltaUsage, BetaUsage
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._models import construct_type as openai_construct
from openai.types import CompletionUsage
from openai.types.responses import ResponseUsage

from otel_context.formats.anthropic_messages import merge_stream_usage, usage_from_anthropic
from otel_context.formats.openai_chat import usage_from_deepseek, usage_from_openai_chat
from otel_context.formats.openai_responses import usage_from_openai_responses
from otel_context.usage import TokenUsage, is_deepseek

# --- Anthropic ------------------------------------------------------------------------------------------------

ANTHROPIC_CACHED: dict[str, Any] = {
    "input_tokens": 12,
    "cache_read_input_tokens": 1111,
    "cache_creation_input_tokens": 418,
    "cache_creation": {"ephemeral_5m_input_tokens": 400, "ephemeral_1h_input_tokens": 18},
    "output_tokens": 57,
    "output_tokens_details": {"thinking_tokens": 30},
    "service_tier": "standard",
    "inference_geo": "global",
}


def test_anthropic_input_includes_cache_reads_and_writes() -> None:
    usage = usage_from_anthropic(ANTHROPIC_CACHED)
    assert usage == TokenUsage(
        input_tokens=12 + 1111 + 418,
        output_tokens=57,
        cache_read_tokens=1111,
        cache_write_tokens=418,
        cache_write_5m_tokens=400,
        cache_write_1h_tokens=18,
        reasoning_tokens=30,
        reported_cache=True,
        reported_reasoning=True,
    )
    assert usage.hit_ratio == pytest.approx(1111 / 1541)
    assert usage.context_tokens == 1541 + 57


@pytest.mark.parametrize("model", [Usage, BetaUsage])
def test_anthropic_sdk_object_equals_dict(model: type) -> None:
    obj = anthropic_construct(type_=model, value=copy.deepcopy(ANTHROPIC_CACHED))
    assert isinstance(obj, model)
    assert usage_from_anthropic(obj) == usage_from_anthropic(ANTHROPIC_CACHED)


def test_anthropic_2024_usage_without_cache_fields() -> None:
    usage = usage_from_anthropic({"input_tokens": 17, "output_tokens": 171})
    assert usage == TokenUsage(input_tokens=17, output_tokens=171)
    assert not usage.reported_cache and not usage.reported_reasoning
    sdk = anthropic_construct(type_=Usage, value={"input_tokens": 17, "output_tokens": 171})
    assert usage_from_anthropic(sdk) == usage


def test_anthropic_nulls_are_zero_but_reported_zero_is_reported() -> None:
    nulls = usage_from_anthropic(
        {"input_tokens": 5, "output_tokens": None, "cache_read_input_tokens": None, "cache_creation": None}
    )
    assert nulls == TokenUsage(input_tokens=5)
    zeros = usage_from_anthropic({"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 0})
    assert zeros.reported_cache and zeros.cache_read_tokens == 0


def test_anthropic_cache_write_reported_only_as_ttl_breakdown_is_not_zero() -> None:
    usage = usage_from_anthropic(
        {
            "input_tokens": 3,
            "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 20},
        }
    )
    assert usage.cache_write_tokens == 120
    assert usage.input_tokens == 123
    assert usage.reported_cache


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "usage",
        42,
        [],
        {},
        object(),
        {"input_tokens": "12", "output_tokens": True},
        {"input_tokens": float("inf")},
    ],
)
def test_anthropic_never_crashes_on_garbage(garbage: Any) -> None:
    assert usage_from_anthropic(garbage) == TokenUsage()


def test_anthropic_unknown_fields_ignored() -> None:
    raw = {**ANTHROPIC_CACHED, "brand_new_field": {"x": 1}, "server_tool_use": {"web_search_requests": 2}}
    assert usage_from_anthropic(raw) == usage_from_anthropic(ANTHROPIC_CACHED)


def test_anthropic_does_not_mutate_its_argument() -> None:
    raw = copy.deepcopy(ANTHROPIC_CACHED)
    usage_from_anthropic(raw)
    assert raw == ANTHROPIC_CACHED


COMPACTION_USAGE: dict[str, Any] = {
    # Shape of pydantic-ai's recorded compaction response: the top level is the final pass only.
    "input_tokens": 229,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 5,
    "iterations": [
        {
            "type": "compaction",
            "input_tokens": 100,
            "cache_creation_input_tokens": 55096,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 55096, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 131,
        },
        {"type": "message", "input_tokens": 229, "output_tokens": 5},
    ],
}


def test_anthropic_server_side_compaction_only_in_iterations() -> None:
    usage = usage_from_anthropic(COMPACTION_USAGE)
    assert usage.input_tokens == 229 and usage.output_tokens == 5
    assert usage.cache_write_tokens == 0
    assert usage.compaction_iterations == 1
    assert usage.compaction_input_tokens == 100 + 55096
    assert usage.compaction_output_tokens == 131
    sdk = anthropic_construct(type_=BetaUsage, value=copy.deepcopy(COMPACTION_USAGE))
    assert usage_from_anthropic(sdk) == usage


def test_anthropic_iterations_without_compaction_and_malformed_entries() -> None:
    raw = {"input_tokens": 1, "output_tokens": 1, "iterations": [{"type": "message", "input_tokens": 9}, None, "x", 3]}
    assert usage_from_anthropic(raw).compaction_iterations == 0
    assert usage_from_anthropic({"input_tokens": 1, "iterations": "nope"}).compaction_iterations == 0
    two = {
        "input_tokens": 1,
        "iterations": [
            {"type": "compaction", "input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 2},
            {"type": "compaction", "input_tokens": 20, "output_tokens": None},
        ],
    }
    usage = usage_from_anthropic(two)
    assert (usage.compaction_iterations, usage.compaction_input_tokens, usage.compaction_output_tokens) == (2, 35, 2)


def test_anthropic_stable_usage_keeps_iterations_it_does_not_declare() -> None:
    """A stable-namespace ``Usage`` has no ``iterations`` field, but the SDK keeps extra fields."""
    sdk = anthropic_construct(type_=Usage, value=copy.deepcopy(COMPACTION_USAGE))
    assert usage_from_anthropic(sdk).compaction_iterations == 1


# --- Anthropic streams ----------------------------------------------------------------------------------------


def _fold(*usages: Any) -> TokenUsage:
    merged: TokenUsage | None = None
    for u in usages:
        merged = merge_stream_usage(merged, u)
    assert merged is not None
    return merged


def test_stream_old_delta_only_output_tokens() -> None:
    start = {"input_tokens": 17, "output_tokens": 3}
    delta = {"output_tokens": 171}
    assert _fold(start, delta) == TokenUsage(input_tokens=17, output_tokens=171)


def test_stream_cache_figures_from_start_survive_an_output_only_delta() -> None:
    start = {"input_tokens": 4, "cache_creation_input_tokens": 1165, "cache_read_input_tokens": 0, "output_tokens": 1}
    merged = _fold(start, {"output_tokens": 300})
    assert merged == TokenUsage(input_tokens=4 + 1165, output_tokens=300, cache_write_tokens=1165, reported_cache=True)


def test_stream_delta_changes_input_later_value_wins() -> None:
    """The web_search stream: 2050 input at message_start, 31772 in the final message_delta."""
    start = {"input_tokens": 2050, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 1}
    delta = {
        "input_tokens": 31772,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "output_tokens": 500,
    }
    merged = _fold(start, delta)
    assert merged.input_tokens == 31772 and merged.output_tokens == 500


def test_stream_server_side_compaction_delta_overrides_start() -> None:
    """pydantic-ai's compaction stream: message_start is the compaction pass, message_delta the final one."""
    start = {
        "input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 55096,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 7,
    }
    delta = {
        "input_tokens": 181,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 8,
        "iterations": [
            {"type": "compaction", "input_tokens": 100, "output_tokens": 83, "cache_read_input_tokens": 55096},
            {"type": "message", "input_tokens": 181, "output_tokens": 8},
        ],
    }
    merged = _fold(start, delta)
    assert merged.input_tokens == 181
    assert merged.cache_read_tokens == 0
    assert merged.output_tokens == 8
    assert merged.compaction_iterations == 1
    assert merged.compaction_input_tokens == 55196
    assert merged.compaction_output_tokens == 83
    # The same through the SDK's beta delta type.
    sdk_delta = anthropic_construct(type_=BetaMessageDeltaUsage, value=copy.deepcopy(delta))
    assert _fold(start, sdk_delta) == merged


def test_stream_delta_null_fields_keep_earlier_values() -> None:
    start = {
        "input_tokens": 10,
        "cache_read_input_tokens": 50,
        "cache_creation_input_tokens": 20,
        "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 1,
    }
    sdk_delta = anthropic_construct(type_=MessageDeltaUsage, value={"output_tokens": 40})
    assert isinstance(sdk_delta, MessageDeltaUsage)
    assert sdk_delta.input_tokens is None  # the SDK represents "not sent" as None
    merged = _fold(start, sdk_delta)
    assert merged == TokenUsage(
        input_tokens=80,
        output_tokens=40,
        cache_read_tokens=50,
        cache_write_tokens=20,
        cache_write_5m_tokens=20,
        reported_cache=True,
    )


def test_stream_new_cache_write_total_without_breakdown_drops_stale_split() -> None:
    start = {
        "input_tokens": 1,
        "cache_creation_input_tokens": 20,
        "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 0},
    }
    merged = _fold(start, {"cache_creation_input_tokens": 35, "output_tokens": 2})
    assert merged.cache_write_tokens == 35
    assert merged.cache_write_5m_tokens + merged.cache_write_1h_tokens in (0, 35)


def test_stream_compaction_figures_survive_a_later_event_without_iterations() -> None:
    merged = _fold({"input_tokens": 1}, COMPACTION_USAGE, {"output_tokens": 9})
    assert merged.compaction_iterations == 1 and merged.output_tokens == 9


def test_stream_first_event_equals_plain_extraction() -> None:
    assert merge_stream_usage(None, ANTHROPIC_CACHED) == usage_from_anthropic(ANTHROPIC_CACHED)


def test_stream_garbage_events_do_not_crash_or_erase() -> None:
    merged = _fold(ANTHROPIC_CACHED, None, "x", {"output_tokens": None})
    assert merged == usage_from_anthropic(ANTHROPIC_CACHED)


def test_stream_reasoning_from_delta() -> None:
    merged = _fold(
        {"input_tokens": 3, "output_tokens": 1}, {"output_tokens": 90, "output_tokens_details": {"thinking_tokens": 60}}
    )
    assert merged.reasoning_tokens == 60 and merged.reported_reasoning


# --- OpenAI Chat Completions ----------------------------------------------------------------------------------

CHAT_USAGE: dict[str, Any] = {
    "prompt_tokens": 4020,
    "completion_tokens": 4,
    "total_tokens": 4024,
    "prompt_tokens_details": {"audio_tokens": 0, "cache_write_tokens": 4012, "cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}


def test_openai_chat_prompt_tokens_already_include_cache() -> None:
    usage = usage_from_openai_chat(CHAT_USAGE)
    assert usage == TokenUsage(
        input_tokens=4020,
        output_tokens=4,
        cache_read_tokens=0,
        cache_write_tokens=4012,
        reported_cache=True,
        reported_reasoning=True,
    )
    sdk = openai_construct(type_=CompletionUsage, value=copy.deepcopy(CHAT_USAGE))
    assert usage_from_openai_chat(sdk) == usage


def test_openai_chat_cached_and_reasoning() -> None:
    raw = {
        "prompt_tokens": 1370,
        "completion_tokens": 200,
        "prompt_tokens_details": {"cached_tokens": 1280},
        "completion_tokens_details": {"reasoning_tokens": 192},
    }
    usage = usage_from_openai_chat(raw)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.reasoning_tokens) == (1370, 1280, 192)
    assert usage.hit_ratio == pytest.approx(1280 / 1370)


def test_openai_chat_2024_usage_without_details() -> None:
    raw = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
    usage = usage_from_openai_chat(raw)
    assert usage == TokenUsage(input_tokens=10, output_tokens=20)
    sdk = openai_construct(type_=CompletionUsage, value=dict(raw))
    assert isinstance(sdk, CompletionUsage)
    assert sdk.prompt_tokens_details is None
    assert usage_from_openai_chat(sdk) == usage


def test_openai_embeddings_usage() -> None:
    assert usage_from_openai_chat({"prompt_tokens": 8, "total_tokens": 8}) == TokenUsage(input_tokens=8)


def test_openai_chat_null_details() -> None:
    raw = {
        "prompt_tokens": 5,
        "completion_tokens": None,
        "prompt_tokens_details": None,
        "completion_tokens_details": {"reasoning_tokens": None},
    }
    assert usage_from_openai_chat(raw) == TokenUsage(input_tokens=5)


def test_openai_chat_reads_responses_spelling() -> None:
    """A compatible server that answers chat with Responses-style names: not silently 0."""
    usage = usage_from_openai_chat(
        {"input_tokens": 50, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 32}}
    )
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (50, 7, 32)


@pytest.mark.parametrize("garbage", [None, "x", 1.5, [], {}, {"prompt_tokens_details": "x"}])
def test_openai_never_crashes_on_garbage(garbage: Any) -> None:
    assert usage_from_openai_chat(garbage) == TokenUsage()
    assert usage_from_openai_responses(garbage) == TokenUsage()
    assert usage_from_deepseek(garbage) == TokenUsage()


# --- OpenAI Responses -----------------------------------------------------------------------------------------

RESPONSES_USAGE: dict[str, Any] = {
    "input_tokens": 4020,
    "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 4012},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 4025,
}


def test_openai_responses_usage() -> None:
    usage = usage_from_openai_responses(RESPONSES_USAGE)
    assert usage == TokenUsage(
        input_tokens=4020,
        output_tokens=5,
        cache_read_tokens=4012,
        cache_write_tokens=0,
        reasoning_tokens=3,
        reported_cache=True,
        reported_reasoning=True,
    )
    sdk = openai_construct(type_=ResponseUsage, value=copy.deepcopy(RESPONSES_USAGE))
    assert usage_from_openai_responses(sdk) == usage


def test_openai_responses_older_shape_without_cache_write() -> None:
    raw = {
        "input_tokens": 37,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 11,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 48,
    }
    usage = usage_from_openai_responses(raw)
    assert usage.cache_write_tokens == 0 and usage.reported_cache
    assert usage.input_tokens == 37


# --- DeepSeek -------------------------------------------------------------------------------------------------


def test_deepseek_hit_and_miss() -> None:
    raw = {
        "prompt_tokens": 1500,
        "completion_tokens": 40,
        "prompt_cache_hit_tokens": 1280,
        "prompt_cache_miss_tokens": 220,
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    usage = usage_from_deepseek(raw)
    assert usage == TokenUsage(
        input_tokens=1500,
        output_tokens=40,
        cache_read_tokens=1280,
        reasoning_tokens=30,
        reported_cache=True,
        reported_reasoning=True,
    )
    # Parsed by the openai SDK (DeepSeek is used through it): the extra fields survive.
    sdk = openai_construct(type_=CompletionUsage, value=dict(raw))
    assert usage_from_deepseek(sdk) == usage


def test_deepseek_without_prompt_tokens_rebuilds_input() -> None:
    usage = usage_from_deepseek({"prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36, "completion_tokens": 1})
    assert usage.input_tokens == 100 and usage.cache_read_tokens == 64


def test_deepseek_reports_only_openai_style_details() -> None:
    usage = usage_from_deepseek({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 8}})
    assert usage.cache_read_tokens == 8 and usage.reported_cache


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.deepseek.com", True),
        ("https://api.deepseek.com/v1", True),
        ("https://API.DeepSeek.com./beta", True),
        ("api.deepseek.com", True),
        ("https://deepseek.com/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://deepseek.com.evil.example/v1", False),
        ("https://notdeepseek.com", False),
        ("http://127.0.0.1:8080/v1", False),
        ("", False),
        (None, False),
        ("http://[::1", False),
    ],
)
def test_is_deepseek(url: Any, expected: bool) -> None:
    assert is_deepseek(url) is expected


def test_is_deepseek_accepts_the_sdk_url_type() -> None:
    import openai

    client = openai.OpenAI(api_key="x", base_url="https://api.deepseek.com/v1")
    assert is_deepseek(client.base_url)


def test_token_usage_stays_a_frozen_value() -> None:
    import dataclasses

    usage = TokenUsage(1, 2, cache_read_tokens=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        usage.input_tokens = 5  # type: ignore[misc]
    assert dataclasses.replace(usage, output_tokens=9) == TokenUsage(1, 9, 3)
    assert [f.name for f in dataclasses.fields(TokenUsage)][:4] == [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ]
    assert hash(usage) == hash(TokenUsage(1, 2, 3))


_COUNT = st.one_of(st.none(), st.integers(min_value=0, max_value=10**7), st.booleans(), st.floats(allow_nan=True))


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "input_tokens": _COUNT,
            "output_tokens": _COUNT,
            "cache_read_input_tokens": _COUNT,
            "cache_creation_input_tokens": _COUNT,
            "cache_creation": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {}, optional={"ephemeral_5m_input_tokens": _COUNT, "ephemeral_1h_input_tokens": _COUNT}
                ),
            ),
            "output_tokens_details": st.one_of(st.none(), st.fixed_dictionaries({"thinking_tokens": _COUNT})),
            "service_tier": st.just("standard"),
        },
    ),
    st.booleans(),
)
def test_anthropic_response_usage_reads_as_a_stream_first_event(raw: dict[str, Any], as_sdk_object: bool) -> None:
    """A whole response's usage and a stream's first event that carries the same figures must read the same, on
    every shape, as dicts and as the SDK's objects (it found an infinite count raising in ``as_count``)."""
    usage: Any = anthropic_construct(type_=Usage, value=copy.deepcopy(raw)) if as_sdk_object else raw
    assert usage_from_anthropic(usage) == merge_stream_usage(None, usage)
