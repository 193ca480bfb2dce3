"""Fixtures of the compactor's tests: in-memory OpenTelemetry and a clean engine state per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_context import engine
from tests.compaction.support import FakeSummarizer, Otel, make_otel


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
