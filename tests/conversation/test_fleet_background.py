"""Issue 13 on many workers: with the shared store, one worker prepares each summary in the background and
every worker applies the same one.

Spawned worker processes (each instrumented, a real SDK client) share a real redis-server and one simulated
provider whose summarizer is slower than the model; the test plays the agent and hands each call to the
next worker. What the provider received, and the spans and metrics of the workers, tell what the fleet did.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

import otel_context
from otel_context import Settings, engine, semconv
from otel_context.compaction.budget import budget_for
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.conversation import shared
from otel_context.conversation.state_store import StateStore
from otel_context.engine import fleet, pacing
from otel_context.formats import for_format
from otel_context.instrumentation import _background
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, Fleet, file_content, run_agent
from otel_context.testing.redis_server import RedisServer
from otel_context.testing.tokens import count_request_tokens
from otel_context.tokens import estimate_fixed, estimate_items
from tests.compaction.conftest import _fresh_engine, otel
from tests.compaction.support import Otel
from tests.conversation.test_fleet import FILE_LINES, MODELS, SLOW_MACHINE, TURNS, WINDOW
from tests.instrumentation.instr_support import TransportOfTheApp
from tests.values import attrs_of

__all__ = ["_fresh_engine", "otel"]

#: Seconds the simulated summarizer takes: a call that waited for a summary would take about this more.
SUMMARY_LATENCY = 0.5
#: Seconds the user thinks between turns (a background summary lands within a few turns).
PAUSE = 0.2
#: The window of the single-process tests (a few turns of :func:`_question` reach its threshold).
SMALL_WINDOW = 14_000


@dataclass(frozen=True)
class Run:
    figures: Figures
    #: The ``compaction.mode`` of every ``compact`` span the workers ended.
    modes: list[str]
    #: Per call: whether it says compacted, and how many links its chat span has.
    compacted: list[tuple[bool, int]]
    #: Per compaction mode: how many calls waited for (or applied) one, and the longest wait.
    waits: dict[str, tuple[int, float]]
    #: Unintended cache breaks the chat spans reported (a summary applied is an intended one).
    breaks: int


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
        return Run(Figures.of(sim.exchanges), fleet.modes, fleet.compacted, fleet.waits(), fleet.breaks)


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
    assert four.breaks == alone.breaks == 0  # every worker knew the prefix changed on purpose


def _question(turn: int) -> str:
    return f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(400))


class _Chat:
    """One conversation with an explicit id through a real anthropic client (sync, or async on one loop that
    also runs between turns, so a background summary's task goes on while the user thinks)."""

    def __init__(self, sim: SimulatedProvider, otel: Otel, asynchronous: bool = False) -> None:
        self.sim, self.otel = sim, otel
        self.loop = asyncio.new_event_loop() if asynchronous else None
        self.client: Any = sim.async_anthropic() if asynchronous else sim.anthropic()
        self.history: list[dict[str, Any]] = []

    def pause(self, seconds: float) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.client.close())
            self.loop.close()

    def turn(self, number: int, text: str | None = None) -> None:
        self.history.append({"role": "user", "content": text if text is not None else _question(number)})
        kwargs: dict[str, Any] = {"model": MODELS["anthropic"], "max_tokens": 256, "messages": list(self.history)}
        with otel_context.conversation("published"):
            if self.loop is not None:
                response = self.loop.run_until_complete(self.client.messages.create(**kwargs))
            else:
                response = self.client.messages.create(**kwargs)
        self.history.append({"role": "assistant", "content": response.content[0].text})

    def published(self, store: StateStore) -> shared.Published | None:
        return shared.published(store.get("published", shared.PREPARED))


def _instrument(otel: Otel, url: str) -> StateStore:
    otel_context.instrument(
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        auto_compact_window=SMALL_WINDOW,
        background_compaction=True,
        state_store=url,
    )
    store = shared.store_for(otel_context.Settings(state_store=url))
    assert store is not None
    return store


def _until_published(chat: _Chat, store: StateStore) -> shared.Published:
    """Turns until a summary runs in the background, then no more turns until it is published: the history is
    then the one it started at, whatever the machine's load. (A fixed pause per turn let a loaded machine run
    more turns meanwhile, up to the threshold, where the next worker applied the summary at once instead of on
    the path a test meant to reach.)"""
    for turn in range(1, 40):
        chat.turn(turn)
        deadline = time.monotonic() + 30  # a generous bound against a hang
        while _background.running() and chat.published(store) is None and time.monotonic() < deadline:
            chat.pause(0.02)  # the user thinks (an async client's summary runs on this loop meanwhile)
        got = chat.published(store)
        if got is not None:
            # Stored is not yet ended: the summary's own flow still moves it to published and lets the prepare
            # lock go. Under load the test went on before that (an async one's task runs only while this loop
            # does), and a worker restarted meanwhile (engine.reset()) found it mid-publish and reported it
            # discarded: a second compact span the tests did not mean to make.
            while _background.running() and time.monotonic() < deadline:
                chat.pause(0.02)
            return got
    raise AssertionError("no summary was published")


