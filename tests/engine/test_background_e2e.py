"""Issue 13, end to end: summaries prepared in the background, applied at the threshold without waiting.

Real SDK clients (sync, async, streaming; anthropic and openai chat) against the simulated provider, whose
``summary_latency`` makes the summarizer slower than the model.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from opentelemetry.trace import StatusCode

import otel_context
from otel_context import engine, semconv
from otel_context.compaction.budget import budget_for
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.conversation import CONVERSATIONS, ConversationState
from otel_context.engine import background, pacing
from otel_context.instrumentation import _background
from tests.compaction.support import Otel
from tests.instrumentation.instr_support import TransportOfTheApp
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o"
WINDOW = 14_000


def _question(turn: int) -> str:
    return f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(400))


def _is_summary(body: Any) -> bool:
    items = body.get("messages") or []
    return bool(items) and "<summary>" in json.dumps(items[-1])


def _app_exchanges(sim: Any) -> list[Any]:
    return [e for e in sim.exchanges if isinstance(e.body, dict) and not _is_summary(e.body)]


def _mains(otel: Otel) -> list[Any]:
    chats = [s for s in otel.spans() if s.name.startswith("chat ") and semconv.CONTEXT_ESTIMATED_TOKENS in attrs_of(s)]
    return sorted(chats, key=lambda s: s.start_time)


def _bg_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _background.THREAD_NAME]


def _wait_idle(timeout: float = 20.0) -> None:
    """Until no background summary is in flight (a generous bound against a hang)."""
    deadline = time.monotonic() + timeout
    while (_background.running() or _bg_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _background.running() == 0 and not _bg_threads()


class Chat:
    """A chat app that resends its whole history each turn (anthropic or openai chat, sync)."""

    def __init__(self, client: Any, fmt: str = "anthropic", *, stream: bool = False) -> None:
        self.client, self.fmt, self.stream = client, fmt, stream
        self.history: list[dict[str, Any]] = []

    def turn(self, number: int) -> str:
        self.history.append({"role": "user", "content": _question(number)})
        messages = list(self.history)
        text: str
        if self.fmt == "anthropic":
            if self.stream:
                with self.client.messages.stream(model=MODEL, max_tokens=512, messages=messages) as stream:
                    text = stream.get_final_message().content[0].text
            else:
                text = self.client.messages.create(model=MODEL, max_tokens=512, messages=messages).content[0].text
        elif self.stream:
            chunks = self.client.chat.completions.create(
                model=OPENAI_MODEL, max_tokens=512, messages=messages, stream=True
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = self.client.chat.completions.create(model=OPENAI_MODEL, max_tokens=512, messages=messages)
            text = reply.choices[0].message.content or ""
        self.history.append({"role": "assistant", "content": text})
        return text


def _setup(sim: Any, instrumented: Callable[..., Any], **settings: Any) -> None:
    sim.set_window(MODEL, WINDOW)
    sim.set_window(OPENAI_MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW, **settings)


def _run_until_compacted(chat: Chat, otel: Otel, limit: int = 30, pause: float = 0.0) -> int:
    """Turns until a main chat span says compacted; returns that turn's number."""
    for turn in range(1, limit + 1):
        chat.turn(turn)
        if any(s.attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED) for s in _mains(otel)):
            return turn
        if pause:
            time.sleep(pause)
    raise AssertionError("never compacted")


