"""Fixtures of the cache tests: a clean conversation store per test (conversations are keyed by their first
user message, and these tests reuse openings on purpose)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_context import engine


@pytest.fixture(autouse=True)
def _fresh_conversations() -> Iterator[None]:
    engine.reset()
    yield
    engine.reset()