def _until_a_summary_is_in_flight(chat: _Chat) -> None:
    """Turns until a background summary runs, then until its request reaches the provider: a client closed
    before the request was on a connection of the pool is not what these tests close it under (under load,
    the summary's thread may not have sent it yet)."""
    turn = 0
    while not _background.running():
        turn += 1
        chat.turn(turn)
    deadline = time.monotonic() + 10
    while not chat.sim.in_flight and time.monotonic() < deadline:  # the turns' own requests have all returned
        chat.pause(0.01)
    assert chat.sim.in_flight, "the summary's request never reached the provider"


@pytest.fixture
def store_url(redis_url: str) -> Iterator[str]:
    yield redis_url + SLOW_MACHINE
    otel_context.uninstrument()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_published_summary_is_applied_from_the_store(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str, asynchronous: bool
) -> None:
    simulated_provider.summary_latency = SUMMARY_LATENCY
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel, asynchronous)
    try:
        _apply_published(chat, store, otel, simulated_provider)
    finally:
        chat.close()


def _apply_published(chat: _Chat, store: StateStore, otel: Otel, simulated_provider: SimulatedProvider) -> None:
    published = _until_published(chat, store)
    assert published.entry.summary and published.entry.prefix_len > 0
    # Ended once it was published (the fleet's one compaction), in the trace of the call that started it.
    (compact,) = otel.compact_spans()
    assert (compact.attributes or {})[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert (compact.attributes or {})[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert published.link == (compact.context.trace_id, compact.context.span_id, int(compact.context.trace_flags))
    for turn in range(100, 140):
        chat.turn(turn)
        chats = [s for s in otel.spans() if s.name.startswith("chat ") and s.parent is None]
        if (chats[-1].attributes or {}).get(semconv.GEN_AI_CONVERSATION_COMPACTED):
            break
    else:
        raise AssertionError("never applied")
    assert [link.context.span_id for link in chats[-1].links] == [compact.context.span_id]
    sent = simulated_provider.exchanges[-1].body["messages"]
    assert sent[: len(published.entry.replacement)] == list(published.entry.replacement)
    assert sent[len(published.entry.replacement) :] == chat.history[published.entry.prefix_len : -1]
    assert len(otel.compact_spans()) == 1  # applied without another summary


def test_a_summary_given_up_midway_lets_the_prepare_lock_go(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str
) -> None:
    """A summary given up midway (the app closed a client we had to share) cannot let the fleet's prepare lock
    go where it stops; the conversation's next call does, so the summary is prepared again in the background
    at once, not after the lease (the summarizer's whole budget) runs out while the threshold compacts inline."""
    simulated_provider.summary_latency = 3.0  # longer than a turn: still under way when the client closes
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel)
    chat.client.close()  # this conversation's first client is one whose connections we share
    chat.client = simulated_provider.anthropic(http_client=httpx2.Client(transport=TransportOfTheApp()))
    _until_a_summary_is_in_flight(chat)
    chat.client.close()  # cuts the summary's request: it is given up
    assert _background.wait_idle(10)
    assert [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in otel.compact_spans()] == [semconv.OUTCOME_DISCARDED]
    simulated_provider.summary_latency = SUMMARY_LATENCY
    chat.client = simulated_provider.anthropic()
    _until_published(chat, store)
    compacts = otel.compact_spans()
    assert [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in compacts] == [
        semconv.OUTCOME_DISCARDED,
        semconv.OUTCOME_SUCCESS,
    ]
    assert {attrs_of(c)[semconv.COMPACTION_MODE] for c in compacts} == {semconv.MODE_BACKGROUND}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_uninstrument_with_a_summary_in_flight_gives_the_prepare_lock_back(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str, asynchronous: bool
) -> None:
    """``uninstrument()`` gives up a summary in flight, which will never be published: the fleet's prepare lock
    it holds is given back at once, so another worker may prepare the conversation now rather than compact it
    inline until the lease (the summarizer's whole budget) runs out."""
    simulated_provider.summary_latency = 4.0  # longer than a turn: still under way at uninstrument()
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel, asynchronous)
    try:
        _until_a_summary_is_in_flight(chat)
        assert store.acquire("published", fleet.PREPARE_LOCK, 5.0) is None  # this worker holds it
        otel_context.uninstrument()
        lease = store.acquire("published", fleet.PREPARE_LOCK, 5.0)
        assert lease is not None and lease.exclusive
        store.release(lease)
    finally:
        deadline = time.monotonic() + 10
        while _background.running() and time.monotonic() < deadline:
            chat.pause(0.05)  # an async summary's task is cancelled on the chat's loop
        chat.close()
    assert not _background.running()
    assert [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in otel.compact_spans()] == [semconv.OUTCOME_DISCARDED]


