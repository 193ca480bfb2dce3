"""The usage normalizers against every real recorded response shape (tests/data/cassettes).

For each recorded 200 response the expected figures are computed here straight from the recorded JSON, with
the providers' documented rules, and compared with what the normalizers return for the plain dict and for the
object the real SDK parses it into. For Anthropic streams the SDK's own stream accumulator is a second,
independent oracle for :func:`merge_stream_usage`. A few documented figures (SOURCES.md) are pinned by value.
"""

from __future__ import annotations

from typing import Any, cast

import httpx2
import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic.lib.streaming._beta_messages import accumulate_event
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai.types import Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from otel_context.formats.anthropic_messages import merge_stream_usage, usage_from_anthropic
from otel_context.formats.openai_chat import usage_from_openai_chat
from otel_context.formats.openai_responses import usage_from_openai_responses
from otel_context.usage import TokenUsage
from tests.cassettes.cassette import Interaction, all_names, load, short_id


def _successes() -> list[Any]:
    params = []
    for name in all_names():
        for index, interaction in enumerate(load(name).interactions):
            if interaction.status == 200 and not interaction.path.endswith("count_tokens"):
                params.append(pytest.param(interaction, id=f"{short_id(name)}#{index}"))
    return params


SUCCESSES = _successes()


def _n(d: Any, *path: str) -> int:
    for key in path:
        if not isinstance(d, dict):
            return 0
        d = d.get(key)
    return d if isinstance(d, int) else 0


def _has(d: Any, *path: str) -> bool:
    for key in path:
        if not isinstance(d, dict) or d.get(key) is None:
            return False
        d = d[key]
    return True


def expected_anthropic(u: dict[str, Any]) -> TokenUsage:
    """Anthropic's rules, written out: input excludes cache reads/writes, compaction lives in iterations."""
    compactions = [it for it in u.get("iterations") or [] if it.get("type") == "compaction"]
    return TokenUsage(
        input_tokens=_n(u, "input_tokens") + _n(u, "cache_read_input_tokens") + _n(u, "cache_creation_input_tokens"),
        output_tokens=_n(u, "output_tokens"),
        cache_read_tokens=_n(u, "cache_read_input_tokens"),
        cache_write_tokens=_n(u, "cache_creation_input_tokens"),
        cache_write_5m_tokens=_n(u, "cache_creation", "ephemeral_5m_input_tokens"),
        cache_write_1h_tokens=_n(u, "cache_creation", "ephemeral_1h_input_tokens"),
        reasoning_tokens=_n(u, "output_tokens_details", "thinking_tokens"),
        compaction_input_tokens=sum(
            _n(it, "input_tokens") + _n(it, "cache_read_input_tokens") + _n(it, "cache_creation_input_tokens")
            for it in compactions
        ),
        compaction_output_tokens=sum(_n(it, "output_tokens") for it in compactions),
        reported_cache=_has(u, "cache_read_input_tokens") or _has(u, "cache_creation_input_tokens"),
        reported_reasoning=_has(u, "output_tokens_details", "thinking_tokens"),
        compaction_iterations=len(compactions),
    )


def expected_openai(u: dict[str, Any], responses: bool) -> TokenUsage:
    """OpenAI's rules: the input total already includes cached tokens."""
    inp, out = ("input_tokens", "output_tokens") if responses else ("prompt_tokens", "completion_tokens")
    idet, odet = f"{inp}_details", f"{out}_details"
    return TokenUsage(
        input_tokens=_n(u, inp),
        output_tokens=_n(u, out),
        cache_read_tokens=_n(u, idet, "cached_tokens"),
        cache_write_tokens=_n(u, idet, "cache_write_tokens"),
        reasoning_tokens=_n(u, odet, "reasoning_tokens"),
        reported_cache=_has(u, idet, "cached_tokens") or _has(u, idet, "cache_write_tokens"),
        reported_reasoning=_has(u, odet, "reasoning_tokens"),
    )


def _anthropic_stream_usages(interaction: Interaction) -> list[Any]:
    usages = []
    for event in interaction.events:
        if event.data.get("type") == "message_start":
            usages.append(event.data["message"].get("usage"))
        elif event.data.get("type") == "message_delta":
            usages.append(event.data.get("usage"))
    return usages