@pytest.mark.parametrize(
    ("fmt", "stream"), [("anthropic", False), ("anthropic", True), ("openai", False), ("openai", True)]
)
def test_prepared_summary_is_applied_at_the_threshold_without_waiting(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], fmt: str, stream: bool
) -> None:
    simulated_provider.summary_latency = 0.4
    _setup(simulated_provider, instrumented)
    client = simulated_provider.anthropic() if fmt == "anthropic" else simulated_provider.openai()
    chat = Chat(client, fmt, stream=stream)
    turn = _run_until_compacted(chat, otel, pause=0.5)  # the app thinks between turns: the summary lands
    mains = _mains(otel)
    applying = mains[-1]
    compacts = otel.compact_spans()
    assert [attrs_of(c)[semconv.COMPACTION_MODE] for c in compacts] == [semconv.MODE_BACKGROUND]
    compact = compacts[0]
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    # The applying call is marked and linked to the compact span, which is the root of a trace of its own,
    # linked to the call that started it, and ended when the summary was ready (before it was applied).
    assert applying.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert [link.context.span_id for link in applying.links] == [compact.context.span_id]
    assert compact.parent is None
    starter = next(s for s in mains if s.context.span_id == compact.links[0].context.span_id)
    assert len({starter.context.trace_id, compact.context.trace_id, applying.context.trace_id}) == 3
    assert starter.end_time is not None and compact.end_time is not None and applying.start_time is not None
    assert starter.end_time < applying.start_time and compact.end_time < applying.start_time
    summarizer = next(s for s in otel.spans() if s.parent is not None and s.parent.span_id == compact.context.span_id)
    assert summarizer.end_time is not None and summarizer.end_time <= compact.end_time
    # The application is an event on the applying call: the context before and after on this call.
    (applied,) = [e for e in applying.events if e.name == semconv.COMPACTION_APPLIED_EVENT]
    assert applied.attributes[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert applied.attributes[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
    assert applied.attributes[semconv.COMPACTION_OUTPUT_TOKENS] < applied.attributes[semconv.COMPACTION_INPUT_TOKENS]
    # What it saved is counted once, when it was sent, and is what it removed from the call that sent it.
    (saved,) = otel.metric_points(semconv.METRIC_COMPACTION_TOKENS_SAVED)
    assert saved.count == 1 and saved.attributes[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
    assert saved.sum == (
        applied.attributes[semconv.COMPACTION_INPUT_TOKENS] - applied.attributes[semconv.COMPACTION_OUTPUT_TOKENS]
    )
    # The applying call did not wait for the summarizer (0.4 s): it took about what the model takes.
    assert (applying.end_time - applying.start_time) / 1e9 < 0.3
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_MODE: "background"}) == 1
    # No request was rejected (pairing, length).
    assert [e.status for e in simulated_provider.exchanges if e.status != 200] == []
    assert turn > 3


def test_a_background_summary_the_pre_compact_hook_vetoes_ends_its_span_as_skipped(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Its ``compact`` span opened when the call started it (so that the call names it): a veto ends it as
    ``skipped``, with the reason and no summarizer call, still named by that call."""
    _setup(simulated_provider, instrumented, pre_compact=lambda event: False)
    chat = Chat(simulated_provider.anthropic())
    for turn in range(1, 30):
        chat.turn(turn)
        _wait_idle()
        if otel.compact_spans():
            break
    vetoed = otel.compact_spans()[0]
    a = attrs_of(vetoed)
    assert a[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SKIPPED
    assert a[semconv.CONTEXT_COMPACTION_SKIPPED_REASON] == "vetoed by the pre_compact hook"
    assert a[semconv.OUTPUT_VALUE] == "skipped: vetoed by the pre_compact hook"
    assert not [s for s in otel.spans() if s.parent is not None and s.parent.span_id == vetoed.context.span_id]
    starter = next(s for s in _mains(otel) if s.context.span_id == vetoed.links[0].context.span_id)
    assert attrs_of(starter)[semconv.COMPACTION_STARTED_SPAN_ID] == f"{vetoed.context.span_id:016x}"
    assert not [e for e in simulated_provider.exchanges if isinstance(e.body, dict) and _is_summary(e.body)]


def test_apply_is_byte_identical_after_the_cut_and_reused_by_the_next_calls(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    _run_until_compacted(chat, otel, pause=0.05)
    history_at_apply = list(chat.history[:-1])  # what the app sent on the applying call
    sent = _app_exchanges(simulated_provider)[-1].body["messages"]
    # The head: the user's own messages kept verbatim, then the summary message.
    head = 1 + next(i for i, m in enumerate(sent) if SUMMARY_MESSAGE_HEADER in json.dumps(m))
    kept = len(sent) - head
    # The summary replaced a prefix; every message after the cut is the app's own, byte for byte.
    assert json.dumps(sent[head:]) == json.dumps(history_at_apply[-kept:])
    assert "summary" in json.dumps(sent[head - 1]).lower()
    # The memo remembers it: the next calls send the very same head (a cacheable prefix).
    chat.turn(100)
    chat.turn(101)
    for exchange in _app_exchanges(simulated_provider)[-2:]:
        assert json.dumps(exchange.body["messages"][:head]) == json.dumps(sent[:head])
        assert json.dumps(exchange.body["messages"][head : head + kept]) == json.dumps(sent[head:])
    assert len(otel.compact_spans()) == 1  # summarized once


def test_not_ready_at_the_threshold_sends_unchanged_then_applies_when_it_lands(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.summary_latency = 1.5
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    turn = _turns_until_pending(chat)
    # Cross the threshold while the summary is still in flight: sent unchanged, without waiting.
    threshold = _threshold()
    threshold_calls = []
    while _mains(otel)[-1].attributes[semconv.CONTEXT_ESTIMATED_TOKENS] < threshold:
        turn += 1
        began = time.perf_counter()
        chat.turn(turn)
        threshold_calls.append(time.perf_counter() - began)
        assert not any(s.attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED) for s in _mains(otel))
    assert _background.running() == 1  # still in flight when the threshold was crossed
    assert max(threshold_calls) < 1.0  # nobody waited for the 1.5 s summarizer
    assert _app_exchanges(simulated_provider)[-1].body["messages"] == chat.history[:-1]
    _wait_idle()
    turn += 1
    chat.turn(turn)
    applying = _mains(otel)[-1]
    assert applying.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert len(applying.links) == 1
    # One summary for the prefix, never two.
    assert sum(1 for e in simulated_provider.exchanges if _is_summary(e.body)) == 1


def _threshold() -> int:
    from otel_context.compaction.budget import budget_for
    from otel_context.settings import Settings

    budget = budget_for(MODEL, Settings(auto_compact_window=WINDOW), max_output_tokens=512)
    assert budget is not None
    return budget.auto_threshold


def background_pending() -> bool:
    return any(background.pending(state) is not None for state in CONVERSATIONS.states())


def _turns_until_pending(chat: Chat) -> int:
    """Turns of ``chat`` until a background summary is under way; the number of the last turn."""
    turn = 0
    while not background_pending():
        turn += 1
        chat.turn(turn)
    return turn


def test_edited_history_discards_the_prepared_summary_and_sends_nothing_stale(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    # An explicit id: the edited history stays the same conversation (a derived key would branch, and the
    # old branch keeps its summary for a rewind until the store forgets it).
    with otel_context.conversation("edited"):
        turn = _turns_until_pending(chat)
        _wait_idle()
        stale = chat.history[2]["content"]
        chat.history[2] = {"role": "user", "content": "EDITED " + _question(999)}  # below any cut
        before = len(simulated_provider.exchanges)
        for _ in range(8):
            turn += 1
            chat.turn(turn)
        _wait_idle()
    later = [e for e in simulated_provider.exchanges[before:] if isinstance(e.body, dict)]
    assert all(stale not in json.dumps(e.body) for e in later), "content the app edited away was sent"
    discarded = [
        c for c in otel.compact_spans() if attrs_of(c)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    ]
    assert len(discarded) == 1 and attrs_of(discarded[0])[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "discarded"}) == 1


def test_background_failure_counts_on_the_breaker_then_the_threshold_compacts_inline(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    from otel_context.testing.scripted import Turn, summarize

    calls: list[int] = []

    def summarizer(body: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("summarizer down")
        return summarize([Turn("user", json.dumps(body["messages"])), Turn("user", "<summary>")])

    _setup(simulated_provider, instrumented, summarizer=summarizer)
    chat = Chat(simulated_provider.anthropic())
    _run_until_compacted(chat, otel, pause=0.05)
    compacts = otel.compact_spans()
    modes = [(attrs_of(c)[semconv.COMPACTION_MODE], attrs_of(c)[semconv.COMPACTION_OUTCOME]) for c in compacts]
    assert modes == [("background", "failure"), ("inline", "success")]
    assert attrs_of(compacts[0])[semconv.COMPACTION_CONSECUTIVE_FAILURES] == 1
    assert attrs_of(compacts[1])[semconv.COMPACTION_CONSECUTIVE_FAILURES] == 0
    assert len(calls) == 2  # no retry in the background on every call


def test_off_from_code_and_env_is_todays_inline_behaviour(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[list[Any]] = []
    for how in ("code", "env"):
        engine.reset()
        simulated_provider.clear()
        if how == "env":
            monkeypatch.setenv("OTEL_CONTEXT_BACKGROUND_COMPACTION", "false")
            _setup(simulated_provider, instrumented)
        else:
            _setup(simulated_provider, instrumented, background_compaction=False)
        chat = Chat(simulated_provider.anthropic())
        for turn in range(1, 20):
            chat.turn(turn)
        sent.append([e.body for e in simulated_provider.exchanges])
        assert _background.running() == 0 and not _bg_threads()
    assert sent[0] == sent[1]
    compacts = otel.compact_spans()
    assert compacts and all(attrs_of(c)[semconv.COMPACTION_MODE] == semconv.MODE_INLINE for c in compacts)
    # Inline: the summarizer ran inside the call that crossed the threshold (its child span is under it).
    for compact in compacts:
        assert compact.parent is not None
        assert any(s.context.span_id == compact.parent.span_id for s in _mains(otel))


def test_reactive_path_uses_a_prepared_summary(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    # The provider's real window is smaller than the one declared: it rejects before our threshold, after
    # the start point, when the prepared summary is ready.
    instrumented(auto_compact_window=WINDOW)
    simulated_provider.set_window(MODEL, 11_000)
    chat = Chat(simulated_provider.anthropic())
    for turn in range(1, 30):
        chat.turn(turn)
        _wait_idle()  # a started summary has landed before the next call (deterministic under load)
        if any(e.status != 200 for e in simulated_provider.exchanges):
            break
    rejected = [e for e in simulated_provider.exchanges if e.status != 200]
    assert len(rejected) == 1
    retry = simulated_provider.exchanges[-1]
    assert retry.status == 200 and not _is_summary(retry.body)
    # The retry carried the prepared summary: one summarizer call in all, made in the background.
    assert sum(1 for e in simulated_provider.exchanges if _is_summary(e.body)) == 1
    compacts = otel.compact_spans()
    assert [attrs_of(c)[semconv.COMPACTION_MODE] for c in compacts] == [semconv.MODE_BACKGROUND]
    assert _mains(otel)[-1].attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True


def test_async_client_prepares_on_the_running_loop(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.summary_latency = 0.3
    _setup(simulated_provider, instrumented)

    async def main() -> int:
        client = simulated_provider.async_anthropic()
        history: list[dict[str, Any]] = []
        ticks = 0

        async def ticker() -> None:  # the loop stays responsive while the summary is prepared
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        for turn in range(1, 30):
            history.append({"role": "user", "content": _question(turn)})
            reply = await client.messages.create(model=MODEL, max_tokens=512, messages=list(history))
            history.append({"role": "assistant", "content": reply.content[0].text})
            await asyncio.sleep(0.4)
            if any(s.attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED) for s in _mains(otel)):
                break
        tick_task.cancel()
        return ticks

    ticks = asyncio.run(main())
    assert ticks > 10
    assert not _bg_threads()  # no thread: a task on the loop
    compacts = otel.compact_spans()
    assert [attrs_of(c)[semconv.COMPACTION_MODE] for c in compacts] == [semconv.MODE_BACKGROUND]
    assert _mains(otel)[-1].links[0].context.span_id == compacts[0].context.span_id


def test_uninstrument_with_a_summary_in_flight(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    simulated_provider.summary_latency = 1.0
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    turn = 0
    while not _bg_threads():
        turn += 1
        chat.turn(turn)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        began = time.perf_counter()
        otel_context.uninstrument()
        assert time.perf_counter() - began < 0.5  # no hang
        _wait_idle(timeout=10)
    assert not background_pending()
    assert [r.getMessage() for r in caplog.records] == []
    compacts = otel.compact_spans()
    assert [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in compacts] == [semconv.OUTCOME_DISCARDED]


def _nothing_failed(otel: Otel, caplog: pytest.LogCaptureFixture) -> ConversationState:
    """No compaction failed: a summary given up ended as discarded, one kept as success when it was ready (no
    ERROR), nothing counted on the breaker or the failure counter (the compaction-failure alert), nothing
    logged. The conversation's state."""
    for compact in otel.compact_spans():
        assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] in (semconv.OUTCOME_DISCARDED, semconv.OUTCOME_SUCCESS)
        assert compact.status.status_code is StatusCode.UNSET
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "failure"}) == 0
    assert [r.getMessage() for r in caplog.records] == []
    (state,) = CONVERSATIONS.states()
    assert state.breaker.consecutive_failures == 0
    return state


