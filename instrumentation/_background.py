"""Running the engine's background summaries: a worker thread for sync clients, a loop task for async ones.

The engine (:mod:`otel_context.engine.background`) decides; this module runs. A plan's summarizer sender
is wrapped by :func:`route_sync` / :func:`route_async`: a :class:`~otel_context.flow.BackgroundStart`
runs its steps in the background with a fresh sender of the same client (so the summary goes through the
app's client, with the recursion guard and its own :class:`._summarizer.SummarizerBudget`), a
:class:`~otel_context.flow.BackgroundWait` waits without blocking an event loop, anything else is a
summarizer request sent as today.

Lifecycle: :func:`shutdown` (``uninstrument()``) cancels the loop tasks and abandons the threads (a request
in flight cannot be interrupted: its thread ends when the request does, and sends nothing more); at
interpreter exit everything is abandoned silently (daemon threads, no span ended after the exporters shut
down); a forked child forgets its parent's summaries (:func:`os.register_at_fork`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from otel_context import telemetry
from otel_context.engine import background as engine_background
from otel_context.flow import BackgroundStart, BackgroundWait, SummaryRequest, SummaryResult

__all__ = ["THREAD_NAME", "route_async", "route_sync", "running", "shutdown"]

#: Name of the worker threads (tests look for leaks by it).
THREAD_NAME = "otel-context-summary"

SyncSender = Callable[[SummaryRequest], SummaryResult]
AsyncSender = Callable[[SummaryRequest], Awaitable[SummaryResult]]
Steps = Generator[SummaryRequest, SummaryResult, Any]


class _Run:
    """One background summary in flight."""

    __slots__ = ("abandoned", "loop", "task", "thread")

    def __init__(self) -> None:
        self.abandoned = False
        self.thread: threading.Thread | None = None
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None


_lock = threading.Lock()
_runs: set[_Run] = set()
_exiting = False
#: Generators abandoned at interpreter exit, kept so that no finalizer ends a span after the exporters stop.
_kept: list[Steps] = []


def running() -> int:
    """Background summaries in flight (tests and the demo)."""
    with _lock:
        return len(_runs)


def route_sync(send: SyncSender, fresh: Callable[[], SyncSender]) -> SyncSender:
    """``send`` that also runs the engine's background requests (sync clients)."""

    def route(request: SummaryRequest) -> SummaryResult:
        if isinstance(request, BackgroundStart):
            _start_thread(request.steps, fresh())
            return SummaryResult()
        if isinstance(request, BackgroundWait):
            request.done.wait(request.timeout)
            return SummaryResult()
        return send(request)

    return route


def route_async(send: Callable[[SummaryRequest], Any], fresh: Callable[[], Any]) -> AsyncSender:
    """``send`` that also runs the engine's background requests (async clients, on the running loop)."""

    async def route(request: SummaryRequest) -> SummaryResult:
        if isinstance(request, BackgroundStart):
            _start_task(request.steps, fresh())
            return SummaryResult()
        if isinstance(request, BackgroundWait):
            deadline = time.monotonic() + request.timeout
            pause = 0.002
            while not request.done.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(pause)  # the loop keeps serving everything else meanwhile
                pause = min(pause * 2, 0.02)
            return SummaryResult()
        result: SummaryResult = await send(request)
        return result

    return route


def _register(run: _Run) -> bool:
    with _lock:
        if _exiting:
            return False
        _runs.add(run)
        return True


def _unregister(run: _Run) -> None:
    with _lock:
        _runs.discard(run)


def _start_thread(steps: Steps, send: SyncSender) -> None:
    run = _Run()
    if not _register(run):
        _keep(steps)
        return
    ctx = contextvars.copy_context()  # the starting call's trace context: the compact span lives in its trace
    thread = threading.Thread(target=ctx.run, args=(_run_sync, run, steps, send), name=THREAD_NAME, daemon=True)
    run.thread = thread
    try:
        thread.start()
    except RuntimeError:  # interpreter shutting down: nothing can run any more
        _unregister(run)
        _keep(steps)


def _run_sync(run: _Run, steps: Steps, send: SyncSender) -> None:
    try:
        request = next(steps)
        while True:
            if run.abandoned:
                _abandon(steps)
                return
            result = send(request)
            if run.abandoned:
                _abandon(steps)
                return
            request = steps.send(result)
    except StopIteration:
        pass
    except Exception:
        if not _exiting:
            telemetry.log_once("background.run", "otel_context: a background summary failed", exc_info=True)
    finally:
        _unregister(run)


def _start_task(steps: Steps, send: Callable[[SummaryRequest], Any]) -> None:
    run = _Run()
    if not _register(run):
        _keep(steps)
        return
    loop = asyncio.get_running_loop()
    run.loop = loop
    run.task = loop.create_task(_run_async(run, steps, send), name=THREAD_NAME)


async def _run_async(run: _Run, steps: Steps, send: Callable[[SummaryRequest], Any]) -> None:
    try:
        request = next(steps)
        while True:
            result = await send(request)
            if run.abandoned:
                _abandon(steps)
                return
            request = steps.send(result)
    except StopIteration:
        pass
    except asyncio.CancelledError:
        _abandon(steps)
        raise
    except Exception:
        if not _exiting:
            telemetry.log_once("background.run", "otel_context: a background summary failed", exc_info=True)
    finally:
        _unregister(run)


def _abandon(steps: Steps) -> None:
    """Stop a summary that will never be applied: its span ends as ``discarded`` (none at interpreter exit)."""
    if _exiting:
        _keep(steps)
        return
    try:
        steps.close()
    except Exception:
        telemetry.log_once("background.close", "otel_context: could not close a background summary", exc_info=True)


def _keep(steps: Steps) -> None:
    with _lock:
        _kept.append(steps)


def shutdown() -> None:
    """``uninstrument()``: cancel the loop tasks, abandon the threads, drop every prepared summary."""
    with _lock:
        runs = list(_runs)
    for run in runs:
        run.abandoned = True
        task, loop = run.task, run.loop
        if task is not None and loop is not None and not loop.is_closed():
            try:
                if _on_loop(loop):
                    task.cancel()
                else:
                    loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop closed meanwhile: the task is gone with it
                pass
    engine_background.discard_all()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _at_exit() -> None:
    """Interpreter exit: abandon everything silently (the exporters may already be shut down)."""
    global _exiting
    with _lock:
        _exiting = True
        runs = list(_runs)
    for run in runs:
        run.abandoned = True


def _after_fork_in_child() -> None:
    """A forked child inherits no summary: the threads did not survive the fork, the spans are the parent's."""
    global _lock
    _lock = threading.Lock()
    _runs.clear()
    _kept.clear()
    engine_background.forget_all()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
