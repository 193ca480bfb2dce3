"""A chain of stored Responses (``previous_response_id``) served by several workers through a real Redis.

The worker that serves a continued call often did not make the response it continues: it reads that
response's link (its conversation and reported usage) from the store, so the chain keeps one conversation id
and the estimate counts the history the provider holds. Workers are spawned processes with real SDK clients
on one simulated provider (see :mod:`otel_context.testing.fleet`).
"""

from __future__ import annotations

import itertools
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


#: A window the chains below outgrow three times over in 24 turns (about 1,560 tokens each).
SMALL_WINDOW = 12_000


def _compacting(sim: SimulatedProvider) -> list[int]:
    """Indexes of the provider's responses that carry a compaction item (its record, in call order)."""
    return [
        i for i, e in enumerate(sim.exchanges) if e.status == 200 and e.response["output"][0]["type"] == "compaction"
    ]


def _four_workers(sim: SimulatedProvider, redis_url: str) -> Fleet:
    return Fleet(
        4, sim.base_url, "openai-responses", state_store=redis_url + SLOW_MACHINE, auto_compact_window=SMALL_WINDOW
    )


def _check_compacted_once_per_crossing(sim: SimulatedProvider, fleet: Fleet, turns: int) -> None:
    assert [e.status for e in sim.exchanges if e.path == "/v1/responses"] == [200] * turns  # no app-visible error
    at = _compacting(sim)
    assert len(at) >= 3
    # Once per crossing: a compacted chain starts small again, so no two compactions follow each other.
    assert all(b - a > 2 for a, b in itertools.pairwise(at)), at
    theirs = [c for c in fleet.compactions if c["trigger"] == semconv.TRIGGER_PROVIDER]
    assert len(theirs) == len(at) and {c["outcome"] for c in theirs} == {semconv.OUTCOME_SUCCESS}
    assert fleet.counted()[(semconv.MODE_INLINE, semconv.OUTCOME_SUCCESS, semconv.TRIGGER_PROVIDER)] == len(at)
    # Each by the worker that served the call whose response carried it: one compact span under that chat span.
    parents = {c["parent_id"] for c in theirs}
    assert parents == {fleet.chat_span_ids[i] for i in at}
    assert len({chat[semconv.GEN_AI_CONVERSATION_ID] for chat in fleet.chats}) == 1
    assert fleet.breaks == 0


def test_a_chain_three_windows_long_on_four_workers_is_compacted_by_the_provider_once_per_crossing(
    redis_url: str,
) -> None:
    """Four workers take the chain's calls in turn: each reads the link of the response it continues (made by
    another worker), so its estimate counts the history the provider holds, and from the warning line on its
    request asks the provider to compact; the provider compacts once per crossing, and the worker that served
    that call reports it."""
    turns = 24
    with SimulatedProvider(windows={MODEL: SMALL_WINDOW}) as sim, _four_workers(sim, redis_url) as fleet:
        previous: str | None = None
        for turn in range(turns):
            kwargs: dict[str, Any] = {"model": MODEL, "input": f"Turn {turn}. words:1000", "max_output_tokens": 2_000}
            if previous is not None:
                kwargs["previous_response_id"] = previous
            previous = fleet.call(**kwargs)["id"]
    _check_compacted_once_per_crossing(sim, fleet, turns)
    assert set(fleet.sources[1:]) == {semconv.STATE_SOURCE_STORE}


def test_a_stored_conversation_on_four_workers_is_compacted_by_the_provider_once_per_crossing(redis_url: str) -> None:
    turns = 24
    with SimulatedProvider(windows={MODEL: SMALL_WINDOW}) as sim, _four_workers(sim, redis_url) as fleet:
        client = sim.openai()  # the app's own, to open the conversation (this process is not instrumented)
        conversation = client.conversations.create().id
        client.close()
        sim.clear()
        for turn in range(turns):
            fleet.call(
                model=MODEL, conversation=conversation, input=f"Turn {turn}. words:1000", max_output_tokens=2_000
            )
    _check_compacted_once_per_crossing(sim, fleet, turns)