def _last_per_field(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """The stream's final usage by the documented rule: per field, the last non-null value."""
    final: dict[str, Any] = {}
    for u in usages:
        for key, value in (u or {}).items():
            if value is not None:
                final[key] = value
    return final


@pytest.mark.parametrize("interaction", SUCCESSES)
def test_usage_matches_the_recorded_figures(interaction: Interaction) -> None:
    path = interaction.path
    if path.startswith("/messages") and not interaction.is_sse:
        body = interaction.json
        got = usage_from_anthropic(body["usage"])
        assert got == expected_anthropic(body["usage"])
        message = anthropic_construct(type_=BetaMessage, value=interaction.json)
        assert isinstance(message, BetaMessage)
        assert usage_from_anthropic(message.usage) == got
    elif path.startswith("/messages"):
        raw = _anthropic_stream_usages(interaction)
        assert raw, "an Anthropic stream without usage events"
        merged: TokenUsage | None = None
        for u in raw:
            merged = merge_stream_usage(merged, u)
        assert merged == expected_anthropic(_last_per_field(raw))
        # Oracle 2: the SDK's own accumulator (the beta one: it also keeps `iterations`).
        snapshot = None
        json_bufs: dict[int, bytes] = {}
        sdk_merged: TokenUsage | None = None
        for event in interaction.events:
            # construct_type returns object; it builds the type it is given (a union: no isinstance check)
            parsed = cast(
                BetaRawMessageStreamEvent, anthropic_construct(type_=BetaRawMessageStreamEvent, value=event.data)
            )
            snapshot = accumulate_event(
                event=parsed, current_snapshot=snapshot, json_bufs=json_bufs, request_headers=httpx2.Headers()
            )
            if event.data.get("type") == "message_start":
                sdk_merged = merge_stream_usage(sdk_merged, parsed.message.usage)  # type: ignore[union-attr]
            elif event.data.get("type") == "message_delta":
                sdk_merged = merge_stream_usage(sdk_merged, parsed.usage)  # type: ignore[union-attr]
        assert snapshot is not None
        from_sdk = usage_from_anthropic(snapshot.usage)
        assert (merged.input_tokens, merged.output_tokens, merged.cache_read_tokens, merged.cache_write_tokens) == (
            from_sdk.input_tokens,
            from_sdk.output_tokens,
            from_sdk.cache_read_tokens,
            from_sdk.cache_write_tokens,
        )
        assert merged.compaction_input_tokens == from_sdk.compaction_input_tokens
        assert sdk_merged == merged  # SDK event objects fold to the same figures as the dicts
    elif path in ("/chat/completions", "/completions", "/embeddings"):
        if interaction.is_sse:
            chunks = [e.data for e in interaction.events if e.data.get("usage")]
            assert len(chunks) <= 1
            if not chunks:  # recorded without stream_options.include_usage: nothing to report, nothing invented
                assert all(e.data.get("usage") is None for e in interaction.events)
                return
            usage = chunks[0]["usage"]
            sdk = openai_construct(type_=ChatCompletionChunk, value=chunks[0]).usage  # type: ignore[attr-defined]
        else:
            usage = interaction.json["usage"]
            kind = {"/chat/completions": ChatCompletion, "/completions": Completion}.get(path, CreateEmbeddingResponse)
            sdk = openai_construct(type_=kind, value=interaction.json).usage  # type: ignore[attr-defined]
        got = usage_from_openai_chat(usage)
        assert got == expected_openai(usage, responses=False)
        assert usage_from_openai_chat(sdk) == got
    elif path == "/responses":
        if interaction.is_sse:
            done = [e.data for e in interaction.events if e.data.get("type") == "response.completed"]
            assert len(done) == 1
            body = done[0]["response"]
        else:
            body = interaction.json
        got = usage_from_openai_responses(body["usage"])
        assert got == expected_openai(body["usage"], responses=True)
        response = openai_construct(type_=Response, value=body)
        assert usage_from_openai_responses(response.usage) == got  # type: ignore[attr-defined]
    else:
        pytest.fail(f"unexpected recorded path {path}")


def _usage_of(name: str, index: int) -> TokenUsage:
    interaction = load(name).interactions[index]
    if interaction.path.startswith("/messages"):
        if interaction.is_sse:
            merged: TokenUsage | None = None
            for u in _anthropic_stream_usages(interaction):
                merged = merge_stream_usage(merged, u)
            assert merged is not None
            return merged
        return usage_from_anthropic(interaction.json["usage"])
    if interaction.path == "/responses":
        return usage_from_openai_responses(interaction.json["usage"])
    return usage_from_openai_chat(interaction.json["usage"])


PYD = "pydantic-ai/tests/models/cassettes/"
OLL = "openllmetry/packages/opentelemetry-instrumentation-anthropic/tests/cassettes/"
OI = "openinference/python/instrumentation/"


def test_pinned_server_side_compaction_figures() -> None:
    usage = _usage_of(PYD + "test_anthropic/test_anthropic_compaction_usage_with_cache.yaml", 0)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_write_tokens) == (229, 5, 0)
    assert (usage.compaction_iterations, usage.compaction_input_tokens, usage.compaction_output_tokens) == (
        1,
        100 + 55096,
        131,
    )


