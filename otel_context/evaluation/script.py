"""What a scripted session is made of: planted facts, turns, tool calls, the agent's work, and the scenario.

Every turn is scripted, the assistant's replies and the tool results included, so the history is the same
for every provider and model: what differs between two runs is only what the compaction kept. The model's
own reply to each request is read for its usage and then dropped, as a replay would.

Each scenario plants eleven facts at fixed fractions of the conversation, so a shorter run (``--turns``)
still plants them all: seven the user states (a constraint; a second constraint, a value the user later
changes; a file path; an identifier; a preference; a pending task; the change of that value), three
artifacts a tool result prints (a file path, an identifier, an error line) and one decision of the
assistant. Each is written as a user, a tool or the assistant would write it, inside an ordinary message:
nothing marks it as planted, so a summarizer (simulated or real) cannot tell it from the work around it.
Every fact has a *key*, a phrase found in its text and in no other line of the scenario, and a short
*answer* that its probe question expects (an artifact's answer, the path or identifier itself, is found in
no other line either); both are checked when the script is built.

The turns between the facts come from the scenario's *source*, a seeded generator, so they are identical on
every run: each records what it does to the agent's work (:mod:`otel_context.evaluation.work`), the ground
truth the evaluation judges the requests against.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from otel_context.evaluation.work import (
    FAILS,
    FAMILY_DECISION,
    SEES,
    Tracked,
    WorkEvent,
    WorkItem,
    command,
    decision,
    track,
)

__all__ = [
    "DEFAULT_WINDOW",
    "KINDS",
    "MIN_TURNS",
    "SOURCES",
    "TOOLS",
    "Fact",
    "Scenario",
    "ScriptedTurn",
    "ToolStep",
    "TurnSource",
    "answer_matches",
]

KIND_CONSTRAINT = "constraint"
KIND_PREFERENCE = "preference"
KIND_FILE_PATH = "file_path"
KIND_IDENTIFIER = "identifier"
KIND_ERROR = "error_message"
KIND_DECISION = "decision"
KIND_PENDING = "pending_task"
KIND_REVERSAL = "reversal"
KINDS = (
    KIND_CONSTRAINT,
    KIND_PREFERENCE,
    KIND_FILE_PATH,
    KIND_IDENTIFIER,
    KIND_ERROR,
    KIND_DECISION,
    KIND_PENDING,
    KIND_REVERSAL,
)

SOURCE_USER = "user"
SOURCE_ASSISTANT = "assistant"
SOURCE_TOOL = "tool"
SOURCES = (SOURCE_USER, SOURCE_ASSISTANT, SOURCE_TOOL)


@dataclass(frozen=True)
class Fact:
    """One planted fact: the exact line planted, and the probe question that checks it."""

    id: str
    kind: str
    source: str  #: who states it: user, assistant or tool (a tool result)
    text: str  #: the exact text planted (a sentence of the user's or assistant's message, a line of a tool result)
    key: str  #: a phrase of ``text`` found in no other line of the scenario (the reversal shares its constraint's)
    question: str
    answer: str  #: the short answer the probe expects (a word-bounded, case-insensitive match)
    at: float  #: where it is planted, as a fraction of the conversation's turns
    lead: str  #: what the message says before the fact (user, assistant) or the tool's argument (tool)
    reverses: str | None = None  #: for a reversal: the id of the constraint it reverses
    #: A tool fact: the tool whose result prints it, ``run_command`` (a shell) or ``grep`` (a search), as the
    #: scenario names those (``Scenario.shell``, ``Scenario.search``).
    tool: str = "run_command"
    before: tuple[str, ...] = ()  #: a tool fact: the result's lines before it (a test run's, by default)
    after: tuple[str, ...] = ()  #: a tool fact: the result's lines after it
    #: An error a tool printed: the same error as a piece of the agent's work (an open error, never fixed).
    error: WorkItem | None = None

    @property
    def artifact(self) -> bool:
        """Whether a tool result printed it (a path, an identifier, an error line): an artifact is kept when
        its answer, the artifact itself, reaches the request, even in a bare list of artifacts."""
        return self.source == SOURCE_TOOL

    @property
    def user_fact(self) -> bool:
        """Whether the user stated it: losing it fails the evaluation (the exit status CI checks)."""
        return self.source == SOURCE_USER

    def probe_line(self) -> str:
        """The question as asked: the ``probe:`` suffix is how the simulated model finds what to answer."""
        return f"{self.question} (probe: {self.key})"


@dataclass(frozen=True)
class ToolStep:
    """A tool call the assistant makes in a turn, and its scripted result."""

    name: str
    arguments: Mapping[str, Any]
    result: str


@dataclass(frozen=True)
class ScriptedTurn:
    """One turn: the user's message, optionally a tool call and its result, and the assistant's reply.

    The request of the turn is the history, the user's message and the tool round; the scripted reply is
    appended to the history afterwards (the model's own reply is not kept). A turn without a user message
    continues the agent's work: its tool call joins the assistant's reply before it, in one message (text, then
    the call), as a model that says something and calls a tool writes it.
    """

    user: str
    reply: str
    tool: ToolStep | None = None
    planted: tuple[str, ...] = ()  #: ids of the facts this turn plants
    #: What the turn does to the agent's work (files read or changed, errors, commands, decisions): the ground
    #: truth the evaluation judges the requests against, recorded by the generator that wrote the turn.
    work: tuple[WorkEvent, ...] = ()

    def __post_init__(self) -> None:
        if not self.user and self.tool is None:
            raise ValueError("a turn without a user message continues with a tool call")

    def lines(self) -> list[str]:
        """Every line of text the turn carries (for the uniqueness check of the keys)."""
        parts = [self.user, self.reply]
        if self.tool is not None:
            parts += [self.tool.result, json.dumps(dict(self.tool.arguments))]
        return [line for part in parts for line in part.splitlines()]


TOOLS: tuple[Mapping[str, Any], ...] = (
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "run_command",
        "description": "Run a shell command in the repository and return its output.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {
        "name": "grep",
        "description": "Search the repository for a regular expression.",
        "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
    },
    {
        "name": "edit_file",
        "description": "Replace a string in a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"],
        },
    },
)


#: The compaction window a scenario runs at unless it says otherwise (``Scenario.window``) or ``--window`` does.
DEFAULT_WINDOW = 12_000


class TurnSource(Protocol):
    """What fills a scenario's turns between its facts: an endless stream of turns from a seeded generator."""

    def turns(self, rng: random.Random) -> Iterator[ScriptedTurn]: ...


@dataclass(frozen=True)
class Scenario:
    """A scripted session: its system prompt, its tools, its planted facts and what fills the turns between them."""

    name: str
    title: str
    turns: int  #: the shipped length
    system: str
    facts: tuple[Fact, ...]
    source: TurnSource
    #: The window it runs at when ``--window`` does not say one (its standard configuration).
    window: int = DEFAULT_WINDOW
    tools: tuple[Mapping[str, Any], ...] = TOOLS
    #: The session's working directory: an absolute path under it names the same file as the relative one.
    root: str | None = None
    #: The tools a tool fact runs with: (name, argument) of the shell and of the search.
    shell: tuple[str, str] = ("run_command", "command")
    search: tuple[str, str] = ("grep", "pattern")
    #: Whether a changed file, an open error or a decision lost fails a run (issue 48; see ``scenarios``).
    work_gated: bool = False
    _cache: dict[int, tuple[ScriptedTurn, ...]] = field(default_factory=dict, compare=False, repr=False)

    def fact(self, fact_id: str) -> Fact:
        return next(f for f in self.facts if f.id == fact_id)

    def plant_turns(self, turns: int) -> dict[str, int]:
        """The turn (0-based) each fact is planted at in a conversation of ``turns`` turns."""
        taken: set[int] = set()
        where: dict[str, int] = {}
        for fact in sorted(self.facts, key=lambda f: f.at):
            index = min(max(1, round(fact.at * turns)), turns - 2)
            while index in taken:
                index += 1
            taken.add(index)
            where[fact.id] = index
        return where

    def script(self, turns: int | None = None) -> tuple[ScriptedTurn, ...]:
        """The turns of the conversation (the shipped length by default), the same on every call."""
        turns = self.turns if turns is None else turns
        if turns < MIN_TURNS:
            raise ValueError(f"a scenario needs at least {MIN_TURNS} turns to plant its facts, got {turns}")
        cached = self._cache.get(turns)
        if cached is not None:
            return cached
        where = {index: fact_id for fact_id, index in self.plant_turns(turns).items()}
        stream = self.source.turns(random.Random(f"otel-context-eval/{self.name}"))
        script = tuple(self._fact_turn(self.fact(where[i])) if i in where else next(stream) for i in range(turns))
        self._check_keys(script)
        self._check_decisions(script)
        self._cache[turns] = script
        return script

    def work(self, turns: int | None = None) -> list[Tracked]:
        """The agent's work in the conversation: every item, the turn it appears at and the turn its kind
        changes (a file's first change, an error's fix)."""
        return track(turn.work for turn in self.script(turns))

    def _fact_turn(self, fact: Fact) -> ScriptedTurn:
        """The turn that plants ``fact``: in the user's message, the assistant's reply or a tool result."""
        if fact.source == SOURCE_USER:
            ack = _ACKS[len(fact.id) % len(_ACKS)]
            return ScriptedTurn(user=f"{fact.lead} {fact.text}", reply=ack, planted=(fact.id,))
        if fact.source == SOURCE_ASSISTANT:
            reply = f"{fact.lead} {fact.text} I will apply it in the next edits."
            stated = decision(fact.id, fact.text, fact.key, fact.answer)
            work = (WorkEvent(stated, in_reply=True),) if fact.kind == KIND_DECISION else ()
            return ScriptedTurn(
                user="How do you want to handle this? Decide and tell me.", reply=reply, planted=(fact.id,), work=work
            )
        errors = (WorkEvent(fact.error, FAILS),) if fact.error is not None else ()
        if fact.tool == "grep":
            name, argument = self.search
            return ScriptedTurn(
                user="Search the repository for that.",
                tool=ToolStep(name, {argument: fact.lead}, "\n".join([*fact.before, fact.text, *fact.after])),
                reply="Found it; I will read that file next.",
                planted=(fact.id,),
                work=errors,
            )
        before = fact.before or ("collected 14 items", "", "FAILURES", "_" * 20)
        after = fact.after if fact.before else ("", "1 failed, 13 passed")
        output = "\n".join([f"$ {fact.lead}", *before, fact.text, *after])
        name, argument = self.shell
        return ScriptedTurn(
            user="Run that again and show me what it prints.",
            tool=ToolStep(name, {argument: fact.lead}, output),
            reply="The output above says what went wrong. I will look at it next.",
            planted=(fact.id,),
            work=(WorkEvent(command(fact.lead), SEES), *errors),
        )

    def _check_keys(self, script: Sequence[ScriptedTurn]) -> None:
        """Every key is in its fact's text and in no line without it (an artifact's answer neither); no fact
        carries a marker that would tell a summarizer it is planted."""
        for fact in self.facts:
            owners = [fact] + [f for f in self.facts if f.key == fact.key and f.id != fact.id]
            if "FACT:" in fact.text or "\n" in fact.text:
                raise ValueError(f"{self.name}/{fact.id}: a fact is one line of ordinary text, without a marker")
            if fact.key.lower() not in fact.text.lower():
                raise ValueError(f"{self.name}/{fact.id}: the key {fact.key!r} is not in its text")
            if not answer_matches(fact.answer, fact.text):
                raise ValueError(f"{self.name}/{fact.id}: the answer {fact.answer!r} is not in its text")
            needles = [fact.key.lower()] + ([fact.answer.lower()] if fact.artifact else [])
            for turn in script:
                for line in turn.lines():
                    lowered = line.lower()
                    for needle in needles:
                        if needle in lowered and not any(o.text in line for o in owners):
                            raise ValueError(f"{self.name}/{fact.id}: {needle!r} also appears in {line!r}")

    def _check_decisions(self, script: Sequence[ScriptedTurn]) -> None:
        """A decision's gist is on no line of the script but its own sentence's, and its sentence is in its
        turn's reply: a line that holds the gist can only have come from the decision."""
        decisions = {e.item.id: e.item for t in script for e in t.work if e.item.family == FAMILY_DECISION}
        for turn in script:
            for event in turn.work:
                item = event.item
                if item.family == FAMILY_DECISION and (item.sentence or "") not in turn.reply:
                    raise ValueError(f"{self.name}/{item.id}: a decision is stated in its turn's reply")
        for item in decisions.values():
            for turn in script:
                for line in turn.lines():
                    if item.sentence and item.sentence in line:
                        continue
                    if item.kept_in([line]):
                        raise ValueError(f"{self.name}/{item.id}: its gist is also on the line {line!r}")


def answer_matches(answer: str, text: str) -> bool:
    """Exact-match scoring: ``answer`` occurs in ``text`` as a whole (any case, not inside a longer word)."""
    return re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", text, re.IGNORECASE) is not None


MIN_TURNS = 24

_ACKS = (
    "Understood, I will keep that in mind for the rest of the session.",
    "Noted. I will follow that from now on.",
    "Got it; that changes nothing in the current step, and I will apply it to the next ones.",
)
