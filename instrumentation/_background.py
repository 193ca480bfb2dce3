"""Running the engine's background summaries: a worker thread for sync clients, a loop task for async ones.

The engine (:mod:`otel_context.engine.background`) decides; the driver of the call's flow
(``_core.Interceptor._perform``) turns a :class:`~otel_context.flow.BackgroundStart` into a flow of its own
(the summary's requests go through a sibling of the app's client with connections of its own,
:mod:`._summary_client`, with the recursion guard and their own :class:`._summarizer.SummarizerAllowance`), and
this module runs it: :func:`start_thread` for a sync client, :func:`start_task` for an async one, each with
the driver the call's flow uses (``flow.drive`` / ``flow.adrive``). It owns their lifecycle, and the
sibling's.

Lifecycle: :func:`shutdown` (``uninstrument()``) cancels the loop tasks and abandons the threads (a request
in flight cannot be interrupted: its thread ends when the request does, and sends nothing more), and gives
the fleet's prepare locks of their summaries back at once (a shared store); a summary
that had to share the app's client (:mod:`._summary_client`) and whose request fails because the app closed
that client is abandoned the same way (the app withdrew it: not a compaction failure, and a later call of
the conversation may prepare one again); at
interpreter exit the summaries in flight get a short, bounded wait (:data:`EXIT_WAIT_SECONDS`: most land in it,
and end their spans as they would have), then everything is abandoned silently (daemon threads, no span
ended after the exporters shut down; the prepare locks given back), but first the spans of the summaries
still in flight are ended (their ``compact`` span as ``discarded``, the summarizer's request span as it
stands) so that the tracer provider's own exit hook exports them: no span of ours is left unexported, and
none arrives without its parent. For that, our exit hook must run before the provider's:
:func:`register_exit` (called by ``instrument()``) registers it again after a provider set before
``instrument()``. A forked child forgets its parent's summaries (registered in
:mod:`otel_context.process_state`).

An app that shuts its tracer provider down itself waits for them first with :func:`wait_idle`
(``otel_context.wait_for_summaries``) or :func:`await_idle` (``wait_for_summaries_async``). One that does not
loses the spans of those still in flight (the SDK's processors take nothing after their shutdown): a
processor of ours on the provider (:func:`watch_provider`) is shut down with it and says so, once.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from otel_context import process_state, telemetry
from otel_context.engine import background as engine_background
from otel_context.flow import Stopped
from otel_context.fork_safe import new_lock

from ._summary_client import SummaryClient

__all__ = [
    "EXIT_WAIT_SECONDS",
    "THREAD_NAME",
    "await_idle",
    "register_exit",
    "running",
    "shutdown",
    "start_task",
    "start_thread",
    "track",
    "wait_idle",
    "watch_provider",
]

#: Name of the worker threads (tests look for leaks by it).
THREAD_NAME = "otel-context-summary"
#: The most the interpreter's exit waits for the summaries in flight before ending their spans as they stand.
EXIT_WAIT_SECONDS = 2.0
#: How often a wait looks again.
_POLL_SECONDS = 0.01

#: A summary's flow of I/O steps (``_core.Interceptor._with_summarizer`` over the engine's steps).
Flow = Generator[Any, Any, Any]
#: Runs a flow to its end through the given SDK client, giving up once ``Stopped`` says so (``flow.drive``).
SyncDriver = Callable[[Flow, Stopped, Any], Any]
AsyncDriver = Callable[[Flow, Stopped, Any], Awaitable[Any]]


class _Run:
    """One background summary in flight, and the client its requests go through (made by its thread or task:
    copying the app's client is not the app's call's cost)."""

    __slots__ = ("abandoned", "calls", "client", "loop", "task", "thread")

    def __init__(self) -> None:
        self.abandoned = False
        #: The summarizer's requests it made (``_call.InstrumentedCall``), whose spans the interpreter's exit ends.
        self.calls: list[Any] = []
        self.client: SummaryClient | None = None
        self.thread: threading.Thread | None = None
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def stopped(self, error: BaseException | None) -> bool:
        """Abandoned by :func:`shutdown`, or a step failed because the app closed the client it shares with
        us (asked only after a failure: a summary already received is kept even when the client closes right
        after)."""
        if not self.abandoned and error is not None and self.client is not None and self.client.closed():
            self.abandoned = True
        return self.abandoned


_lock = new_lock(sys.modules[__name__], "_lock")
_runs: set[_Run] = set()
_exiting = False
#: Flows abandoned at interpreter exit, kept so that no finalizer ends a span after the exporters stop.
_kept: list[Flow] = []
#: The run whose flow this thread or task drives (set in its own context: the thread's copy, the task's).
_current: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("otel_context_summary_run", default=None)


def track(call: Any) -> None:
    """A request made by a background summary (the summarizer's ``chat`` span): the interpreter's exit ends
    its span when it is still in flight. Other calls (the app's, an inline summary's) are not tracked."""
    run = _current.get()
    if run is not None:
        run.calls.append(call)


def running() -> int:
    """Background summaries in flight (tests and the demo)."""
    with _lock:
        return len(_runs)


def wait_idle(timeout: float) -> bool:
    """Block until no background summary is in flight, at most ``timeout`` seconds; whether none is (each has
    ended its spans then). ``uninstrument()`` abandons them without waiting, and each ends (and ends its span)
    when its current step returns. Refused (``RuntimeError``) on the thread of an event loop that runs some of
    them: they could not go on while it blocks (:func:`await_idle` is for that loop)."""
    loop = _loop_of_this_thread()
    if loop is not None:
        with _lock:
            blocked = any(run.loop is loop for run in _runs)
        if blocked:
            raise RuntimeError(
                "otel_context.wait_for_summaries() was called on the event loop that runs the summaries it would "
                "wait for, which cannot go on while it blocks: use `await otel_context.wait_for_summaries_async()`"
            )
    deadline = time.monotonic() + timeout
    while running() and time.monotonic() < deadline:
        time.sleep(_POLL_SECONDS)
    return running() == 0


async def await_idle(timeout: float) -> bool:
    """:func:`wait_idle` for a coroutine: the summaries on its own loop go on while it waits."""
    deadline = time.monotonic() + timeout
    while running() and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_SECONDS)
    return running() == 0


