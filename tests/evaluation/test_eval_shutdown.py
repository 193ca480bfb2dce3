"""An eval run in the background ends with every summary it started landed on the simulated provider: the wait
for the summaries in flight comes while the provider still answers (it came after it stopped: the last summary
then failed on a refused connection and the run printed 'a compaction failed')."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import otel_context
from otel_context.evaluation import runner
from otel_context.evaluation.runner import EvalOptions, run_one
from otel_context.evaluation.scenarios import get_scenario
from otel_context.instrumentation import _background

#: The simulated summarizer's delay: longer than many turns of the eval, so a summary is still in flight at the end.
SUMMARY_LATENCY = 2.0


def test_a_background_run_waits_for_its_summaries_while_the_provider_answers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = runner._provider

    @contextmanager
    def slow_summaries(options: EvalOptions, style: str | None, window: int) -> Iterator[Any]:
        with original(options, style, window) as sim:
            sim.summary_latency = SUMMARY_LATENCY
            yield sim

    in_flight: list[int] = []
    wait = otel_context.wait_for_summaries

    def counted_wait(*args: Any, **kwargs: Any) -> bool:
        in_flight.append(_background.running())
        return wait(*args, **kwargs)

    monkeypatch.setattr(runner, "_provider", slow_summaries)
    monkeypatch.setattr(otel_context, "wait_for_summaries", counted_wait)
    options = EvalOptions(sdk="openai", background=True, scenarios=("billing",), summarizers=("start",), turns=40)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        run_one(options, get_scenario("billing"), "start")
    assert in_flight and in_flight[0] >= 1, "no summary was in flight at the end: the test did not reach its case"
    assert not [r for r in caplog.records if "compaction failed" in r.getMessage()]
