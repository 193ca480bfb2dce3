"""The sans-I/O step protocol between the context engine and whoever does its I/O: one vocabulary of steps,
one pair of drivers.

To serve sync and async clients with ONE implementation, the engine is written "sans I/O": its entry points
are generators that *yield* a :data:`Step` whenever they need something done outside and are sent the
step's reply back (each step documents its reply). The steps:

- :class:`SummaryRequest`: call the summarizer model; the reply is a :class:`SummaryResult`.
- :class:`StoreRequest`: a shared-store (Redis) operation, as a blocking callable and an awaitable one, so
  that a sync client's thread may block (for the store's short timeout) while an async client never blocks
  its event loop on the store.
- :class:`BackgroundStart` / :class:`BackgroundWait`: start a summary in the background, wait for one.
- :class:`Sleep`: wait before trying again.

:func:`drive` (sync) and :func:`adrive` (async) run such a generator to its end, handing each step to a
``perform`` function that does its I/O. Two kinds of callers share them: the instrumentation
(``instrumentation._core``), whose ``perform`` sends summary requests through the app's client with the
recursion guard (:data:`in_summarizer`) set, so the summarizer's call becomes a child ``chat`` span of the
``compact`` span, and runs background summaries; and the callers that only have a summarizer function (the
explicit ``Compactor`` API, ``Settings.summarizer``, tests), whose ``perform`` :func:`perform_with` and
:func:`aperform_with` build. The drivers are generic in the step type: the instrumentation's own flow of a
call adds its SDK I/O (send the call, send a summary raw, prepare a body) to the engine's steps.

This module is a leaf: it knows nothing of the engine, the wire formats or the SDKs.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from otel_context.usage import TokenUsage

#: Set while the engine's own summarizer call runs: that call is never compacted nor planned.
in_summarizer: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_context_in_summarizer", default=False)


@dataclass(frozen=True)
class SummaryRequest:
    """A request body (same wire format as the call) the engine wants sent to the summarizer model.

    Reply: a :class:`SummaryResult` (a failure is a result too: the driver does not raise for it)."""

    body: Mapping[str, Any]


@dataclass(frozen=True)
class SummaryResult:
    """What came back: the response text and usage, or the exception the SDK raised."""

    text: str = ""
    usage: TokenUsage | None = None
    error: BaseException | None = None
    #: True when the provider said the summarizer's own request was too long.
    too_long: bool = False
    #: The reply's finish reasons, normalized (``length``: cut at its ``max_tokens``, so never a summary).
    finish_reasons: tuple[str, ...] = ()
    #: The rates the reply says applied (see :func:`otel_context.pricing.price_context`): what its cost,
    #: part of the compaction's, is priced at.
    price_context: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StoreRequest:
    """A shared-store operation the engine waits for.

    Reply: what ``run()`` returns (:func:`drive`) or what ``arun()`` resolves to (:func:`adrive`). Both never
    raise (the store falls back on any failure)."""

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class BackgroundStart:
    """Run ``steps`` to their end in the background (a worker thread for a sync client, a task on the running
    loop for an async one), doing their steps as the driver does its own (summary requests through the same
    client, store requests to the store).

    Reply: None, at once. Only yielded when the driver said it runs background work
    (``otel_context.contract.CallRequest.background``): :func:`perform_with` refuses it."""

    steps: Generator[Step, Any, Any]


@dataclass(frozen=True)
class BackgroundWait:
    """Wait until ``done`` is set (by a background summary) or ``timeout`` seconds passed, without blocking an
    event loop. Reply: None (the engine looks at ``done`` itself)."""

    done: threading.Event
    timeout: float


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (before trying again), without blocking an event loop. Reply: None."""

    seconds: float


#: What the engine's generators yield.
Step = SummaryRequest | StoreRequest | BackgroundStart | BackgroundWait | Sleep

#: Asked by a driver after each step with the error that step raised (None: none): whether to give up there,
#: without resuming the steps (a background summary abandoned by ``uninstrument()``).
Stopped = Callable[[BaseException | None], bool]

S = TypeVar("S")
T = TypeVar("T")


class _Finished(Generic[T]):
    """The steps returned ``value`` (a type of its own: a step may be any value, None included)."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


def _advance(steps: Generator[S, Any, T], reply: Any, error: BaseException | None) -> S | _Finished[T]:
    """Resume ``steps`` with the reply to their last step (or the exception it raised): their next step, or
    their end. An exception the steps raise propagates to the driver's caller."""
    try:
        return steps.send(reply) if error is None else steps.throw(error)
    except StopIteration as done:
        return _Finished(done.value)


