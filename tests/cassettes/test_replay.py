"""Every recorded provider exchange, replayed to the REAL SDK clients through the instrumentation.

A loopback server (:mod:`.replay`) answers with the recorded status, headers and body (SSE included); the
test rebuilds the SDK call from the recorded request (:mod:`.calls`), consumes the result fully, and checks
the finished span against what the provider really reported, computed from the recorded body alone
(:mod:`.expected`). Each cassette runs through the sync client, the async client, and, when it holds a
successful stream, the SDK's stream helper. This is where old shapes (no cache fields), new shapes (fields
the SDK types do not declare), repeated and changed stream usage, and server-side compaction usage are
exercised against the real parsing code.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_context import semconv

from .calls import ASYNC, HELPER, SYNC, call_async, call_helper, call_sync, is_stream, make_client
from .cassette import Cassette, Interaction, all_names, load, short_id
from .expected import expected_for
from .replay import ReplayServer

#: The recorded exchanges name the models of their day; the SDK warns for those past their end of life.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

#: Paths the instrumentation gives a span (legacy ``/completions`` is not a GenAI surface it traces).
TRACED_PATHS = ("/messages", "/messages/count_tokens", "/chat/completions", "/responses", "/embeddings")


def _cases() -> list[Any]:
    cases: list[Any] = []
    for name in all_names():
        cassette = load(name)
        modes = [SYNC, ASYNC]
        if any(is_stream(i) and i.status == 200 for i in cassette.interactions):
            modes.append(HELPER)
        cases.extend(pytest.param(name, mode, id=f"{short_id(name)}-{mode}") for mode in modes)
    return cases


async def _make_call(interaction: Interaction, server: ReplayServer, mode: str) -> BaseException | None:
    """Make the recorded call; return the exception the SDK raised (None on success)."""
    client = make_client(interaction.provider, server.base_url, asynchronous=mode == ASYNC)
    try:
        with warnings.catch_warnings():
            # The SDK's own serializer warns on recorded shapes newer than its types (SOURCES.md); not ours.
            warnings.filterwarnings("ignore", message=".*[Ss]erializ.*")
            if mode == ASYNC:
                await call_async(client, interaction)
            elif mode == HELPER and is_stream(interaction) and interaction.status == 200:
                call_helper(client, interaction)
            else:
                call_sync(client, interaction)
    except (anthropic.APIStatusError, openai.APIStatusError) as exc:
        return exc
    finally:
        close = client.close()
        if asyncio.iscoroutine(close):
            await close
    return None


def _genai_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) is not None]


def _check_span(span: ReadableSpan, interaction: Interaction, label: str) -> None:
    attrs = dict(span.attributes or {})
    exp = expected_for(interaction)
    if exp.error_type is not None or interaction.status >= 400:
        assert span.status.status_code is StatusCode.ERROR, label
        assert attrs.get(semconv.ERROR_TYPE) == exp.error_type, label
        return
    assert span.status.status_code is not StatusCode.ERROR, f"{label}: {span.status.description}"
    assert semconv.ERROR_TYPE not in attrs, label
    expected_provider = semconv.PROVIDER_ANTHROPIC if interaction.provider == "anthropic" else semconv.PROVIDER_OPENAI
    assert attrs.get(semconv.GEN_AI_PROVIDER_NAME) == expected_provider, label
    body = interaction.request_body or {}
    assert attrs.get(semconv.GEN_AI_REQUEST_MODEL) == body.get("model"), label
    if interaction.path.endswith("count_tokens"):
        assert attrs[semconv.GEN_AI_OPERATION_NAME] == semconv.OP_COUNT_TOKENS, label
        return
    usage_got = {k: v for k, v in attrs.items() if k.startswith("gen_ai.usage.")}
    for name, value in exp.required.items():
        assert usage_got.get(name) == value, f"{label}: {name} = {usage_got.get(name)!r}, provider reported {value}"
    for name in exp.absent_or_zero:
        assert usage_got.get(name, 0) == 0, f"{label}: {name} = {usage_got[name]!r} but the provider reported none"
    if exp.response_model is not None:
        assert attrs.get(semconv.GEN_AI_RESPONSE_MODEL) == exp.response_model, label
    if exp.response_id is not None:
        assert attrs.get(semconv.GEN_AI_RESPONSE_ID) == exp.response_id, label
    if interaction.path.startswith("/messages") or interaction.path in ("/chat/completions", "/responses"):
        assert attrs.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT, label
        assert attrs.get(semconv.GEN_AI_REQUEST_STREAM, False) is is_stream(interaction), label
    if exp.provider_compacted:
        assert attrs.get(semconv.GEN_AI_CONVERSATION_COMPACTED) is True, f"{label}: server-side compaction not flagged"
    # No recorded exchange asked for the provider's cache diagnosis (issue 42): the real shapes, among them a
    # Responses reply that echoes ``prompt_cache_options`` without a comparison, carry none and get none.
    assert semconv.CACHE_DIAGNOSIS_STATUS not in attrs, label


_METRICS = {
    semconv.METRIC_USAGE_INPUT_TOKENS: semconv.GEN_AI_USAGE_INPUT_TOKENS,
    semconv.METRIC_USAGE_OUTPUT_TOKENS: semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
    semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
}


def _chat_token_sums(metric_reader: Any) -> dict[str, int]:
    """The token counters' totals over ``chat`` data points."""
    sums = dict.fromkeys(_METRICS, 0)
    data = metric_reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name not in sums:
                    continue
                for point in metric.data.data_points:
                    if point.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT:
                        sums[metric.name] += int(point.value)
    return sums


