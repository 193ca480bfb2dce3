"""What a call costs, on its chat span: both SDKs (plain, streamed, cached) on the simulated provider, each span's
cost against genai-prices' own extraction and calculation of the usage the provider sent, the spend counter
against the spans, an unknown model, a user price, the proposed names behind their switch."""

from __future__ import annotations

import math
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan

import otel_context
from otel_context import pricing, semconv
from otel_context.testing import SimulatedProvider
from otel_context.usage import TokenUsage
from tests.conftest import SpanRecorder
from tests.instrumentation.instr_support import attrs, library_cost, metric_points

SYSTEM = "You are a meticulous assistant for the otel-context repository. " * 60  # ~1,100 tokens: cacheable


def chat_spans(spans: SpanRecorder) -> list[ReadableSpan]:
    return [s for s in spans() if attrs(s).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]


def spend_by_model(reader: InMemoryMetricReader) -> dict[str, float]:
    totals: dict[str, float] = {}
    for point in metric_points(reader, semconv.METRIC_SPEND):
        model = str(point.attributes[semconv.GEN_AI_REQUEST_MODEL])
        totals[model] = totals.get(model, 0.0) + point.value
    return totals


@pytest.fixture
def sim(simulated_provider: SimulatedProvider) -> SimulatedProvider:
    return simulated_provider