EXITING_WORKER = """
import sys
import anthropic
import otel_context
from otel_context.instrumentation import _background

base_url, store_url, window, model = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
otel_context.instrument(auto_compact_window=window, background_compaction=True, state_store=store_url)
client = anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0)
history = []
for turn in range(1, 40):
    history.append({"role": "user", "content": f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(400))})
    with otel_context.conversation("exiting"):
        response = client.messages.create(model=model, max_tokens=256, messages=list(history))
    history.append({"role": "assistant", "content": response.content[0].text})
    if _background.running():
        print("summary in flight", flush=True)
        break
"""


def test_a_worker_that_exits_with_a_summary_in_flight_gives_the_prepare_lock_back(
    simulated_provider: SimulatedProvider, store_url: str, tmp_path: Path
) -> None:
    """A worker stopped by a deployment (its interpreter exits normally) while it prepares a summary: the fleet's
    prepare lock is given back at exit, so the other workers prepare that conversation at once rather than
    compact it inline until the lease runs out. Run as a worker runs: a process of its own."""
    simulated_provider.summary_latency = 30.0  # still in flight when the worker exits
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = shared.store_for(otel_context.Settings(state_store=store_url))
    assert store is not None
    script = tmp_path / "worker.py"
    script.write_text(EXITING_WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = env["OTEL_METRICS_EXPORTER"] = env["OTEL_LOGS_EXPORTER"] = "none"
    args = [simulated_provider.base_url, store_url, str(SMALL_WINDOW), MODELS["anthropic"]]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "summary in flight" in proc.stdout, proc.stdout + proc.stderr
    assert time.monotonic() - started < simulated_provider.summary_latency  # it did not wait for the summary
    lease = store.acquire("exiting", fleet.PREPARE_LOCK, 5.0)
    assert lease is not None and lease.exclusive
    store.release(lease)


def test_a_stale_published_summary_is_dropped_and_reported_as_discarded(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str
) -> None:
    simulated_provider.summary_latency = SUMMARY_LATENCY
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel)
    published = _until_published(chat, store)
    (publishing,) = otel.compact_spans()
    # The app edits its history below the published summary's cut: that summary no longer applies.
    chat.history[0] = {"role": "user", "content": "Edited. " + _question(0)}
    before = len(simulated_provider.exchanges)
    for turn in range(100, 140):
        chat.turn(turn)
        if len(otel.compact_spans()) > 2:
            break
    else:
        raise AssertionError("never compacted again")
    _, discarded, inline = otel.compact_spans()
    attributes = dict(discarded.attributes or {})
    assert attributes[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert attributes[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    assert attributes[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
    assert [link.context.span_id for link in discarded.links] == [publishing.context.span_id]
    # Recorded by the call that found it stale (a child of its chat span), with no summarizer call under it.
    calls = [s for s in otel.spans() if s.name.startswith("chat ") and s.parent is None]
    assert discarded.parent is not None and discarded.parent.span_id == calls[-1].context.span_id
    assert not [s for s in otel.spans() if s.parent is not None and s.parent.span_id == discarded.context.span_id]
    assert (inline.attributes or {})[semconv.COMPACTION_MODE] == semconv.MODE_INLINE  # the threshold compacted
    assert chat.published(store) is None  # removed from the store
    discards = otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: semconv.OUTCOME_DISCARDED})
    assert discards == 1
    # Its summary message (after the user's messages kept verbatim, which are the app's own words).
    head = json.dumps(next(h for h in published.entry.replacement if SUMMARY_MESSAGE_HEADER in json.dumps(h)))
    assert not any(head in json.dumps(e.body) for e in simulated_provider.exchanges[before:])


def test_a_published_summary_of_another_shape_is_ignored(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str
) -> None:
    simulated_provider.set_window(MODELS["anthropic"], SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel)
    chat.turn(0)
    # A later schema, and garbage: neither is applied, and no call fails.
    store.put("published", {"v": shared.PREPARED_VERSION + 1, "entry": {}}, shared.PREPARED)
    assert chat.published(store) is None
    store.put("published", {"v": shared.PREPARED_VERSION, "entry": {"len": "x"}}, shared.PREPARED)
    assert chat.published(store) is None
    for turn in range(1, 30):
        chat.turn(turn)
    assert otel.compact_spans()  # it compacted on its own


def _big(lines: int) -> dict[str, Any]:
    return {"role": "user", "content": "Now this one. " + file_content("big.py", lines)}


def _history_past_start_point() -> tuple[dict[str, Any], dict[str, Any]]:
    """A request past the background start point but below the auto threshold, and the same history with
    one more turn that crosses the threshold (still below the blocking limit)."""
    model = MODELS["anthropic"]
    # The call's max_tokens is the budget's reserve, the room the summary gets at the threshold; with turns
    # longer than the 500 characters of each user message the simulated summary keeps, the summary fits it
    # (a summary cut at its length limit is a failed compaction, asked again once).
    max_tokens, turn_lines = 8_192, 200
    settings = Settings(auto_compact_window=WINDOW)
    budget = budget_for(model, settings, max_output_tokens=max_tokens)
    assert budget is not None
    adapter = for_format("anthropic_messages")
    start = pacing.start_point(budget, settings.background_start_pct)

    def estimate(messages: list[dict[str, Any]]) -> int:
        return estimate_fixed(
            adapter, {"model": model, "max_tokens": max_tokens, "messages": messages}
        ) + estimate_items(adapter, messages)

    def turn(n: int, lines: int) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": f"Turn {n}. " + file_content(f"f{n}.py", lines)},
            {"role": "assistant", "content": f"Read f{n}.py."},
        ]

    messages: list[dict[str, Any]] = []
    question = {"role": "user", "content": "What did you learn?"}
    n = 0
    while estimate([*messages, question]) < start:
        messages += turn(n, turn_lines)
        n += 1
    first = [*messages, question]
    assert estimate(first) < budget.auto_threshold
    # One more turn: the reply to ``first`` and a question that brings a file large enough to cross the
    # threshold (so that the call continues the very history a worker served: the fleet names a
    # conversation's stored state after its history).
    lines = 20
    while estimate([*first, {"role": "assistant", "content": "Much."}, _big(lines)]) < budget.auto_threshold:
        lines += 10
    later = [*first, {"role": "assistant", "content": "Much."}, _big(lines)]
    assert estimate(later) < budget.blocking_limit
    body = {"model": model, "max_tokens": max_tokens}
    return {**body, "messages": first}, {**body, "messages": later}