@pytest.mark.parametrize(("name", "mode"), _cases())
@pytest.mark.usefixtures("instrumented")
async def test_replayed_exchange_span(name: str, mode: str, spans: Any, metric_reader: Any) -> None:
    """``instrumented`` / ``spans`` / ``metric_reader``: tests/conftest.py (global providers, content off)."""
    cassette: Cassette = load(name)
    expected_sums = dict.fromkeys(_METRICS, 0)
    for interaction in cassette.interactions:
        is_chat = interaction.path == "/messages" or interaction.path in ("/chat/completions", "/responses")
        if interaction.status < 400 and is_chat:
            exp = expected_for(interaction)
            for metric, attribute in _METRICS.items():
                expected_sums[metric] += exp.required.get(attribute, 0)
    with ReplayServer(cassette.interactions) as server:
        for index, interaction in enumerate(cassette.interactions):
            label = f"{short_id(name)}#{index} ({mode})"
            before = len(spans())
            error = await _make_call(interaction, server, mode)
            if interaction.status >= 400:
                assert error is not None and error.status_code == interaction.status, label  # type: ignore[attr-defined]
            else:
                assert error is None, f"{label}: {error!r}"
            found = _genai_spans(spans()[before:])
            if interaction.path in TRACED_PATHS:
                assert len(found) == 1, f"{label}: {len(found)} GenAI spans for one call: {[s.name for s in found]}"
            else:
                assert len(found) <= 1, label
            for span in found:
                _check_span(span, interaction, label)
        assert not server.misses, f"calls the recording does not have: {server.misses}"
        assert server.remaining == 0, "recorded interactions left unanswered"
    # The token counters add up to what the provider reported over the cassette's chat calls.
    assert _chat_token_sums(metric_reader) == expected_sums


def test_every_recorded_exchange_is_covered() -> None:
    """59 cassettes, 91 exchanges, 19 of them successful streams that also go through the helpers."""
    cases = _cases()
    assert len({c.values[0] for c in cases}) == 59
    assert sum(len(load(n).interactions) for n in all_names()) == 91
    assert sum(1 for c in cases if c.values[1] == HELPER) == 19
