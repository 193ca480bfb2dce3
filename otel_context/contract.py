"""The contract between the SDK choke points (``otel_context.instrumentation``) and the context engine.

The instrumentation owns the span, the SDK objects, usage extraction and streams. For every ``chat`` call
it builds a :class:`CallRequest`, asks the engine (``otel_context.engine.plan``) for a :class:`CallPlan`,
sends the plan's body, and tells the plan how the call ended. The engine never touches an SDK object: it
sees plain JSON-shaped request bodies and a :class:`~otel_context.usage.TokenUsage`.

This module never imports the engine: the base :class:`CallPlan` is the no-op plan (observe nothing,
change nothing), which the instrumentation uses when the engine is not involved.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from otel_context.flow import Step
from otel_context.settings import Settings
from otel_context.usage import CacheDiagnosis, TokenUsage

#: The name of a wire format registered in :mod:`otel_context.formats` (``anthropic_messages``, ``openai_chat``,
#: ``openai_responses``, ...): a plain string, so that adding a format touches only the formats package.
WireFormat = str


@dataclass(frozen=True, init=False)
class CallRequest:
    """What the instrumentation knows about a chat call before it is sent."""

    provider: str  #: gen_ai.provider.name
    wire_format: WireFormat
    body: Mapping[str, Any]  #: the caller's JSON body; NEVER mutate it
    model: str | None
    settings: Settings
    #: Extra HTTP headers of the call (e.g. anthropic-beta), lower-cased names.
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Whether the driver of the plan runs background work: the engine yields
    #: :class:`~otel_context.flow.BackgroundStart` and :class:`~otel_context.flow.BackgroundWait` steps only
    #: then (the instrumentation's driver does; ``flow.perform_with``, the summarizer-only one, refuses them);
    #: without it the engine compacts inline only.
    background: bool = False
    #: The OpenTelemetry context in which the chat span is current (None: the engine makes one from the span
    #: it is given). The engine records its histograms in it, so their exemplars point at the chat span,
    #: also when a stream ends in the app's own context.
    context: Context | None = None
    #: The server the call goes to (``host:port`` of the client's base URL; "" when unknown): what a refusal of
    #: a request field is remembered for, beside the model (another endpoint of one provider may accept it).
    server: str = ""

    def __init__(
        self,
        provider: str,
        wire_format: WireFormat,
        body: Mapping[str, Any],
        model: str | None,
        settings: Settings,
        headers: Mapping[str, str] | None = None,
        background: bool = False,
        context: Context | None = None,
        server: str = "",
    ) -> None:
        # The generated __init__'s fields and order, in one dict update instead of a frozen dataclass's
        # object.__setattr__ per field (one of these is made for every chat call).
        self.__dict__.update(
            provider=provider,
            wire_format=wire_format,
            body=body,
            model=model,
            settings=settings,
            headers={} if headers is None else headers,
            background=background,
            context=context,
            server=server,
        )


class Spent(NamedTuple):
    """What :meth:`CallPlan.on_cost` answers, for the chat span and the saving counter (USD)."""

    #: The conversation's spend so far, this call included (``otel_context.conversation.cost``).
    conversation: float
    #: What the compactions whose result this call sends saved on it (``otel_context.cost.compaction_saving``).
    compaction_saving: float


class CallPlan:
    """The engine's plan for one call. The base class is the no-op plan (observe nothing, change nothing)."""

    #: Set by :meth:`on_too_long` when the body it returns only takes back a field the engine had added and the
    #: provider refused: the resend is the app's own request, so its error (not the refusal) is the app's.
    resend_error_stands = False

    def __init__(self, body: Mapping[str, Any]) -> None:
        #: The body to send: the caller's object itself when nothing changed.
        self.body: Mapping[str, Any] = body
        #: Attributes for the chat span (context, conversation id, ...); the instrumentation writes them
        #: when the call ends, in the same write as the response's.
        self.attributes: dict[str, AttributeValue] = {}

    def on_response(
        self,
        span: Span,
        usage: TokenUsage | None,
        response: Mapping[str, Any] | None,
        response_id: str | None = None,
        diagnosis: CacheDiagnosis | None = None,
    ) -> None:
        """The call succeeded (for streams: the stream ended, ``usage`` is what was seen).

        ``response`` is the final response as a JSON-shaped mapping when available (non-streaming calls
        and stream helpers' final message); the engine reads server-side compaction items from it.
        ``response_id`` is the provider's id of the response (streams included), which a later request
        may continue (Responses ``previous_response_id``). ``diagnosis`` is the provider's own word on the
        call's prompt cache, when the response carried one.
        Runs while the chat span is still open: the engine adds events to it, and attributes to
        ``self.attributes``, which the instrumentation writes to the span right after, in one write.
        """

    def on_cost(self, amount: float) -> Spent | None:
        """The call cost ``amount`` (USD, priced by the instrumentation after :meth:`on_response`): the
        conversation's spend so far, this call included, and what compactions saved on it; None when the plan
        has no conversation (the no-op plan)."""
        return None

    def on_too_long(self, span: Span, error: BaseException) -> Generator[Step, Any, Mapping[str, Any] | None]:
        """The provider rejected the request (as too long, or refusing a field the engine added): a body to retry
        ONCE, or None to re-raise (the steps may ask the summarizer, and with a shared store the store: see
        :mod:`otel_context.flow`)."""
        return None
        yield  # pragma: no cover  (makes this a generator)
