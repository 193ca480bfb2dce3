"""What the engine keeps of the apps' conversations is bounded in bytes and in count, from code and from env.

Each tracked conversation refers to the app's last history (that is how the next call is proven to extend
it without hashing), so without a byte bound 1,024 large histories stayed alive after the app dropped them.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

import otel_context
from otel_context import settings as settings_mod
from otel_context.conversation import CONVERSATIONS
from otel_context.settings import SettingsError, resolve

HISTORY_MESSAGES = 11
MESSAGE_CHARS = 6_000  # about 66 KB a history


def _history(conv: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"conv {conv} message {i} " + "lorem " * 1_000}
        for i in range(HISTORY_MESSAGES)
    ]


def _retained_after_dropping(sim: Any, conversations: int) -> int:
    """Bytes of the app's histories still alive after ``conversations`` calls whose histories it dropped.

    Only what this module allocated counts (the simulated provider keeps its own parsed copies)."""
    client = sim.anthropic()
    client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=[{"role": "user", "content": "warm"}])
    gc.collect()
    tracemalloc.start()
    try:
        for conv in range(conversations):
            with otel_context.conversation(f"user-{conv}"):
                client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=_history(conv))
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, __file__)])
        return sum(stat.size for stat in snapshot.statistics("filename"))
    finally:
        tracemalloc.stop()


def test_histories_the_app_dropped_are_released_past_the_byte_bound(
    simulated_provider: Any, instrumented: Callable[..., Any]
) -> None:
    bound = 2_000_000
    instrumented(max_state_bytes=bound)
    retained = _retained_after_dropping(simulated_provider, 150)  # ~10 MB of histories sent
    assert CONVERSATIONS.held_bytes <= bound
    assert len(CONVERSATIONS) < 150
    assert retained < bound, f"{retained / 1e6:.1f} MB of dropped histories still held for a {bound / 1e6:.0f} MB bound"


def test_without_a_tight_bound_recent_histories_stay_for_exact_anchoring(
    simulated_provider: Any, instrumented: Callable[..., Any]
) -> None:
    """The control: under the default bound the same run keeps every history (the bound above is what frees)."""
    instrumented()
    retained = _retained_after_dropping(simulated_provider, 150)
    assert len(CONVERSATIONS) == 151
    assert retained > 5 * 2_000_000


def test_the_bounds_come_from_the_environment(
    simulated_provider: Any, instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_MAX_CONVERSATIONS", "5")
    monkeypatch.setenv("OTEL_CONTEXT_CONVERSATION_IDLE_SECONDS", "600")
    monkeypatch.setenv("OTEL_CONTEXT_MAX_STATE_BYTES", "1_000_000")
    settings = instrumented()
    assert (settings.max_conversations, settings.conversation_idle_seconds, settings.max_state_bytes) == (
        5,
        600.0,
        1_000_000,
    )
    client = simulated_provider.anthropic()
    for conv in range(12):
        with otel_context.conversation(f"user-{conv}"):
            client.messages.create(
                model="claude-sonnet-4-6", max_tokens=16, messages=[{"role": "user", "content": f"hello {conv}"}]
            )
    assert len(CONVERSATIONS) == 5


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("OTEL_CONTEXT_MAX_CONVERSATIONS", "0"),
        ("OTEL_CONTEXT_MAX_CONVERSATIONS", "many"),
        ("OTEL_CONTEXT_CONVERSATION_IDLE_SECONDS", "-1"),
        ("OTEL_CONTEXT_CONVERSATION_IDLE_SECONDS", "soon"),
        ("OTEL_CONTEXT_MAX_STATE_BYTES", "1.5GB"),
    ],
)
def test_a_bad_bound_is_refused_with_its_name(var: str, value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        assert resolve(env={var: value}) == resolve(env={})  # the environment: a warning, the default applies
    assert any(f"{var}={value!r}" in r.getMessage() for r in caplog.records)
    name = settings_mod.ENV_VARS[var][0]
    with pytest.raises(SettingsError, match=name):
        resolve({name: value}, env={})
