"""Issue 13 on many workers: with the shared store, one worker prepares each summary in the background and
every worker applies the same one.

Spawned worker processes (each instrumented, a real SDK client) share a real redis-server and one simulated
provider whose summarizer is slower than the model; the test plays the agent and hands each call to the
next worker. What the provider received, and the spans and metrics of the workers, tell what the fleet did.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from otel_context import semconv
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, Fleet, run_agent
from otel_context.testing.redis_server import RedisServer
from tests.conversation.test_fleet import FILE_LINES, MODELS, SLOW_MACHINE, TURNS, WINDOW

#: Seconds the simulated summarizer takes: a call that waited for a summary would take about this more.
SUMMARY_LATENCY = 0.5
#: Seconds the user thinks between turns (a background summary lands within a few turns).
PAUSE = 0.2


@dataclass(frozen=True)
class Run:
    figures: Figures
    #: The ``compaction.mode`` of every ``compact`` span the workers ended.
    modes: list[str]
    #: Per call: whether it says compacted, and how many links its chat span has.
    compacted: list[tuple[bool, int]]
    #: Per compaction mode: how many calls waited for (or applied) one, and the longest wait.
    waits: dict[str, tuple[int, float]]


def _conversation(sdk: str, workers: int, url: str | None) -> Run:
    model = MODELS[sdk]
    store = {"state_store": url + SLOW_MACHINE} if url else {}
    with SimulatedProvider(summary_latency=SUMMARY_LATENCY) as sim:
        sim.set_window(model, WINDOW)
        with Fleet(
            workers, sim.base_url, sdk, auto_compact_window=WINDOW, background_compaction=True, **store
        ) as fleet:
            run_agent(fleet, model, TURNS, FILE_LINES, PAUSE)
        expected = semconv.STATE_SOURCE_STORE if url else semconv.STATE_SOURCE_MEMORY
        assert set(fleet.sources) == {expected}
        return Run(Figures.of(sim.exchanges), fleet.modes, fleet.compacted, fleet.waits())


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_four_workers_prepare_each_summary_once_in_the_background(sdk: str, shared_redis: RedisServer) -> None:
    alone = _conversation(sdk, 1, None)  # one process, no store: the reference
    shared_redis.command("FLUSHALL")
    four = _conversation(sdk, 4, shared_redis.url)
    calls = alone.figures.summarizer_calls
    assert calls >= 2  # the conversation crosses the threshold more than once
    assert four.figures.summarizer_calls == calls  # one worker prepared each summary
    assert four.figures.rejected == alone.figures.rejected == 0
    # Every worker sent each summary byte-identically (as parsed from the wire, key order included).
    assert four.figures.summary_serializations == four.figures.summary_heads == alone.figures.summary_heads
    assert four.figures.distinct_heads == alone.figures.distinct_heads
    # Prepared in the background, never inline; each applied once, by a call linked to its compact span.
    assert four.modes and set(four.modes) == {semconv.MODE_BACKGROUND}
    assert [c for c in four.compacted if c[0] or c[1]] == [(True, 1)] * calls
    # No call waited for a summary: each was applied at once (a wait of 0 s), and no inline one ran.
    assert four.waits == alone.waits == {semconv.MODE_BACKGROUND: (calls, 0.0)}
