"""A terminal monitor: one line per LLM call (turn, input tokens, cache hit rate, compactions), read from the finished spans.

    turn  5 | input   8,234 | cache hit  67.3% | context  41% | compactions 0
    turn  6 | input   8,410 | cache hit   0.0% | context  42% | compactions 0 | cache break: system_changed

Why spans: the monitor then needs no hook of its own. It is a ``SpanProcessor``, so with the one import
(``import otel_context.auto``) ``TokenMonitor().attach()`` is all a user adds, and what it prints is exactly
what the telemetry says (the demo styles the same :class:`TurnLine` with rich).

A *turn* is one ``chat`` span of the app (the summarizer's own call, a child of a ``compact`` span, is not
a turn). Its compactions are the successful ``compact`` spans under it, plus those the app ran explicitly
since the previous turn; numbering and counts are per conversation (``gen_ai.conversation.id``).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_context import semconv
from otel_context.fork_safe import new_lock
from otel_context.span_figures import float_attr, int_attr

__all__ = ["TokenMonitor", "TurnLine"]

#: Conversations remembered for numbering; the oldest is forgotten first (a long-lived process must not
#: grow without bound).
MAX_CONVERSATIONS = 256


@dataclass(frozen=True)
class TurnLine:
    """The figures of one turn, as the monitor prints them (the demo renders the same with colours)."""

    turn: int
    conversation: str | None
    model: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    #: Cache reads / input tokens of this call (0..1).
    hit_ratio: float
    #: Reported input tokens / effective context window (None when the engine did not report it).
    utilization: float | None
    #: Compactions of this conversation so far, this turn's included.
    compactions: int
    #: Compactions that happened in this turn.
    new_compactions: int
    #: Reasons of the unexpected cache breaks reported on this call.
    cache_breaks: tuple[str, ...] = ()

    def render(self) -> str:
        """The plain-text line."""
        context = f"{self.utilization:4.0%}" if self.utilization is not None else "   -"
        line = (
            f"turn {self.turn:>2} | input {self.input_tokens:>7,} | cache hit {self.hit_ratio:6.1%} | "
            f"context {context} | compactions {self.compactions}"
        )
        if self.new_compactions:
            line += f" (+{self.new_compactions})"
        if self.cache_breaks:
            line += " | cache break: " + ", ".join(self.cache_breaks)
        return line


class _Conversation:
    __slots__ = ("compactions", "turns")

    def __init__(self) -> None:
        self.turns = 0
        self.compactions = 0


class TokenMonitor(SpanProcessor):
    """Prints a :class:`TurnLine` per chat span to ``stream`` (default stdout; None prints nothing) and
    hands it to ``on_turn``. ``lines`` keeps the most recent ``keep`` lines for programs and tests."""

    def __init__(
        self,
        stream: IO[str] | None = sys.stdout,
        *,
        on_turn: Callable[[TurnLine], None] | None = None,
        keep: int = 1_000,
    ) -> None:
        self._stream = stream
        self._on_turn = on_turn
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise ValueError(f"keep={keep!r}: the number of recent lines to keep must be a whole number >= 0")
        self._keep = keep
        self._lock = new_lock(self, "_lock")
        self._compact_spans: set[int] = set()  # open compact spans: their child chat spans are summarizers
        self._chat_spans: set[int] = set()  # open chat spans
        self._compactions_under: dict[int, int] = {}  # open chat span id -> successful compactions under it
        self._pending_compactions: dict[str | None, int] = {}  # explicit compactions not under a chat span
        self._conversations: OrderedDict[str | None, _Conversation] = OrderedDict()
        self._enabled = True
        self.lines: list[TurnLine] = []

    # -- wiring ------------------------------------------------------------------------------------------

    def attach(self, tracer_provider: Any = None) -> TokenMonitor:
        """Register on ``tracer_provider`` (default: the one the instrumented calls' spans go to: the provider
        ``otel_context.instrument(tracer_provider=...)`` was given, else the global one, which the one import
        configures)."""
        from otel_context import telemetry

        provider = tracer_provider if tracer_provider is not None else telemetry.tracer_provider()
        add = getattr(provider, "add_span_processor", None)
        if add is None:
            if isinstance(provider, trace.ProxyTracerProvider):
                found = (
                    "no tracer provider is set up yet (the global one is OpenTelemetry's ProxyTracerProvider "
                    "placeholder)"
                )
            else:
                found = f"got a {type(provider).__name__}, which takes no span processor"
            raise RuntimeError(
                f"TokenMonitor reads the finished spans of the OpenTelemetry SDK's TracerProvider, and {found}. "
                "Import otel_context.auto before attaching (it sets one up from the OTEL_* variables), or set "
                "one first (trace.set_tracer_provider(TracerProvider())), or pass yours: "
                "TokenMonitor().attach(tracer_provider)."
            )
        add(self)
        self._enabled = True
        return self

    def detach(self) -> None:
        """Stop printing (the SDK cannot remove a span processor; a detached monitor ignores spans)."""
        self._enabled = False

    # -- SpanProcessor -----------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if not self._enabled:
            return
        if span.name == semconv.COMPACT_SPAN:
            with self._lock:
                self._compact_spans.add(span.context.span_id)
        elif span.name.startswith(semconv.OP_CHAT + " ") or span.name == semconv.OP_CHAT:
            with self._lock:
                self._chat_spans.add(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        if not self._enabled or span.context is None:
            return
        try:
            if span.name == semconv.COMPACT_SPAN:
                self._compact_ended(span)
            elif (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT:
                line = self._chat_ended(span)
                if line is not None:
                    self._emit(line)
        except Exception:  # a monitor must never break the app's tracing pipeline
            from otel_context import telemetry

            telemetry.log_once("monitor.on_end", "otel_context: the token monitor failed on a span", exc_info=True)

    def shutdown(self) -> None:
        self._enabled = False

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._stream is not None:
            self._stream.flush()
        return True

    # -- internals ---------------------------------------------------------------------------------------

    def _compact_ended(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        succeeded = attrs.get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS
        with self._lock:
            self._compact_spans.discard(span.context.span_id)
            if not succeeded:
                return
            parent = span.parent.span_id if span.parent is not None else None
            if parent is not None and parent in self._chat_spans:
                # Transparent mode: the compaction belongs to the chat call it rewrote.
                self._compactions_under[parent] = self._compactions_under.get(parent, 0) + 1
            else:
                # The explicit API (under some span of the app): it counts with the conversation's next turn.
                key = _str(attrs.get(semconv.GEN_AI_CONVERSATION_ID))
                self._pending_compactions[key] = self._pending_compactions.get(key, 0) + 1

    def _chat_ended(self, span: ReadableSpan) -> TurnLine | None:
        attrs = span.attributes or {}
        span_id = span.context.span_id
        with self._lock:
            self._chat_spans.discard(span_id)
            under = self._compactions_under.pop(span_id, 0)
            if span.parent is not None and span.parent.span_id in self._compact_spans:
                return None  # the summarizer's call inside a compaction
            if semconv.GEN_AI_USAGE_INPUT_TOKENS not in attrs:
                return None  # failed before any usage was reported: not a turn
            key = _str(attrs.get(semconv.GEN_AI_CONVERSATION_ID))
            state = self._conversations.pop(key, None) or _Conversation()
            self._conversations[key] = state
            while len(self._conversations) > MAX_CONVERSATIONS:
                self._conversations.popitem(last=False)
            # Compactions seen since the last turn of this conversation (or of unidentified spans).
            new = under + self._pending_compactions.pop(key, 0)
            if key is not None:
                new += self._pending_compactions.pop(None, 0)
            state.turns += 1
            state.compactions += new
            input_tokens = int_attr(attrs, semconv.GEN_AI_USAGE_INPUT_TOKENS)
            cache_read = int_attr(attrs, semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
            line = TurnLine(
                turn=state.turns,
                conversation=key,
                model=_str(attrs.get(semconv.GEN_AI_RESPONSE_MODEL))
                or _str(attrs.get(semconv.GEN_AI_REQUEST_MODEL))
                or "",
                input_tokens=input_tokens,
                cache_read_tokens=cache_read,
                cache_write_tokens=int_attr(attrs, semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS),
                hit_ratio=cache_read / input_tokens if input_tokens else 0.0,
                utilization=float_attr(attrs, semconv.CONTEXT_UTILIZATION),
                compactions=state.compactions,
                new_compactions=new,
                cache_breaks=tuple(
                    str((event.attributes or {}).get(semconv.CACHE_BREAK_REASON, semconv.REASON_UNKNOWN))
                    for event in span.events
                    if event.name == semconv.CACHE_BREAK_EVENT
                    and (event.attributes or {}).get(semconv.CACHE_BREAK_INTENTIONAL) is False
                ),
            )
            self.lines.append(line)
            del self.lines[: len(self.lines) - self._keep]  # keep=0 keeps none (a [:-0] slice would keep all)
        return line

    def _emit(self, line: TurnLine) -> None:
        if self._stream is not None:
            self._stream.write(line.render() + "\n")
            self._stream.flush()
        if self._on_turn is not None:
            self._on_turn(line)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
