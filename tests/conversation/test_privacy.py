"""Nothing of one user's reaches another through the compaction memo or the shared store (issue 32).

- A summary is stored under what it summarizes (the system prompt, tools and model the summarizer read, and
  the replaced messages): two conversations with the same messages under another system prompt or other
  tools never get each other's summary, in one process or through a real redis-server, and a worker reads
  only the stored values of the conversation it serves (every ``GET`` a real server ran, from ``MONITOR``).
- With ``OTEL_CONTEXT_STATE_STORE_KEY`` the store's values are sealed (AES-256-GCM): they round-trip, a
  value sealed with another key, written in clear or moved under another name is ignored, keys rotate, and
  the bytes in a real redis-server hold none of the conversation's text.

Real SDK clients against the simulated provider, real spans, a real ``redis-server``.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import otel_context
from otel_context import Settings, SettingsError, semconv
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.conversation import shared
from otel_context.conversation.state_store import RETIRE_SECONDS, MemoryStateStore, StateStore
from otel_context.settings import resolve
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, file_content
from otel_context.testing.redis_server import RedisServer
from tests.compaction.conftest import _fresh_engine, otel
from tests.compaction.support import Otel
from tests.conversation.conftest import errors
from tests.values import keys_of

__all__ = ["_fresh_engine", "otel"]

MODEL = "claude-sonnet-4-6"
WINDOW = 30_000
TOOL = {"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}}
WRITE = {"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object", "properties": {}}}
#: What makes conversation B another conversation than A, though its messages are A's.
SCOPES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "system": ({"system": "You help Alice.", "tools": [TOOL]}, {"system": "You help Bob.", "tools": [TOOL]}),
    "tools": ({"system": "You help.", "tools": [TOOL]}, {"system": "You help.", "tools": [TOOL, WRITE]}),
}


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.fixture
def store_url(own_redis: RedisServer) -> Iterator[str]:
    yield f"{own_redis.url}?timeout_ms=2000"
    otel_context.uninstrument()


def _instrument(otel: Otel, **settings: Any) -> None:
    otel_context.instrument(
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
        auto_compact_window=WINDOW,
        background_compaction=False,
        **settings,
    )


def _until_summarized(sim: SimulatedProvider, scope: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Conversation A, a turn per call, up to its first summary: the app's messages of each call, and last
    its history after that call (the reply appended) with a next question."""
    client = sim.anthropic()
    history: list[dict[str, Any]] = []
    sent: list[list[dict[str, Any]]] = []
    turn = 0
    while Figures.of(sim.exchanges).summaries_written == 0:
        history.append({"role": "user", "content": f"Turn {turn}. Secret-{turn}. " + file_content(f"f{turn}.py", 200)})
        sent.append(list(history))
        reply = client.messages.create(model=MODEL, max_tokens=64, messages=history, **scope)
        history.append({"role": "assistant", "content": reply.content[0].text})
        turn += 1
        assert turn < 40, "the conversation was meant to cross the threshold"
    return [*sent, [*history, {"role": "user", "content": "And now?"}]]


def _replay(sim: SimulatedProvider, calls: list[list[dict[str, Any]]], scope: dict[str, Any]) -> None:
    """Conversation B: the very messages of A's calls, under another scope."""
    client = sim.anthropic()
    for messages in calls:
        client.messages.create(model=MODEL, max_tokens=64, messages=messages, **scope)


def _summary_requests(sim: SimulatedProvider) -> list[dict[str, Any]]:
    """Each compaction's first summarizer request (one cut at its length limit is asked once more, next)."""

    def asks(body: Any) -> bool:
        return "summar" in str((body.get("messages") or [{}])[-1]).lower()

    exchanges = sim.exchanges
    return [e.body for i, e in enumerate(exchanges) if asks(e.body) and not (i and asks(exchanges[i - 1].body))]


@pytest.mark.parametrize("differs", list(SCOPES))
def test_same_messages_under_another_scope_never_get_the_other_summary(
    simulated_provider: SimulatedProvider, otel: Otel, differs: str
) -> None:
    """One process: B's messages are A's, its system prompt (or tools) are not; B summarizes on its own."""
    simulated_provider.set_window(MODEL, WINDOW)
    _instrument(otel)
    a, b = SCOPES[differs]
    calls = _until_summarized(simulated_provider, a)[:-1]
    _replay(simulated_provider, calls, b)
    assert Figures.of(simulated_provider.exchanges).summaries_written == 2  # A's summary was not reused for B
    asked = _summary_requests(simulated_provider)
    assert [body.get("system") for body in asked] == [a["system"], b["system"]]


