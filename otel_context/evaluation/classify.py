"""Where a planted fact stands in a request that went out: verbatim, in the summary, or absent.

Pure functions on the JSON body of a request, for the three wire formats, so that the evaluation reads the
request the SDK actually sent (after the transparent compaction rewrote it), not what the app passed.

* **verbatim**: the exact planted line is inside a message that is not the compaction's summary message
  (a user message, an assistant message or a tool result kept as it was);
* **summary**: it is only inside the summary message (the one that begins with the compaction's header,
  docs/compaction.md): the exact line, or, as a real summarizer rephrases, a line holding both the fact's
  key and its answer;
* **absent**: neither.

A constraint the user later reversed is judged with its reversal: once the reversal is planted, the
constraint may go (it is superseded), but it must never reach the model without the reversal, which
would make the model follow an instruction the user withdrew.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER
from otel_context.evaluation.scenarios import Fact, answer_matches

__all__ = [
    "ABSENT",
    "STATES",
    "SUMMARY",
    "VERBATIM",
    "FactStatus",
    "SentMessage",
    "answer_matches",
    "assess",
    "classify",
    "is_summarizer_request",
    "parse_answers",
    "request_messages",
]

VERBATIM = "verbatim"
SUMMARY = "summary"
ABSENT = "absent"
STATES = (VERBATIM, SUMMARY, ABSENT)

WIRE_FORMATS = ("anthropic_messages", "openai_chat", "openai_responses")


@dataclass(frozen=True)
class SentMessage:
    """One message of a request as text: its role, everything it says, and whether it is the summary."""

    role: str
    text: str
    summary: bool = False


def _text_of(content: Any) -> str:
    """The text of a message's content in any of the three formats (string, or a list of blocks/parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping):
            btype = block.get("type")
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif btype == "tool_result":
                parts.append(_text_of(block.get("content")))
            elif btype == "tool_use":
                parts.append(json.dumps(block.get("input"), sort_keys=True))
    return "\n".join(parts)


def _message(role: str, text: str) -> SentMessage:
    return SentMessage(role, text, summary=SUMMARY_MESSAGE_HEADER in text)


def request_messages(body: Mapping[str, Any], wire_format: str) -> list[SentMessage]:
    """The messages of a request body as text, system prompt first (role ``system``)."""
    out: list[SentMessage] = []
    if wire_format == "anthropic_messages":
        system = body.get("system")
        if system:
            out.append(SentMessage("system", _text_of(system)))
        for msg in body.get("messages") or []:
            if isinstance(msg, Mapping):
                out.append(_message(str(msg.get("role")), _text_of(msg.get("content"))))
        return out
    if wire_format == "openai_chat":
        for msg in body.get("messages") or []:
            if not isinstance(msg, Mapping):
                continue
            text = _text_of(msg.get("content"))
            for call in msg.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping):
                    text += "\n" + str(function.get("arguments", ""))
            role = str(msg.get("role"))
            out.append(SentMessage(role, text) if role in ("system", "developer") else _message(role, text))
        return out
    if wire_format == "openai_responses":
        if isinstance(body.get("instructions"), str):
            out.append(SentMessage("system", body["instructions"]))
        items = body.get("input")
        if isinstance(items, str):
            return [*out, _message("user", items)]
        for item in items or []:
            if not isinstance(item, Mapping):
                continue
            itype = item.get("type", "message")
            if itype == "message":
                role = str(item.get("role"))
                text = _text_of(item.get("content"))
                out.append(SentMessage(role, text) if role in ("system", "developer") else _message(role, text))
            elif itype == "function_call":
                out.append(SentMessage("assistant", str(item.get("arguments", ""))))
            elif itype == "function_call_output":
                output = item.get("output")
                out.append(_message("tool", output if isinstance(output, str) else _text_of(output)))
        return out
    raise ValueError(f"unknown wire format {wire_format!r}: one of {', '.join(WIRE_FORMATS)}")


def is_summarizer_request(body: Mapping[str, Any], wire_format: str) -> bool:
    """Whether a captured request is the compactor's own summary request (not one the app made)."""
    messages = request_messages(body, wire_format)
    return bool(messages) and NO_TOOLS_PREAMBLE in messages[-1].text


def classify(fact: Fact, messages: Sequence[SentMessage]) -> str:
    """verbatim, summary or absent (see the module docstring)."""
    if any(not m.summary and fact.text in m.text for m in messages):
        return VERBATIM
    key = fact.key.lower()
    for m in messages:
        if not m.summary:
            continue
        if fact.text in m.text:
            return SUMMARY
        if any(key in line.lower() and answer_matches(fact.answer, line) for line in m.text.splitlines()):
            return SUMMARY
    return ABSENT


@dataclass(frozen=True)
class FactStatus:
    """A planted fact in one request: where it stands and whether that is a failure."""

    fact: Fact
    state: str
    #: Absent and not superseded by a reversal that was planted: the fact is lost.
    lost: bool
    #: A reversed constraint that reached the model without its reversal.
    without_reversal: bool = False
    #: A constraint whose reversal has been planted (it may go; it must not stay alone).
    superseded: bool = False

    @property
    def failure(self) -> bool:
        """What fails the evaluation: a user fact lost, or a constraint sent without its reversal."""
        return (self.lost and self.fact.user_fact) or self.without_reversal


def assess(planted: Iterable[Fact], messages: Sequence[SentMessage]) -> list[FactStatus]:
    """The status of every planted fact in the request ``messages`` (reversals applied)."""
    facts = list(planted)
    states = {f.id: classify(f, messages) for f in facts}
    reversal_of = {f.reverses: f for f in facts if f.reverses}
    out: list[FactStatus] = []
    for fact in facts:
        state = states[fact.id]
        reversal = reversal_of.get(fact.id)
        if reversal is None:
            out.append(FactStatus(fact, state, lost=state == ABSENT))
            continue
        alone = state != ABSENT and states[reversal.id] == ABSENT
        out.append(FactStatus(fact, state, lost=False, without_reversal=alone, superseded=True))
    return out


_NUMBERED = re.compile(r"^\s*(?:\*\*)?(\d+)\s*[.):]\s*(?:\*\*)?\s*(.*)$")


def parse_answers(text: str) -> dict[int, str]:
    """The numbered answers of a probe reply (``1. ...`` lines; a line without a number continues the last)."""
    answers: dict[int, str] = {}
    current: int | None = None
    for line in text.splitlines():
        match = _NUMBERED.match(line)
        if match:
            current = int(match.group(1))
            answers[current] = (answers.get(current, "") + " " + match.group(2)).strip()
        elif current is not None and line.strip():
            answers[current] += " " + line.strip()
    return answers
