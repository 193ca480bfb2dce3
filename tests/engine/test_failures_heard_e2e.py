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
from otel_context import engine, semconv
from otel_context.compaction import alerts
from otel_context.instrumentation import _background
from otel_context.testing import Fault, SimulatedProvider
from tests.compaction.support import Otel
from tests.engine.agents import long_history, run_anthropic_agent, run_openai_chat_agent
from tests.values import attrs_of

SECRET = "FACT-7f3a-do-not-log"


@pytest.fixture
def strict_provider() -> Iterator[SimulatedProvider]:
    """The simulated provider answering 404 for a model it does not know, as Anthropic and OpenAI do."""
    alerts.reset()
    engine.reset()  # no summary model remembered as unknown by an earlier test
    with SimulatedProvider(strict_models=True) as sim:
        yield sim
    alerts.reset()
    engine.reset()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "otel_context"]


def _summary_models(sim: SimulatedProvider) -> set[str]:
    return {
        str(e.body.get("model"))
        for e in sim.exchanges
        if "<summary>" in str(e.body.get("messages", e.body.get("input", "")))
    }


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
@pytest.mark.parametrize(
    ("sdk", "model", "setting"),
    [
        ("anthropic", "claude-sonnet-4-6", "claude-nonexistent-9"),
        ("openai", "gpt-4o", "anthropic:claude-haiku-4-5,openai:gpt-nonexistent-9"),
    ],
)
def test_a_summary_model_the_provider_does_not_know_falls_back_to_the_calls_own_model(
    strict_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    sdk: str,
    model: str,
    setting: str,
    background: bool,
) -> None:
    # The provider serves exactly the compaction window: without compactions the session dies on its
    # "prompt is too long" (as it did, once the breaker had opened on three failed summaries).
    strict_provider.set_window(model, 12_000)
    monkeypatch.setenv("OTEL_CONTEXT_SUMMARY_MODEL", setting)
    instrumented(auto_compact_window=12_000, background_compaction=background)
    rejected = setting.rsplit(":", 1)[-1]
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        if sdk == "anthropic":
            history = run_anthropic_agent(strict_provider.anthropic(), model, 30)
        else:
            history = run_openai_chat_agent(strict_provider.openai(), model, 30)
        otel_context.uninstrument()  # a background summary still running ends here (and its span)
        assert _background.wait_idle(10)
    assert len(history) > 100  # the whole session ran: 30 turns of tool calls
    compactions = [attrs_of(s) for s in otel.compact_spans()]
    summaries = [a for a in compactions if a[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_SUMMARY]
    assert {a[semconv.COMPACTION_OUTCOME] for a in summaries} <= {semconv.OUTCOME_SUCCESS, semconv.OUTCOME_DISCARDED}
    # Every summary made says so (a background one dropped unsent has a second span, of no summary: not counted).
    made = [a for a in summaries if a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS]
    assert len(made) >= 3
    assert all(a[semconv.COMPACTION_SUMMARY_MODEL_REJECTED] == rejected for a in made)
    noted = [a for a in summaries if semconv.COMPACTION_SUMMARY_MODEL_REJECTED in a]
    # Asked of the provider once: remembered, never tried again; every summary after it with the call's model.
    assert _summary_models(strict_provider) == {rejected, model}
    tried = [e for e in strict_provider.exchanges if isinstance(e.body, dict) and e.body.get("model") == rejected]
    assert len(tried) == 1
    assert otel.counter_value(semconv.METRIC_SUMMARY_MODEL_FALLBACKS) == len(noted)
    warnings = _warnings(caplog)
    said = [w for w in warnings if f"does not know the summary model {rejected!r}" in w]
    assert len(said) == 1, warnings
    assert f"so {sdk} conversations summarize with their own model instead" in said[0]
    assert not [w for w in warnings if "a compaction failed" in w or "circuit breaker" in w], warnings


def test_the_explicit_compactor_falls_back_too(strict_provider: SimulatedProvider, otel: Otel) -> None:
    history = long_history()
    settings = otel_context.Settings(summary_model="anthropic:claude-nonexistent-9")
    compactor = otel_context.Compactor(strict_provider.anthropic(), settings=settings)
    for _ in range(2):
        result = compactor.compact(history, model="claude-sonnet-4-6", target_tokens=20_000)
        assert result.compacted and result.error is None
    assert _summary_models(strict_provider) == {"claude-nonexistent-9", "claude-sonnet-4-6"}
    spans = [attrs_of(s) for s in otel.compact_spans()]
    assert [a[semconv.COMPACTION_SUMMARY_MODEL_REJECTED] for a in spans] == ["claude-nonexistent-9"] * 2


def test_a_summarizer_the_provider_refuses_otherwise_is_reported_once_then_the_breaker(
    strict_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any other refusal of the summary (here a 403 on every summary request) has no model to fall back to: one
    warning per conversation and cause, and the breaker after three failures."""
    strict_provider.set_window("claude-sonnet-4-6", 200_000)
    strict_provider.inject(
        Fault(status=403, message="not allowed to summarize", summaries=True, times=None, path="/messages")
    )
    instrumented(auto_compact_window=12_000, summary_model="anthropic:claude-haiku-4-5", background_compaction=False)
    client = strict_provider.anthropic()
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        history = run_anthropic_agent(client, "claude-sonnet-4-6", 6)
        history.append({"role": "user", "content": f"Remember {SECRET}."})
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=history)
    failed = [s for s in otel.compact_spans() if attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE]
    assert len(failed) == 3  # three failures, then the breaker stops the attempts
    assert not any(semconv.COMPACTION_SUMMARY_MODEL_REJECTED in attrs_of(s) for s in failed)
    warnings = _warnings(caplog)
    failures = [w for w in warnings if "a compaction failed" in w]
    assert len(failures) == 1, warnings  # one per conversation and cause, not one per failure
    assert "summary model claude-haiku-4-5" in failures[0] and "does not know" not in failures[0]
    assert "HTTP 403" in failures[0] and "permission_error" in failures[0]
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