class Monitor:
    """Every key a real redis-server was asked to read (``GET`` / ``MGET``) while it runs (``MONITOR``)."""

    STOP = "otel-context-monitor-stop"

    def __init__(self, url: str) -> None:
        self.url = url
        self.reads: list[str] = []
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()  # type: ignore[no-untyped-call]  # unannotated in redis-py
        self._monitor.__enter__()  # MONITOR is on when this returns
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            command = str(self._monitor.next_command()["command"])
            if self.STOP in command:
                return
            words = command.split()
            if not words:
                continue  # a command MONITOR printed with no words (an empty line)
            verb, *args = words
            if verb.upper() in ("GET", "MGET"):
                self.reads.extend(args)

    def stop(self) -> set[str]:
        redis.Redis.from_url(self.url).echo(self.STOP)
        self._thread.join(10)
        self._monitor.__exit__()
        self._client.close()
        return set(self.reads)


def _values(url: str) -> dict[str, bytes]:
    """Every value the store holds (locks and links included), by key."""
    client = redis.Redis.from_url(url)
    found = {k.decode(): client.get(k) for k in keys_of(client)}
    client.close()
    return {k: v for k, v in found.items() if isinstance(v, bytes)}


@pytest.mark.parametrize("differs", list(SCOPES))
def test_a_worker_reads_only_the_stored_values_of_its_own_conversation(
    simulated_provider: SimulatedProvider, otel: Otel, own_redis: RedisServer, store_url: str, differs: str
) -> None:
    """Through a real redis-server: A's worker stores A's state and summary; a worker that never saw either
    serves B (A's messages, another scope), then A. Serving B it reads no value of A's (MONITOR) and makes
    B's own summary; serving A it reads A's and sends A's summary without a summarizer call."""
    simulated_provider.set_window(MODEL, WINDOW)
    _instrument(otel, state_store=store_url)
    store = shared.store_for(otel_context.Settings(state_store=store_url))
    assert store is not None
    a, b = SCOPES[differs]
    *calls, following = _until_summarized(simulated_provider, a)
    head = simulated_provider.exchanges[-1].body["messages"][0]  # A's summary, as A's last call sent it
    assert store.flush(5)
    of_a = set(_values(own_redis.url))
    assert any(":memo" in k for k in of_a) and any(":state" in k for k in of_a)
    # One state per call, each named after its history: the one the next call reads lives as long as the
    # store keeps values, those the conversation moved on from only a little longer (calls still under way).
    client = redis.Redis.from_url(own_redis.url)
    states = [k for k in of_a if ":state" in k]
    lasting = [k for k in states if client.pttl(k) > RETIRE_SECONDS * 1000]
    client.close()
    assert len(states) == len(calls) and len(lasting) == 1

    otel_context.engine.reset()  # a worker that never saw either conversation
    monitor = Monitor(own_redis.url)
    _replay(simulated_provider, calls, b)
    assert store.flush(5)
    read = monitor.stop()
    assert read, "the worker serving B read its own state from the store"
    assert not read & of_a  # no value of A's conversation was read while serving B
    assert Figures.of(simulated_provider.exchanges).summaries_written == 2

    otel_context.engine.reset()
    monitor = Monitor(own_redis.url)
    client = simulated_provider.anthropic()
    client.messages.create(model=MODEL, max_tokens=64, messages=following, **a)
    read = monitor.stop()
    assert read & of_a  # serving A, the worker reads A's values
    assert Figures.of(simulated_provider.exchanges).summaries_written == 2  # and reuses A's summary
    assert simulated_provider.exchanges[-1].body["messages"][0] == head


# --- encryption at rest -----------------------------------------------------------------------------------


def test_sealed_values_round_trip_rotate_and_foreign_ones_are_ignored(
    redis_url: str, make_store: Callable[..., StateStore], metric_reader: Any
) -> None:
    old, new = os.urandom(32), os.urandom(32)
    sealed = make_store(redis_url, keys=(old,))
    value = {"summary": "Alice's plan for the merger", "n": 1}
    assert sealed.put("conv", value) and sealed.get("conv").value == value
    client = redis.Redis.from_url(redis_url)
    raw = client.get(sealed.key("conv"))
    assert isinstance(raw, bytes) and raw.startswith(b"OCE1") and b"merger" not in raw and old not in raw

    # Rotation: the new key first, the old one after it: reads the old key's values, writes with the new.
    rotated = make_store(redis_url, keys=(new, old))
    assert rotated.get("conv").value == value
    assert rotated.put("conv", {**value, "n": 2})
    assert make_store(redis_url, keys=(new,)).get("conv").value == {**value, "n": 2}
    assert sealed.get("conv").source == semconv.STATE_SOURCE_FALLBACK  # the old key alone cannot read it

    # Foreign values are ignored like garbage: another key, a value in clear, one moved under another name.
    clear = make_store(redis_url)
    assert clear.put("plain", value)
    assert rotated.get("plain").source == semconv.STATE_SOURCE_FALLBACK
    client.set(rotated.key("other"), client.get(rotated.key("conv")) or b"")
    assert rotated.get("other").source == semconv.STATE_SOURCE_FALLBACK
    assert clear.get("conv").source == semconv.STATE_SOURCE_FALLBACK  # a store without the key neither
    assert errors(metric_reader).get(("get", "garbage")) == 4

    # The removal of a published summary compares sealed values here, not in the server.
    assert rotated.put("conv", {"id": "x1"}, "prepared")
    assert not rotated.remove_if("conv", "prepared", "id", "other")
    assert rotated.remove_if("conv", "prepared", "id", "x1")
    assert rotated.get("conv", "prepared").value is None
    client.close()