def _three_workers(sim: SimulatedProvider, server: RedisServer) -> Fleet:
    """Three anthropic workers with background compaction on, sharing ``server``."""
    return Fleet(
        3,
        sim.base_url,
        "anthropic",
        auto_compact_window=WINDOW,
        background_compaction=True,
        state_store=server.url + SLOW_MACHINE,
    )


def test_two_workers_past_the_start_point_at_once_prepare_one_summary(shared_redis: RedisServer) -> None:
    shared_redis.command("FLUSHALL")
    first, later = _history_past_start_point()
    with SimulatedProvider() as sim:
        sim.set_window(MODELS["anthropic"], WINDOW)
        with _three_workers(sim, shared_redis) as fleet:
            fleet.call_at_once([0, 1], **first)
            deadline = time.monotonic() + 30  # a generous bound against a hang
            while not Figures.of(sim.exchanges).summarizer_calls and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # a second summary, if one were under way, would have been sent by now
            fleet.call(2, **later)  # a worker that prepared nothing crosses the threshold
        figures = Figures.of(sim.exchanges)
    assert figures.summarizer_calls == 1 and figures.rejected == 0
    assert fleet.compacted[-1] == (True, 1)  # applied at once, linked to the compact span
    assert fleet.waits() == {semconv.MODE_BACKGROUND: (1, 0.0)}


