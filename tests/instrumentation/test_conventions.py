"""OTEL_CONTEXT_CONVENTIONS=legacy: the older names beside the current ones, for the viewers and dashboards that
lag the conventions (docs/telemetry.md, "Which semantic conventions"; docs/viewing.md): Arize Phoenix reads cache
writes as ``gen_ai.usage.cache_creation.input_tokens`` (core semconv v1.41) and priced them as plain input."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import otel_context
from otel_context import semconv
from otel_context.settings import SettingsError
from tests.conftest import SpanRecorder
from tests.instrumentation.instr_support import MODEL_A, attrs, metric_points

SYSTEM = [{"type": "text", "text": "You review billing code. " * 300, "cache_control": {"type": "ephemeral"}}]


def _cached_call(simulated_provider: Any) -> None:
    """A first call with a cache breakpoint: the provider writes the prefix to its cache."""
    simulated_provider.anthropic().messages.create(
        model=MODEL_A, max_tokens=32, system=SYSTEM, messages=[{"role": "user", "content": "hi"}]
    )


@pytest.mark.parametrize("conventions", ["", "legacy", "proposed,legacy"])
def test_the_older_cache_write_name_only_when_the_switch_asks(
    instrument_with: Any,
    simulated_provider: Any,
    spans: SpanRecorder,
    metric_reader: InMemoryMetricReader,
    conventions: str,
) -> None:
    instrument_with(conventions=conventions)
    _cached_call(simulated_provider)
    (span,) = spans()
    a = attrs(span)
    written = a[semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS]
    assert written > 0  # the call wrote its prefix to the cache
    legacy = "legacy" in conventions
    assert a.get(semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS) == (written if legacy else None)
    # The older metrics come with it (as OTEL_CONTEXT_LEGACY_METRICS emits them), the current ones stay.
    assert bool(metric_points(metric_reader, semconv.METRIC_LEGACY_OPERATION_DURATION)) == legacy
    assert metric_points(metric_reader, semconv.METRIC_INFERENCE_DURATION)


def test_an_unknown_convention_is_a_clear_error() -> None:
    with pytest.raises(SettingsError, match=r"known: proposed, legacy"):
        otel_context.instrument(conventions="v1.41")