@pytest.mark.parametrize("sealed", [True, False], ids=["with-key", "clear"])
def test_with_a_key_the_store_holds_none_of_the_conversation_text(
    simulated_provider: SimulatedProvider, otel: Otel, own_redis: RedisServer, store_url: str, sealed: bool
) -> None:
    """A conversation to its first summary through a real redis-server: with a key, no stored byte holds its
    text (the control, without a key, shows the same check finds it); a worker that never saw it takes the
    sealed state and summary and sends that summary (no second summarizer call)."""
    simulated_provider.set_window(MODEL, WINDOW)
    _instrument(otel, state_store=store_url, **({"state_store_key": _key()} if sealed else {}))
    following = _until_summarized(simulated_provider, {"system": "You are Alice's assistant."})[-1]
    store = shared.store_for(otel_context.Settings(state_store=store_url))
    assert store is not None and store.flush(5)
    stored = _values(own_redis.url)
    # The summary message the last call sent (after the user's messages kept verbatim).
    summary = next(m for m in simulated_provider.exchanges[-1].body["messages"] if SUMMARY_MESSAGE_HEADER in str(m))
    content = summary["content"]
    text = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    assert len(text) > 200
    fragment = json.dumps(text[100:160], ensure_ascii=False)[1:-1]  # as the store's JSON writes it
    words = [b"Secret-0", b"Secret-1", fragment.encode()]  # the user's words kept verbatim, the summary's
    found = [w for w in words if any(w in v for v in stored.values())]
    if not sealed:
        assert found == words  # the check can fail: in clear the store holds the users' words and the summary
        return
    assert stored and found == []
    otel_context.engine.reset()
    client = simulated_provider.anthropic()
    client.messages.create(model=MODEL, max_tokens=64, messages=following, system="You are Alice's assistant.")
    assert Figures.of(simulated_provider.exchanges).summaries_written == 1
    assert summary in simulated_provider.exchanges[-1].body["messages"]
    assert (otel.spans()[-1].attributes or {}).get(semconv.STATE_SOURCE) == semconv.STATE_SOURCE_STORE


def test_the_key_setting(caplog: pytest.LogCaptureFixture) -> None:
    key, other = _key(), base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    settings = resolve({"state_store_key": f"{key}, {other}"}, env={})
    assert settings.state_store_key is not None and len(settings.state_store_key) == 2
    assert key not in repr(settings) and "state_store_key" not in repr(settings)
    from_env = resolve(env={"OTEL_CONTEXT_STATE_STORE_KEY": key, "OTEL_CONTEXT_STATE_STORE": "redis://127.0.0.1:1/0"})
    assert from_env.state_store_key == (base64.b64decode(key),)
    # From code, a bad key fails at once, saying why and never showing the key.
    short = base64.b64encode(b"k" * 16).decode()
    with pytest.raises(SettingsError, match="16 bytes, not 32") as raised:
        resolve({"state_store_key": short}, env={})
    assert short not in str(raised.value)
    with pytest.raises(SettingsError, match="not base64"):
        Settings().replace(state_store_key="not a key!")
    # From the environment: one warning naming the variable, and no shared store (nothing stored in clear).
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        bad = resolve(
            env={"OTEL_CONTEXT_STATE_STORE_KEY": short + "x", "OTEL_CONTEXT_STATE_STORE": "redis://127.0.0.1:1/0"}
        )
    assert bad.state_store is None and bad.state_store_key is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("OTEL_CONTEXT_STATE_STORE_KEY" in m and "not used" in m for m in messages)
    assert not any(short in m for m in messages)
    # A store object made without keys, with a key set: not used rather than written in clear.
    unsealed = resolve({"state_store": MemoryStateStore(), "state_store_key": key}, env={})
    assert shared.store_for(unsealed) is None
    sealed = resolve({"state_store": MemoryStateStore(keys=(os.urandom(32),)), "state_store_key": key}, env={})
    assert shared.store_for(sealed) is not None
