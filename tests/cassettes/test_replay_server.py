"""The replay server itself: what the cassette tests rely on (no instrumentation involved)."""

from __future__ import annotations

import anthropic
import httpx2
import openai
import pytest

from .calls import call_sync, is_stream, make_client
from .cassette import all_names, load, parse_sse
from .replay import MISS_STATUS, ReplayServer

#: The recorded exchanges name the models of their day; the SDK warns for those past their end of life.
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

ANTHROPIC_STREAM = (
    "openllmetry/packages/opentelemetry-instrumentation-anthropic/tests/cassettes/test_messages/"
    "test_anthropic_message_streaming_legacy.yaml"
)
GZIP_SSE = "logfire/tests/otel_integrations/cassettes/test_anthropic/test_sync_messages_beta_stream.yaml"
TWO_CALLS = (
    "openllmetry/packages/opentelemetry-instrumentation-anthropic/tests/cassettes/test_prompt_caching/"
    "test_anthropic_prompt_caching_legacy.yaml"
)


@pytest.mark.parametrize("name", [ANTHROPIC_STREAM, GZIP_SSE])
def test_sse_body_is_sent_byte_for_byte(name: str) -> None:
    interaction = load(name).interactions[0]
    with ReplayServer([interaction]) as server:
        response = httpx2.post(server.base_url + "/v1/messages?beta=true", json={})
    assert response.status_code == 200
    assert response.content == interaction.body
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in response.headers  # the gzip recording is served decoded
    assert parse_sse(response.content)[0].data["type"] == "message_start"


def test_interactions_for_one_path_are_answered_in_order_then_missed() -> None:
    cassette = load(TWO_CALLS)
    with ReplayServer(cassette.interactions) as server:
        client = make_client("anthropic", server.base_url)
        first = call_sync(client, cassette.interactions[0])
        second = call_sync(client, cassette.interactions[1])
        assert first.usage.cache_creation_input_tokens == 1163
        assert second.usage.cache_read_input_tokens == 1163
        assert server.remaining == 0
        with pytest.raises(anthropic.APIStatusError) as info:
            call_sync(client, cassette.interactions[1])
        assert info.value.status_code == MISS_STATUS
        assert [r.path for r in server.misses] == ["/messages"]
        assert server.received[0].body == cassette.interactions[0].request_body


def test_rebuilt_requests_carry_the_recorded_body() -> None:
    """extra_body routing keeps the wire request equal to the recording (fields the SDK no longer declares)."""
    structured = (
        "openllmetry/packages/opentelemetry-instrumentation-anthropic/tests/cassettes/test_structured_outputs/"
        "test_anthropic_structured_outputs_legacy.yaml"
    )
    interaction = load(structured).interactions[0]
    with ReplayServer([interaction]) as server:
        call_sync(make_client("anthropic", server.base_url), interaction)
        sent = server.received[0]
    assert sent.body == interaction.request_body
    assert sent.path == "/messages"
    assert "structured-outputs-2025-11-13" in sent.headers.get("anthropic-beta", "")


@pytest.mark.parametrize("name", all_names())
def test_every_cassette_replays_to_the_uninstrumented_sdk(name: str) -> None:
    """The baseline: without instrumentation every recorded call succeeds or raises the recorded status."""
    cassette = load(name)
    with ReplayServer(cassette.interactions) as server:
        for interaction in cassette.interactions:
            client = make_client(interaction.provider, server.base_url)
            if interaction.status >= 400:
                with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as info:
                    call_sync(client, interaction)
                assert isinstance(info.value, (anthropic.APIStatusError, openai.APIStatusError))
                assert info.value.status_code == interaction.status
            else:
                result = call_sync(client, interaction)
                assert result is not None or is_stream(interaction)
        assert not server.misses and server.remaining == 0
