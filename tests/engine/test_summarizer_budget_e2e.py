"""The summarizer's own retry and time budget: faults at the summarizer cost the app's call at most the budget.

Real SDK clients with the SDK's default retries (``max_retries=2``) against the simulated provider; faults are
queued so that the first request (the inline compaction's summarizer) gets them and the app's own request,
which goes out after the failed compaction, does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from otel_context import semconv
from otel_context.settings import SettingsError, resolve
from otel_context.testing import Fault
from tests.compaction.support import Otel
from tests.engine.agents import SYSTEM, long_history
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o"


_history = long_history


def _summary_failed(otel: Otel) -> None:
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE


def _anthropic_call(sim: Any) -> float:
    client = sim.anthropic(max_retries=2)
    started = time.monotonic()
    response = client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=_history())
    elapsed = time.monotonic() - started
    assert response.content
    last = sim.exchanges[-1]
    assert last.status == 200 and len(last.body["messages"]) == len(_history())  # the original request
    return elapsed


def test_overloaded_with_long_retry_after_fails_the_compaction_at_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """529 with ``retry-after: 5``: the SDK would sleep 5 s per retry; the summarizer gives up at once."""
    instrumented(auto_compact_window=60_000)
    simulated_provider.inject(Fault(status=529, retry_after=5))
    elapsed = _anthropic_call(simulated_provider)
    _summary_failed(otel)
    assert elapsed < 4.0  # the app client's policy would have slept 5 s before its retry
    assert [e.status for e in simulated_provider.exchanges] == [529, 200]


def test_server_errors_get_the_summarizers_retry_budget_only(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Two 500s: one retry (``summarizer_max_retries=1``), not the app client's two, then the original request."""
    instrumented(auto_compact_window=60_000, summarizer_max_retries=1)
    simulated_provider.inject(Fault(status=500, times=2))
    _anthropic_call(simulated_provider)
    _summary_failed(otel)
    assert [e.status for e in simulated_provider.exchanges] == [500, 500, 200]


def test_a_retry_after_one_500_still_compacts(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented(auto_compact_window=60_000, summarizer_max_retries=1)
    simulated_provider.inject(Fault(status=500))
    client = simulated_provider.anthropic(max_retries=2)
    client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=_history())
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    statuses = [e.status for e in simulated_provider.exchanges]
    parts = attrs_of(compact).get(semconv.COMPACTION_SUMMARY_PARTS, 1)  # a request per part of the span
    assert statuses[0] == 500 and statuses[1:] == [200] * (parts + 1)


def test_slow_summarizer_is_cut_at_the_timeout(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """A provider 3 s slow on the summary: the call waits the 0.5 s budget, not the app's 600 s timeout."""
    instrumented(auto_compact_window=60_000, summarizer_timeout_seconds=0.5)
    simulated_provider.inject(Fault(delay=3.0))
    elapsed = _anthropic_call(simulated_provider)
    _summary_failed(otel)
    assert elapsed < 2.5
    (compact,) = otel.compact_spans()
    assert "Timeout" in str(attrs_of(compact)[semconv.ERROR_TYPE])


async def test_async_openai_overload_fails_the_compaction_at_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented(auto_compact_window=60_000)
    simulated_provider.inject(Fault(status=529, retry_after=5))
    client = simulated_provider.async_openai(max_retries=2)
    history = [{"role": "system", "content": SYSTEM}, *_history()]
    started = time.monotonic()
    response = await client.chat.completions.create(model=OPENAI_MODEL, max_tokens=256, messages=history)
    elapsed = time.monotonic() - started
    assert response.choices
    _summary_failed(otel)
    assert elapsed < 4.0
    assert [e.status for e in simulated_provider.exchanges] == [503, 200]
    assert len(simulated_provider.exchanges[-1].body["messages"]) == len(history)


def test_settings_from_env_and_code() -> None:
    env = {"OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS": "2.5", "OTEL_CONTEXT_SUMMARIZER_MAX_RETRIES": "0"}
    settings = resolve({}, env=env)
    assert (settings.summarizer_timeout_seconds, settings.summarizer_max_retries) == (2.5, 0)
    assert resolve({"summarizer_timeout_seconds": 7}, env=env).summarizer_timeout_seconds == 7.0
    defaults = resolve({}, env={})
    assert (defaults.summarizer_timeout_seconds, defaults.summarizer_max_retries) == (60.0, 1)
    for bad in ("0", "-1", "soon", "nan", "inf"):
        # From the environment a bad value is a warning and the default; from code, an error.
        assert resolve({}, env={"OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS": bad}).summarizer_timeout_seconds == 60.0
        with pytest.raises(SettingsError, match="summarizer_timeout_seconds"):
            resolve({"summarizer_timeout_seconds": bad}, env={})
    with pytest.raises(SettingsError, match="summarizer_max_retries"):
        resolve({"summarizer_max_retries": -1}, env={})
