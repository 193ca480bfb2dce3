"""Server-side compaction on the simulated provider's ``/v1/responses`` (``context_management``), and stored
``conversation`` objects, driven by the real openai SDK and read back with the SDK's own models.

What the real API does (developers.openai.com, "Compaction"; the SDK's ``openai.types.responses``): once the
rendered context passes ``compact_threshold``, the server compacts before it answers, the output starts with an
encrypted ``compaction`` item (streamed: ``response.output_item.added``, ``response.compaction.compacting``,
``response.output_item.done``), and a ``previous_response_id`` chain (or a conversation) continues from it.
"""

from __future__ import annotations

import base64
from typing import Any

import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseCompactionCompactingEvent,
    ResponseCompactionItem,
    ResponseStreamEvent,
)
from pydantic import BaseModel, TypeAdapter

from otel_context.testing import count_tokens

from .helpers import GPT

WINDOW = 12_000
THRESHOLD = 9_000
COMPACTION = [{"type": "compaction", "compact_threshold": THRESHOLD}]


def _extras(model: Any, where: str = "") -> set[str]:
    """The fields of a parsed SDK object (recursively) that its model does not declare."""
    found: set[str] = set()
    if isinstance(model, BaseModel):
        found.update(f"{where}.{key}" for key in model.model_extra or {})
        for name in type(model).model_fields:
            found |= _extras(getattr(model, name), f"{where}.{name}")
    elif isinstance(model, list):
        for value in model:
            found |= _extras(value, f"{where}[]")
    return found


def _decoded(item: Any) -> str:
    return base64.b64decode(item.encrypted_content.removeprefix("simcompact:")).decode()


def _grow(client: Any, previous: str, turns: int, **kwargs: Any) -> list[Any]:
    """``turns`` calls of about 1,500 tokens each (the reply of 1,000 words), chained on ``previous``."""
    responses = []
    for turn in range(turns):
        response = client.responses.create(
            model=GPT, previous_response_id=previous, input=f"More {turn}. words:1000", **kwargs
        )
        responses.append(response)
        previous = response.id
    return responses


@pytest.fixture
def small(sim: Any) -> Any:
    sim.set_window(GPT, WINDOW)
    return sim


def test_a_chain_compacts_once_past_the_threshold_and_continues_from_it(small: Any, openai_client: Any) -> None:
    first = openai_client.responses.create(model=GPT, input="Write. FACT: the build uses uv. words:800")
    responses = _grow(openai_client, first.id, 9, context_management=COMPACTION)
    kinds = [[item.type for item in r.output] for r in responses]
    compacting = [i for i, k in enumerate(kinds) if k[0] == "compaction"]
    assert len(compacting) == 1, kinds
    at = compacting[0]
    compacted = responses[at]
    before = responses[at - 1].usage
    # The previous response's context plus its reply was past the threshold; the compacted one is small.
    assert before.input_tokens + before.output_tokens > THRESHOLD
    assert compacted.usage.input_tokens < THRESHOLD // 10
    item = compacted.output[0]
    assert isinstance(item, ResponseCompactionItem) and item.id.startswith("cmp_")
    assert item.encrypted_content.startswith("simcompact:")
    summary = _decoded(item)
    assert "FACT: the build uses uv." in summary and "Write." in summary
    # The usage is the answering pass's: the compacted context (the item and the turn) and the reply.
    wire = small.exchanges[len(small.exchanges) - len(responses) + at]
    assert wire.body["context_management"] == COMPACTION
    assert compacted.usage.input_tokens == count_tokens(summary) + 3 + count_tokens(f"More {at}. words:1000") + 3
    # The chain continues from the compaction: the next call reads the item, the turn and the reply, and its own
    # input (the reply is counted as the usage said: its text, and 3 per item).
    after = responses[at + 1].usage
    turn = count_tokens(f"More {at + 1}. words:1000") + 3
    assert after.input_tokens == compacted.usage.input_tokens + compacted.usage.output_tokens + 3 + turn


def test_under_the_threshold_nothing_is_compacted(small: Any, openai_client: Any) -> None:
    first = openai_client.responses.create(model=GPT, input="Hello")
    second = openai_client.responses.create(
        model=GPT, previous_response_id=first.id, input="Again", context_management=COMPACTION
    )
    assert [item.type for item in second.output] == ["message"]


def test_without_a_threshold_the_provider_compacts_at_its_own(small: Any, openai_client: Any) -> None:
    """``compact_threshold`` left out: the simulator compacts past 80 % of the window."""
    first = openai_client.responses.create(model=GPT, input="Write. words:800")
    responses = _grow(openai_client, first.id, 9, context_management=[{"type": "compaction"}])
    at = next(i for i, r in enumerate(responses) if r.output[0].type == "compaction")
    before = responses[at - 1].usage
    assert before.input_tokens + before.output_tokens > 0.8 * WINDOW > before.input_tokens