def _ready(state: ConversationState) -> bool:
    prepared = background.pending(state)
    return prepared is not None and prepared.entry is not None


def _client_of(sim: Any, fmt: str) -> Callable[..., Any]:
    client: Callable[..., Any] = sim.anthropic if fmt == "anthropic" else sim.openai
    return client


def _proxied_client(sim: Any, fmt: str, **kw: Any) -> Any:
    """A client of a provider reached through an HTTP proxy with credentials (the simulator plays both)."""
    sdk: Any = importlib.import_module(fmt)
    http = sdk.DefaultHttpxClient(proxy=f"http://user:secret@127.0.0.1:{sim.port}", trust_env=False)
    cls, base = (
        (sdk.Anthropic, "http://provider.invalid") if fmt == "anthropic" else (sdk.OpenAI, "http://provider.invalid/v1")
    )
    return cls(base_url=base, http_client=http, max_retries=0, **kw)


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "proxied"])
@pytest.mark.parametrize("fmt", ["anthropic", "openai"])
def test_closing_the_client_with_a_summary_in_flight_keeps_the_summary(
    simulated_provider: Any,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    fmt: str,
    proxied: bool,
) -> None:
    """An app that makes a client per request closes it while the summary its call started is still running.
    The summary has connections of its own (httpx's close() closes every connection of its pool, the one a
    summary thread is reading included): it lands, is kept, and the conversation's next call, on a new client,
    applies it. It went out as the app's client would send it: its credentials, its default headers, its
    proxy (with the proxy's credentials)."""
    simulated_provider.summary_latency = 1.0
    _setup(simulated_provider, instrumented)
    app = {"api_key": "key-of-the-app", "default_headers": {"x-app": "mine"}}
    chat = Chat(
        _proxied_client(simulated_provider, fmt, **app) if proxied else _client_of(simulated_provider, fmt)(**app), fmt
    )
    turn = _turns_until_pending(chat)  # under way: the summarizer takes 1 s
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        chat.client.close()  # before the change, this cut the summary's request
        _wait_idle(timeout=10)
    state = _nothing_failed(otel, caplog)
    assert _ready(state)
    (summary,) = [e for e in simulated_provider.exchanges if _is_summary(e.body)]
    assert summary.status == 200
    credential = summary.headers.get("x-api-key") or summary.headers.get("authorization", "")
    assert credential.endswith("key-of-the-app") and summary.headers["x-app"] == "mine"
    if proxied:
        assert summary.headers["host"] == "provider.invalid" and "proxy-authorization" in summary.headers
    chat.client = _client_of(simulated_provider, fmt)()  # turns until the threshold, where the summary is applied
    for later in range(turn + 1, turn + 20):
        chat.turn(later)
        if _mains(otel)[-1].attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED):
            break
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert [link.context for link in _mains(otel)[-1].links] == [compact.context]
    assert [e for e in simulated_provider.exchanges if _is_summary(e.body)] == [summary]  # kept, not made again


