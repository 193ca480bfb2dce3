"""Fault injection: provider-shaped errors, delays (client timeouts), dropped connections."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
import pytest

from otel_context.testing import Fault
from tests.values import body_of

from .helpers import CLAUDE, GPT

ANTHROPIC_BODY: dict[str, Any] = {
    "model": CLAUDE,
    "max_tokens": 500,
    "messages": [{"role": "user", "content": "hi words:80"}],
}
CHAT_BODY: dict[str, Any] = {"model": GPT, "messages": [{"role": "user", "content": "hi words:80"}]}


@pytest.mark.parametrize(
    ("status", "exc", "etype"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_anthropic_status_faults(
    sim: Any, anthropic_client: Any, status: int, exc: type[anthropic.APIStatusError], etype: str
) -> None:
    sim.inject(Fault(status=status))
    with pytest.raises(exc) as info:
        anthropic_client.messages.create(**ANTHROPIC_BODY)
    assert info.value.status_code == status
    assert body_of(info.value)["error"]["type"] == etype
    assert body_of(info.value)["request_id"].startswith("req_")
    assert sim.last_exchange.status == status
    assert sim.last_exchange.fault is not None
    # consumed: the next call succeeds
    assert anthropic_client.messages.create(**ANTHROPIC_BODY).stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("status", "exc", "code"),
    [
        (429, openai.RateLimitError, 429),
        (500, openai.InternalServerError, 500),
        (529, openai.InternalServerError, 503),
    ],
)
def test_openai_status_faults(sim: Any, openai_client: Any, status: int, exc: type[Exception], code: int) -> None:
    sim.inject(Fault(status=status))
    with pytest.raises(exc) as info:
        openai_client.chat.completions.create(**CHAT_BODY)
    assert info.value.status_code == code  # type: ignore[attr-defined]
    assert set(info.value.body) == {"message", "type", "param", "code"}  # type: ignore[attr-defined]


def test_retry_after_is_honoured_by_sdk_retries(sim: Any) -> None:
    client = sim.anthropic(max_retries=2)
    try:
        sim.inject(Fault(status=529, times=2, retry_after=0.001))
        msg = client.messages.create(**ANTHROPIC_BODY)
    finally:
        client.close()
    assert msg.stop_reason == "end_turn"
    assert [x.status for x in sim.exchanges] == [529, 529, 200]
    assert sim.exchanges[1].headers["x-stainless-retry-count"] == "1"
    assert sim.exchanges[0].response["error"]["type"] == "overloaded_error"


def test_custom_error_and_path_matching(sim: Any, anthropic_client: Any, openai_client: Any) -> None:
    sim.inject(
        Fault(
            status=400, path="/chat/completions", error_type="invalid_request_error", message="nope", code="bad_thing"
        )
    )
    assert anthropic_client.messages.create(**ANTHROPIC_BODY).stop_reason == "end_turn"  # not matched
    assert sim.pending_faults == 1
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(**CHAT_BODY)
    assert info.value.body == {"message": "nope", "type": "invalid_request_error", "param": None, "code": "bad_thing"}
    assert sim.pending_faults == 0


def test_delay_triggers_client_timeout(sim: Any, anthropic_client: Any) -> None:
    sim.inject(Fault(delay=0.5))
    with pytest.raises(anthropic.APITimeoutError):
        anthropic_client.messages.create(**ANTHROPIC_BODY, timeout=0.05)


def test_drop_mid_stream_anthropic(sim: Any, anthropic_client: Any) -> None:
    sim.inject(Fault(drop_after_events=4))
    received: list[str] = []
    # anthropic 2.x lets the transport error through unwrapped while iterating a stream
    with (
        pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)),
        anthropic_client.messages.stream(**ANTHROPIC_BODY) as stream,
    ):
        for event in stream:
            received.append(event.type)
    assert received[0] == "message_start"
    assert "message_stop" not in received
    assert sim.last_exchange.dropped is True
    assert len(sim.last_exchange.response) == 4


def test_drop_mid_stream_openai(sim: Any, openai_client: Any) -> None:
    sim.inject(Fault(drop_after_events=3))
    chunks = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in openai_client.chat.completions.create(**CHAT_BODY, stream=True):
            chunks.append(chunk)
    assert 0 < len(chunks) <= 3


async def test_drop_mid_stream_async(sim: Any, async_openai_client: Any) -> None:
    sim.inject(Fault(drop_after_events=2))
    with pytest.raises(openai.APIConnectionError):
        async with async_openai_client.responses.stream(model=GPT, input="hi words:50") as stream:
            async for _ in stream:
                pass


def test_drop_on_non_streamed_request(sim: Any, openai_client: Any) -> None:
    sim.inject(Fault(drop_after_events=0))
    with pytest.raises(openai.APIConnectionError):
        openai_client.chat.completions.create(**CHAT_BODY)
    assert sim.last_exchange.dropped is True
    # the server keeps serving after a drop
    assert openai_client.chat.completions.create(**CHAT_BODY).choices[0].finish_reason == "stop"


def test_fault_validation() -> None:
    with pytest.raises(ValueError, match="needs a status"):
        Fault()
    with pytest.raises(ValueError, match="400-599"):
        Fault(status=200)
    with pytest.raises(ValueError, match="times"):
        Fault(status=500, times=0)


def test_clear_faults(sim: Any, anthropic_client: Any) -> None:
    sim.inject(Fault(status=500, times=3))
    sim.clear_faults()
    assert anthropic_client.messages.create(**ANTHROPIC_BODY).stop_reason == "end_turn"


def test_error_event_mid_stream_anthropic(sim: Any, anthropic_client: Any) -> None:
    sim.inject(Fault(status=529, drop_after_events=3))
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info, anthropic_client.messages.stream(**ANTHROPIC_BODY) as stream:
        for event in stream:
            seen.append(event.type)
    assert body_of(info.value)["error"]["type"] == "overloaded_error"
    assert seen[0] == "message_start" and "message_stop" not in seen
    assert sim.last_exchange.response[-1][0] == "error"
    assert sim.last_exchange.dropped is False


def test_error_event_mid_stream_openai(sim: Any, openai_client: Any) -> None:
    sim.inject(Fault(status=500, drop_after_events=2))
    with pytest.raises(openai.APIError, match="The server had an error"):
        for _ in openai_client.chat.completions.create(**CHAT_BODY, stream=True):
            pass
    sim.inject(Fault(status=500, drop_after_events=2))
    with openai_client.responses.stream(model=GPT, input="hi") as stream:
        types = [event.type for event in stream]
    assert types == ["response.created", "response.in_progress", "error"]


def test_status_with_drop_on_non_stream_is_a_plain_error(sim: Any, openai_client: Any) -> None:
    sim.inject(Fault(status=429, drop_after_events=2))
    with pytest.raises(openai.RateLimitError):
        openai_client.chat.completions.create(**CHAT_BODY)