def test_a_streamed_compaction_and_its_events(small: Any, openai_client: Any) -> None:
    first = openai_client.responses.create(model=GPT, input="Write. FACT: tabs, not spaces. words:800")
    previous = first.id
    for turn in range(9):
        with openai_client.responses.stream(
            model=GPT, previous_response_id=previous, input=f"More {turn}. words:1000", context_management=COMPACTION
        ) as stream:
            events = list(stream)
            final = stream.get_final_response()
        previous = final.id
        if final.output[0].type == "compaction":
            break
    else:
        pytest.fail("no compaction in nine streamed calls")
    types = [e.type for e in events]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
    ]
    compacting = events[3]
    assert isinstance(compacting, ResponseCompactionCompactingEvent)
    assert compacting.output_index == 0 and compacting.item_id == final.output[0].id
    assert events[2].item.type == "compaction" and events[2].item.encrypted_content == ""
    assert events[4].item.encrypted_content == final.output[0].encrypted_content
    assert "FACT: tabs, not spaces." in _decoded(final.output[0])
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_the_sdk_models_read_every_field_the_compaction_adds(small: Any, openai_client: Any) -> None:
    """Parsed with the SDK's models, a compacting response has no field they do not declare beyond those a plain
    response of the simulator has (which the real API sends too), and neither have its stream events."""
    first = openai_client.responses.create(model=GPT, input="Write. words:800")
    plain = _extras(Response.model_validate(small.last_exchange.response))
    _grow(openai_client, first.id, 8, context_management=COMPACTION)
    exchange = next(e for e in small.exchanges if e.response["output"][0]["type"] == "compaction")
    parsed = Response.model_validate(exchange.response)
    assert isinstance(parsed.output[0], ResponseCompactionItem)
    assert _extras(parsed) == plain
    assert _extras(parsed.output[0]) == set()
    # The same request streamed (a branch of the same chain: it compacts too).
    events = list(openai_client.responses.create(**{**exchange.body, "stream": True}))
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    parsed_events = [adapter.validate_python(event.model_dump()) for event in events]
    assert any(isinstance(e, ResponseCompactionCompactingEvent) for e in parsed_events)
    for event in parsed_events:
        assert _extras(event) <= {".response" + name for name in plain}, event.type


async def test_async_and_a_stored_conversation(small: Any, async_openai_client: Any) -> None:
    """A stored ``conversation`` compacts as a chain does, and goes on from the compaction."""
    conversation = await async_openai_client.conversations.create(
        items=[{"role": "user", "content": "FACT: the port is 8080."}]
    )
    assert conversation.id.startswith("conv_")
    responses = []
    for turn in range(9):
        response = await async_openai_client.responses.create(
            model=GPT, conversation=conversation.id, input=f"More {turn}. words:1000", context_management=COMPACTION
        )
        assert response.conversation is not None and response.conversation.id == conversation.id
        responses.append(response)
    kinds = [r.output[0].type for r in responses]
    assert kinds.count("compaction") == 1, kinds
    at = kinds.index("compaction")
    assert "FACT: the port is 8080." in _decoded(responses[at].output[0])  # the conversation's first item
    compacted, after = responses[at].usage, responses[at + 1].usage
    turn = count_tokens(f"More {at + 1}. words:1000") + 3
    assert after.input_tokens == compacted.input_tokens + compacted.output_tokens + 3 + turn


def test_a_conversation_and_a_previous_response_are_exclusive(openai_client: Any) -> None:
    first = openai_client.responses.create(model=GPT, input="Hi")
    conversation = openai_client.conversations.create()
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(
            model=GPT, input="x", previous_response_id=first.id, conversation=conversation.id
        )
    assert info.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.create(model=GPT, input="x", conversation="conv_missing")


@pytest.mark.parametrize(("refused", "code"), [(True, "unknown_parameter"), ({"gpt-4o"}, "unsupported_parameter")])
def test_an_endpoint_or_a_model_that_refuses_the_field(sim: Any, openai_client: Any, refused: Any, code: str) -> None:
    sim.refuses_compaction = refused
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model=GPT, input="Hi", context_management=COMPACTION)
    assert info.value.code == code and info.value.param == "context_management"
    assert openai_client.responses.create(model=GPT, input="Hi").status == "completed"  # without the field: fine
    other = (
        None
        if refused is True
        else openai_client.responses.create(model="o3", input="Hi", context_management=COMPACTION)
    )
    assert other is None or other.status == "completed"  # a model the set does not name compacts


@pytest.mark.parametrize(
    ("value", "param", "code"),
    [
        ("compaction", "context_management", "invalid_type"),
        ([{"type": "summarize"}], "context_management[0].type", "invalid_value"),
        ([{"compact_threshold": 5}], "context_management[0].type", "missing_required_parameter"),
        (
            [{"type": "compaction", "compact_threshold": "many"}],
            "context_management[0].compact_threshold",
            "invalid_type",
        ),
        (
            [{"type": "compaction", "compact_threshold": 0}],
            "context_management[0].compact_threshold",
            "integer_below_min_value",
        ),
    ],
)
def test_a_malformed_field_is_a_clear_400(openai_client: Any, value: Any, param: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.responses.create(model=GPT, input="Hi", context_management=value)
    assert (info.value.param, info.value.code) == (param, code)