@pytest.mark.parametrize("fmt", ["anthropic", "openai"])
def test_closing_a_client_whose_connections_cannot_be_remade_gives_the_summary_up(
    simulated_provider: Any,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    fmt: str,
) -> None:
    """With a transport of the app's own, the summary goes through the app's client itself. Closing it cuts
    the summary's request: the summary is given up like one uninstrument() abandons (not a failure, which
    would count on the breaker and fire the failure alert), and the next client prepares it again."""
    # Far longer than a turn: still under way when the client closes, even on a loaded machine (with 3 s, a
    # CI run beside other work once saw the summary land before the close).
    simulated_provider.summary_latency = 8.0
    _setup(simulated_provider, instrumented)
    new_client = _client_of(simulated_provider, fmt)
    chat = Chat(new_client(http_client=httpx2.Client(transport=TransportOfTheApp())), fmt)
    turn = _turns_until_pending(chat)  # under way: the summarizer takes 3 s
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        chat.client.close()  # the sync client's close cuts the request in flight
        _wait_idle(timeout=10)
    state = _nothing_failed(otel, caplog)
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED and not _ready(state)
    simulated_provider.summary_latency = 0.0
    chat.client = new_client()
    chat.turn(turn + 1)
    _wait_idle()
    assert _ready(state)


