"""Where a planted fact stands in a request that went out: verbatim, in the summary, or absent.

Pure functions on the JSON body of a request, for the three wire formats, so that the evaluation reads the
request the SDK actually sent (after the transparent compaction rewrote it), not what the app passed.

* **verbatim**: the exact planted line is inside a message that is not the compaction's summary message
  (a user message, an assistant message or a tool result kept as it was);
* **summary**: it is only inside the summary message (the one that begins with the compaction's header,
  docs/compaction.md): the exact text, or, as a real summarizer rephrases, a line holding both the fact's
  key and its answer, or, for an artifact a tool printed (a path, an identifier, an error), the artifact
  itself anywhere in the summary (a list of artifacts need not repeat what the tool was asked);
* **absent**: neither.

A constraint the user later reversed is judged with its reversal: once the reversal is planted, the
constraint may go (it is superseded), but it must never reach the model without the reversal, which
would make the model follow an instruction the user withdrew.

A **stale value** is the superseded value reaching the model as if it were current (:func:`stale_value`).
Read the request in order (messages in order, lines in order): a line that holds the constraint's key and its
old value, without the new value (a line with both states the change), is an *old line*; a line that holds
the key and the new value is a *new line*. An old line is *marked* when it, or the first line of its message,
says it was replaced (one of :data:`SUPERSEDED_MARKERS`, any case). The request carries a stale value when an
unmarked old line is there and either no new line is, or the last unmarked old line comes after the last new
line: a reader who takes the latest statement as the one in force then reads the old value. Old statements
kept in order before the change, or marked, are not stale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER
from otel_context.evaluation.script import Fact, answer_matches

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
    "stale_value",
    "user_messages_kept",
    "work_texts",
]

VERBATIM = "verbatim"
SUMMARY = "summary"
ABSENT = "absent"
STATES = (VERBATIM, SUMMARY, ABSENT)

#: Words that mark a statement as replaced (an old line holding one is not read as current; any case).
SUPERSEDED_MARKERS = (
    "superseded",
    "replaced",
    "outdated",
    "obsolete",
    "overridden",
    "no longer in force",
    "no longer applies",
)

WIRE_FORMATS = ("anthropic_messages", "openai_chat", "openai_responses")


@dataclass(frozen=True)
class SentMessage:
    """One message of a request as text: its role, everything it says, and whether it is the summary."""

    role: str
    text: str
    summary: bool = False
    #: A tool's result (a ``tool_result`` block, a ``tool`` message, a ``function_call_output``).
    tool_result: bool = False


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
                parts.append(_call_text(block.get("input")))
    return "\n".join(parts)


def _call_text(arguments: Any) -> str:
    """A tool call's arguments as the model reads them: the JSON the request carries, then each string argument
    that JSON escapes (a double quote, a backslash, a line break) as its own text. A command line with quotes
    (``git commit -m "fix: ..."``) is whole in what the model reads, not in the JSON (``\\"``): judged on the JSON
    alone, a command kept verbatim in the recent turns counted as lost."""
    if isinstance(arguments, str):
        raw = arguments
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return raw
    else:
        raw = json.dumps(arguments, sort_keys=True)
    escaped = [value for value in _string_values(arguments) if json.dumps(value)[1:-1] != value]
    return "\n".join([raw, *escaped])


def _string_values(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _string_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _string_values(item)


def _message(role: str, text: str, tool_result: bool = False) -> SentMessage:
    return SentMessage(role, text, summary=SUMMARY_MESSAGE_HEADER in text, tool_result=tool_result)


def _holds_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)


def request_messages(body: Mapping[str, Any], wire_format: str) -> list[SentMessage]:
    """The messages of a request body as text, system prompt first (role ``system``)."""
    out: list[SentMessage] = []
    if wire_format == "anthropic_messages":
        system = body.get("system")
        if system:
            out.append(SentMessage("system", _text_of(system)))
        for msg in body.get("messages") or []:
            if isinstance(msg, Mapping):
                content = msg.get("content")
                out.append(_message(str(msg.get("role")), _text_of(content), _holds_tool_result(content)))
        return out
    if wire_format == "openai_chat":
        for msg in body.get("messages") or []:
            if not isinstance(msg, Mapping):
                continue
            text = _text_of(msg.get("content"))
            for call in msg.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping):
                    text += "\n" + _call_text(function.get("arguments", ""))
            role = str(msg.get("role"))
            if role in ("system", "developer"):
                out.append(SentMessage(role, text))
            else:
                out.append(_message(role, text, tool_result=role == "tool"))
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
                out.append(SentMessage("assistant", _call_text(item.get("arguments", ""))))
            elif itype == "function_call_output":
                output = item.get("output")
                out.append(_message("tool", output if isinstance(output, str) else _text_of(output), True))
        return out
    raise ValueError(f"unknown wire format {wire_format!r}: one of {', '.join(WIRE_FORMATS)}")


def work_texts(messages: Sequence[SentMessage]) -> list[str]:
    """The texts the agent's work is looked for in (:mod:`otel_context.evaluation.work`): every message but the
    system prompt, a tool's result joined to the message that called the tool, as a reader takes them together
    (the call names the file, the result shows its code)."""
    texts: list[str] = []
    for m in messages:
        if m.role in ("system", "developer"):
            continue
        if m.tool_result and texts:
            texts[-1] += "\n" + m.text
        else:
            texts.append(m.text)
    return texts


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
        if fact.artifact and answer_matches(fact.answer, m.text):
            return SUMMARY
    return ABSENT


def _marked(line: str, first_line: str) -> bool:
    return any(marker in text.lower() for text in (line, first_line) for marker in SUPERSEDED_MARKERS)


def stale_value(old: Fact, new: Fact, messages: Sequence[SentMessage]) -> tuple[bool, bool]:
    """(stale, sent): whether ``old`` (a constraint that ``new`` reversed) reaches the model as if current
    (the module docstring defines it), and whether its old value is in the request at all (marked or not)."""
    key = old.key.lower()
    position = 0
    last_old = last_new = -1
    sent = False
    for m in messages:
        lines = m.text.splitlines()
        first = lines[0] if lines else ""
        for line in lines:
            position += 1
            if key not in line.lower():
                continue
            has_new = answer_matches(new.answer, line)
            if has_new:
                last_new = position
            elif answer_matches(old.answer, line):
                sent = True
                if not _marked(line, first):
                    last_old = position
    return last_old > last_new, sent


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
    #: A superseded constraint whose old value reaches the model as if current (see :func:`stale_value`).
    stale: bool = False
    #: A superseded constraint whose old value is in the request at all, marked or in order (not a failure).
    old_value_sent: bool = False

    @property
    def failure(self) -> bool:
        """What fails the evaluation: a user fact lost, a constraint sent without its reversal, a stale value."""
        return (self.lost and self.fact.user_fact) or self.without_reversal or self.stale


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
        stale, sent = stale_value(fact, reversal, messages)
        out.append(
            FactStatus(
                fact, state, lost=False, without_reversal=alone, superseded=True, stale=stale, old_value_sent=sent
            )
        )
    return out


def user_messages_kept(said: Sequence[str], messages: Sequence[SentMessage]) -> tuple[int, int]:
    """Of the user's messages ``said`` so far (their texts, oldest first), how many reach the request
    verbatim: (as a user message of their own, whole inside the summary message). A text said several times
    counts once per copy that reached the request."""
    own: dict[str, int] = {}
    for m in messages:
        if m.role == "user" and not m.summary:
            own[m.text] = own.get(m.text, 0) + 1
    summary = "\n".join(m.text for m in messages if m.summary)
    quoted_left: dict[str, int] = {}
    verbatim = quoted = 0
    for text in said:
        if own.get(text, 0) > 0:
            own[text] -= 1
            verbatim += 1
            continue
        if text not in quoted_left:
            quoted_left[text] = summary.count(text) if text else 0
        if quoted_left[text] > 0:
            quoted_left[text] -= 1
            quoted += 1
    return verbatim, quoted


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