def _anthropic_calls(client: Any, model: str = "claude-sonnet-4-6") -> None:
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    long_system = [
        {"type": "text", "text": "Long-lived. " + SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    user = [{"role": "user", "content": "hello there"}]
    with otel_context.conversation("costs-anthropic"):
        client.messages.create(model=model, max_tokens=64, system=system, messages=user)  # writes the cache
        client.messages.create(model=model, max_tokens=64, system=system, messages=user)  # reads it
        with client.messages.stream(model=model, max_tokens=64, system=system, messages=user) as stream:
            stream.get_final_message()
        client.messages.create(model=model, max_tokens=64, system=long_system, messages=user)  # a 1-hour write


def _openai_calls(client: Any, model: str = "gpt-4.1") -> None:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello there"}]
    with otel_context.conversation("costs-openai"):
        client.chat.completions.create(model=model, messages=messages)
        client.chat.completions.create(model=model, messages=messages)  # automatic caching: a read
        for _ in client.chat.completions.create(
            model=model, messages=messages, stream=True, stream_options={"include_usage": True}
        ):
            pass
        client.responses.create(model=model, input="hello there", instructions=SYSTEM)


def test_each_chat_span_costs_what_the_library_says(
    instrumented: None, sim: SimulatedProvider, spans: SpanRecorder, metric_reader: InMemoryMetricReader
) -> None:
    with sim.anthropic() as a, sim.openai() as o:
        _anthropic_calls(a)
        _openai_calls(o)
    exchanges = [e for e in sim.exchanges if e.usage is not None]
    found = chat_spans(spans)
    assert len(found) == len(exchanges) == 8
    read = write_1h = 0
    for span, exchange in zip(found, exchanges, strict=True):
        a = attrs(span)
        assert math.isclose(a[semconv.COST_AMOUNT], library_cost(exchange), rel_tol=1e-9), exchange.usage
        assert a[semconv.COST_CURRENCY] == "USD"
        assert a[semconv.COST_SOURCE] == f"genai-prices {pricing.library_version()}"
        parts = [a.get(k, 0.0) for k in (semconv.COST_INPUT, semconv.COST_CACHE_READ, semconv.COST_CACHE_WRITE)]
        parts += [a.get(k, 0.0) for k in (semconv.COST_OUTPUT, semconv.COST_REASONING)]
        assert math.isclose(sum(parts), a[semconv.COST_AMOUNT], rel_tol=1e-12)
        read += semconv.COST_CACHE_READ in a
        write_1h += semconv.COST_CACHE_WRITE_1H in a
        assert semconv.GEN_AI_USAGE_COST_AMOUNT not in a  # the proposed names only behind their switch
    assert read >= 3 and write_1h == 1  # cached calls of both SDKs were priced, the 1-hour write apart
    # The conversation's spend so far, call by call.
    for conversation, model in (("costs-anthropic", "claude-sonnet-4-6"), ("costs-openai", "gpt-4.1")):
        mine = [attrs(s) for s in found if attrs(s)[semconv.GEN_AI_CONVERSATION_ID] == conversation]
        running = 0.0
        for a in mine:
            running += a[semconv.COST_AMOUNT]
            assert math.isclose(a[semconv.CONVERSATION_COST], running, rel_tol=1e-12)
        # The spend counter: the spans' costs, by model; no conversation id among its attributes. (Its totals are
        # the process's less what they were when this test's meter registered: a float subtraction, 1e-12 off.)
        assert math.isclose(spend_by_model(metric_reader)[model], running, rel_tol=1e-9)
    for point in metric_points(metric_reader, semconv.METRIC_SPEND):
        assert semconv.GEN_AI_CONVERSATION_ID not in point.attributes


def test_an_unknown_model_has_no_cost(
    instrumented: None, sim: SimulatedProvider, spans: SpanRecorder, metric_reader: InMemoryMetricReader
) -> None:
    with sim.openai() as o:
        o.chat.completions.create(model="my-local-llama", messages=[{"role": "user", "content": "hi"}])
    (span,) = chat_spans(spans)
    assert not [k for k in attrs(span) if k.startswith("otel_context.cost.") or k == semconv.CONVERSATION_COST]
    assert metric_points(metric_reader, semconv.METRIC_SPEND) == []
    assert attrs(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0  # the call itself was recorded as always


def test_a_user_price_overrides_a_model(
    instrument_with: Any, sim: SimulatedProvider, spans: SpanRecorder, metric_reader: InMemoryMetricReader
) -> None:
    instrument_with(
        prices={"openai:gpt-4.1": {"input": 1.0, "output": 4.0}, "my-local-llama": {"input": 0, "output": 1}}
    )
    with sim.openai() as o:
        o.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
        o.chat.completions.create(model="my-local-llama", messages=[{"role": "user", "content": "hi"}])
    gpt, llama = (attrs(s) for s in chat_spans(spans))
    expected = gpt[semconv.GEN_AI_USAGE_INPUT_TOKENS] * 1e-6 + gpt[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] * 4e-6
    assert math.isclose(gpt[semconv.COST_AMOUNT], expected, rel_tol=1e-12)
    assert gpt[semconv.COST_SOURCE] == llama[semconv.COST_SOURCE] == "user"
    assert math.isclose(llama[semconv.COST_AMOUNT], llama[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] * 1e-6, rel_tol=1e-12)


def test_the_proposed_names_behind_their_switch(
    instrument_with: Any, sim: SimulatedProvider, spans: SpanRecorder, metric_reader: InMemoryMetricReader
) -> None:
    instrument_with(conventions="proposed")
    with sim.anthropic() as a:
        a.messages.create(model="claude-haiku-4-5", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    a_ = attrs(chat_spans(spans)[0])
    assert a_[semconv.GEN_AI_USAGE_COST_AMOUNT] == a_[semconv.COST_AMOUNT] > 0
    assert a_[semconv.GEN_AI_USAGE_COST_CURRENCY] == "USD"
    assert a_[semconv.GEN_AI_USAGE_COST_SOURCE] == a_[semconv.COST_SOURCE]


def test_the_rates_the_response_names(
    instrumented: None, sim: SimulatedProvider, spans: SpanRecorder, metric_reader: InMemoryMetricReader
) -> None:
    """OpenAI's flex and priority tiers: the response says which served the call, and the span is priced at it
    (the library's variant rates), not at the standard rates."""
    with sim.openai() as o:
        for tier in ("flex", "priority", None):
            extra = {"service_tier": tier} if tier else {}
            o.responses.create(model="gpt-5", input="hello there", **extra)
    flex, priority, standard = (attrs(s) for s in chat_spans(spans))
    for a, tier in ((flex, "flex"), (priority, "priority"), (standard, None)):
        usage = TokenUsage(
            input_tokens=a[semconv.GEN_AI_USAGE_INPUT_TOKENS], output_tokens=a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS]
        )
        extracted = Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        expected = calc_price(
            extracted, "gpt-5", provider_id="openai", price_context={"service_tier": tier} if tier else None
        ).total_price
        assert math.isclose(a[semconv.COST_AMOUNT], float(expected), rel_tol=1e-9), tier
    tokens = {
        (a[semconv.GEN_AI_USAGE_INPUT_TOKENS], a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS])
        for a in (flex, standard, priority)
    }
    assert len(tokens) == 1  # the same call three times: only the rates differ
    assert flex[semconv.COST_AMOUNT] < standard[semconv.COST_AMOUNT] < priority[semconv.COST_AMOUNT]