def test_closing_an_async_client_with_a_summary_in_flight_keeps_the_summary(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The same with an async client: the summary's connections are its own, so it lands and is kept."""
    simulated_provider.summary_latency = 1.0
    _setup(simulated_provider, instrumented)

    async def settled() -> None:
        deadline = time.monotonic() + 10
        while _background.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert _background.running() == 0

    async def main() -> None:
        history: list[dict[str, Any]] = []

        async def turn(client: Any, number: int) -> None:
            history.append({"role": "user", "content": _question(number)})
            reply = await client.messages.create(model=MODEL, max_tokens=512, messages=list(history))
            history.append({"role": "assistant", "content": reply.content[0].text})

        client = simulated_provider.async_anthropic()
        number = 0
        while not _background.running():
            number += 1
            await turn(client, number)
        with caplog.at_level(logging.WARNING, logger="otel_context"):
            await client.close()
            await settled()
        state = _nothing_failed(otel, caplog)
        assert _ready(state)
        client = simulated_provider.async_anthropic()
        for later in range(number + 1, number + 20):  # until the threshold, where the summary is applied
            await turn(client, later)
            if _mains(otel)[-1].attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED):
                break
        (compact,) = otel.compact_spans()
        assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
        assert [link.context for link in _mains(otel)[-1].links] == [compact.context]

    asyncio.run(main())


