"""Small helpers of the instrumentation tests (span lookup, metric points)."""

from __future__ import annotations

from typing import Any

import httpx2
from genai_prices import extract_usage
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan

from otel_context import semconv
from otel_context.testing import Exchange

MODEL_A = "claude-sonnet-4-6"
MODEL_O = "gpt-5"
USER: list[Any] = [{"role": "user", "content": "hello there"}]  # a message list both SDKs take


class TransportOfTheApp(httpx2.HTTPTransport):
    """A transport class of the app's own: one whose connections a background summary cannot remake without
    guessing at it, so the summary shares the app's client (``instrumentation/_summary_client.py``)."""


def only_span(found: list[ReadableSpan]) -> ReadableSpan:
    """The one span of the call; fails with the names when there are more (the double-span bug)."""
    assert len(found) == 1, [(s.name, s.instrumentation_scope.name if s.instrumentation_scope else None) for s in found]
    return found[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    points: list[Any] = []
    if data is None:
        return points
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    points.extend(metric.data.data_points)
    return points


def counter_total(reader: InMemoryMetricReader, name: str) -> float:
    total: float = sum(p.value for p in metric_points(reader, name))
    return total


def assert_usage_matches(span: ReadableSpan, usage: dict[str, Any] | None) -> None:
    """The span's usage attributes equal what the simulated provider reported (input includes cache)."""
    assert usage is not None
    a = attrs(span)
    if "prompt_tokens" in usage:  # openai chat / embeddings
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
        if "completion_tokens" in usage:
            assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]
    elif "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:  # anthropic
        total = (
            usage["input_tokens"]
            + (usage.get("cache_read_input_tokens") or 0)
            + (usage.get("cache_creation_input_tokens") or 0)
        )
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == total
        assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["output_tokens"]
    else:  # responses
        assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == usage["input_tokens"]
        assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["output_tokens"]


#: The library's API flavor of each endpoint the cost tests call.
_FLAVOR = {"/v1/messages": "default", "/v1/chat/completions": "chat", "/v1/responses": "responses"}


def library_cost(exchange: Exchange) -> float:
    """genai-prices' own figure for what the provider answered: its extraction of the usage, its calculation
    (what the chat span's ``otel_context.cost.amount`` must be)."""
    assert exchange.usage is not None
    provider = "anthropic" if exchange.path == "/v1/messages" else "openai"
    extracted = extract_usage(
        {"model": exchange.body["model"], "usage": exchange.usage},
        provider_id=provider,
        api_flavor=_FLAVOR[exchange.path],
    )
    return float(extracted.calc_price().total_price)
