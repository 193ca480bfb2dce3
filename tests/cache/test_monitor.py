"""The TokenMonitor on spans shaped like the instrumentation's (a private SDK tracer provider, no server)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_context import semconv
from otel_context.monitor import TokenMonitor


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    tp = TracerProvider()
    yield tp
    tp.shutdown()


def chat(
    tracer: Any,
    *,
    input_tokens: int | None = 1_000,
    read: int = 0,
    conversation: str | None = "c1",
    utilization: float | None = 0.25,
    break_reason: str | None = None,
    inside: Any = None,
) -> Any:
    span = tracer.start_span(
        "chat claude-sonnet-4-6",
        context=trace.set_span_in_context(inside) if inside is not None else None,
        attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT, semconv.GEN_AI_REQUEST_MODEL: "claude-sonnet-4-6"},
    )
    if conversation is not None:
        span.set_attribute(semconv.GEN_AI_CONVERSATION_ID, conversation)
    if input_tokens is not None:
        span.set_attribute(semconv.GEN_AI_USAGE_INPUT_TOKENS, input_tokens)
        span.set_attribute(semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, read)
        span.set_attribute(semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, 0)
    if utilization is not None:
        span.set_attribute(semconv.CONTEXT_UTILIZATION, utilization)
    if break_reason is not None:
        span.add_event(
            semconv.CACHE_BREAK_EVENT,
            {semconv.CACHE_BREAK_INTENTIONAL: False, semconv.CACHE_BREAK_REASON: break_reason},
        )
    return span


def compact(tracer: Any, parent: Any = None, outcome: str = semconv.OUTCOME_SUCCESS) -> Any:
    span = tracer.start_span(
        semconv.COMPACT_SPAN, context=trace.set_span_in_context(parent) if parent is not None else None
    )
    span.set_attribute(semconv.COMPACTION_OUTCOME, outcome)
    return span


def test_one_line_per_turn_in_the_monitor_format(provider: TracerProvider) -> None:
    out = io.StringIO()
    TokenMonitor(out).attach(provider)
    tracer = provider.get_tracer("t")
    chat(tracer, input_tokens=1_842, read=0, utilization=0.012).end()
    chat(tracer, input_tokens=8_234, read=5_541, utilization=0.41).end()
    chat(tracer, input_tokens=8_300, read=0, break_reason=semconv.REASON_SYSTEM_CHANGED).end()
    assert out.getvalue().splitlines() == [
        "turn  1 | input   1,842 | cache hit   0.0% | context   1% | compactions 0",
        "turn  2 | input   8,234 | cache hit  67.3% | context  41% | compactions 0",
        "turn  3 | input   8,300 | cache hit   0.0% | context  25% | compactions 0 | cache break: system_changed",
    ]


def test_compaction_counts_on_its_turn_and_the_summarizer_is_not_a_turn(provider: TracerProvider) -> None:
    monitor = TokenMonitor(None).attach(provider)
    tracer = provider.get_tracer("t")
    chat(tracer).end()
    call = chat(tracer, read=0)
    work = compact(tracer, parent=call)
    chat(tracer, inside=work, conversation=None).end()  # the summarizer's own call
    work.end()
    call.end()
    failed = chat(tracer)
    compact(tracer, parent=failed, outcome=semconv.OUTCOME_FAILURE).end()
    failed.end()
    assert [(line.turn, line.new_compactions, line.compactions) for line in monitor.lines] == [
        (1, 0, 0),
        (2, 1, 1),
        (3, 0, 1),
    ]
    assert "compactions 1 (+1)" in monitor.lines[1].render()


def test_explicit_compaction_counts_with_the_next_turn(provider: TracerProvider) -> None:
    monitor = TokenMonitor(None).attach(provider)
    tracer = provider.get_tracer("t")
    chat(tracer).end()
    app_span = tracer.start_span("app work")
    compact(tracer, parent=app_span).end()
    app_span.end()
    chat(tracer).end()
    assert [line.new_compactions for line in monitor.lines] == [0, 1]


def test_conversations_are_numbered_separately_and_failed_calls_are_no_turn(provider: TracerProvider) -> None:
    seen: list[Any] = []
    monitor = TokenMonitor(None, on_turn=seen.append).attach(provider)
    tracer = provider.get_tracer("t")
    chat(tracer, conversation="a").end()
    chat(tracer, conversation="b", utilization=None).end()
    chat(tracer, conversation="a", input_tokens=None).end()  # failed before usage
    chat(tracer, conversation="a").end()
    tracer.start_span("not a chat").end()
    assert [(line.conversation, line.turn) for line in seen] == [("a", 1), ("b", 1), ("a", 2)]
    assert seen == monitor.lines
    assert "context    - |" in seen[1].render()


def test_detach_stops_and_keep_bounds_memory(provider: TracerProvider) -> None:
    monitor = TokenMonitor(None, keep=2).attach(provider)
    tracer = provider.get_tracer("t")
    for _ in range(3):
        chat(tracer).end()
    assert [line.turn for line in monitor.lines] == [2, 3]
    monitor.detach()
    chat(tracer).end()
    assert [line.turn for line in monitor.lines] == [2, 3]


def test_keep_zero_keeps_no_lines_and_a_bad_keep_is_refused(provider: TracerProvider) -> None:
    out = io.StringIO()
    monitor = TokenMonitor(out, keep=0).attach(provider)
    chat(provider.get_tracer("t")).end()
    assert monitor.lines == [] and "turn" in out.getvalue()  # printed, not kept
    with pytest.raises(ValueError, match="keep=-1"):
        TokenMonitor(None, keep=-1)


def test_attach_needs_an_sdk_provider() -> None:
    with pytest.raises(RuntimeError, match=r"otel_context\.auto"):
        TokenMonitor(None).attach(trace.NoOpTracerProvider())


def test_attach_finds_the_provider_instrument_was_given(simulated_provider: Any) -> None:
    """The README's pairing: ``instrument(tracer_provider=...)`` then ``TokenMonitor().attach()`` (it raised:
    it looked only at the global provider, still OpenTelemetry's placeholder)."""
    import otel_context

    provider = TracerProvider()
    otel_context.instrument(tracer_provider=provider)
    out = io.StringIO()
    try:
        monitor = TokenMonitor(out).attach()
        simulated_provider.anthropic().messages.create(
            model="claude-sonnet-4-6", max_tokens=50, messages=[{"role": "user", "content": "Hi words:3"}]
        )
    finally:
        otel_context.uninstrument()
        provider.shutdown()
    assert len(monitor.lines) == 1 and out.getvalue().startswith("turn  1 | input ")
