"""A model the provider does not know, as the real APIs answer it (recorded), as the simulated provider answers it
with ``strict_models=True``, and as the compactor recognizes it (the summary model's fallback: docs/compaction.md,
"When compaction fails")."""

from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest

from otel_context.compaction import alerts
from otel_context.testing import SimulatedProvider

from .calls import call_sync, make_client
from .cassette import load
from .replay import ReplayServer

ANTHROPIC_404 = "pydantic-ai/tests/cassettes/test_model_name_suggestions/test_model_name_suggestion[anthropic].yaml"
_CONTRIB = "opentelemetry-python-contrib/instrumentation-genai/opentelemetry-instrumentation-openai-v2/tests/cassettes/"
OPENAI_CHAT_404 = _CONTRIB + "test_chat_completion_404.yaml"
OPENAI_RESPONSES_400 = _CONTRIB + "test_responses_create_api_error[content_mode0].yaml"


@pytest.mark.parametrize("name", [ANTHROPIC_404, OPENAI_CHAT_404, OPENAI_RESPONSES_400])
def test_the_recorded_unknown_model_errors_read_as_an_unknown_model(name: str) -> None:
    (interaction,) = load(name).interactions
    errors = (anthropic.APIStatusError, openai.APIStatusError)
    with ReplayServer([interaction]) as server, pytest.raises(errors) as info:
        call_sync(make_client(interaction.provider, server.base_url), interaction)
    assert alerts.unknown_model(info.value)


@pytest.mark.parametrize("name", [ANTHROPIC_404, OPENAI_CHAT_404])
def test_the_strict_simulated_provider_answers_as_the_recording(name: str) -> None:
    (interaction,) = load(name).interactions
    with SimulatedProvider(strict_models=True) as sim:
        sent = httpx2.post(f"{sim.base_url}/v1{interaction.path}", json=interaction.request_body)
    recorded = interaction.json
    answered = sent.json()
    assert sent.status_code == interaction.status == 404
    if interaction.provider == "anthropic":  # its request id is per request
        assert recorded.pop("request_id").startswith("req_") and answered.pop("request_id").startswith("req_")
    assert json.dumps(answered, sort_keys=True) == json.dumps(recorded, sort_keys=True)
