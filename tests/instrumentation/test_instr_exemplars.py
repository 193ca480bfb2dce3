"""A call's histograms carry exemplars of the call's own chat span, streamed or not, sync or async.

A streamed call's metrics are recorded when the stream ends: in the app's loop, after ``create()`` returned,
where the current span is the app's own (or none). The exemplars must still point at the chat span, so that
a latency or utilization point leads to the trace of the call that produced it.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_context import semconv
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, only_span

HISTOGRAMS = (semconv.METRIC_INFERENCE_DURATION, semconv.METRIC_CONTEXT_UTILIZATION)


def _exemplar_span_ids(reader: InMemoryMetricReader, names: tuple[str, ...]) -> dict[str, set[int | None]]:
    """Span ids of each histogram's exemplars, from ONE collection (a collection takes the exemplars away)."""
    data = reader.get_metrics_data()
    found: dict[str, set[int | None]] = {name: set() for name in names}
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name in found:
                    found[metric.name].update(e.span_id for p in metric.data.data_points for e in p.exemplars)
    return found


def _anthropic(client: Any, streamed: bool) -> None:
    if streamed:
        for _ in client.messages.create(model=MODEL_A, max_tokens=100, messages=USER, stream=True):
            pass
    else:
        client.messages.create(model=MODEL_A, max_tokens=100, messages=USER)


def _openai(client: Any, streamed: bool) -> None:
    if streamed:
        stream = client.chat.completions.create(
            model=MODEL_O, messages=USER, stream=True, stream_options={"include_usage": True}
        )
        for _ in stream:
            pass
    else:
        client.chat.completions.create(model=MODEL_O, messages=USER)


@pytest.mark.parametrize("streamed", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_exemplars_point_at_the_chat_span_inside_an_app_span(
    simulated_provider: Any,
    instrumented: None,
    spans: Any,
    metric_reader: InMemoryMetricReader,
    sdk: str,
    streamed: bool,
) -> None:
    client = simulated_provider.anthropic() if sdk == "anthropic" else simulated_provider.openai()
    with trace.get_tracer("app").start_as_current_span("handle request") as app_span:
        (_anthropic if sdk == "anthropic" else _openai)(client, streamed)
    chat = only_span(spans(f"chat {MODEL_A if sdk == 'anthropic' else MODEL_O}"))
    assert chat.parent is not None and chat.parent.span_id == app_span.get_span_context().span_id
    names = HISTOGRAMS + ((semconv.METRIC_TIME_TO_FIRST_CHUNK,) if streamed else ())
    assert _exemplar_span_ids(metric_reader, names) == {name: {chat.context.span_id} for name in names}


def test_exemplars_of_a_stream_read_outside_any_span(
    simulated_provider: Any, instrumented: None, spans: Any, metric_reader: InMemoryMetricReader
) -> None:
    _anthropic(simulated_provider.anthropic(), streamed=True)
    chat = only_span(spans(f"chat {MODEL_A}"))
    names = (*HISTOGRAMS, semconv.METRIC_TIME_TO_FIRST_CHUNK)
    assert _exemplar_span_ids(metric_reader, names) == {name: {chat.context.span_id} for name in names}


async def test_exemplars_of_an_async_stream_read_inside_an_app_span(
    async_anthropic_client: Any, instrumented: None, spans: Any, metric_reader: InMemoryMetricReader
) -> None:
    with trace.get_tracer("app").start_as_current_span("handle request"):
        stream = await async_anthropic_client.messages.create(model=MODEL_A, max_tokens=100, messages=USER, stream=True)
        async for _ in stream:
            pass
    chat = only_span(spans(f"chat {MODEL_A}"))
    names = (*HISTOGRAMS, semconv.METRIC_TIME_TO_FIRST_CHUNK)
    assert _exemplar_span_ids(metric_reader, names) == {name: {chat.context.span_id} for name in names}
