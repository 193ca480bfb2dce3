"""Fixtures of the engine's tests: in-memory OpenTelemetry, a clean engine, and instrumentation on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import otel_context
from tests.compaction.conftest import _fresh_engine, otel, summarizer  # the compactor tests' fixtures, shared
from tests.compaction.support import Otel

__all__ = ["_fresh_engine", "instrumented", "otel", "summarizer"]


@pytest.fixture
def instrumented(otel: Otel) -> Iterator[Callable[..., Any]]:
    """``instrumented(**settings)`` instruments both SDKs with ``settings`` and the in-memory providers."""

    def apply(**settings: Any) -> Any:
        return otel_context.instrument(
            tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, **settings
        )

    yield apply
    otel_context.uninstrument()
