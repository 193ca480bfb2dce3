"""The adapters against the simulated provider through the REAL SDK clients.

Cut, repaired and microcompacted histories must be accepted (200); a history ``validate`` calls broken must
be rejected with the provider's 400 — and the other way round, so the adapters are exactly as strict as the
provider. ``is_too_long_error`` is checked on the exception the SDK really raises for an over-window request.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context.compaction.microcompact import microcompact
from otel_context.formats import for_format
from otel_context.testing import SimulatedProvider
from tests.formats.histories import anthropic_agent_body, openai_chat_agent_body, openai_responses_agent_body
from tests.formats.strategies import FORMATS, TOOL_NAMES, histories
from tests.values import body_of

MODELS = {"anthropic_messages": "claude-sonnet-4-6", "openai_chat": "gpt-4o-mini", "openai_responses": "gpt-4.1-mini"}
_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


@dataclass
class Clients:
    sim: SimulatedProvider
    anthropic: Any
    openai: Any


@pytest.fixture(scope="module")
def clients() -> Iterator[Clients]:
    with SimulatedProvider() as sim:
        a, o = sim.anthropic(), sim.openai()
        try:
            yield Clients(sim, a, o)
        finally:
            a.close()
            o.close()


def body_for(wire_format: str, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A complete request of ``wire_format`` around ``items`` (tools offered, as the agent's were)."""
    if wire_format == "anthropic_messages":
        tools = [{"name": n, "description": n, "input_schema": _SCHEMA} for n in TOOL_NAMES]
        return {
            "model": MODELS[wire_format],
            "max_tokens": 64,
            "system": "Be brief.",
            "tools": tools,
            "messages": items,
        }
    if wire_format == "openai_chat":
        tools = [{"type": "function", "function": {"name": n, "parameters": _SCHEMA}} for n in TOOL_NAMES]
        system = {"role": "system", "content": "Be brief."}
        return {"model": MODELS[wire_format], "tools": tools, "messages": [system, *items]}
    tools = [{"type": "function", "name": n, "parameters": _SCHEMA} for n in TOOL_NAMES]
    return {"model": MODELS[wire_format], "instructions": "Be brief.", "tools": tools, "input": items}


@pytest.mark.parametrize("wire_format", FORMATS)
def test_summary_request_is_accepted_and_sees_the_whole_story(clients: Clients, wire_format: str) -> None:
    adapter = for_format(wire_format)
    body = {
        "anthropic_messages": anthropic_agent_body,
        "openai_chat": openai_chat_agent_body,
        "openai_responses": openai_responses_agent_body,
    }[wire_format]()
    items = adapter.items(body)
    first_user = adapter.user_text_items(items)[0]
    ref = adapter.tool_results(items)[-1]
    items = adapter.with_tool_results_replaced(items, {ref.call_id: "FACT: the tool says 42"})
    items = [*items, adapter.make_user_item("FACT: the user prefers Rust")]
    request = adapter.make_summary_request(
        body, items, "Summarize the conversation in <summary> tags.", 500, MODELS[wire_format]
    )
    if wire_format == "anthropic_messages":
        text = adapter.response_text(clients.anthropic.messages.create(**request).model_dump())
    elif wire_format == "openai_chat":
        text = adapter.response_text(clients.openai.chat.completions.create(**request).model_dump())
    else:
        text = adapter.response_text(clients.openai.responses.create(**request).model_dump())
    summary = text.split("<summary>")[1]
    assert "FACT: the tool says 42" in summary and "FACT: the user prefers Rust" in summary
    assert f"- {first_user}" in summary  # the user's own words, listed as a user message
    assert "- [tool result" not in summary  # tool output is not mistaken for a user message


def send_raising(c: Clients, wire_format: str, body: dict[str, Any]) -> None:
    if wire_format == "anthropic_messages":
        c.anthropic.messages.create(**body)
    elif wire_format == "openai_chat":
        c.openai.chat.completions.create(**body)
    else:
        c.openai.responses.create(**body)


def send(c: Clients, wire_format: str, body: dict[str, Any]) -> tuple[int, str]:
    """``(status, error message)`` of one real SDK call."""
    try:
        send_raising(c, wire_format, body)
    except (anthropic.APIStatusError, openai.APIStatusError) as exc:
        return exc.status_code, str(exc)
    return 200, ""


