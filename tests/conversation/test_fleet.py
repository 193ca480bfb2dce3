"""Many workers, one conversation: spawned worker processes share its state through a real redis-server.

Each worker is its own process (spawned), instrumented with the Redis store, with a real SDK client pointed
at ONE simulated provider that this test runs; the test plays the agent and hands each call to the next
worker. What the provider received tells what the fleet did.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_context import Settings, semconv
from otel_context.compaction.budget import budget_for
from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER, summary_of_message
from otel_context.formats import for_format
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Figures, Fleet, file_content, run_agent
from otel_context.testing.redis_server import RedisServer
from otel_context.tokens import estimate_fixed, estimate_items

WINDOW = 30_000
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o"}
TURNS = 30
FILE_LINES = 250
#: The store's timeout: generous, as this machine's cores are shared (a timeout is a fallback, tested
#: in test_engine_faults.py; here it would only make the figures noisy).
SLOW_MACHINE = "?timeout_ms=2000"


def _conversation(sdk: str, workers: int, url: str) -> Figures:
    model = MODELS[sdk]
    with SimulatedProvider() as sim:
        sim.set_window(model, WINDOW)
        with Fleet(workers, sim.base_url, sdk, auto_compact_window=WINDOW, state_store=url + SLOW_MACHINE) as fleet:
            run_agent(fleet, model, TURNS, FILE_LINES)
        assert set(fleet.sources) == {semconv.STATE_SOURCE_STORE}
        _check_anchored(sim.exchanges)
        return Figures.of(sim.exchanges)


def _check_anchored(exchanges: list[Any]) -> None:
    """From the second summary on, whichever worker summarizes updates the previous summary, taken from the
    shared store (the anchor): it is quoted in the summarizer's prompt."""
    anchors: list[str | None] = []
    latest: str | None = None
    for exchange in exchanges:
        messages = exchange.body.get("messages") or []
        texts = [
            m["content"]
            if isinstance(m.get("content"), str)
            else "".join(b.get("text", "") for b in m.get("content") or [])
            for m in messages
        ]
        if messages and NO_TOOLS_PREAMBLE in texts[-1]:
            assert (latest is None) == ("<previous_summary>" not in texts[-1])
            if latest is not None:
                assert f"<previous_summary>\n{latest}\n</previous_summary>" in texts[-1]
            anchors.append(latest)
            continue
        found = next((summary_of_message(t) for t in texts if t.startswith(SUMMARY_MESSAGE_HEADER)), None)
        latest = found or latest
    assert len(anchors) >= 2 and anchors[1] is not None


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_four_workers_serve_one_conversation_as_one_process_does(sdk: str, shared_redis: RedisServer) -> None:
    shared_redis.command("FLUSHALL")
    one = _conversation(sdk, 1, shared_redis.url)
    shared_redis.command("FLUSHALL")
    four = _conversation(sdk, 4, shared_redis.url)
    assert one.summarizer_calls >= 2  # the conversation crosses the threshold more than once
    assert four.summarizer_calls == one.summarizer_calls
    assert four.rejected == one.rejected == 0  # no tool-pairing (or any other) rejection
    # Every worker sent each summary byte-identically (as parsed from the wire, key order included).
    assert four.summary_serializations == four.summary_heads == one.summary_heads
    assert four.distinct_heads == one.distinct_heads
    assert abs(four.cache_read_fraction - one.cache_read_fraction) <= 0.02


def _history_over_threshold(sdk: str) -> tuple[dict[str, Any], int]:
    """A request whose estimate is past the auto threshold but below the blocking limit; and how many
    tokens it is estimated at."""
    model = MODELS[sdk]
    # The call's max_tokens is the budget's reserve, the room the summary gets at the threshold; with turns
    # longer than the 500 characters of each user message the simulated summary keeps, the summary fits it
    # (a summary cut at its length limit is a failed compaction, asked again once).
    max_tokens, turn_lines = 8_192, 200
    budget = budget_for(model, Settings(auto_compact_window=WINDOW), max_output_tokens=max_tokens)
    assert budget is not None
    adapter = for_format("anthropic_messages" if sdk == "anthropic" else "openai_chat")
    messages: list[dict[str, Any]] = [] if sdk == "anthropic" else [{"role": "system", "content": "Be brief."}]
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
    turn = 0
    while True:
        body["messages"] = [*messages, {"role": "user", "content": "What did you learn?"}]
        tokens = estimate_fixed(adapter, body) + estimate_items(adapter, body["messages"])
        if tokens >= budget.auto_threshold:
            break
        messages += [
            {"role": "user", "content": f"Turn {turn}. " + file_content(f"f{turn}.py", turn_lines)},
            {"role": "assistant", "content": f"Read f{turn}.py."},
        ]
        turn += 1
    assert tokens < budget.blocking_limit
    return body, tokens


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "per-process"])
def test_two_workers_crossing_the_threshold_at_once_make_one_summary(shared: bool, shared_redis: RedisServer) -> None:
    shared_redis.command("FLUSHALL")
    body, _ = _history_over_threshold("anthropic")
    settings: dict[str, Any] = {"auto_compact_window": WINDOW}
    if shared:
        settings["state_store"] = shared_redis.url + SLOW_MACHINE
    with SimulatedProvider() as sim:
        sim.set_window(MODELS["anthropic"], WINDOW)
        with Fleet(2, sim.base_url, "anthropic", **settings) as fleet:
            answers = fleet.call_at_once([0, 1], **body)
        figures = Figures.of(sim.exchanges)
    assert all(a["content"] for a in answers) and figures.rejected == 0
    # The control: without the store, each process summarizes the same crossing on its own.
    assert figures.summarizer_calls == (1 if shared else 2)
