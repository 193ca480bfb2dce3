"""Done-when of issue 4, end to end: real SDK clients, the instrumentation, the simulated provider.

A 60-turn tool-using agent resending its full, growing history on a 30,000-token window finishes with no
too-long error; the summarizer runs once per threshold crossing; after each compaction the provider
reports cache reads again within two calls; no request is ever rejected.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import run_anthropic_agent, run_openai_chat_agent, user_turn
from tests.values import attrs_of

WINDOW = 30_000
TURNS = 60


def _main_chat_spans(otel: Otel) -> list[Any]:
    """Chat spans of the app's own calls (not the summarizer's, which are children of a compact span)."""
    compact_ids = {s.context.span_id for s in otel.compact_spans()}
    chats = [s for s in otel.spans() if s.name.startswith("chat ")]
    mains = [s for s in chats if s.parent is None or s.parent.span_id not in compact_ids]
    return sorted(mains, key=lambda s: s.start_time)


def _check_run(otel: Otel, sim: Any, history: list[dict[str, Any]]) -> None:
    # Nothing was rejected: every exchange succeeded (no too-long, no pairing error).
    assert [e.status for e in sim.exchanges if e.status != 200] == []
    compacts = otel.compact_spans()
    assert len(compacts) >= 3, "60 turns on a 30K window must cross the threshold several times"
    for span in compacts:
        attrs = attrs_of(span)
        assert attrs[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
        assert attrs[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
        assert attrs[semconv.COMPACTION_OUTPUT_TOKENS] < attrs[semconv.COMPACTION_INPUT_TOKENS]
    # The summarizer ran exactly once per compaction: one child chat span each.
    compact_ids = {s.context.span_id for s in compacts}
    summarizer_spans = [s for s in otel.spans() if s.parent is not None and s.parent.span_id in compact_ids]
    assert len(summarizer_spans) == len(compacts)
    # The summarizer shares the call's cached prefix: it reads the conversation from the prompt cache.
    for span in summarizer_spans:
        assert (
            attrs_of(span)[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]
            > 0.8 * attrs_of(span)[semconv.GEN_AI_USAGE_INPUT_TOKENS]
        )
    # Once per threshold crossing: the compacted calls are far apart, not on every later call.
    mains = _main_chat_spans(otel)
    compacted_at = [i for i, s in enumerate(mains) if s.attributes.get(semconv.GEN_AI_CONVERSATION_COMPACTED)]
    assert len(compacted_at) == len(compacts)
    assert all(b - a >= 5 for a, b in itertools.pairwise(compacted_at))
    # After each compaction, cache reads again within two calls.
    for index in compacted_at:
        following = mains[index + 1 : index + 3]
        if following:
            assert any(s.attributes.get(semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) > 0 for s in following)
    # Context attributes on every main chat span.
    for span in mains:
        assert span.attributes[semconv.CONTEXT_WINDOW] == WINDOW
        assert span.attributes[semconv.CONTEXT_STATE] in ("ok", "warning")
        assert semconv.GEN_AI_CONVERSATION_ID in span.attributes
    # The app's history was never touched: it still holds every turn from the first one.
    texts = [str(m.get("content")) for m in history if m.get("role") == "user"]
    assert sum(1 for t in texts if "FACT: fact-" in t) == TURNS


def test_anthropic_agent_runs_past_the_window(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    model = "claude-sonnet-4-6"
    simulated_provider.set_window(model, WINDOW)
    # Pins inline compaction: exactly one summarizer call on the call that crosses each threshold.
    instrumented(auto_compact_window=WINDOW, background_compaction=False)
    client = simulated_provider.anthropic()
    history = run_anthropic_agent(client, model, TURNS)
    assert history[0]["content"][0]["text"] == user_turn(0)
    _check_run(otel, simulated_provider, history)


def test_openai_chat_agent_runs_past_the_window(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    model = "gpt-4o"
    simulated_provider.set_window(model, WINDOW)
    # Pins inline compaction: exactly one summarizer call on the call that crosses each threshold.
    instrumented(auto_compact_window=WINDOW, background_compaction=False)
    client = simulated_provider.openai()
    history = run_openai_chat_agent(client, model, TURNS)
    assert history[1]["content"] == user_turn(0)
    _check_run(otel, simulated_provider, history)


@pytest.mark.parametrize("mode", ["observe", "off"])
def test_without_compaction_the_same_agent_hits_the_window(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], mode: str
) -> None:
    """The control experiment: with compaction off/observe the provider rejects the history as too long."""
    import anthropic

    model = "claude-sonnet-4-6"
    simulated_provider.set_window(model, WINDOW)
    instrumented(auto_compact_window=WINDOW, compaction=mode)
    client = simulated_provider.anthropic()
    with pytest.raises(anthropic.BadRequestError, match="too long"):
        run_anthropic_agent(client, model, TURNS)
    assert otel.compact_spans() == []
