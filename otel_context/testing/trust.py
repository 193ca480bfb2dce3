"""A long coding-agent conversation that tells whether compaction keeps what the user said (issue 31).

A user sets a constraint on turn 2 ("use Rust, not Go"), reverses it much later, and says facts of their own
on the way (``FACT: ...`` lines, which the simulated summarizer keeps when it reads them). The agent resends
its whole, growing history on every call (transparent mode), reads a small file every few turns and answers
in a few dozen words; on a 30,000-token window that makes five or six compactions over 200 turns.

:func:`run` plays it through a real SDK client against a :class:`~otel_context.testing.SimulatedProvider`
(whose ``summarizer`` style decides what the summaries lose), and :func:`audit` reads what the provider
received: after each compaction, whether the constraint, its reversal and the user's facts reached the
model, how many of the user's messages went out verbatim as their own message, the summarizer's input
(and cache reads), and the context after the compaction. The test suite and ``benchmarks/trust.py`` use it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER
from otel_context.testing.fleet import ANTHROPIC_TOOLS, OPENAI_TOOLS, SYSTEM, file_content, with_breakpoint

__all__ = ["CONSTRAINT", "REVERSAL", "Audit", "Compaction", "audit", "run", "user_message"]

TASK = "Build a service that syncs the inventory database with the warehouse API, step by step."
CONSTRAINT = "Use Rust for the sync service, not Go."
REVERSAL = "Change of plan: write the sync service in Go after all, not Rust."
#: The turn (0-based) of the reversal.
REVERSAL_TURN = 120
#: Facts the user says mid-conversation: turn -> the fact line.
FACTS = {
    t: f"FACT: user fact {t}: the {name} is {value}."
    for t, name, value in (
        (22, "staging database port", "5433"),
        (47, "warehouse API rate limit", "40 requests a second"),
        (73, "deploy window", "Tuesdays 14:00 UTC"),
        (98, "on-call reviewer", "Ilse Marchetti"),
        (141, "release branch", "release/2.7"),
        (166, "retry budget", "7 attempts"),
    )
}
#: Every this many turns the agent reads a file (one tool round).
READ_EVERY = 3


def user_message(turn: int) -> str:
    """The user's message of ``turn`` (the model's reply length and tool use are scripted in it)."""
    if turn == 0:
        return TASK + " words:40"
    if turn == 1:
        return CONSTRAINT + " words:40"
    if turn == REVERSAL_TURN:
        return REVERSAL + " words:40"
    text = f"Step {turn}: carry on with the next part of the plan."
    if turn in FACTS:
        text += "\n" + FACTS[turn]
    if turn % READ_EVERY == 0:
        text += " tool:read_file" + json.dumps({"path": f"src/step{turn}.rs"})
    return text + " words:150"


def run(client: Any, sdk: str, model: str, turns: int = 200, file_lines: int = 120) -> list[dict[str, Any]]:
    """Play the conversation (``sdk``: ``anthropic`` or ``openai``, chat completions); returns the history."""
    if sdk != "anthropic":
        from openai.types.chat import ChatCompletion
    if sdk == "openai-responses":
        return _run_responses(client, model, turns, file_lines)
    anthropic = sdk == "anthropic"
    history: list[dict[str, Any]] = [] if anthropic else [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        history.append({"role": "user", "content": user_message(turn)})
        for _ in range(3):
            if anthropic:
                response = client.messages.create(
                    model=model,
                    max_tokens=1024,
                    system=SYSTEM,
                    tools=ANTHROPIC_TOOLS,
                    messages=with_breakpoint(history),
                )
                history.append(
                    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
                )
                calls = [b for b in response.content if b.type == "tool_use"]
                if not calls:
                    break
                history.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": b.id,
                                "content": file_content(b.input["path"], file_lines),
                            }
                            for b in calls
                        ],
                    }
                )
            else:
                # ``client.post`` is what ``chat.completions.create`` ends in, without its typed transform of
                # every message of every request (a quarter of a second per call once the history holds 400
                # messages): the same request, instrumented at the same place.
                response = client.post(
                    "/chat/completions",
                    body={"model": model, "max_tokens": 1024, "tools": OPENAI_TOOLS, "messages": history},
                    cast_to=ChatCompletion,
                )
                message = response.choices[0].message
                # Only the fields the API needs: the SDK transforms every message of every request.
                said: dict[str, Any] = {"role": "assistant", "content": message.content}
                if message.tool_calls:
                    said["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.function.name, "arguments": c.function.arguments},
                        }
                        for c in message.tool_calls
                    ]
                history.append(said)
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    path = json.loads(call.function.arguments)["path"]
                    history.append({"role": "tool", "tool_call_id": call.id, "content": file_content(path, file_lines)})
    return history


#: The read_file tool in the Responses API's shape.
RESPONSES_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


def _run_responses(client: Any, model: str, turns: int, file_lines: int) -> list[dict[str, Any]]:
    """The conversation on the Responses API, its whole input resent on every call (no stored state)."""
    from openai.types.responses import Response

    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": user_message(turn)})
        for _ in range(3):
            body = {
                "model": model,
                "instructions": SYSTEM,
                "max_output_tokens": 1024,
                "tools": RESPONSES_TOOLS,
                "input": history,
                "store": False,
            }
            response = client.post("/responses", body=body, cast_to=Response)  # see run(): create's transform
            calls = []
            for item in response.output:
                if item.type == "message":
                    text = "".join(part.text for part in item.content if part.type == "output_text")
                    history.append({"role": "assistant", "content": text})
                elif item.type == "function_call":
                    history.append(
                        {
                            "type": "function_call",
                            "call_id": item.call_id,
                            "name": item.name,
                            "arguments": item.arguments,
                        }
                    )
                    calls.append(item)
            if not calls:
                break
            for call in calls:
                path = json.loads(call.arguments)["path"]
                history.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": file_content(path, file_lines)}
                )
    return history


@dataclass
class Compaction:
    """What the model received on the first request after one compaction."""

    turn: int  #: the turn of that request
    constraint: bool
    reversal: bool  #: False also when the reversal was not said yet
    reversal_said: bool
    facts_said: int
    facts_kept: int
    user_messages: int  #: the user's messages sent before that request
    verbatim: int  #: of those, how many went out verbatim as a message of their own
    summarizer_input: int = 0  #: input tokens of the summarizer call(s) since the previous compaction
    summarizer_cache_read: int = 0
    tokens_after: int = 0  #: input tokens the provider counted for that request


@dataclass
class Audit:
    compactions: list[Compaction] = field(default_factory=list)

    @property
    def fact_rate(self) -> float:
        said = sum(c.facts_said for c in self.compactions)
        return sum(c.facts_kept for c in self.compactions) / said if said else 1.0


_TEXT_PARTS = ("text", "input_text", "output_text")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") in _TEXT_PARTS)
        return "\n".join(str(t) for t in texts)
    return ""


def _messages(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict):
        return []
    messages = body.get("messages") if "messages" in body else body.get("input")
    return [m for m in messages or [] if isinstance(m, dict) and m.get("role") not in ("system", "developer")]


def _is_summarizer(body: Any) -> bool:
    messages = _messages(body)
    return bool(messages) and NO_TOOLS_PREAMBLE in _text(messages[-1].get("content"))


def _summary_of(messages: Sequence[dict[str, Any]]) -> str | None:
    for m in messages:
        text = _text(m.get("content"))
        if SUMMARY_MESSAGE_HEADER[:40] in text:
            return text
    return None


def _turn_of(messages: Sequence[dict[str, Any]]) -> int:
    """The newest "Step N" / task turn the request carries (its user messages are the app's)."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        text = _text(m.get("content"))
        if text.startswith("Step "):
            return int(text.split(":", 1)[0].split()[1])
        if text.startswith(REVERSAL[:20]):
            return REVERSAL_TURN
        if text.startswith(CONSTRAINT[:20]):
            return 1
        if text.startswith(TASK[:20]):
            return 0
    return -1


def audit(exchanges: Sequence[Any]) -> Audit:
    """Per compaction, what the model received (see :class:`Compaction`)."""
    out = Audit()
    previous: str | None = None
    summarizer_in = summarizer_read = 0
    for exchange in exchanges:
        body, usage = exchange.body, exchange.usage or {}
        if not isinstance(body, dict) or exchange.status != 200:
            continue
        if _is_summarizer(body):
            if "prompt_tokens" in usage or "input" in body:
                summarizer_in += int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
                details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
                summarizer_read += int(details.get("cached_tokens") or 0)
            else:
                read = int(usage.get("cache_read_input_tokens") or 0)
                summarizer_in += (
                    int(usage.get("input_tokens") or 0) + read + int(usage.get("cache_creation_input_tokens") or 0)
                )
                summarizer_read += read
            continue
        messages = _messages(body)
        summary = _summary_of(messages)
        if summary is None or summary == previous:
            continue
        previous = summary
        turn = _turn_of(messages)
        sent = json.dumps(body, ensure_ascii=False)
        own = {_text(m.get("content")) for m in messages if m.get("role") == "user"}
        said = [user_message(t) for t in range(turn + 1)]
        facts = [FACTS[t] for t in FACTS if t < turn]
        tokens = int(usage.get("prompt_tokens") or 0) or sum(
            int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        )
        out.compactions.append(
            Compaction(
                turn=turn,
                constraint=CONSTRAINT in sent,
                reversal=REVERSAL in sent,
                reversal_said=turn >= REVERSAL_TURN,
                facts_said=len(facts),
                facts_kept=sum(1 for f in facts if f in sent),
                user_messages=len(said),
                verbatim=sum(1 for s in said if s in own),
                summarizer_input=summarizer_in,
                summarizer_cache_read=summarizer_read,
                tokens_after=tokens,
            )
        )
        summarizer_in = summarizer_read = 0
    return out
