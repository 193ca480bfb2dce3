"""Structured output: the parse helpers of both SDKs get a JSON example of the requested schema."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from .helpers import CLAUDE, GPT


class City(BaseModel):
    name: str
    population: int


class Answer(BaseModel):
    capital: City
    cities: list[City]
    note: str | None
    ok: bool


EXPECTED = Answer(capital=City(name="sim-name", population=1), cities=[], note="sim-note", ok=True)


def test_chat_parse(openai_client: Any) -> None:
    completion = openai_client.chat.completions.parse(
        model=GPT, messages=[{"role": "user", "content": "x"}], response_format=Answer
    )
    assert completion.choices[0].message.parsed == EXPECTED


def test_chat_json_object(openai_client: Any) -> None:
    completion = openai_client.chat.completions.create(
        model=GPT, messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
    )
    assert json.loads(completion.choices[0].message.content) == {"reply": "sim"}


def test_responses_parse(openai_client: Any) -> None:
    response = openai_client.responses.parse(model=GPT, input="x", text_format=Answer)
    assert response.output_parsed == EXPECTED


def test_anthropic_parse(anthropic_client: Any) -> None:
    message = anthropic_client.messages.parse(
        model=CLAUDE, max_tokens=500, messages=[{"role": "user", "content": "x"}], output_format=Answer
    )
    assert message.parsed_output == EXPECTED
