"""Fixtures of the instrumentation tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import otel_context
from otel_context import pricing


@pytest.fixture
def instrument_with() -> Iterator[Any]:
    """``instrument_with(**settings)``: ``otel_context.instrument()`` with those settings (content capture off
    unless they say), undone after the test (and the price table put back to the default)."""

    def instrument(**settings: Any) -> None:
        otel_context.instrument(**{"capture_content": "NO_CONTENT", **settings})

    try:
        yield instrument
    finally:
        otel_context.uninstrument()
        pricing.configure()
