"""The engine with a shared store, through real SDK calls: where a span's state came from, the async path,
and faults of a real redis-server (shut down, restarted, paused, a value overwritten with garbage): no call
fails, one warning, the metric counts, and the state goes back to the store when it answers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.conversation import shared
from otel_context.conversation.state_store import SCHEMA_VERSION, StateStore
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, file_content
from otel_context.testing.redis_server import RedisServer
from tests.compaction.conftest import _fresh_engine, otel
from tests.compaction.support import Otel

__all__ = ["_fresh_engine", "otel"]

MODEL = "claude-sonnet-4-6"
WINDOW = 30_000
#: Above this machine's scheduling noise (its cores are shared), far below what a paused server costs.
TIMEOUT_MS = 300


@pytest.fixture
def store_url(own_redis: RedisServer) -> Iterator[str]:
    yield f"{own_redis.url}?timeout_ms={TIMEOUT_MS}"
    otel_context.uninstrument()


def _store(url: str) -> StateStore:
    settings = otel_context.Settings(state_store=url)
    store = shared.store_for(settings)
    assert store is not None
    return store


class Chat:
    """One conversation with an explicit id, a turn per call, through a real anthropic client."""

    def __init__(self, client: Any, otel: Otel) -> None:
        self.client, self.otel = client, otel
        self.history: list[dict[str, Any]] = []

    def turn(self, text: str) -> tuple[str, float]:
        """One call; the state source on its chat span and how long it took."""
        self.history.append({"role": "user", "content": text})
        started = time.perf_counter()
        with otel_context.conversation("faulty"):
            response = self.client.messages.create(model=MODEL, max_tokens=64, messages=self.history)
        took = time.perf_counter() - started
        self.history.append({"role": "assistant", "content": response.content[0].text})
        chat = self.otel.spans()[-1]
        return str((chat.attributes or {})[semconv.STATE_SOURCE]), took


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "otel_context"]


def test_default_spans_say_memory(simulated_provider: SimulatedProvider, otel: Otel) -> None:
    otel_context.instrument(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    try:
        chat = Chat(simulated_provider.anthropic(), otel)
        assert chat.turn("hello")[0] == semconv.STATE_SOURCE_MEMORY
    finally:
        otel_context.uninstrument()


def test_redis_faults_never_fail_a_call(
    simulated_provider: SimulatedProvider,
    otel: Otel,
    own_redis: RedisServer,
    store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_context")
    otel_context.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, state_store=store_url
    )
    store = _store(store_url)
    chat = Chat(simulated_provider.anthropic(), otel)
    errors = semconv.METRIC_STATE_STORE_ERRORS

    assert chat.turn("one")[0] == semconv.STATE_SOURCE_STORE
    assert chat.turn("two")[0] == semconv.STATE_SOURCE_STORE
    assert store.flush(5)
    assert store.get("faulty").value is not None  # the conversation's state is in the store
    assert _warnings(caplog) == []

    # Shut down: calls go on with this process's state; one warning for the outage; the metric counts.
    own_redis.stop()
    sources = [chat.turn(f"down {i}")[0] for i in range(3)]
    assert sources[0] == semconv.STATE_SOURCE_FALLBACK
    assert set(sources) == {semconv.STATE_SOURCE_FALLBACK}
    assert len(_warnings(caplog)) == 1
    assert otel.counter_value(errors, **{semconv.STATE_STORE_OPERATION: "get"}) >= 1

    # Restarted (empty): after the back-off the store is used again and the state is written back.
    own_redis.start()
    time.sleep(1.1)
    assert chat.turn("back")[0] == semconv.STATE_SOURCE_STORE
    assert store.flush(5)
    assert store.get("faulty").value is not None
    assert len(_warnings(caplog)) == 1  # still the one warning of the outage

    # Paused (DEBUG SLEEP): the call waits at most about one timeout, never the pause.
    time.sleep(1.1)
    paused = own_redis.pause(3)
    source, took = chat.turn("paused")
    assert source == semconv.STATE_SOURCE_FALLBACK
    assert took < 2.0
    paused.join()
    time.sleep(1.1)
    assert chat.turn("awake")[0] == semconv.STATE_SOURCE_STORE
    assert otel.counter_value(errors, **{semconv.ERROR_TYPE: "timeout"}) >= 1

    # Garbage under the conversation's key: ignored (one more warning, of its own kind), counted, and the
    # next write puts a good value back.
    assert store.flush(5)
    before = len(_warnings(caplog))
    assert own_redis.command("SET", store.key("faulty"), "not json") == "+OK"
    assert chat.turn("garbage")[0] == semconv.STATE_SOURCE_FALLBACK
    assert otel.counter_value(errors, **{semconv.ERROR_TYPE: "garbage"}) == 1
    assert len(_warnings(caplog)) == before + 1
    assert store.flush(5)
    assert chat.turn("healed")[0] == semconv.STATE_SOURCE_STORE
    assert otel.counter_value(errors, **{semconv.ERROR_TYPE: "garbage"}) == 1


def test_a_worker_takes_up_state_another_left(
    simulated_provider: SimulatedProvider, otel: Otel, store_url: str
) -> None:
    """What another worker left (here: this process's state forgotten between two calls) is taken back
    from the store by content hashes: the usage anchor (the estimate is not recomputed from scratch) and
    the breaker."""
    otel_context.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, state_store=store_url
    )
    store = _store(store_url)
    chat = Chat(simulated_provider.anthropic(), otel)
    chat.turn("one")
    chat.turn("two")
    assert store.flush(5)
    value = store.get("faulty").value
    assert value is not None and value["anchor"]["n"] == 3
    # Another worker opened the breaker meanwhile.
    store.put("faulty", {**value, "seq": value["seq"] + 1, "rev": "other", "breaker": [3, 0]})
    otel_context.engine.reset()  # this process forgets the conversation, as a worker that never saw it
    chat.turn("three")
    span = otel.spans()[-1]
    assert (span.attributes or {}).get(semconv.COMPACTION_BREAKER_OPEN) is True
    assert (span.attributes or {})[semconv.STATE_SOURCE] == semconv.STATE_SOURCE_STORE


def test_async_clients_await_the_store(simulated_provider: SimulatedProvider, otel: Otel, store_url: str) -> None:
    otel_context.instrument(
        tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, state_store=store_url
    )
    store = _store(store_url)
    client = simulated_provider.async_anthropic()

    async def run() -> None:
        history: list[dict[str, Any]] = []
        for text in ("one", "two"):
            history.append({"role": "user", "content": text})
            with otel_context.conversation("async"):
                response = await client.messages.create(model=MODEL, max_tokens=64, messages=history)
            history.append({"role": "assistant", "content": response.content[0].text})

    asyncio.run(run())
    sources = [(s.attributes or {}).get(semconv.STATE_SOURCE) for s in otel.spans() if s.name.startswith("chat")]
    assert sources == [semconv.STATE_SOURCE_STORE] * 2
    assert store.flush(5)
    value = store.get("async").value
    assert value is not None and value["anchor"]["n"] == 3


def _calls(client: Any) -> dict[str, int]:
    """Commands the server ran since its last ``CONFIG RESETSTAT``, by name."""
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in client.info("commandstats").items()}


def _compacted(simulated_provider: SimulatedProvider, otel: Otel, store_url: str) -> tuple[Chat, StateStore]:
    """A conversation through the Redis store, up to its first compaction (its writes flushed).

    Inline compaction: the summarizer's call is then the compacting call's own, so the memo is stored once
    it is seen (with a shared store, background summaries are prepared by one worker and applied later:
    test_fleet_background.py)."""
    simulated_provider.set_window(MODEL, WINDOW)
    otel_context.instrument(
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        state_store=store_url,
        auto_compact_window=WINDOW,
        background_compaction=False,
    )
    store = _store(store_url)
    chat = Chat(simulated_provider.anthropic(), otel)
    turn = 0
    while Figures.of(simulated_provider.exchanges).summarizer_calls == 0:
        chat.turn(f"Turn {turn}. " + file_content(f"f{turn}.py", 200))
        turn += 1
        assert turn < 40, "the conversation was meant to cross the threshold"
    assert store.flush(5)
    return chat, store


def test_an_appended_turn_reads_and_writes_only_the_small_state(
    simulated_provider: SimulatedProvider, otel: Otel, own_redis: RedisServer, store_url: str
) -> None:
    """The summaries live in a part of their own, written when they change: an appended turn after a
    compaction does one ``GET`` before its request and writes only the small state (the summaries' expiry
    renewed with it); a worker that never saw the conversation reads the summaries once, and sends them
    byte-identically."""
    import redis

    chat, store = _compacted(simulated_provider, otel, store_url)
    summarized = Figures.of(simulated_provider.exchanges).summarizer_calls
    client = redis.Redis.from_url(own_redis.url)
    state = store.get("faulty").value
    assert state is not None
    length, address = state["memo"][0]
    memo_part = shared.memo_part(address)
    state_key, memo_key = store.key("faulty"), store.key("faulty", memo_part)
    memo = store.get("faulty", memo_part).value
    assert memo is not None and memo["len"] == length > 0
    summary = memo["summary"]
    state_bytes = client.get(state_key)
    assert isinstance(state_bytes, bytes) and summary and summary.encode() not in state_bytes
    memo_bytes = client.get(memo_key)
    client.pexpire(memo_key, 60_000)  # about to expire: the appended turns renew it

    client.config_resetstat()
    for i in range(3):
        chat.turn(f"appended {i}")
        assert store.flush(5)
    calls = _calls(client)
    assert calls.get("get") == 3  # one round trip before each request
    assert calls.get("set") == 3 and calls.get("pexpire") == 3  # the state only; the summaries' expiry renewed
    assert client.get(memo_key) == memo_bytes
    assert client.pttl(memo_key) > 3_600_000  # the store's expiry (a day), renewed with the state
    sent = simulated_provider.exchanges[-1].body["messages"][0]
    assert sent == memo["head"][0]  # the summary, as stored

    otel_context.engine.reset()  # this process forgets the conversation, as a worker that never saw it
    client.config_resetstat()
    chat.turn("another worker")
    assert _calls(client).get("get") == 2  # the state, then the summary it names
    assert simulated_provider.exchanges[-1].body["messages"][0] == sent
    assert Figures.of(simulated_provider.exchanges).summarizer_calls == summarized  # not summarized again
    assert Figures.of(simulated_provider.exchanges).summaries_written == 1
    client.close()


@pytest.mark.parametrize("lost", ["deleted", "garbage"])
def test_summaries_lost_from_the_store_are_written_back(
    simulated_provider: SimulatedProvider, otel: Otel, own_redis: RedisServer, store_url: str, lost: str
) -> None:
    """Summaries are written only when they change, so a copy the store lost (evicted, a failed write) or
    that was overwritten with garbage must come back: a worker that finds them gone names none in its write,
    and a worker that holds them writes them back when it reads that."""
    import redis

    chat, store = _compacted(simulated_provider, otel, store_url)
    state = store.get("faulty").value
    assert state is not None
    memo_part = shared.memo_part(state["memo"][0][1])
    memo = store.get("faulty", memo_part).value
    assert memo is not None
    client = redis.Redis.from_url(own_redis.url)
    memo_key = store.key("faulty", memo_part)

    def lose() -> None:
        if lost == "deleted":
            client.delete(memo_key)
        else:
            client.set(memo_key, b'{"v":%d,"d":{"head":"not a list"}}' % SCHEMA_VERSION)

    # The worker that holds them reads the write of a worker that found them gone (it names none): it
    # writes them back.
    lose()
    store.put("faulty", {**state, "seq": state["seq"] + 1, "rev": "other", "memo": None})
    assert chat.turn("on the worker that made the summary")[0] == semconv.STATE_SOURCE_STORE
    assert store.flush(5)
    assert store.get("faulty", memo_part).value == memo
    after = store.get("faulty").value
    assert after is not None and after["memo"] == state["memo"]

    # A worker that never saw the conversation finds them gone: its call goes on, and its write names none.
    lose()
    otel_context.engine.reset()
    assert chat.turn("on a worker without them")[0] == semconv.STATE_SOURCE_STORE
    assert store.flush(5)
    after = store.get("faulty").value
    assert after is not None and after["memo"] is None
    garbage = otel.counter_value(semconv.METRIC_STATE_STORE_ERRORS, **{semconv.ERROR_TYPE: "garbage"})
    assert garbage == (1 if lost == "garbage" else 0)
    client.close()
