"""Shared OpenTelemetry fixtures for every test suite of the project.

Fixtures (use them by name):

* ``spans``: a :class:`SpanRecorder` over the session's global in-memory span exporter, cleared before the
  test. ``spans()`` -> every finished span, oldest first; ``spans("chat claude-x")`` -> those with that name;
  ``spans.clear()``; ``spans.exporter`` is the ``InMemorySpanExporter``.
* ``metric_reader``: a fresh ``InMemoryMetricReader`` for this test (``metric_reader.get_metrics_data()``).
  The global meter provider is set once per session to a small delegating provider whose target is
  swapped per test, so every test starts with no metrics while the global provider is only set once.
* ``instrumented``: ``otel_context.instrument()`` on those global providers (content capture off),
  ``uninstrument()`` afterwards. Depends on ``spans`` and ``metric_reader``.

Global providers are installed once per session (OpenTelemetry allows one ``set_*_provider`` per
process); ``otel_context.telemetry`` is re-pointed at them before each test that asks for these fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context_api
from opentelemetry import metrics, trace
from opentelemetry.metrics import Meter, MeterProvider
from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_context import telemetry


class SwitchableMeterProvider(MeterProvider):
    """A global meter provider whose real target changes per test (the global can only be set once)."""

    def __init__(self) -> None:
        self.target: MeterProvider = SDKMeterProvider()

    def get_meter(
        self, name: str, version: str | None = None, schema_url: str | None = None, attributes: Any = None
    ) -> Meter:
        return self.target.get_meter(name, version, schema_url, attributes)


class SpanRecorder:
    """Callable view of the in-memory exporter: ``spans()`` or ``spans(name)``."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def __call__(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return found if name is None else [s for s in found if s.name == name]

    def clear(self) -> None:
        self.exporter.clear()


class _Globals:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = SwitchableMeterProvider()
        trace.set_tracer_provider(self.tracer_provider)
        metrics.set_meter_provider(self.meter_provider)


_globals: _Globals | None = None


def _otel_globals() -> _Globals:
    global _globals
    if _globals is None:
        _globals = _Globals()
    return _globals


@pytest.fixture
def spans() -> Iterator[SpanRecorder]:
    g = _otel_globals()
    g.exporter.clear()
    telemetry.configure()
    yield SpanRecorder(g.exporter)
    g.exporter.clear()


@pytest.fixture
def metric_reader() -> Iterator[InMemoryMetricReader]:
    g = _otel_globals()
    reader = InMemoryMetricReader()
    provider = SDKMeterProvider(metric_readers=[reader])
    g.meter_provider.target = provider
    telemetry.configure()
    yield reader
    g.meter_provider.target = SDKMeterProvider()
    provider.shutdown()


@pytest.fixture
def instrumented(spans: SpanRecorder, metric_reader: InMemoryMetricReader) -> Iterator[None]:
    import otel_context

    otel_context.instrument(capture_content="NO_CONTENT")
    try:
        yield
    finally:
        otel_context.uninstrument()


@pytest.fixture(autouse=True)
def _settings_warnings_anew() -> Iterator[None]:
    """Each test sees the once-per-process warnings of the settings (a bad environment value) afresh."""
    from otel_context import settings

    settings._warned.clear()
    yield


@pytest.fixture(autouse=True)
def _no_span_left_current() -> Iterator[None]:
    """Every test leaves this thread's OpenTelemetry context as it found it. A span left current (a step
    generator suspended inside ``use_span`` and never closed) makes every later span of the thread its child:
    on CI that surfaced 44 tests later as "no root chat span", only when the garbage collector came late."""
    before = otel_context_api.get_current()
    yield
    current = trace.get_current_span()
    if otel_context_api.get_current() is not before and current.get_span_context().is_valid:
        token = otel_context_api.attach(before)  # the next tests start clean: one failure, not forty
        del token
        raise AssertionError(f"the test left a span current in this thread: {current}")