def test_uninstrument_cancels_an_async_summary_in_flight(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.summary_latency = 2.0
    _setup(simulated_provider, instrumented)

    async def main() -> None:
        client = simulated_provider.async_anthropic()
        history: list[dict[str, Any]] = []
        for turn in range(1, 30):
            history.append({"role": "user", "content": _question(turn)})
            reply = await client.messages.create(model=MODEL, max_tokens=512, messages=list(history))
            history.append({"role": "assistant", "content": reply.content[0].text})
            if _background.running():
                break
        otel_context.uninstrument()
        await asyncio.sleep(0.05)
        assert _background.running() == 0
        assert not [t for t in asyncio.all_tasks() if t.get_name() == _background.THREAD_NAME]

    asyncio.run(main())
    assert [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in otel.compact_spans()] == [semconv.OUTCOME_DISCARDED]


def test_fifty_conversations_in_parallel_threads_each_prepare_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    _setup(simulated_provider, instrumented)
    client = simulated_provider.anthropic()
    errors: list[BaseException] = []
    start = threading.Barrier(50)

    def conversation(n: int) -> None:
        chat = Chat(client)
        try:
            start.wait()
            with otel_context.conversation(f"conv-{n}"):
                for turn in range(1, 17):  # past the threshold: each applies its prepared summary
                    chat.turn(turn)
                    time.sleep(0.05)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    _wait_idle(timeout=60)
    # Each conversation prepared exactly once: one compaction, in the background, a success.
    compacts = otel.compact_spans()
    by_conversation: dict[str, list[tuple[str, str]]] = {}
    for compact in compacts:
        attributes = attrs_of(compact)
        by_conversation.setdefault(str(attributes[semconv.GEN_AI_CONVERSATION_ID]), []).append(
            (str(attributes[semconv.COMPACTION_MODE]), str(attributes[semconv.COMPACTION_OUTCOME]))
        )
    assert by_conversation == {f"conv-{n}": [("background", "success")] for n in range(50)}
    # And one summarizer request each, but for the summarizer's own retry of a request that failed (a
    # connection error on a loaded machine: its span says so): every summary request the provider saw is one
    # of the summarizer's spans under those compactions, and the provider failed none of them.
    summaries = [e for e in simulated_provider.exchanges if _is_summary(e.body)]
    ids = {c.context.span_id for c in compacts}
    attempts = [s for s in otel.spans() if s.name.startswith("chat ") and s.parent and s.parent.span_id in ids]
    failed = [attrs_of(s).get(semconv.ERROR_TYPE) for s in attempts if s.status.status_code is StatusCode.ERROR]
    assert len(attempts) - len(failed) == 50, failed
    assert 50 <= len(summaries) <= len(attempts), (len(summaries), failed)
    assert [e.error for e in summaries if e.error] == []


def test_a_fork_does_not_inherit_pending_summaries(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    simulated_provider.summary_latency = 1.0
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    turn = 0
    while not _bg_threads():
        turn += 1
        chat.turn(turn)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing pending, nothing running
        ok = not background_pending() and _background.running() == 0
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert background_pending()  # the parent's summary is still there
    _wait_idle()


def test_interpreter_exit_with_a_summary_in_flight_is_quiet_and_quick(tmp_path: Any) -> None:
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time

            import otel_context
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
            from otel_context.instrumentation import _background
            from otel_context.testing import SimulatedProvider

            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=open("/dev/null", "w"))))
            trace.set_tracer_provider(provider)
            sim = SimulatedProvider(summary_latency=15.0).start()
            sim.set_window("{MODEL}", {WINDOW})
            otel_context.instrument(auto_compact_window={WINDOW})
            client = sim.anthropic()
            history = []
            for turn in range(40):
                history.append({{"role": "user", "content": "Q%d " % turn + " ".join("w%d" % i for i in range(400))}})
                reply = client.messages.create(model="{MODEL}", max_tokens=512, messages=list(history))
                history.append({{"role": "assistant", "content": reply.content[0].text}})
                if _background.running():
                    break
            assert _background.running() == 1
            print(time.monotonic())
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    ended = time.monotonic()  # CLOCK_MONOTONIC: the same clock in both processes
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # Waited briefly (EXIT_WAIT_SECONDS, 2 s), not for the 15 s summarizer (the margin is for a loaded machine).
    assert ended - float(done.stdout.strip()) < _background.EXIT_WAIT_SECONDS + 6.0


