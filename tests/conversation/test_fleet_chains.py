"""A chain of stored Responses (``previous_response_id``) served by several workers through a real Redis.

The worker that serves a continued call often did not make the response it continues: it reads that
response's link (its conversation and reported usage) from the store, so the chain keeps one conversation id
and the estimate counts the history the provider holds. Workers are spawned processes with real SDK clients
on one simulated provider (see :mod:`otel_context.testing.fleet`).
"""

from __future__ import annotations

from typing import Any

from otel_context import semconv
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Fleet
from tests.values import keys_of

MODEL = "gpt-4o"
SLOW_MACHINE = "?timeout_ms=2000"  # see test_fleet.py


def _chain(fleet: Fleet, asks: list[str]) -> None:
    previous: str | None = None
    for ask in asks:
        kwargs: dict[str, Any] = {"model": MODEL, "input": ask}
        if previous is not None:
            kwargs["previous_response_id"] = previous
        previous = fleet.call(**kwargs)["id"]


def test_a_chain_served_by_two_workers_is_one_conversation(redis_url: str) -> None:
    with (
        SimulatedProvider() as sim,
        Fleet(2, sim.base_url, "openai-responses", state_store=redis_url + SLOW_MACHINE) as fleet,
    ):
        _chain(
            fleet,
            ["Write the report. words:2000", "More. words:1500", "Go on. words:800", "Again.", "Once more.", "End."],
        )
    # Each worker keeps one state for the chain, moved on by the calls it serves; no cache break is reported.
    assert fleet.states == [1, 1, 1, 1, 1, 1]
    assert fleet.breaks == 0
    ids = {chat[semconv.GEN_AI_CONVERSATION_ID] for chat in fleet.chats}
    assert len(ids) == 1 and next(iter(ids)).startswith("openai:")
    assert set(fleet.sources) == {semconv.STATE_SOURCE_STORE}
    for chat in fleet.chats[1:]:  # each served by the worker that did not make the response it continues
        estimated, reported = chat[semconv.CONTEXT_ESTIMATED_TOKENS], chat[semconv.GEN_AI_USAGE_INPUT_TOKENS]
        assert reported > 2_000
        assert abs(estimated - reported) <= 0.05 * reported, (estimated, reported)


def test_the_store_holds_a_link_per_stored_response_and_no_content(redis_url: str) -> None:
    import redis

    with (
        SimulatedProvider() as sim,
        Fleet(2, sim.base_url, "openai-responses", state_store=redis_url + SLOW_MACHINE) as fleet,
    ):
        _chain(fleet, ["Write the report. words:300", "More about FACT-ALPHA."])
    client = redis.Redis.from_url(redis_url)
    names = [name.decode() for name in keys_of(client)]
    assert len([n for n in names if n.endswith(":link")]) == 2  # one per response; the names are hashes
    values = b"".join(v for n in names if client.type(n) == b"string" if isinstance(v := client.get(n), bytes))
    assert b"Write the report" not in values and b"FACT-ALPHA" not in values and b"resp_" not in values


def test_a_branch_from_a_response_another_worker_made_gets_its_own_state(redis_url: str) -> None:
    """Worker 1 served the chain's second call; continuing the first response again (an edited turn) is a
    branch: a state of its own there, estimated from the first response, and no cache break against the
    second call's request."""
    with (
        SimulatedProvider() as sim,
        Fleet(2, sim.base_url, "openai-responses", state_store=redis_url + SLOW_MACHINE) as fleet,
    ):
        first = fleet.call(worker=0, model=MODEL, input="Write the report. words:2500")["id"]
        fleet.call(worker=1, model=MODEL, previous_response_id=first, input="Longer. words:3000")
        fleet.call(worker=1, model=MODEL, previous_response_id=first, input="Shorter, then.")
    assert fleet.states == [1, 1, 2]
    assert fleet.breaks == 0
    assert len({chat[semconv.GEN_AI_CONVERSATION_ID] for chat in fleet.chats}) == 1
    branch = fleet.chats[2]
    estimated, reported = branch[semconv.CONTEXT_ESTIMATED_TOKENS], branch[semconv.GEN_AI_USAGE_INPUT_TOKENS]
    assert 2_000 < reported < 4_000  # the second call's long turn is not in this branch
    assert abs(estimated - reported) <= 0.05 * reported, (estimated, reported)
