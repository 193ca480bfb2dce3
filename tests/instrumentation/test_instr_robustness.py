"""The user's call comes first: telemetry, extraction and engine failures never reach the app."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import otel_context
from otel_context import engine, semconv, telemetry
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, attrs, only_span

pytestmark = [pytest.mark.usefixtures("instrumented"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

A = {"model": MODEL_A, "max_tokens": 100, "messages": USER}


class _Boom(RuntimeError):
    pass


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise _Boom("telemetry broke on purpose")


@pytest.fixture(autouse=True)
def _fresh_log_once() -> Any:
    telemetry._logged.clear()
    yield
    telemetry._logged.clear()


def _call_both(sim: Any) -> tuple[Any, Any]:
    message = sim.anthropic().messages.create(**A)
    chunks = list(sim.openai().chat.completions.create(model=MODEL_O, messages=USER, stream=True))
    return message, chunks


def test_tracer_that_raises(simulated_provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    broken = telemetry.Telemetry(_BrokenTracer(), telemetry.get().meter, telemetry.get().instruments)  # type: ignore[arg-type]
    monkeypatch.setattr(telemetry, "_current", broken)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        message, chunks = _call_both(simulated_provider)
        _call_both(simulated_provider)
    assert message.content[0].text.startswith("Simulated reply")
    assert chunks[-1].choices[0].finish_reason == "stop"
    logged = [r for r in caplog.records if r.name == "otel_context"]
    assert len(logged) == 1 and "could not start a span" in logged[0].getMessage()  # logged ONCE


class _BrokenTracer:
    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        raise _Boom("no spans today")


def test_metrics_that_raise(simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    instruments = telemetry.get().instruments
    monkeypatch.setattr(instruments.inference_duration, "record", _boom)
    message, _ = _call_both(simulated_provider)
    assert message.content
    assert len(spans()) == 2  # the spans are still ended


def test_response_extraction_that_raises(simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_context.formats import anthropic_messages, openai_chat

    monkeypatch.setattr(anthropic_messages.AnthropicMessagesAdapter, "response_info", _boom)
    monkeypatch.setattr(openai_chat._ChatAccumulator, "add", _boom)
    message, chunks = _call_both(simulated_provider)
    assert message.content and chunks
    assert {s.name for s in spans()} == {f"chat {MODEL_A}", f"chat {MODEL_O}"}


def test_engine_that_raises(simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "plan", _boom)
    message, _ = _call_both(simulated_provider)
    assert message.content
    assert simulated_provider.exchanges[0].body["messages"] == USER  # sent unchanged


def test_engine_on_response_that_raises(simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_context.contract import CallPlan

    class BadPlan(CallPlan):
        def on_response(
            self, span: Any, usage: Any, response: Any, response_id: str | None = None, diagnosis: Any = None
        ) -> None:
            raise _Boom("engine failed late")

    def plan(span: Any, request: Any) -> Any:
        return BadPlan(request.body)
        yield

    monkeypatch.setattr(engine, "plan", plan)
    message, _ = _call_both(simulated_provider)
    assert message.content
    span = spans(f"chat {MODEL_A}")[0]
    assert attrs(span)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] > 0


def test_content_capture_that_raises(simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_context.formats.anthropic_messages import AnthropicMessagesAdapter
    from otel_context.instrumentation import _content

    otel_context.instrument(capture_content="SPAN_AND_EVENT")
    monkeypatch.setattr(AnthropicMessagesAdapter, "capture_input", _boom)
    monkeypatch.setattr(_content, "fit_json", _boom)
    message, chunks = _call_both(simulated_provider)
    assert message.content and chunks
    assert len(spans()) == 2
    assert attrs(spans(f"chat {MODEL_A}")[0])[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0  # the rest still recorded


async def test_cancelled_call_leaves_status_unset(simulated_provider: Any, spans: Any) -> None:
    import asyncio

    from opentelemetry.trace import StatusCode

    from otel_context.testing import Fault

    simulated_provider.inject(Fault(delay=1.5))
    task = asyncio.create_task(simulated_provider.async_anthropic().messages.create(**A))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.ERROR_TYPE not in attrs(span)


def test_app_errors_are_untouched(simulated_provider: Any, spans: Any) -> None:
    import anthropic

    from otel_context.testing import Fault

    simulated_provider.inject(Fault(status=400, error_type="invalid_request_error", message="nope"))
    with pytest.raises(anthropic.BadRequestError) as caught:
        simulated_provider.anthropic().messages.create(**A)
    assert caught.value.status_code == 400
    assert caught.value.type == "invalid_request_error"
    only_span(spans())