def test_the_applied_summary_leaves_about_what_an_inline_one_would_keep(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    # Prepared at the start point, the summary is applied a few turns later: the turns appended meanwhile are
    # kept verbatim too. Aimed at the history as it stands, it would leave more than an inline compaction at
    # the threshold (which keeps the newest ``keep_recent_messages``), and the next compaction would come sooner.
    simulated_provider.summary_latency = 0.2
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    _run_until_compacted(chat, otel, pause=0.3)
    sent = _app_exchanges(simulated_provider)[-1].body["messages"]
    # After the head (the user's messages kept verbatim, then the summary message).
    kept = len(sent) - 1 - next(i for i, m in enumerate(sent) if SUMMARY_MESSAGE_HEADER in json.dumps(m))
    assert 1 <= kept <= otel_context.Settings().keep_recent_messages + 1


#: Seconds a slow summarizer takes (the simulated provider's summary latency).
SLOW_SUMMARY = 1.5
#: Seconds the app of the second conversation pauses between turns (a fast-growing agent).
FAST_PACE_PAUSE = 0.1


@pytest.mark.parametrize(("summary_latency", "early"), [(SLOW_SUMMARY, True), (0.0, False)], ids=["slow", "fast"])
def test_a_slow_summarizer_starts_the_background_summary_earlier(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], summary_latency: float, early: bool
) -> None:
    simulated_provider.summary_latency = summary_latency
    simulated_provider.set_window(MODEL, WINDOW)
    settings = instrumented(auto_compact_window=WINDOW)
    client = simulated_provider.anthropic()
    # A first conversation measures how long this summarizer takes: its background summary lands (the app
    # waits for it between turns) and is applied at the threshold.
    with otel_context.conversation("measures"):
        first = Chat(client)
        for turn in range(1, 40):
            first.turn(turn)
            _wait_idle()
            if any(s.attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED) for s in _mains(otel)):
                break
        else:
            raise AssertionError("the first conversation never compacted")
    # A second one grows fast (a short pause between turns): run it until its summary starts.
    otel.exporter.clear()
    with otel_context.conversation("grows fast"):
        second = Chat(client)
        for turn in range(1, 40):
            second.turn(turn)
            if background_pending():  # started (running or landed: applied only at the threshold)
                break
            time.sleep(FAST_PACE_PAUSE)
        else:
            raise AssertionError("the second conversation never started a summary")
    starting = _mains(otel)[-1]
    _wait_idle()
    # Its compact span ended when it was ready: a trace of its own, linked to the call that started it.
    (compact,) = otel.compact_spans()
    assert compact.parent is None and [link.context for link in compact.links] == [starting.context]
    assert (compact.attributes or {})[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    budget = budget_for(MODEL, settings, max_output_tokens=512)
    assert budget is not None
    start = pacing.start_point(budget, settings.background_start_pct)
    estimate = int(starting.attributes[semconv.CONTEXT_ESTIMATED_TOKENS])
    if early:
        # Started before the start point: at its pace, a summary that takes this long would have landed
        # after the history reached the blocking limit. Never below half the threshold.
        assert budget.auto_threshold // 2 <= estimate < start
    else:
        assert start <= estimate < budget.auto_threshold  # at the start point, as without a measure


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_a_summarizer_much_slower_than_the_turns_never_opens_the_breaker(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture, sdk: str
) -> None:
    """A summary that takes as long as many turns is aimed far below the threshold (the turns appended until it
    lands come on top of what it keeps), but it is judged as an inline one: against the threshold. Judged
    against its aim, every such summary counted as thrashing, the third opened the breaker, and the session
    died on the provider's "too long" (seen as a failure of a test under load, and in benchmarks/parity.py)."""
    from tests.engine.agents import run_anthropic_agent, run_openai_chat_agent

    window = 12_000
    model = MODEL if sdk == "anthropic" else OPENAI_MODEL
    simulated_provider.set_window(model, window)  # the provider refuses what the compactor lets grow past it
    simulated_provider.summary_latency = 0.5  # many turns of the agent (no latency) while a summary runs
    instrumented(auto_compact_window=window)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        if sdk == "anthropic":
            history = run_anthropic_agent(simulated_provider.anthropic(), model, 30)
        else:
            history = run_openai_chat_agent(simulated_provider.openai(), model, 30)
        _wait_idle()
    assert len(history) > 100  # the whole session ran
    assert not [r.getMessage() for r in caplog.records if "circuit breaker" in r.getMessage()]
    (state,) = CONVERSATIONS.states()
    assert not state.breaker.open and state.breaker.consecutive_thrashing == 0
    made = [
        s
        for s in otel.compact_spans()
        if attrs_of(s)[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
        and attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    ]
    assert len(made) >= 3
    # The threshold on its span is the call's, not the aim below it.
    budget = budget_for(model, otel_context.Settings(auto_compact_window=window), max_output_tokens=1024)
    assert budget is not None
    assert {attrs_of(s)[semconv.COMPACTION_THRESHOLD_TOKENS] for s in made} == {budget.auto_threshold}


def test_a_conversation_evicted_with_a_ready_summary_discards_it_at_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    # One conversation tracked at a time: the first call of another one evicts it.
    _setup(simulated_provider, instrumented, max_conversations=1)
    chat = Chat(simulated_provider.anthropic())
    with otel_context.conversation("evicted"):
        _turns_until_pending(chat)
    _wait_idle()  # the summary is ready, waiting for the threshold
    (ready,) = otel.compact_spans()  # its span ended when it was ready
    assert attrs_of(ready)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    with otel_context.conversation("other"):
        Chat(simulated_provider.anthropic()).turn(1)
    assert [s.key for s in CONVERSATIONS.states()] == ["other"]
    # Reported by the eviction itself (no later call of any conversation was needed), in a trace of its own
    # (not under the call of the other conversation that evicted it), linked to the summary's span.
    _, compact = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    assert attrs_of(compact)[semconv.COMPACTION_MODE] == semconv.MODE_BACKGROUND
    assert attrs_of(compact)[semconv.GEN_AI_CONVERSATION_ID] == "evicted"
    assert compact.parent is None and [link.context for link in compact.links] == [ready.context]
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "discarded"}) == 1