def _loop_of_this_thread() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _wait_at_exit(timeout: float) -> None:
    """The interpreter exits: wait (bounded) for the summaries whose thread still runs, so that they land and
    end their spans as they would have. A loop task cannot go on (its loop is not running any more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _lock:
            alive = any(run.thread is not None and run.thread.is_alive() for run in _runs)
        if not alive:
            return
        time.sleep(_POLL_SECONDS)


def _register(run: _Run) -> bool:
    with _lock:
        if _exiting:
            return False
        _runs.add(run)
        return True


def _unregister(run: _Run) -> None:
    with _lock:
        _runs.discard(run)


def start_thread(flow: Flow, drive: SyncDriver, app_client: Any) -> None:
    """Run ``flow`` with ``drive`` on a worker thread (sync clients), in the starting call's context."""
    run = _Run()
    if not _register(run):
        _keep(flow)
        return
    ctx = contextvars.copy_context()  # the starting call's trace context: the compact span lives in its trace
    args = (_run_sync, run, flow, drive, app_client)
    thread = threading.Thread(target=ctx.run, args=args, name=THREAD_NAME, daemon=True)
    run.thread = thread
    try:
        thread.start()
    except RuntimeError:  # interpreter shutting down: nothing can run any more
        _unregister(run)
        _keep(flow)


def _run_sync(run: _Run, flow: Flow, drive: SyncDriver, app_client: Any) -> None:
    _current.set(run)  # this thread's own context (a copy)
    client = run.client = SummaryClient(app_client)
    try:
        drive(flow, run.stopped, client.client)
        if run.abandoned:
            _abandon(flow)
    except Exception:
        if not _exiting:
            telemetry.log_once("background.run", "otel_context: a background summary failed", exc_info=True)
    finally:
        _unregister(run)
        try:
            client.close()
        except Exception:
            _closing_failed()


def start_task(flow: Flow, drive: AsyncDriver, app_client: Any) -> None:
    """Run ``flow`` with ``drive`` as a task on the running loop (async clients)."""
    run = _Run()
    if not _register(run):
        _keep(flow)
        return
    loop = asyncio.get_running_loop()
    run.loop = loop
    run.task = loop.create_task(_run_async(run, flow, drive, app_client), name=THREAD_NAME)


async def _run_async(run: _Run, flow: Flow, drive: AsyncDriver, app_client: Any) -> None:
    _current.set(run)  # the task's own context (a copy)
    client = run.client = SummaryClient(app_client)
    try:
        await drive(flow, run.stopped, client.client)
        if run.abandoned:
            _abandon(flow)
    except asyncio.CancelledError:
        _abandon(flow)
        raise
    except Exception:
        if not _exiting:
            telemetry.log_once("background.run", "otel_context: a background summary failed", exc_info=True)
    finally:
        _unregister(run)
        try:
            await client.aclose()
        except Exception:
            _closing_failed()


