"""A stateful property (issue 11): whatever the apps do, every request sent is the app's own history or a
compaction of exactly that history.

Hypothesis interleaves conversations that share first messages and system prompts, with and without
explicit ids, and branches, rewinds and edits them, through the real anthropic client, the instrumentation
and the simulated provider (on a window small enough that compactions happen often). Every message an app
writes carries a unique id; the simulated summarizer copies user messages into its summary. Invariant, for
every exchange a call caused: its ids are ids of the app's own history, and when the request differs from
that history, it ends with a verbatim tail of it and everything before that tail came from the prefix the
tail follows.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

import otel_context
from otel_context import engine

MODEL = "claude-sonnet-4-6"
WINDOW = 4_096  # the smallest window the settings accept (settings.MIN_WINDOW_TOKENS)
OPENERS = ["Hi", "Hello there"]
SYSTEMS = ["You are helpful.", "You are terse."]
_ID = re.compile(r"\bid-(\d+)-")


def _ids(value: Any) -> set[str]:
    return set(_ID.findall(str(value)))


class App:
    """One app's conversation: its history, system prompt and (maybe) explicit id."""

    def __init__(self, history: list[dict[str, Any]], system: str, conversation_id: str | None) -> None:
        self.history = history
        self.system = system
        self.conversation_id = conversation_id


def _check_exchanges(histories: list[list[dict[str, Any]]], exchanges: list[Any]) -> None:
    """Each exchange carries the content of one of these histories only."""
    for exchange in exchanges:
        # A too-long rejection is answered by a reactive compaction and a retry (checked as the app's request).
        assert exchange.status == 200 or "too long" in str(exchange.response), exchange.response
        ids = _ids(exchange.body)
        assert any(ids <= _ids(history) for history in histories), "a request carried content of another history"


def _check_request(history: list[dict[str, Any]], exchanges: list[Any]) -> None:
    """The app's own request is its history, or ends with a verbatim tail of it after a summary of the rest."""
    newest = _ids(history[-1])
    (sent,) = [e.body["messages"] for e in exchanges if e.status == 200 and newest <= _ids(e.body["messages"][-1])]
    if sent == history:
        return
    tail = 0
    while tail < min(len(sent), len(history)) and sent[-1 - tail] == history[-1 - tail]:
        tail += 1
    assert tail >= 1, "a compacted request must end with the app's own newest messages"
    head, prefix = sent[: len(sent) - tail], history[: len(history) - tail]
    assert _ids(head) <= _ids(prefix), "a summary must come from the prefix of this very history"


def _machine(sim: Any) -> type[RuleBasedStateMachine]:
    client = sim.anthropic()

    class Conversations(RuleBasedStateMachine):
        apps = Bundle("apps")

        def __init__(self) -> None:
            super().__init__()
            engine.reset()  # each example starts from nothing, so that a failing one replays the same way
            sim.reset_cache()
            self.counter = itertools.count()

        def _user(self, words: int) -> dict[str, Any]:
            n = next(self.counter)
            filler = " ".join(f"note{n}x{i}" for i in range(words))
            return {"role": "user", "content": f"id-{n}- FACT: fact-{n}. {filler} words:60"}

        def _send(self, app: App) -> None:
            start = len(sim.exchanges)
            history = self._call(app)
            exchanges = sim.exchanges[start:]
            _check_exchanges([history], exchanges)
            _check_request(history, exchanges)

        def _call(self, app: App) -> list[dict[str, Any]]:
            """One call with the app's history; the reply joins the history. Returns what was sent."""
            history = list(app.history)
            if app.conversation_id is not None:
                with otel_context.conversation(app.conversation_id):
                    response = client.messages.create(model=MODEL, max_tokens=256, system=app.system, messages=history)
            else:
                response = client.messages.create(model=MODEL, max_tokens=256, system=app.system, messages=history)
            # The app stores the reply with an id of its own, so that every message but the opener is traceable.
            app.history.append({"role": "assistant", "content": f"id-{next(self.counter)}- {response.content[0].text}"})
            return history

        @initialize(target=apps, opener=st.sampled_from(OPENERS), system=st.sampled_from(SYSTEMS))
        def first(self, opener: str, system: str) -> App:
            app = App([{"role": "user", "content": opener}], system, None)
            self._send(app)
            return app

        @rule(target=apps, opener=st.sampled_from(OPENERS), system=st.sampled_from(SYSTEMS), explicit=st.booleans())
        def start(self, opener: str, system: str, explicit: bool) -> App:
            app = App([{"role": "user", "content": opener}], system, f"app-{next(self.counter)}" if explicit else None)
            self._send(app)
            return app

        @rule(app=apps, words=st.integers(20, 120))
        def turn(self, app: App, words: int) -> None:
            app.history.append(self._user(words))
            self._send(app)

        @rule(target=apps, app=apps, back=st.integers(0, 20), words=st.integers(20, 120))
        def branch(self, app: App, back: int, words: int) -> App:
            """A new history from an earlier point of ``app``'s (same explicit id, if any: a branch of it)."""
            keep = max(2, len(app.history) - 2 * back)
            twin = App([*app.history[:keep], self._user(words)], app.system, app.conversation_id)
            self._send(twin)
            return twin

        @rule(app=apps, back=st.integers(1, 20), words=st.integers(20, 120))
        def rewind(self, app: App, back: int, words: int) -> None:
            """Regenerate from an earlier user message (the last one when ``back`` is 1)."""
            keep = max(0, len(app.history) - 2 * back)
            del app.history[keep:]
            app.history.append(self._user(words))
            self._send(app)

        @rule(app=apps, position=st.integers(0, 40), words=st.integers(20, 120))
        def edit(self, app: App, position: int, words: int) -> None:
            """Replace an old message (same role) in place in the list, then take a turn."""
            index = position % len(app.history)
            role = app.history[index]["role"]
            app.history[index] = {**self._user(20), "role": role}
            app.history.append(self._user(words))
            self._send(app)

        @rule(first=apps, second=apps, words=st.integers(20, 120))
        def together(self, first: App, second: App, words: int) -> None:
            """Two apps' calls in flight at once (different conversations, or two branches of one id)."""
            if first is second:
                return
            first.history.append(self._user(words))
            second.history.append(self._user(words))
            start = len(sim.exchanges)
            sent: dict[int, list[dict[str, Any]]] = {}
            gate = threading.Barrier(2)

            def call(key: int, app: App) -> None:
                gate.wait()
                sent[key] = self._call(app)

            threads = [threading.Thread(target=call, args=(k, app)) for k, app in enumerate((first, second))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert len(sent) == 2, "a call failed"
            exchanges = sim.exchanges[start:]
            _check_exchanges([sent[0], sent[1]], exchanges)
            _check_request(sent[0], exchanges)
            _check_request(sent[1], exchanges)

    return Conversations


def test_every_request_is_the_apps_own_history_or_a_compaction_of_it(
    simulated_provider: Any, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window(MODEL, WINDOW)
    # Inline: every exchange made during a call is attributed to that call (a background summary of another
    # history would land in between).
    instrumented(auto_compact_window=WINDOW, background_compaction=False)
    run_state_machine_as_test(
        _machine(simulated_provider),
        settings=settings(
            max_examples=20,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    summaries = [e for e in simulated_provider.exchanges if "summar" in str(e.body["messages"][-1]).lower()]
    assert summaries, "the window must be small enough for the property to see compactions"