def test_a_conversation_the_store_clears_discards_its_ready_summary_and_its_record_stays_with_the_state(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    with otel_context.conversation("cleared"):
        _turns_until_pending(chat)
    _wait_idle()
    (state,) = CONVERSATIONS.states()  # held, as a call in flight would hold it
    with background._lock:
        record = background._records[state]
    assert record.prepared is not None and record.pace.steps

    CONVERSATIONS.clear()  # the table alone forgets it (engine.reset() would drop every summary first)

    # The store told background compaction: the summary is discarded at once, as on an eviction.
    ready, compact = otel.compact_spans()
    assert attrs_of(ready)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    # Ready, then never sent: it saved nothing, and the tokens-saved histogram says so.
    assert [p.sum for p in otel.metric_points(semconv.METRIC_COMPACTION_TOKENS_SAVED)] in ([], [0])
    assert background.pending(state) is None
    # The rest of the record (the pace) stays with the state while something holds it, and goes with it.
    with background._lock:
        assert background._records[state] is record and record.pace.steps
    gone = weakref.ref(record)
    del state, record
    gc.collect()
    assert gone() is None


def test_reset_forgets_every_background_record_and_drops_their_summaries(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    with otel_context.conversation("reset"):
        _turns_until_pending(chat)
    _wait_idle()
    (state,) = CONVERSATIONS.states()

    engine.reset()

    _, compact = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    with background._lock:
        assert state not in background._records and len(background._records) == 0