def _rejected_once_then(sim: SimulatedProvider, before: int) -> dict[str, Any]:
    """The body the provider accepted after rejecting the first request since ``before`` as too long (and
    nothing else was sent: no summarizer call)."""
    exchanges = sim.exchanges[before:]
    assert [e.status for e in exchanges] == [400, 200]
    assert "prompt is too long" in json.dumps(exchanges[0].response)
    body: dict[str, Any] = exchanges[1].body
    return body


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_reactive_path_applies_a_summary_another_worker_published(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str, asynchronous: bool
) -> None:
    model = MODELS["anthropic"]
    simulated_provider.summary_latency = SUMMARY_LATENCY
    simulated_provider.set_window(model, SMALL_WINDOW)
    store = _instrument(otel, store_url)
    chat = _Chat(simulated_provider, otel, asynchronous)
    try:
        published = _until_published(chat, store)  # worker A prepared and published it
        (compact,) = otel.compact_spans()
        # Worker B: this process with none of A's in-process state (what a restart or another process has),
        # only the shared store. The provider's window turns out smaller than the one configured: B's next
        # request is rejected as too long although it is below B's threshold.
        engine.reset()
        question = {"role": "user", "content": "Go on."}  # a short turn: below B's threshold
        full = count_request_tokens(
            {"model": model, "max_tokens": 256, "messages": [*chat.history, question]}, "anthropic_messages"
        )
        simulated_provider.set_window(model, full - 1)
        before = len(simulated_provider.exchanges)
        chat.turn(200, "Go on.")
    finally:
        chat.close()
    sent = _rejected_once_then(simulated_provider, before)["messages"]
    # Retried with the published summary, byte-identical, and the turns after its cut verbatim.
    n, head = published.entry.prefix_len, list(published.entry.replacement)
    assert json.dumps(sent[: len(head)]) == json.dumps(head)
    assert sent[len(head) :] == chat.history[n:-1]
    assert len(otel.compact_spans()) == 1  # B made no summary of its own
    (retried,) = [s for s in otel.spans() if s.name.startswith("chat ") and s.parent is None][-1:]
    assert (retried.attributes or {})[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert [link.context.span_id for link in retried.links] == [compact.context.span_id]
    waits = otel.metric_points(semconv.METRIC_COMPACTION_WAIT)
    assert {
        (p.attributes[semconv.COMPACTION_TRIGGER_SOURCE], p.attributes[semconv.COMPACTION_MODE]) for p in waits
    } == {(semconv.TRIGGER_REACTIVE, semconv.MODE_BACKGROUND)}


def test_workers_of_an_edited_history_never_read_the_summary_published_for_it_before(
    shared_redis: RedisServer,
) -> None:
    import redis

    shared_redis.command("FLUSHALL")
    first, later = _history_past_start_point()
    # The app edited an early turn (below any cut; the conversation's first message, its key, unchanged).
    messages = list(later["messages"])
    messages[1] = {"role": "assistant", "content": "Read f0.py, edited."}
    edited = {**later, "messages": messages}
    client = redis.Redis.from_url(shared_redis.url)
    with SimulatedProvider() as sim:
        sim.set_window(MODELS["anthropic"], WINDOW)
        with _three_workers(sim, shared_redis) as fleet:
            fleet.call(0, **first)  # past the start point: worker 0 prepares and publishes
            deadline = time.monotonic() + 30  # a generous bound against a hang
            while not client.keys("*:prepared:*") and time.monotonic() < deadline:
                time.sleep(0.05)
            (key,) = client.keys("*:prepared:*")
            stored = client.get(key)
            value = json.loads(stored or b"{}")["d"]
            head = json.dumps(next(h for h in value["entry"]["head"] if SUMMARY_MESSAGE_HEADER in json.dumps(h)))
            before = len(sim.exchanges)
            fleet.call_at_once([1, 2], **edited)  # both cross the threshold
        exchanges = sim.exchanges[before:]
    # An edited history is another history to the fleet (as another user's that opened alike would be): its
    # workers never read the summary published for the history as it was, which expires with the store's
    # expiry (not reported as discarded: no worker of that history ever sees it).
    assert client.get(key) == stored
    assert not [c for c in fleet.compactions if c["outcome"] == semconv.OUTCOME_DISCARDED]
    # Nothing stale sent: never the published summary nor the turn as it was before the edit; one worker
    # compacted inline (the fleet's lock), the other sent its request unchanged (it still fits).
    assert not any(head in json.dumps(e.body) or "Read f0.py." in json.dumps(e.body) for e in exchanges)
    figures = Figures.of(exchanges)
    assert (figures.calls, figures.summarizer_calls, figures.rejected) == (2, 1, 0)
    inline = [c for c in fleet.compactions if c["mode"] == semconv.MODE_INLINE]
    assert [c["outcome"] for c in inline] == [semconv.OUTCOME_SUCCESS]
