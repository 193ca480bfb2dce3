"""Properties of the three adapters on random valid histories (single, parallel and thinking tool loops).

- a generated history validates, and so do both sides of a cut at EVERY round boundary;
- no boundary separates a call from its result, and none lands inside a thinking/reasoning tool loop;
- repair of any damaged history validates, changes nothing valid, and never mutates its input.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context import tokens
from otel_context.formats import for_format
from tests.formats.strategies import FORMATS, Item, histories

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(st.sampled_from(FORMATS), st.sampled_from(["oops", 42, None, ["nested"]]))
def test_malformed_entries_reach_has_unknown_content(wire_format: str, junk: Any) -> None:
    adapter = for_format(wire_format)
    body = adapter.with_items({"model": "m"}, [adapter.make_user_item("hi")])
    key = "input" if wire_format == "openai_responses" else "messages"
    body = {**body, key: [*body[key], junk]}
    items = adapter.items(body)
    assert items[-1] == junk
    assert "not an object" in (adapter.has_unknown_content(items) or "")
    # Nothing crashes on them either (the engine estimates every call, even ones it will not rewrite).
    adapter.validate(items)
    adapter.round_boundaries(items)
    adapter.repair(items)
    adapter.tool_results(items)
    adapter.user_text_items(items)
    assert adapter.image_count(junk) == 0 and isinstance(adapter.item_text(junk), str)
    assert tokens.estimate_items(adapter, items) > 0


def _call_index(wire_format: str, items: list[Item]) -> dict[str, int]:
    """call id -> index of the item holding the call."""
    found: dict[str, int] = {}
    for i, item in enumerate(items):
        if wire_format == "anthropic_messages" and item.get("role") == "assistant":
            for block in item["content"] if isinstance(item["content"], list) else []:
                if block.get("type") == "tool_use":
                    found[block["id"]] = i
        elif wire_format == "openai_chat":
            for call in item.get("tool_calls") or []:
                found[call["id"]] = i
        elif item.get("type") == "function_call":
            found[item["call_id"]] = i
    return found


@SETTINGS
@given(histories())
def test_every_boundary_cut_leaves_both_sides_valid(case: tuple[str, list[Item]]) -> None:
    wire_format, items = case
    adapter = for_format(wire_format)
    assert adapter.validate(items) == []
    assert adapter.has_unknown_content(items) is None
    cuts = adapter.round_boundaries(items)
    assert cuts[0] == 0 and cuts[-1] == len(items) and cuts == sorted(set(cuts))
    for cut in cuts:
        assert adapter.validate(items[:cut]) == [], (cut, items[:cut])
        assert adapter.validate(items[cut:]) == [], (cut, items[cut:])


@SETTINGS
@given(histories())
def test_no_boundary_between_a_call_and_its_result(case: tuple[str, list[Item]]) -> None:
    wire_format, items = case
    adapter = for_format(wire_format)
    cuts = set(adapter.round_boundaries(items))
    calls = _call_index(wire_format, items)
    for ref in adapter.tool_results(items):
        start = calls[ref.call_id]
        assert not cuts & set(range(start + 1, ref.item_index + 1)), (ref, sorted(cuts))


@SETTINGS
@given(histories(wire_format="anthropic_messages"))
def test_thinking_tool_loops_are_one_unit(case: tuple[str, list[Item]]) -> None:
    _fmt, items = case
    adapter = for_format("anthropic_messages")
    cuts = set(adapter.round_boundaries(items))
    for i, item in enumerate(items):
        blocks = item["content"] if isinstance(item["content"], list) else []
        if item["role"] != "assistant" or not any(b["type"] == "thinking" for b in blocks):
            continue
        if not any(b["type"] == "tool_use" for b in blocks):
            continue
        end = i + 1  # the end of this turn: the next genuine user message
        while end < len(items) and not (
            items[end]["role"] == "user"
            and not any(
                isinstance(b, dict) and b.get("type") == "tool_result"
                for b in items[end]["content"]
                if isinstance(items[end]["content"], list)
            )
        ):
            end += 1
        assert not cuts & set(range(i + 1, end)), (i, end, sorted(cuts))


@SETTINGS
@given(histories(wire_format="openai_responses"))
def test_reasoning_stays_with_what_it_produced(case: tuple[str, list[Item]]) -> None:
    _fmt, items = case
    cuts = set(for_format("openai_responses").round_boundaries(items))
    for i, item in enumerate(items):
        if item.get("type") == "reasoning":
            assert i + 1 not in cuts


def _damage(items: list[Item], ops: list[tuple[int, int, int]]) -> list[Item]:
    """Drop whole items or single blocks / tool calls, as a careless trimmer would."""
    out = copy.deepcopy(items)
    for kind, a, b in ops:
        if not out:
            break
        i = a % len(out)
        item = out[i]
        if kind == 0:
            del out[i]
        elif isinstance(item.get("content"), list) and item["content"]:
            del item["content"][b % len(item["content"])]
        elif item.get("tool_calls"):
            del item["tool_calls"][b % len(item["tool_calls"])]
        else:
            del out[i]
    return out


damage_ops = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 10_000), st.integers(0, 100)), min_size=1, max_size=6)


@SETTINGS
@given(histories(), damage_ops)
def test_repair_always_validates_and_never_mutates(case: tuple[str, list[Item]], ops: list[Any]) -> None:
    wire_format, items = case
    adapter = for_format(wire_format)
    assert adapter.repair(items) == items  # nothing to fix in a valid history
    damaged = _damage(items, ops)
    snapshot = copy.deepcopy(damaged)
    fixed = adapter.repair(damaged)
    assert adapter.validate(fixed) == [], (damaged, fixed)
    assert damaged == snapshot
    assert adapter.repair(fixed) == fixed
    assert len(fixed) <= len(damaged)


@SETTINGS
@given(st.sampled_from(FORMATS), st.data())
def test_repair_of_a_cut_at_any_index_validates(wire_format: str, data: st.DataObject) -> None:
    _fmt, items = data.draw(histories(wire_format=wire_format))
    adapter = for_format(wire_format)
    cut = data.draw(st.integers(0, len(items)))
    for side in (items[:cut], items[cut:]):
        assert adapter.validate(adapter.repair(side)) == []
    if cut in adapter.round_boundaries(items):
        assert adapter.repair(items[:cut]) == items[:cut] and adapter.repair(items[cut:]) == items[cut:]
