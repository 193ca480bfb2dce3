"""The token-usage counters: summed in process, reported as monotonic sums equal to what the provider said."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, Sum

import otel_context
from otel_context import semconv, telemetry
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, metric_points

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

COUNTERS = {
    semconv.METRIC_USAGE_INPUT_TOKENS: semconv.GEN_AI_USAGE_INPUT_TOKENS,
    semconv.METRIC_USAGE_OUTPUT_TOKENS: semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
    semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS: semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
}
#: A system prompt long enough for the simulated provider to cache (its minimum is 1,024 tokens).
SYSTEM = [{"type": "text", "text": "You are terse. " * 900, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def instrumented_otel(spans: Any, metric_reader: InMemoryMetricReader) -> Iterator[tuple[Any, InMemoryMetricReader]]:
    otel_context.instrument()
    yield spans, metric_reader
    otel_context.uninstrument()


def _span_totals(spans: list[Any]) -> dict[tuple[str, str], int]:
    """(counter, request model) -> the sum of the matching usage attribute over the chat spans."""
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for span in spans:
        attributes = dict(span.attributes or {})
        for counter, attribute in COUNTERS.items():
            if attributes.get(attribute):
                totals[counter, attributes[semconv.GEN_AI_REQUEST_MODEL]] += attributes[attribute]
    return dict(totals)


def _counter_totals(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for counter in COUNTERS:
        for point in metric_points(reader, counter):
            totals[counter, point.attributes[semconv.GEN_AI_REQUEST_MODEL]] += int(point.value)
    return dict(totals)


def test_counters_equal_the_span_usage_per_model(simulated_provider: Any, instrumented_otel: Any) -> None:
    spans, reader = instrumented_otel
    anthropic_client, openai_client = simulated_provider.anthropic(), simulated_provider.openai()
    for _ in range(3):  # the first call writes the cache, the next two read it
        anthropic_client.messages.create(model=MODEL_A, max_tokens=50, system=SYSTEM, messages=USER)
    openai_client.chat.completions.create(model=MODEL_O, messages=USER)
    openai_client.chat.completions.create(model=MODEL_O, messages=USER)
    chat = spans()
    assert len(chat) == 5
    expected = _span_totals(chat)
    assert expected[semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS, MODEL_A] > 0
    assert expected[semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS, MODEL_A] > 0
    assert _counter_totals(reader) == expected
    # A figure that never went above 0 has no series at all, as with a synchronous counter.
    assert (semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS, MODEL_O) not in _counter_totals(reader)
    # The same attributes as the duration histogram, and reported as monotonic cumulative sums.
    duration_attrs = {frozenset(p.attributes.items()) for p in metric_points(reader, semconv.METRIC_INFERENCE_DURATION)}
    data = reader.get_metrics_data()
    assert data is not None
    for metric in (m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics):
        if metric.name in COUNTERS:
            assert isinstance(metric.data, Sum) and metric.data.is_monotonic
            assert metric.data.aggregation_temporality == AggregationTemporality.CUMULATIVE
            assert metric.unit == "{token}"
            assert {frozenset((p.attributes or {}).items()) for p in metric.data.data_points} <= duration_attrs


def test_a_failed_call_counts_no_tokens(simulated_provider: Any, instrumented_otel: Any) -> None:
    import anthropic

    from otel_context.testing import Fault

    spans, reader = instrumented_otel
    client = simulated_provider.anthropic()
    simulated_provider.inject(Fault(status=400, error_type="invalid_request_error", message="bad request"))
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=MODEL_A, max_tokens=50, messages=USER)
    assert len(spans()) == 1
    assert _counter_totals(reader) == {}


def test_delta_temporality_reports_what_was_added_since_the_last_collection(simulated_provider: Any) -> None:
    reader = InMemoryMetricReader(preferred_temporality={ObservableCounter: AggregationTemporality.DELTA})
    provider = MeterProvider(metric_readers=[reader])
    otel_context.instrument(meter_provider=provider)
    try:
        client = simulated_provider.openai()
        client.chat.completions.create(model=MODEL_O, messages=USER)
        first = _counter_totals(reader)[semconv.METRIC_USAGE_INPUT_TOKENS, MODEL_O]
        client.chat.completions.create(model=MODEL_O, messages=USER)
        client.chat.completions.create(model=MODEL_O, messages=USER)
        second = _counter_totals(reader)[semconv.METRIC_USAGE_INPUT_TOKENS, MODEL_O]
        assert first > 0
        assert second == 2 * first  # the same prompt twice, not the running total of three calls
    finally:
        otel_context.uninstrument()
        provider.shutdown()


def test_instrumenting_again_on_the_same_meter_counts_once(simulated_provider: Any, metric_reader: Any) -> None:
    """``configure()`` runs on every ``instrument()``: the SDK keeps the first observable counter of a name, so
    the totals must be the meter's, not the latest configuration's."""
    client = simulated_provider.openai()
    otel_context.instrument()
    try:
        client.chat.completions.create(model=MODEL_O, messages=USER)
        otel_context.uninstrument()
        otel_context.instrument()
        telemetry.configure()
        client.chat.completions.create(model=MODEL_O, messages=USER)
    finally:
        otel_context.uninstrument()
    points = metric_points(metric_reader, semconv.METRIC_USAGE_OUTPUT_TOKENS)
    assert len(points) == 1
    usage = client.chat.completions.create(model=MODEL_O, messages=USER).usage  # uninstrumented: counts nothing
    assert usage is not None
    assert points[0].value == 2 * usage.completion_tokens


def test_instrumenting_twice_before_the_app_sets_its_meter_provider(simulated_provider: Any, tmp_path: Any) -> None:
    """OpenTelemetry hands out a new proxy meter per ``get_meter`` until the app sets its provider; each
    ``instrument()`` then registers the counters again, and the SDK keeps only the first registration's
    callbacks when the provider arrives. The calls are still counted (in a fresh interpreter: the global
    provider can be set once per process)."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "app.py"
    script.write_text(
        f"""
import json, warnings
warnings.simplefilter("ignore")
import openai
import otel_context
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
otel_context.instrument()
otel_context.uninstrument()
otel_context.instrument()
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
client = openai.OpenAI(base_url={simulated_provider.base_url + "/v1"!r}, api_key="k", max_retries=0)
usage = client.chat.completions.create(model={MODEL_O!r}, messages={USER!r}).usage
points = [
    p.value
    for rm in reader.get_metrics_data().resource_metrics
    for sm in rm.scope_metrics
    for m in sm.metrics
    if m.name == {semconv.METRIC_USAGE_INPUT_TOKENS!r}
    for p in m.data.data_points
]
print(json.dumps({{"points": points, "prompt_tokens": usage.prompt_tokens}}))
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTEST"))}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["points"] == [result["prompt_tokens"]]