def small(wire_format: str, items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Tool results capped so every random history fits the smallest window used here."""
    return microcompact(for_format(wire_format), items, clear_at_least=10**9, max_tool_result_tokens=300).items


@pytest.mark.parametrize(
    ("wire_format", "body"),
    [
        ("anthropic_messages", anthropic_agent_body()),
        ("openai_chat", openai_chat_agent_body()),
        ("openai_responses", openai_responses_agent_body()),
    ],
)
def test_realistic_history_cut_at_every_boundary_is_accepted(clients: Clients, wire_format: str, body: Any) -> None:
    adapter = for_format(wire_format)
    items = adapter.items(body)
    assert send(clients, wire_format, body) == (200, "")
    for cut in adapter.round_boundaries(items)[1:-1]:
        for side in (items[:cut], items[cut:]):
            assert send(clients, wire_format, adapter.with_items(body, side)) == (200, ""), (cut, side)


@pytest.mark.parametrize("wire_format", FORMATS)
def test_a_non_boundary_cut_is_rejected_until_repaired(clients: Clients, wire_format: str) -> None:
    body = {
        "anthropic_messages": anthropic_agent_body,
        "openai_chat": openai_chat_agent_body,
        "openai_responses": openai_responses_agent_body,
    }[wire_format]()
    adapter = for_format(wire_format)
    items = adapter.items(body)
    ref = adapter.tool_results(items)[0]
    broken = items[ref.item_index :]  # starts with a result whose call was cut off
    assert adapter.validate(broken)
    status, message = send(clients, wire_format, adapter.with_items(body, broken))
    assert status == 400 and ("tool" in message.lower())
    assert send(clients, wire_format, adapter.with_items(body, adapter.repair(broken))) == (200, "")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(histories(max_turns=3), st.data())
def test_random_cuts_repairs_and_microcompacts_are_accepted(clients: Clients, case: Any, data: st.DataObject) -> None:
    wire_format, items = case
    adapter = for_format(wire_format)
    items = small(wire_format, items)
    snapshot = copy.deepcopy(items)
    cuts = adapter.round_boundaries(items)
    cut = data.draw(st.sampled_from(cuts[1:]))  # a non-empty left side
    assert send(clients, wire_format, body_for(wire_format, items[:cut])) == (200, "")
    anywhere = data.draw(st.integers(1, len(items)))
    repaired = adapter.repair(items[:anywhere])
    if repaired:
        assert send(clients, wire_format, body_for(wire_format, repaired)) == (200, "")
    compacted = microcompact(adapter, items, keep_recent=1, clear_at_least=0).items
    assert send(clients, wire_format, body_for(wire_format, compacted)) == (200, "")
    assert items == snapshot


def modelled_problems(wire_format: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
    """``validate``'s problems minus the two real rules the simulator does not model (see the report):
    Responses reasoning without its following item, and an Anthropic history ending on an unanswered
    tool_use (no next message at all)."""
    problems = for_format(wire_format).validate(items)
    if wire_format == "openai_responses":
        return [p for p in problems if "reasoning item" not in p]
    if wire_format == "anthropic_messages":
        return [p for p in problems if not p.startswith(f"messages.{len(items) - 1}: tool_use ids")]
    return problems


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(histories(max_turns=3), st.lists(st.integers(0, 10_000), min_size=1, max_size=3))
def test_validate_agrees_with_the_provider(clients: Clients, case: Any, drops: list[int]) -> None:
    wire_format, items = case
    damaged = small(wire_format, items)
    for d in drops:  # a careless trimmer dropping whole messages
        if len(damaged) > 1:
            del damaged[d % len(damaged)]
    status, message = send(clients, wire_format, body_for(wire_format, damaged))
    problems = modelled_problems(wire_format, damaged)
    assert (status == 200) == (problems == []), (problems, status, message)


@pytest.mark.parametrize("wire_format", FORMATS)
def test_too_long_error_recognized_on_the_real_sdk_exception(clients: Clients, wire_format: str) -> None:
    adapter = for_format(wire_format)
    model = f"{MODELS[wire_format]}-tiny"
    clients.sim.set_window(model, 50)
    body = {**body_for(wire_format, [adapter.make_user_item("word " * 400)]), "model": model}
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as info:
        send_raising(clients, wire_format, body)
    exc = info.value
    assert isinstance(exc, (anthropic.APIStatusError, openai.APIStatusError))
    assert adapter.is_too_long_error(exc.status_code, body_of(exc), str(exc))
    # An ordinary 400 (a result whose call is missing) is not taken for an overflow.
    orphans: dict[str, dict[str, Any]] = {
        "anthropic_messages": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c", "content": "x"}],
        },
        "openai_chat": {"role": "tool", "tool_call_id": "c", "content": "x"},
        "openai_responses": {"type": "function_call_output", "call_id": "c", "output": "x"},
    }
    orphan = orphans[wire_format]
    bad = body_for(wire_format, [adapter.make_user_item("hi"), orphan])
    with pytest.raises((anthropic.APIStatusError, openai.APIStatusError)) as other:
        send_raising(clients, wire_format, bad)
    rejected = other.value
    assert isinstance(rejected, (anthropic.APIStatusError, openai.APIStatusError))
    assert rejected.status_code == 400
    assert not adapter.is_too_long_error(rejected.status_code, body_of(rejected), str(rejected))