def _abandon(flow: Flow) -> None:
    """Stop a summary that will never be applied: its span ends as ``discarded`` (none at interpreter exit)."""
    if _exiting:
        _keep(flow)
        return
    try:
        flow.close()
    except Exception:
        telemetry.log_once("background.close", "otel_context: could not close a background summary", exc_info=True)


def _closing_failed() -> None:
    """Closing the summary's own client (its connections are ours to release) failed."""
    if not _exiting:
        telemetry.log_once("background.client", "otel_context: could not close a summary's client", exc_info=True)


def _keep(flow: Flow) -> None:
    with _lock:
        _kept.append(flow)


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
    """Interpreter exit: wait a little for the summaries in flight (:data:`EXIT_WAIT_SECONDS`), end the spans
    of those still running, so that the tracer provider's exit hook (which runs after this one, see
    :func:`register_exit`) exports them, then abandon everything silently,
    giving the fleet's prepare locks back (a worker stopped by a deployment must not keep the others from
    preparing its conversations' summaries until the leases run out)."""
    global _exiting
    with contextlib.suppress(Exception):  # nothing may be said at exit
        _wait_at_exit(EXIT_WAIT_SECONDS)
    with _lock:
        _exiting = True
        runs = list(_runs)
    for run in runs:
        run.abandoned = True
    with contextlib.suppress(Exception):  # nothing may be said at exit
        for run in runs:
            for call in list(run.calls):
                if not call.ended:  # cut short by the exit: ended as it stands (no response, no metric)
                    call.ended = True
                    call.span.end()
        engine_background.end_at_exit()
    with contextlib.suppress(Exception):  # the leases then run out as before
        engine_background.release_leases()


#: The SDK tracer providers :func:`watch_provider` watches (each gets one processor of ours, once).
_watched: weakref.WeakSet[Any] = weakref.WeakSet()
# Reset and a fork's child: kept (a watched provider keeps its processor through both, so watching it again
# would give it a second one).
process_state.register(__name__, ("_watched",), on_reset=None, in_forked_child=None)

LOST_AT_SHUTDOWN = (
    "otel_context: the tracer provider was shut down while %d summary(ies) prepared in the background were in "
    "flight: their compact spans and their summarizer's chat spans will not be exported. Call "
    "otel_context.wait_for_summaries() (or await otel_context.wait_for_summaries_async()) before shutting the "
    "tracer provider down"
)


def watch_provider(provider: Any) -> None:
    """Give an SDK tracer provider (one with ``add_span_processor``) a processor of ours, once: it does nothing
    with spans, and when the provider shuts down while summaries are in flight it says once that their spans
    are lost (the SDK's processors take nothing after their shutdown: a batch processor drops them silently).
    Another tracer provider (the API's placeholder, a vendor's) is left alone."""
    add = getattr(provider, "add_span_processor", None)
    if add is None:
        return
    with _lock:
        if provider in _watched:
            return
        _watched.add(provider)
    try:
        add(_shutdown_watch())
    except Exception:
        telemetry.log_once("background.watch", "otel_context: could not watch the tracer provider", exc_info=True)


def _shutdown_watch() -> Any:
    from opentelemetry.sdk.trace import SpanProcessor

    class ShutdownWatch(SpanProcessor):
        """Shut down with its tracer provider (after the app's processors): says what is lost then, once."""

        said = False

        def shutdown(self) -> None:
            in_flight = running()
            if in_flight and not _exiting and not self.said:
                self.said = True
                telemetry.log.warning(LOST_AT_SHUTDOWN, in_flight)

    return ShutdownWatch()


def register_exit() -> None:
    """(Re-)register the exit hook, so that it runs before the exit hooks registered until now (``atexit``
    runs the last registered first): the tracer provider's shutdown, which exports the spans it ends."""
    atexit.unregister(_at_exit)
    atexit.register(_at_exit)


def _after_fork_in_child() -> None:
    """A forked child inherits no summary: the threads did not survive the fork, the spans are the parent's
    (the engine's side forgets them too, see its registration in :mod:`otel_context.engine.background`)."""
    _runs.clear()
    _kept.clear()


atexit.register(_at_exit)
# Reset: kept (engine.reset() drops the summaries; the flows running them end on their own). A fork's child:
# no flow.
process_state.register(__name__, ("_runs", "_kept"), on_reset=None, in_forked_child=_after_fork_in_child)
