"""The step protocol of ``otel_context.flow``: each kind of step driven by ``drive`` and ``adrive``.

The engine's steps are driven here through the summarizer-only ``perform`` (``perform_with`` /
``aperform_with``), as the ``Compactor`` API drives them; the instrumentation's own ``perform`` is covered by
the e2e tests (tests/engine/test_background_e2e.py runs background summaries through it).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Generator
from typing import Any

import pytest

from otel_context.flow import (
    BackgroundStart,
    BackgroundWait,
    NoBackgroundWork,
    Sleep,
    Step,
    StoreRequest,
    SummaryRequest,
    SummaryResult,
    adrive,
    aperform_with,
    drive,
    perform_with,
)


def _summarize(request: SummaryRequest) -> SummaryResult:
    return SummaryResult(text=f"summary of {request.body['n']}")


async def _asummarize(request: SummaryRequest) -> SummaryResult:
    return _summarize(request)


def _replies(steps: list[Step]) -> Generator[Step, Any, list[Any]]:
    """Yields ``steps`` one after the other; returns the reply each got."""
    replies = []
    for step in steps:
        replies.append((yield step))
    return replies


def test_no_step_returns_the_value_at_once() -> None:
    def plan() -> Generator[Step, Any, str]:
        return "plan"
        yield  # pragma: no cover

    assert drive(plan(), perform_with(_summarize)) == "plan"


async def test_no_step_returns_the_value_at_once_on_the_loop() -> None:
    def plan() -> Generator[Step, Any, str]:
        return "plan"
        yield  # pragma: no cover

    assert await adrive(plan(), aperform_with(_asummarize)) == "plan"


def test_summary_requests_go_to_the_summarizer_and_its_results_come_back() -> None:
    replies = drive(_replies([SummaryRequest({"n": 1}), SummaryRequest({"n": 2})]), perform_with(_summarize))
    assert replies == [SummaryResult(text="summary of 1"), SummaryResult(text="summary of 2")]


async def test_summary_requests_are_awaited_on_the_loop() -> None:
    replies = await adrive(_replies([SummaryRequest({"n": 3})]), aperform_with(_asummarize))
    assert replies == [SummaryResult(text="summary of 3")]


def _store_request(ran: list[str]) -> StoreRequest:
    def run() -> str:
        ran.append("run")
        return "blocking reply"

    async def arun() -> str:
        ran.append("arun")
        return "awaited reply"

    return StoreRequest(run, arun)


def test_a_store_request_runs_blocking_under_drive() -> None:
    ran: list[str] = []
    assert drive(_replies([_store_request(ran)]), perform_with(_summarize)) == ["blocking reply"]
    assert ran == ["run"]


async def test_a_store_request_is_awaited_under_adrive() -> None:
    ran: list[str] = []
    assert await adrive(_replies([_store_request(ran)]), aperform_with(_asummarize)) == ["awaited reply"]
    assert ran == ["arun"]


def test_sleep_waits_and_answers_none() -> None:
    began = time.monotonic()
    assert drive(_replies([Sleep(0.05)]), perform_with(_summarize)) == [None]
    assert time.monotonic() - began >= 0.05


async def test_sleep_on_the_loop_lets_other_tasks_run() -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(3):
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    began = time.monotonic()
    other = asyncio.create_task(ticker())
    assert await adrive(_replies([Sleep(0.1)]), aperform_with(_asummarize)) == [None]
    assert time.monotonic() - began >= 0.1
    await other
    assert len(ticks) == 3 and ticks[-1] < began + 0.1  # the loop served the ticker meanwhile


def _set_later(done: threading.Event, seconds: float) -> None:
    threading.Timer(seconds, done.set).start()


def test_a_wait_returns_once_the_event_is_set() -> None:
    done = threading.Event()
    _set_later(done, 0.05)
    began = time.monotonic()
    assert drive(_replies([BackgroundWait(done, timeout=10)]), perform_with(_summarize)) == [None]
    assert done.is_set() and time.monotonic() - began < 5


def test_a_wait_returns_at_its_timeout_when_the_event_stays_unset() -> None:
    done = threading.Event()
    began = time.monotonic()
    assert drive(_replies([BackgroundWait(done, timeout=0.05)]), perform_with(_summarize)) == [None]
    assert not done.is_set() and time.monotonic() - began >= 0.05


async def test_a_wait_on_the_loop_returns_once_the_event_is_set() -> None:
    done = threading.Event()
    _set_later(done, 0.05)
    began = time.monotonic()
    assert await adrive(_replies([BackgroundWait(done, timeout=10)]), aperform_with(_asummarize)) == [None]
    assert done.is_set() and time.monotonic() - began < 5


async def test_a_wait_on_the_loop_returns_at_its_timeout_and_lets_other_tasks_run() -> None:
    done = threading.Event()
    other_ran = asyncio.Event()

    async def other() -> None:
        other_ran.set()

    began = time.monotonic()
    task = asyncio.create_task(other())
    assert await adrive(_replies([BackgroundWait(done, timeout=0.05)]), aperform_with(_asummarize)) == [None]
    assert not done.is_set() and time.monotonic() - began >= 0.05
    assert other_ran.is_set()
    await task


def _background_start() -> tuple[BackgroundStart, Generator[Step, Any, None]]:
    def summary() -> Generator[Step, Any, None]:
        yield SummaryRequest({"n": 0})  # pragma: no cover (never run: refused)

    work = summary()
    return BackgroundStart(work), work


def _catching(step: Step) -> Generator[Step, Any, BaseException | None]:
    """Yields ``step``; returns the exception thrown in for it (None: none)."""
    try:
        yield step
    except Exception as exc:
        return exc
    return None


def test_a_summarizer_only_driver_refuses_background_work() -> None:
    start, work = _background_start()
    error = drive(_catching(start), perform_with(_summarize))
    assert isinstance(error, NoBackgroundWork)
    assert "runs no background work" in str(error) and "CallRequest.background" in str(error)
    assert inspect.getgeneratorstate(work) == inspect.GEN_CREATED  # never started


async def test_a_summarizer_only_driver_refuses_background_work_on_the_loop() -> None:
    start, _ = _background_start()
    error = await adrive(_catching(start), aperform_with(_asummarize))
    assert isinstance(error, NoBackgroundWork)


def test_an_unhandled_refusal_reaches_the_caller() -> None:
    start, _ = _background_start()
    with pytest.raises(NoBackgroundWork):
        drive(_replies([start]), perform_with(_summarize))


def test_an_exception_of_perform_is_thrown_into_the_steps() -> None:
    def failing(step: Step) -> Any:
        raise ValueError(f"could not do {type(step).__name__}")

    error = drive(_catching(Sleep(0)), failing)
    assert isinstance(error, ValueError) and str(error) == "could not do Sleep"


async def test_an_exception_of_perform_is_thrown_into_the_steps_on_the_loop() -> None:
    async def failing(step: Step) -> Any:
        raise ValueError(f"could not do {type(step).__name__}")

    error = await adrive(_catching(Sleep(0)), failing)
    assert isinstance(error, ValueError) and str(error) == "could not do Sleep"


def test_stopped_gives_up_without_resuming_the_steps() -> None:
    asked: list[BaseException | None] = []
    steps = _replies([Sleep(0), Sleep(0), Sleep(0)])

    def stopped(error: BaseException | None) -> bool:
        asked.append(error)
        return len(asked) == 2

    assert drive(steps, perform_with(_summarize), stopped) is None
    assert asked == [None, None]
    assert inspect.getgeneratorstate(steps) == inspect.GEN_SUSPENDED  # left for the caller to close
    steps.close()


async def test_stopped_is_told_the_error_of_the_step_on_the_loop() -> None:
    async def failing(step: Step) -> Any:
        raise ValueError("down")

    asked: list[BaseException | None] = []

    def stopped(error: BaseException | None) -> bool:
        asked.append(error)
        return True

    steps = _catching(Sleep(0))
    assert await adrive(steps, failing, stopped) is None
    assert len(asked) == 1 and isinstance(asked[0], ValueError)
    steps.close()
