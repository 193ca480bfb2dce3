"""One response-text reader per wire format, for both of its uses.

The summarizer's result (transparent mode reads the raw JSON, the ``Compactor`` API a ``model_dump``) and the
streamed text of content capture must agree: the text of a response is what its stream's text deltas add up
to, read from SDK objects and JSON dicts alike. Two readers per format used to disagree on the cases below.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai._models import construct_type as openai_construct
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from otel_context.formats import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES
from otel_context.testing import SimulatedProvider


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatedProvider]:
    with SimulatedProvider() as provider:
        yield provider


def test_anthropic_stream_deltas_add_up_to_the_response_text(sim: SimulatedProvider) -> None:
    client = sim.anthropic()
    request = {"model": "claude-sonnet-4-6", "max_tokens": 200, "messages": [{"role": "user", "content": "words:40"}]}
    with client.messages.stream(**request) as stream:
        deltas = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert deltas
    assert ANTHROPIC_MESSAGES.response_text(final) == deltas  # the SDK object
    assert ANTHROPIC_MESSAGES.response_text(final.model_dump()) == deltas  # the Compactor's model_dump
    client.close()


def test_chat_stream_deltas_add_up_to_the_response_text(sim: SimulatedProvider) -> None:
    client = sim.openai()
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "words:40"}]}
    with client.chat.completions.stream(**request) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "content.delta")
        final = stream.get_final_completion()
    assert deltas
    assert OPENAI_CHAT.response_text(final) == deltas
    assert OPENAI_CHAT.response_text(final.model_dump()) == deltas
    client.close()


def test_responses_stream_deltas_add_up_to_the_response_text(sim: SimulatedProvider) -> None:
    client = sim.openai()
    with client.responses.stream(model="gpt-4.1-mini", input="words:40") as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas
    assert OPENAI_RESPONSES.response_text(final) == deltas == final.output_text
    assert OPENAI_RESPONSES.response_text(final.model_dump()) == deltas
    client.close()


def _chat(choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": choices}


def _choice(index: int, content: Any, **message: Any) -> dict[str, Any]:
    return {"index": index, "finish_reason": "stop", "message": {"role": "assistant", "content": content, **message}}


def test_chat_text_of_the_first_choice_that_has_text() -> None:
    # Was "" for the compactor (choices[0] only) and the second choice's text for the instrumentation.
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    response = _chat([_choice(0, None, tool_calls=[call]), _choice(1, "the answer")])
    assert OPENAI_CHAT.response_text(response) == "the answer"
    assert OPENAI_CHAT.response_text(ChatCompletion.model_validate(response)) == "the answer"


def test_chat_text_parts_are_text_and_a_refusal_is_not() -> None:
    # A compatible server's list content was "" for the instrumentation; the compactor counted the refusal
    # part as the summary and joined parts with newlines, unlike a stream.
    parts = [{"type": "text", "text": "Sum"}, {"type": "text", "text": "mary"}, {"type": "refusal", "refusal": "no"}]
    assert OPENAI_CHAT.response_text(_chat([_choice(0, parts)])) == "Summary"
    assert OPENAI_CHAT.response_text(_chat([_choice(0, None, refusal="I can't")])) == ""
    assert OPENAI_CHAT.response_text(_chat([])) == ""


def test_responses_output_text_shortcut_and_parts() -> None:
    # The ``output_text`` field (sent by compatible servers, a property of the SDK's Response) was read by the
    # compactor only; refusal and input parts were text for the compactor only, joined with newlines.
    assert OPENAI_RESPONSES.response_text({"output_text": "short", "output": []}) == "short"
    message = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "a"},
            {"type": "refusal", "refusal": "no"},
            {"type": "output_text", "text": "b"},
        ],
    }
    reasoning = {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "thinking"}]}
    assert OPENAI_RESPONSES.response_text({"output": [reasoning, message]}) == "ab"
    typed = openai_construct(
        type_=Response,
        value={
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "output": [{**message, "id": "msg", "status": "completed"}],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
    )
    assert isinstance(typed, Response)
    assert OPENAI_RESPONSES.response_text(typed) == "ab" == typed.output_text