def test_pinned_server_side_compaction_stream_figures() -> None:
    usage = _usage_of(PYD + "test_anthropic/test_anthropic_compaction_usage_with_cache_streaming.yaml", 0)
    # message_start said cache_read 55096 (the compaction pass); the final message_delta overrides it.
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (181, 0, 8)
    assert (usage.compaction_input_tokens, usage.compaction_output_tokens) == (100 + 55096, 83)


def test_pinned_web_search_stream_final_input() -> None:
    usage = _usage_of(PYD + "test_anthropic/test_anthropic_web_search_tool_stream.yaml", 0)
    # message_start: input 2050, output 1 (placeholder); final message_delta: input 31772, output 644.
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (31772, 644, 0)


def test_pinned_prompt_caching_write_then_read() -> None:
    first = _usage_of(OLL + "test_prompt_caching/test_anthropic_prompt_caching_legacy.yaml", 0)
    second = _usage_of(OLL + "test_prompt_caching/test_anthropic_prompt_caching_legacy.yaml", 1)
    assert (first.cache_write_tokens, second.cache_read_tokens) == (1163, 1163)
    assert first.input_tokens > 1163 and second.input_tokens > 1163
    streamed = _usage_of(OLL + "test_prompt_caching/test_anthropic_prompt_caching_stream_legacy.yaml", 0)
    assert streamed.cache_write_tokens == 1165


def test_pinned_legacy_stream_without_cache_fields() -> None:
    usage = _usage_of(OLL + "test_messages/test_anthropic_message_streaming_legacy.yaml", 0)
    assert usage == TokenUsage(input_tokens=17, output_tokens=171)


def test_pinned_ttl_split_and_thinking_tokens() -> None:
    usage = _usage_of(PYD + "test_anthropic/test_anthropic_cache_real_api.yaml", 1)
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.cache_write_5m_tokens) == (1111, 418, 418)
    inline = PYD + "test_anthropic_mid_conversation_system/test_inline_system_prompt_cache_prefix_is_reused.yaml"
    assert _usage_of(inline, 0).cache_write_tokens == 1590
    assert _usage_of(inline, 1).cache_read_tokens == 1590
    assert _usage_of(inline, 0).reported_reasoning


def test_pinned_openai_cache_and_reasoning() -> None:
    chat = PYD + "test_openai_prompt_cache/test_openai_chat_prompt_cache_e2e.yaml"
    assert (_usage_of(chat, 0).cache_write_tokens, _usage_of(chat, 1).cache_read_tokens) == (4012, 4012)
    responses = PYD + "test_openai_prompt_cache/test_openai_responses_prompt_cache_e2e.yaml"
    assert (_usage_of(responses, 0).cache_write_tokens, _usage_of(responses, 1).cache_read_tokens) == (4012, 4012)
    cached = OI + (
        "openinference-instrumentation-openai/tests/openinference/instrumentation/openai/cassettes/"
        "test_tool_calls/test_cached_tokens.yaml"
    )
    assert (_usage_of(cached, 0).cache_read_tokens, _usage_of(cached, 1).cache_read_tokens) == (0, 1280)
    reasoning = "openllmetry/packages/opentelemetry-instrumentation-openai/tests/traces/cassettes/test_chat/test_chat_reasoning.yaml"
    assert [_usage_of(reasoning, i).reasoning_tokens for i in range(3)] == [192, 192, 128]


def test_every_cassette_was_seen() -> None:
    assert len(all_names()) == 59
    assert sum(len(load(n).interactions) for n in all_names()) == 91
