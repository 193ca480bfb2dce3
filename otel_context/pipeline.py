"""The contract between the SDK choke points (``otel_context.instrumentation``) and the context engine
(compaction, cache-break detection, conversation state).

The instrumentation owns the span, the SDK objects, usage extraction and streams. For every ``chat`` call
it asks :func:`plan` what to send, and tells the plan how the call ended. The engine never touches an SDK
object: it sees plain JSON-shaped request bodies and a :class:`~otel_context.usage.TokenUsage`.

Compaction may need an LLM call (the summarizer). To serve sync and async clients with ONE
implementation, the engine is written "sans I/O": :func:`plan` and :meth:`CallPlan.on_too_long` are
generators that *yield* a :class:`SummaryRequest` whenever they need the summarizer and receive a
:class:`SummaryResult` back. The instrumentation drives them with :func:`drive` (sync) or
:func:`adrive` (async), sending each request through the same client with the recursion guard set, so the
summarizer's call becomes a child ``chat`` span of the ``compact`` span.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from otel_context.settings import Settings
from otel_context.usage import TokenUsage

WireFormat = Literal["anthropic_messages", "openai_chat", "openai_responses"]

#: Set while the engine's own summarizer call runs: that call is never compacted nor planned.
in_summarizer: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_context_in_summarizer", default=False)


@dataclass(frozen=True)
class CallRequest:
    """What the instrumentation knows about a chat call before it is sent."""

    provider: str  #: gen_ai.provider.name
    wire_format: WireFormat
    body: Mapping[str, Any]  #: the caller's JSON body; NEVER mutate it
    model: str | None
    stream: bool
    settings: Settings
    #: Extra HTTP headers of the call (e.g. anthropic-beta), lower-cased names.
    headers: Mapping[str, str] = field(default_factory=dict)


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


Steps = Generator[SummaryRequest, SummaryResult, "T"]
T = TypeVar("T")


class CallPlan:
    """The engine's plan for one call. The base class is the no-op plan (observe nothing, change nothing)."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        #: The body to send: the caller's object itself when nothing changed.
        self.body: Mapping[str, Any] = body
        #: Attributes for the chat span (context, conversation id, ...); the instrumentation writes them
        #: when the call ends, in the same write as the response's.
        self.attributes: dict[str, AttributeValue] = {}

    def on_response(self, span: Span, usage: TokenUsage | None, response: Mapping[str, Any] | None) -> None:
        """The call succeeded (for streams: the stream ended, ``usage`` is what was seen).

        ``response`` is the final response as a JSON-shaped mapping when available (non-streaming calls
        and stream helpers' final message); the engine reads server-side compaction items from it.
        Runs while the chat span is still open: the engine adds events to it, and attributes to
        ``self.attributes``, which the instrumentation writes to the span right after, in one write.
        """

    def on_too_long(
        self, span: Span, error: BaseException
    ) -> Generator[SummaryRequest, SummaryResult, Mapping[str, Any] | None]:
        """The provider rejected the request as too long: a body to retry ONCE, or None to re-raise."""
        return None
        yield  # pragma: no cover  (makes this a generator)


def plan(span: Span, request: CallRequest) -> Generator[SummaryRequest, SummaryResult, CallPlan]:
    """Plan a chat call. Replaced by the context engine (``otel_context.engine``) when it is importable."""
    from otel_context import engine  # the engine depends on compaction, cache and conversation modules

    return (yield from engine.plan(span, request))


def drive(steps: Generator[SummaryRequest, SummaryResult, T], send: Callable[[SummaryRequest], SummaryResult]) -> T:
    """Run engine steps to completion with a synchronous summarizer."""
    try:
        request = next(steps)
        while True:
            request = steps.send(send(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(
    steps: Generator[SummaryRequest, SummaryResult, T], send: Callable[[SummaryRequest], Awaitable[SummaryResult]]
) -> T:
    """Run engine steps to completion with an asynchronous summarizer."""
    try:
        request = next(steps)
        while True:
            request = steps.send(await send(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
