"""Stream lifecycles and API errors: the span ends exactly once, with the right status and usage."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from otel_context import semconv
from otel_context.testing import Fault
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, attrs, metric_points, only_span

pytestmark = [pytest.mark.usefixtures("instrumented"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

A: dict[str, Any] = {
    "model": MODEL_A,
    "max_tokens": 200,
    "messages": [{"role": "user", "content": "words:60 tell me a story"}],
}
O_CHAT = {"model": MODEL_O, "messages": [{"role": "user", "content": "words:60 tell me a story"}]}


@pytest.fixture(autouse=True)
def _no_double_end(caplog: pytest.LogCaptureFixture) -> Any:
    """Fails any test in which a span was ended twice (the SDK logs it)."""
    caplog.set_level(logging.WARNING, logger="opentelemetry.sdk.trace")
    yield
    assert not [r for r in caplog.records if "ended span" in r.getMessage()]


def _anthropic_input_total(sim: Any) -> int:
    usage = sim.last_exchange.usage
    return int(usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"])


# --- early exits ---------------------------------------------------------------------------------------------


def test_break_inside_with_ends_unset_and_keeps_input_usage(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.anthropic()
    with client.messages.create(**A, stream=True) as stream:
        for _event in stream:
            break
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == _anthropic_input_total(simulated_provider)
    assert attrs(span)[semconv.GEN_AI_RESPONSE_ID].startswith("msg_")


def test_helper_break_in_with_ends_span(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.anthropic()
    with client.messages.stream(**A) as stream:
        for _text in stream.text_stream:
            break
        assert spans() == []  # still open inside the block
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == _anthropic_input_total(simulated_provider)


def test_openai_chat_helper_break_in_with_ends_span(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.openai()
    with client.chat.completions.stream(**O_CHAT) as stream:
        for _event in stream:
            break
        assert spans() == []
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[semconv.GEN_AI_RESPONSE_MODEL] == MODEL_O


def test_openai_responses_helper_break_in_with_ends_span(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.openai()
    with client.responses.stream(model=MODEL_O, input="words:60 go") as stream:
        for _event in stream:
            break
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[semconv.GEN_AI_RESPONSE_ID].startswith("resp_")


def test_close_ends_span_once(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.openai()
    stream = client.chat.completions.create(**O_CHAT, stream=True)
    next(iter(stream))
    assert spans() == []
    stream.close()
    stream.close()
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET


def test_abandoned_stream_ends_on_gc(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.anthropic()
    stream = client.messages.create(**A, stream=True)
    next(iter(stream))
    assert spans() == []
    del stream
    gc.collect()
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert attrs(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == _anthropic_input_total(simulated_provider)


@pytest.mark.parametrize("iterated", [False, True])
def test_a_dropped_stream_ends_at_once_without_the_garbage_collector(
    simulated_provider: Any, spans: Any, iterated: bool
) -> None:
    """The proxy holds no reference cycle: dropping the last reference ends the span right away."""
    client = simulated_provider.anthropic()
    gc.disable()
    try:
        stream = client.messages.create(**A, stream=True)
        if iterated:
            next(iter(stream))
        del stream
        assert len(spans()) == 1
    finally:
        gc.enable()


async def test_async_break_and_aclose(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.async_openai()
    stream = await client.chat.completions.create(**O_CHAT, stream=True)
    async for _chunk in stream:
        break
    await stream.close()
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET


async def test_async_helper_break_in_with(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.async_anthropic()
    async with client.messages.stream(**A) as stream:
        async for _text in stream.text_stream:
            break
    span = only_span(spans())
    assert attrs(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS] == _anthropic_input_total(simulated_provider)


async def test_async_abandoned_stream_ends_on_gc(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.async_anthropic()
    stream = await client.messages.create(**A, stream=True)
    await stream.__anext__()
    del stream
    gc.collect()
    assert only_span(spans()).status.status_code is StatusCode.UNSET


# --- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", ["anthropic", "openai"])
def test_mid_stream_disconnect_is_an_error(simulated_provider: Any, spans: Any, flavor: str) -> None:
    simulated_provider.inject(Fault(drop_after_events=3))
    if flavor == "anthropic":
        stream = simulated_provider.anthropic().messages.create(**A, stream=True)
    else:
        stream = simulated_provider.openai().chat.completions.create(**O_CHAT, stream=True)
    with pytest.raises(Exception) as caught:
        for _ in stream:
            pass
    span = only_span(spans())
    assert span.status.status_code is StatusCode.ERROR
    error_type = attrs(span)[semconv.ERROR_TYPE]
    assert error_type == f"{type(caught.value).__module__.split('.')[0]}.{type(caught.value).__qualname__}"


def test_anthropic_400_sets_api_error_type(simulated_provider: Any, spans: Any, metric_reader: Any) -> None:
    import anthropic

    simulated_provider.inject(Fault(status=400, error_type="invalid_request_error", message="bad request"))
    with pytest.raises(anthropic.BadRequestError):
        simulated_provider.anthropic().messages.create(**A)
    span = only_span(spans())
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[semconv.ERROR_TYPE] == "invalid_request_error"
    [point] = metric_points(metric_reader, semconv.METRIC_INFERENCE_DURATION)
    assert point.attributes[semconv.ERROR_TYPE] == "invalid_request_error"


def test_openai_error_code_wins_over_type(simulated_provider: Any, spans: Any) -> None:
    import openai

    simulated_provider.inject(
        Fault(status=400, error_type="invalid_request_error", code="invalid_value", message="bad value")
    )
    with pytest.raises(openai.BadRequestError):
        simulated_provider.openai().chat.completions.create(**O_CHAT)
    assert attrs(only_span(spans()))[semconv.ERROR_TYPE] == "invalid_value"


def test_anthropic_529_overloaded(simulated_provider: Any, spans: Any) -> None:
    import anthropic

    simulated_provider.inject(Fault(status=529))
    with pytest.raises(anthropic.APIStatusError):
        simulated_provider.anthropic().messages.create(**A)
    assert attrs(only_span(spans()))[semconv.ERROR_TYPE] == "overloaded_error"


@pytest.mark.parametrize("flavor", ["anthropic", "openai"])
def test_429_with_sdk_retries_is_still_one_span(simulated_provider: Any, spans: Any, flavor: str) -> None:
    simulated_provider.inject(Fault(status=429, times=2, retry_after=0))
    if flavor == "anthropic":
        simulated_provider.anthropic(max_retries=3).messages.create(**A)
    else:
        simulated_provider.openai(max_retries=3).chat.completions.create(**O_CHAT)
    assert [e.status for e in simulated_provider.exchanges] == [429, 429, 200]
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET
    assert semconv.ERROR_TYPE not in attrs(span)


def test_connection_error_uses_qualified_class_name(spans: Any) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="k", max_retries=0)
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(**A)
    assert attrs(only_span(spans()))[semconv.ERROR_TYPE] == "anthropic.APIConnectionError"


def test_metrics_per_call(simulated_provider: Any, spans: Any, metric_reader: Any) -> None:
    client = simulated_provider.anthropic()
    client.messages.create(**A)
    with client.messages.stream(**A) as stream:
        stream.until_done()
    usage = simulated_provider.last_exchange.usage
    [duration] = metric_points(metric_reader, semconv.METRIC_INFERENCE_DURATION)
    assert duration.count == 2
    assert duration.attributes == {
        semconv.GEN_AI_OPERATION_NAME: "chat",
        semconv.GEN_AI_PROVIDER_NAME: "anthropic",
        semconv.GEN_AI_REQUEST_MODEL: MODEL_A,
        semconv.GEN_AI_RESPONSE_MODEL: MODEL_A,
        semconv.SERVER_ADDRESS: "127.0.0.1",
    }
    assert list(duration.explicit_bounds) == list(semconv.DURATION_BUCKETS)
    [ttfc] = metric_points(metric_reader, semconv.METRIC_TIME_TO_FIRST_CHUNK)
    assert ttfc.count == 1
    [out] = metric_points(metric_reader, semconv.METRIC_USAGE_OUTPUT_TOKENS)
    assert out.value == 2 * usage["output_tokens"]
    assert metric_points(metric_reader, semconv.METRIC_LEGACY_TOKEN_USAGE) == []


def test_legacy_metrics_behind_switch(simulated_provider: Any, spans: Any, metric_reader: Any) -> None:
    import otel_context

    otel_context.instrument(legacy_metrics=True)
    simulated_provider.openai().chat.completions.create(**O_CHAT)
    points = metric_points(metric_reader, semconv.METRIC_LEGACY_TOKEN_USAGE)
    assert {p.attributes[semconv.GEN_AI_TOKEN_TYPE] for p in points} == {"input", "output"}
    assert metric_points(metric_reader, semconv.METRIC_LEGACY_OPERATION_DURATION)


def test_streaming_response_read_raw_still_records_usage(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.openai()
    with client.chat.completions.with_streaming_response.create(**O_CHAT) as response:
        raw = response.read()  # the app reads bytes, never parses
        assert spans() == []
    assert b"chat.completion" in raw
    span = only_span(spans())
    assert (
        attrs(span)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == simulated_provider.last_exchange.usage["completion_tokens"]
    )


def test_streaming_response_lines_of_a_stream_end_on_exit(simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.anthropic()
    with client.messages.with_streaming_response.create(**A, stream=True) as response:
        lines = [line for line in response.iter_lines() if line]
    assert any(line.startswith("event: message_stop") for line in lines)
    span = only_span(spans())
    assert span.status.status_code is StatusCode.UNSET


# --- a stream iterated in several loops (each loop is a generator over the same stream) ---------------------


def test_a_stream_read_in_two_loops_ends_once_at_its_end_with_the_final_usage(
    simulated_provider: Any, spans: Any
) -> None:
    """Leaving a ``for`` loop early does not end the span: the app may go on reading the same stream in another
    loop, and the usage that only the last events carry is still recorded, once."""
    client = simulated_provider.anthropic()
    stream = client.messages.create(**A, stream=True)
    for event in stream:
        if event.type == "content_block_start":
            break
    assert spans() == []
    for _event in stream:
        pass
    span = only_span(spans())
    usage = simulated_provider.last_exchange.usage
    assert attrs(span)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["output_tokens"] > 0
    assert attrs(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attrs(span)[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0


async def test_an_async_stream_read_in_two_loops_ends_once_at_its_end_with_the_final_usage(
    simulated_provider: Any, spans: Any
) -> None:
    client = simulated_provider.async_anthropic()
    stream = await client.messages.create(**A, stream=True)
    async for event in stream:
        if event.type == "content_block_start":
            break
    assert spans() == []
    async for _event in stream:
        pass
    span = only_span(spans())
    usage = simulated_provider.last_exchange.usage
    assert attrs(span)[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["output_tokens"] > 0
    assert attrs(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
