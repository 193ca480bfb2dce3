"""Failures are heard: a summarizer that fails every time leaves warnings in the app's log (one per
conversation and cause, then the breaker), and the summary model is chosen per provider.

Real SDK clients against the simulated provider (strict about model names, as the real APIs are), the
warnings read from the ``otel_context`` logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.compaction import alerts
from otel_context.testing import SimulatedProvider
from tests.compaction.support import Otel
from tests.engine.agents import run_anthropic_agent, run_openai_chat_agent
from tests.values import attrs_of

SECRET = "FACT-7f3a-do-not-log"


@pytest.fixture
def strict_provider() -> Iterator[SimulatedProvider]:
    """The simulated provider answering 404 for a model it does not know, as Anthropic and OpenAI do."""
    alerts.reset()
    with SimulatedProvider(strict_models=True) as sim:
        yield sim
    alerts.reset()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "otel_context"]


def _summary_models(sim: SimulatedProvider) -> set[str]:
    return {
        str(e.body.get("model"))
        for e in sim.exchanges
        if "<summary>" in str(e.body.get("messages", e.body.get("input", "")))
    }


def test_an_unknown_summary_model_is_reported_once_then_the_breaker(
    strict_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    strict_provider.set_window("claude-sonnet-4-6", 200_000)
    instrumented(auto_compact_window=12_000, summary_model="anthropic:claude-haiku-typo", background_compaction=False)
    client = strict_provider.anthropic()
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        history = run_anthropic_agent(client, "claude-sonnet-4-6", 6)
        history.append({"role": "user", "content": f"Remember {SECRET}."})
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=history)
    failed = [s for s in otel.compact_spans() if attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE]
    assert len(failed) == 3  # three failures, then the breaker stops the attempts
    warnings = _warnings(caplog)
    failures = [w for w in warnings if "a compaction failed" in w]
    assert len(failures) == 1, warnings  # one per conversation and cause, not one per failure
    assert "the provider does not know the summary model 'claude-haiku-typo'" in failures[0]
    assert "HTTP 404" in failures[0] and "not_found_error" in failures[0]
    assert "trigger auto" in failures[0]
    opened = [w for w in warnings if "circuit breaker opened" in w]
    assert len(opened) == 1 and "3 compactions in a row failed" in opened[0]
    assert "(model claude-sonnet-4-6)" in opened[0]
    assert not any(SECRET in w or "def handler" in w for w in warnings)  # never content


def test_the_breaker_closing_is_heard_too(
    simulated_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    alerts.reset()

    def down(request: Any) -> str:
        raise ConnectionError("summarization gateway unreachable")

    simulated_provider.set_window("gpt-4o", 200_000)
    instrumented(auto_compact_window=12_000, summarizer=down, background_compaction=False)
    with caplog.at_level(logging.WARNING, logger="otel_context"), otel_context.conversation("support-42"):
        history = run_openai_chat_agent(simulated_provider.openai(), "gpt-4o", 6)
        # The app compacts by hand (its own summarizer works): the breaker closes.
        result = otel_context.Compactor(client=lambda body: "<summary>Files were read.</summary>").compact(
            history, model="gpt-4o", wire_format="openai_chat"
        )
    assert result.compacted
    warnings = _warnings(caplog)
    failures = [w for w in warnings if "a compaction failed" in w]
    assert len(failures) == 1 and "ConnectionError: summarization gateway unreachable" in failures[0], warnings
    assert "conversation support-42" in failures[0] and "summary model the app's summarizer" in failures[0]
    assert len([w for w in warnings if "circuit breaker opened for conversation support-42" in w]) == 1
    closed = [w for w in warnings if "circuit breaker closed" in w]
    assert len(closed) == 1 and "conversation support-42 (model gpt-4o)" in closed[0], warnings
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 0


@pytest.mark.parametrize(
    ("setting", "anthropic_model", "openai_model"),
    [
        # A bare name is for the provider whose model it is: never sent to the other one.
        ("claude-haiku-4-5", "claude-haiku-4-5", "gpt-4o"),
        ("gpt-4o-mini", "claude-sonnet-4-6", "gpt-4o-mini"),
        ("anthropic:claude-haiku-4-5,openai:gpt-4o-mini", "claude-haiku-4-5", "gpt-4o-mini"),
    ],
)
def test_the_summary_model_is_chosen_per_provider(
    strict_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    setting: str,
    anthropic_model: str,
    openai_model: str,
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_SUMMARY_MODEL", setting)
    instrumented(auto_compact_window=12_000, background_compaction=False)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        run_anthropic_agent(strict_provider.anthropic(), "claude-sonnet-4-6", 6)
        anthropic_models = _summary_models(strict_provider)
        run_openai_chat_agent(strict_provider.openai(), "gpt-4o", 6)
    assert anthropic_models == {anthropic_model}
    assert _summary_models(strict_provider) - anthropic_models == {openai_model}
    assert [w for w in _warnings(caplog) if "compaction failed" in w] == []
    outcomes = {attrs_of(s)[semconv.COMPACTION_OUTCOME] for s in otel.compact_spans()}
    assert outcomes == {semconv.OUTCOME_SUCCESS}


def test_warnings_are_rate_limited(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    alerts.reset()
    monkeypatch.setattr(alerts, "REPEAT_SECONDS", 0.3)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        for _ in range(3):
            alerts.breaker_opened("team-a", "gpt-4o", 3, 3)
        time.sleep(0.35)
        alerts.breaker_opened("team-a", "gpt-4o", 3, 3)
    said = _warnings(caplog)
    assert len(said) == 2, said  # the first, then one after the pause that counts those held back
    assert "(2 more like it since the last warning)" in said[1]
    caplog.clear()
    alerts.reset()
    monkeypatch.setattr(alerts, "MAX_PER_MINUTE", 2)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        for family in ("a", "b", "c"):
            alerts.breaker_opened(family, "gpt-4o", 3, 3)
    assert len(_warnings(caplog)) == 2  # a fleet of failing conversations does not flood the log
    alerts.reset()