def _stops(steps: Generator[Any, Any, Any], stopped: Stopped, error: BaseException | None) -> bool:
    """``stopped(error)``; when it raises (``Compactor.compact`` hands its caller's mistake back that way), the
    steps are closed first, here, on the thread and in the context that ran them: left suspended, what they made
    current (a summary's ``compact`` span, the recursion guard) would stay current for whatever this thread
    does next, every later span its child, until the garbage collector happened to close them."""
    try:
        return stopped(error)
    except BaseException:
        steps.close()
        raise


@overload
def drive(steps: Generator[S, Any, T], perform: Callable[[S], Any]) -> T: ...
@overload
def drive(steps: Generator[S, Any, T], perform: Callable[[S], Any], stopped: Stopped) -> T | None: ...
def drive(steps: Generator[S, Any, T], perform: Callable[[S], Any], stopped: Stopped | None = None) -> T | None:
    """Run ``steps`` to their end, doing each step with ``perform`` synchronously: what it returns is sent back
    to the steps, an exception it raises is thrown into them (they decide: the instrumentation's flow retries
    or re-raises the app's error). With ``stopped``: None when it says to give up (the steps are left as they
    are, for the caller to close or keep); an exception it raises closes the steps and reaches the caller."""
    step = _advance(steps, None, None)
    while not isinstance(step, _Finished):
        try:
            reply, error = perform(step), None
        except BaseException as exc:  # handed to the steps, which decide
            reply, error = None, exc
        if stopped is not None and _stops(steps, stopped, error):
            return None
        step = _advance(steps, reply, error)
    return step.value


@overload
async def adrive(steps: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]]) -> T: ...
@overload
async def adrive(steps: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]], stopped: Stopped) -> T | None: ...
async def adrive(
    steps: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]], stopped: Stopped | None = None
) -> T | None:
    """:func:`drive` on the event loop: ``perform`` is awaited."""
    step = _advance(steps, None, None)
    while not isinstance(step, _Finished):
        try:
            reply, error = await perform(step), None
        except BaseException as exc:  # handed to the steps, which decide
            reply, error = None, exc
        if stopped is not None and _stops(steps, stopped, error):
            return None
        step = _advance(steps, reply, error)
    return step.value


class NoBackgroundWork(RuntimeError):
    """A :class:`BackgroundStart` reached a driver that runs no background work: the engine yields one only
    when ``CallRequest.background`` is True, which only the instrumentation says."""

    def __init__(self) -> None:
        super().__init__(
            "BackgroundStart: this driver runs no background work (the engine yields it only when "
            "CallRequest.background is True)"
        )


#: The steps every driver does the same way (no client needed): :func:`perform_plain` / :func:`aperform_plain`.
PlainStep = StoreRequest | BackgroundWait | Sleep


def perform_plain(step: PlainStep) -> Any:
    """Do a step that needs no client, blocking the thread: a store request runs, a wait and a sleep block."""
    if isinstance(step, StoreRequest):
        return step.run()
    if isinstance(step, BackgroundWait):
        step.done.wait(step.timeout)
        return None
    time.sleep(step.seconds)
    return None


async def aperform_plain(step: PlainStep) -> Any:
    """:func:`perform_plain` on the event loop: the store request is awaited, a wait and a sleep leave the loop
    serving everything else."""
    if isinstance(step, StoreRequest):
        return await step.arun()
    if isinstance(step, BackgroundWait):
        await wait_on_loop(step.done, step.timeout)
        return None
    await asyncio.sleep(step.seconds)
    return None


def perform_with(summarize: Callable[[SummaryRequest], SummaryResult]) -> Callable[[Step], Any]:
    """The ``perform`` of :func:`drive` for a caller that has only a summarizer function: summary requests go
    to ``summarize``, the plain steps as every driver does them (:func:`perform_plain`), background work is
    refused (:class:`NoBackgroundWork`)."""

    def perform(step: Step) -> Any:
        if isinstance(step, SummaryRequest):
            return summarize(step)
        if isinstance(step, BackgroundStart):
            raise NoBackgroundWork()
        return perform_plain(step)

    return perform


def aperform_with(summarize: Callable[[SummaryRequest], Awaitable[SummaryResult]]) -> Callable[[Step], Awaitable[Any]]:
    """:func:`perform_with` for :func:`adrive`: ``summarize`` is awaited, the plain steps are done on the loop
    (:func:`aperform_plain`)."""

    async def perform(step: Step) -> Any:
        if isinstance(step, SummaryRequest):
            return await summarize(step)
        if isinstance(step, BackgroundStart):
            raise NoBackgroundWork()
        return await aperform_plain(step)

    return perform


async def wait_on_loop(done: threading.Event, timeout: float) -> None:
    """Wait for ``done`` (set by another thread or task) at most ``timeout`` seconds, the loop serving
    everything else meanwhile (a :class:`threading.Event` has no awaitable wait)."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while not done.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.02)
