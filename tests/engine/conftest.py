"""Fixtures of the engine's tests: in-memory OpenTelemetry, a clean engine, and instrumentation on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from compaction.support import FakeSummarizer, Otel, make_otel

import otel_context
from otel_context import engine


@pytest.fixture
def otel() -> Iterator[Otel]:
    yield from make_otel()


@pytest.fixture(autouse=True)
def _fresh_engine() -> Iterator[None]:
    engine.reset()
    yield
    engine.reset()


@pytest.fixture
def summarizer() -> FakeSummarizer:
    return FakeSummarizer()


@pytest.fixture
def instrumented(otel: Otel) -> Iterator[Callable[..., Any]]:
    """``instrumented(**settings)`` instruments both SDKs with ``settings`` and the in-memory providers."""

    def apply(**settings: Any) -> Any:
        return otel_context.instrument(
            tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, **settings
        )

    yield apply
    otel_context.uninstrument()
