"""The context engine: conversation state, compaction cascade and cache-break detection for one call.

Placeholder until the compactor lands: observes nothing and changes nothing.
"""

from __future__ import annotations

from collections.abc import Generator

from opentelemetry.trace import Span

from otel_context.pipeline import CallPlan, CallRequest, SummaryRequest, SummaryResult


def plan(span: Span, request: CallRequest) -> Generator[SummaryRequest, SummaryResult, CallPlan]:
    """Plan a chat call (see :mod:`otel_context.pipeline`)."""
    return CallPlan(request.body)
    yield  # pragma: no cover
