"""The sans-I/O flow between the context engine and whoever can call the summarizer model.

Compaction may need an LLM call (the summarizer). To serve sync and async clients with ONE
implementation, the engine is written "sans I/O": its entry points are generators that *yield* a
:class:`SummaryRequest` whenever they need the summarizer and receive a :class:`SummaryResult` back. The
instrumentation drives them with :func:`drive` (sync) or :func:`adrive` (async), sending each request
through the same client with the recursion guard (:data:`in_summarizer`) set, so the summarizer's call
becomes a child ``chat`` span of the ``compact`` span. The explicit ``Compactor`` API drives the same
generators with the client it was given.

When conversation state lives in a shared store (Redis), the engine also yields a :class:`StoreRequest`:
the store operation it needs, as a blocking callable and an awaitable one. :func:`drive` runs the first
(a sync client's thread may block, for the store's short timeout), :func:`adrive` awaits the second, so an
async client never blocks its event loop on the store, and the engine itself stays one sans-I/O
implementation. A generator that never yields one (the in-process default) is driven exactly as before.

This module is a leaf: it knows nothing of the engine, the wire formats or the SDKs.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from otel_context.usage import TokenUsage

#: Set while the engine's own summarizer call runs: that call is never compacted nor planned.
in_summarizer: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_context_in_summarizer", default=False)


@dataclass(frozen=True)
class SummaryRequest:
    """A request body (same wire format as the call) the engine wants sent to the summarizer model."""

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


@dataclass(frozen=True)
class StoreRequest:
    """A shared-store operation the engine waits for: the driver sends back what ``run()`` returns (sync)
    or what ``arun()`` resolves to (async). Both never raise (the store falls back on any failure)."""

    run: Callable[[], Any]
    arun: Callable[[], Awaitable[Any]]


#: What the engine's generators yield: a summarizer request, or (with a shared store) a store request.
Step = SummaryRequest | StoreRequest


@dataclass(frozen=True)
class BackgroundStart(SummaryRequest):
    """Not a summarizer request: run ``steps`` to completion in the background (a worker thread for a sync
    client, a task on the running loop for an async one), sending its summary requests through the same
    client (and its store requests to the store), and answer at once with an empty result. Only yielded when the driver said it can
    (:attr:`otel_context.contract.CallRequest.background`)."""

    steps: Generator[Step, Any, Any]


@dataclass(frozen=True)
class BackgroundWait(SummaryRequest):
    """Not a summarizer request: wait until ``done`` is set or ``timeout`` seconds passed (without
    blocking an event loop), then answer with an empty result."""

    done: threading.Event
    timeout: float


T = TypeVar("T")


def drive(steps: Generator[Step, Any, T], send: Callable[[SummaryRequest], SummaryResult]) -> T:
    """Run engine steps to completion with a synchronous summarizer (and blocking store calls)."""
    try:
        request = next(steps)
        while True:
            reply = request.run() if isinstance(request, StoreRequest) else send(request)
            request = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(steps: Generator[Step, Any, T], send: Callable[[SummaryRequest], Awaitable[SummaryResult]]) -> T:
    """Run engine steps to completion with an asynchronous summarizer (and awaited store calls)."""
    try:
        request = next(steps)
        while True:
            if isinstance(request, StoreRequest):
                request = steps.send(await request.arun())
            else:
                request = steps.send(await send(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
