"""A coding assistant that keeps its whole history and resends it every turn.

This is the app the one import is for: it never compacts anything itself. Each turn appends the user's
request, calls the model with the FULL history, runs the tools the model asks for, appends their results,
and calls again until the model answers in text. Keeping that history inside the window is left entirely to
otel-context's transparent compaction, which rewrites what is sent and never the agent's own list.

One :class:`Backend` per wire format (Anthropic Messages, OpenAI Chat Completions) turns the history into
a request with the real SDK client; :class:`CodingAgent` is the loop, with an ``invoke_agent`` span per turn
and an ``execute_tool`` span per tool call (GenAI semantic conventions), so a trace reads
``invoke_agent`` → ``chat`` → ``compact`` → ``chat``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from otel_context import semconv
from otel_context.cache_control import place_cache_breakpoints
from otel_context.demo.scenario import Turn
from otel_context.demo.tools import LATE_TOOL_SPECS, TOOL_SPECS, ToolResult, ToolSpec, Workspace
from otel_context.testing.tokens import WireFormat

__all__ = [
    "AGENT_NAME",
    "SYSTEM_PROMPT",
    "AnthropicBackend",
    "Backend",
    "CodingAgent",
    "OpenAIBackend",
    "Reply",
    "ToolCall",
    "TurnOutcome",
]

AGENT_NAME = "coding-assistant"

# Stable on purpose: anything that changes per call here (a timestamp, a counter) would break the prompt
# cache on every request (the classic prompt-caching failure).
SYSTEM_PROMPT = (
    "You are a careful coding assistant working in the repository of `ledgerline`, a small Python invoicing "
    "library. Use the tools to read files, search and run commands before you answer; never guess file "
    "contents. Keep changes minimal, explain what you found and why, and say which tests prove a fix. Money "
    "is handled with decimal.Decimal; treat rounding, currency conversion and tax computations with care."
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model made."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """One model response: text and/or tool calls."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


class Backend(Protocol):
    """A conversation with one provider through its real SDK client. Owns the history (wire format)."""

    provider: str
    model: str
    wire_format: WireFormat
    #: The SDK's base exception for API errors (caught per turn so a failed call does not end the session).
    api_error: type[Exception]
    history: list[dict[str, Any]]

    def add_user(self, text: str) -> None: ...
    def add_tool(self, spec: ToolSpec) -> None: ...
    def complete(self) -> Reply: ...
    def add_tool_results(self, results: Sequence[tuple[ToolCall, ToolResult]]) -> None: ...
    def request_body(self) -> dict[str, Any]: ...


class AnthropicBackend:
    """Anthropic Messages: cache breakpoints by :func:`otel_context.cache_control.place_cache_breakpoints`."""

    provider = semconv.PROVIDER_ANTHROPIC
    wire_format: WireFormat = "anthropic_messages"

    def __init__(self, client: Any, model: str, max_tokens: int = 1024) -> None:
        import anthropic

        self.api_error: type[Exception] = anthropic.APIError
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.history: list[dict[str, Any]] = []
        self._tools = [spec.anthropic() for spec in TOOL_SPECS]

    def add_user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})

    def add_tool(self, spec: ToolSpec) -> None:
        self._tools = [*self._tools, spec.anthropic()]

    def request_body(self) -> dict[str, Any]:
        """The full history, with cache breakpoints placed by otel-context's helper (tools, system, last
        message); a new body each call, the history itself is not touched."""
        body = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": SYSTEM_PROMPT,
            "tools": self._tools,
            "messages": list(self.history),
        }
        return place_cache_breakpoints(body)

    def complete(self) -> Reply:
        response = self.client.messages.create(**self.request_body())
        content: list[dict[str, Any]] = []
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                content.append({"type": "text", "text": block.text})
                texts.append(block.text)
            elif block.type == "tool_use":
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)})
                calls.append(ToolCall(block.id, block.name, dict(block.input)))
        self.history.append({"role": "assistant", "content": content or [{"type": "text", "text": ""}]})
        return Reply("\n".join(texts), tuple(calls))

    def add_tool_results(self, results: Sequence[tuple[ToolCall, ToolResult]]) -> None:
        self.history.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": result.content,
                        "is_error": result.is_error,
                    }
                    for call, result in results
                ],
            }
        )


class OpenAIBackend:
    """OpenAI Chat Completions: the provider caches prefixes by itself, nothing to mark."""

    provider = semconv.PROVIDER_OPENAI
    wire_format: WireFormat = "openai_chat"

    def __init__(self, client: Any, model: str, max_tokens: int = 1024) -> None:
        import openai

        self.api_error: type[Exception] = openai.APIError
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.history: list[dict[str, Any]] = []
        self._tools = [spec.openai() for spec in TOOL_SPECS]

    def add_user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})

    def add_tool(self, spec: ToolSpec) -> None:
        self._tools = [*self._tools, spec.openai()]

    def request_body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_completion_tokens": self.max_tokens,
            "tools": self._tools,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *self.history],
        }

    def complete(self) -> Reply:
        response = self.client.chat.completions.create(**self.request_body())
        message = response.choices[0].message
        calls = tuple(
            ToolCall(c.id, c.function.name, _arguments(c.function.arguments))
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        )
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        if calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
                }
                for c in calls
            ]
        self.history.append(entry)
        return Reply(message.content or "", calls)

    def add_tool_results(self, results: Sequence[tuple[ToolCall, ToolResult]]) -> None:
        for call, result in results:
            self.history.append({"role": "tool", "tool_call_id": call.id, "content": result.content})


def _arguments(raw: str | None) -> dict[str, Any]:
    """Tool-call arguments as a dict; a model that sends malformed JSON gets ``{}`` (and a tool error)."""
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class TurnOutcome:
    """What a turn did, from the agent's side (the telemetry has the rest)."""

    reply: str = ""
    calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    error: str | None = None
    #: Input tokens of each request the agent passed, before any rewriting (for the cost comparison).
    passed_tokens: list[int] = field(default_factory=list)


#: Called before each model call of a turn with (step, pending tool results); the demo uses it to change
#: the simulated provider's window at one point of the run.
BeforeCall = Callable[[int, Sequence[tuple[ToolCall, ToolResult]]], None]


class CodingAgent:
    """The agent loop: user request -> model -> tools -> model ... -> text, the full history every time."""

    def __init__(
        self,
        backend: Backend,
        workspace: Workspace,
        tracer: Tracer,
        *,
        live: bool = False,
        max_steps: int = 6,
        count_tokens: Callable[[Mapping[str, Any], WireFormat], int] | None = None,
    ) -> None:
        self.backend = backend
        self.workspace = workspace
        self.tracer = tracer
        self.live = live
        self.max_steps = max_steps
        self._count = count_tokens

    def run_turn(self, turn: Turn, before_call: BeforeCall | None = None) -> TurnOutcome:
        """Run one turn inside an ``invoke_agent`` span. A provider error ends the turn, not the session:
        the turn's messages are rolled back so the history stays well-formed for the next turn."""
        outcome = TurnOutcome()
        mark = len(self.backend.history)
        attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: AGENT_NAME,
            semconv.GEN_AI_PROVIDER_NAME: self.backend.provider,
            semconv.GEN_AI_REQUEST_MODEL: self.backend.model,
        }
        name = f"{semconv.OP_INVOKE_AGENT} {AGENT_NAME}"
        with self.tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as span:
            for spec in LATE_TOOL_SPECS:
                if spec.name in turn.new_tools:
                    self.backend.add_tool(spec)
            self.backend.add_user(turn.message(live=self.live))
            pending: list[tuple[ToolCall, ToolResult]] = []
            try:
                for step in range(self.max_steps):
                    if before_call is not None:
                        before_call(step, pending)
                    if self._count is not None:
                        outcome.passed_tokens.append(self._count(self.backend.request_body(), self.backend.wire_format))
                    outcome.calls += 1
                    reply = self.backend.complete()
                    if not reply.tool_calls:
                        outcome.reply = reply.text
                        break
                    pending = [(call, self._execute(call, outcome)) for call in reply.tool_calls]
                    self.backend.add_tool_results(pending)
            except self.backend.api_error as exc:
                del self.backend.history[mark:]
                outcome.error = f"{type(exc).__name__}: {exc}"
                span.set_status(Status(StatusCode.ERROR, outcome.error[:200]))
                span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        return outcome

    def _execute(self, call: ToolCall, outcome: TurnOutcome) -> ToolResult:
        attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
            semconv.GEN_AI_TOOL_NAME: call.name,
            semconv.GEN_AI_TOOL_CALL_ID: call.id,
            semconv.GEN_AI_TOOL_TYPE: semconv.TOOL_TYPE_FUNCTION,
        }
        name = f"{semconv.OP_EXECUTE_TOOL} {call.name}"
        with self.tracer.start_as_current_span(name, kind=SpanKind.INTERNAL, attributes=attributes) as span:
            result = self.workspace.call(call.name, call.arguments)
            outcome.tool_calls += 1
            if result.is_error:
                outcome.tool_errors += 1
                span.set_status(Status(StatusCode.ERROR, f"{call.name} failed"))
        return result
