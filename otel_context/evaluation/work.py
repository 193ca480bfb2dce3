"""The agent's own work in a scripted session, and whether each piece of it reaches a request.

A coding agent's session leaves a trail besides what the user said: the files it read, the files it changed or
created, the definitions it looked at or changed (a class or a function, and where it is), the errors its commands
printed (open until a later run passes, then closed), the commands it ran, and what it decided or committed to
("We will store money as i128 minor units", "Plan: migrate on 2027-01-15"). After a compaction the agent needs that
trail as much as the user's words: without it, it re-reads files it already changed, or repeats a failure it
already saw. The evaluation measures, compaction after compaction, how much of it reaches the request.

**What the trail is** comes from the scenario's script, not from reading its text afterwards: the script's generator
records on each turn what the turn does (a :class:`WorkEvent`: this file read, that one changed, this error seen,
fixed), from the tool calls it scripts. So the evaluation is an independent judge of any compactor: it knows
what happened without an extraction rule, and it does not look for any format a compactor writes.

**Its kind changes with time.** A file is *read* until the agent changes it, *changed* from then on (created files
are changed from the start); an error is *open* until the run that fixes it, *closed* after. The kinds, in
:data:`WORK_KINDS`: files read, files changed or created, definitions, open errors, closed errors, commands and
decisions.

**Kept** means the item reaches the request as sent, anywhere: a message kept verbatim, the summary, or a block
a compactor restores (:func:`kept`). Every message of the request is read, the system prompt excepted, and an
absolute path under the session's working directory is read as the relative path it is (with or without its
leading slash). Each family has one rule,
written as a reader would recognise the item:

* a **file**: its path whole (``src/orders/handlers/refund.py``, not inside ``src/orders/handlers/refunds.py``);
  or, as a list grouped by folder, a folder of the path (``src/orders/handlers/``, ``src/orders:``) followed on
  the same line, or on the indented or bulleted lines under it, by the rest of the path as a word of its own
  (``src/orders/handlers/: refund.py, refunds.py``, ``src/orders/handlers/{refund.py,refunds.py}``). A folder
  alone does not name a file;
* a **definition**: its name as a whole word (case sensitive) and its file, in one message (a tool's call and
  its result count as one: the call names the file, the result shows the code);
* an **error**: where it is (``path:line``, a test's name) and what it is (the error code or exception:
  ``E0308``, ``AssertionError``), in one message;
* a **command**: the command line whole (``cargo test -p ledger-core``);
* a **decision**: its sentence whole, anywhere; or one line holding every term of its gist, any case (the
  values it decided, ``i128`` and ``minor units``; ``2027-01-15``).

Nothing here imports the scenarios or the classifier: the functions work on plain texts, so both can use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

__all__ = [
    "FAMILIES",
    "GATED_KINDS",
    "KIND_LABELS",
    "WORK_KINDS",
    "Needle",
    "Tracked",
    "WorkEvent",
    "WorkItem",
    "WorkStatus",
    "assess_work",
    "command",
    "count_work",
    "decision",
    "definition",
    "error",
    "file",
    "kept",
    "track",
]

FAMILY_FILE = "file"
FAMILY_DEFINITION = "definition"
FAMILY_ERROR = "error"
FAMILY_COMMAND = "command"
FAMILY_DECISION = "decision"
FAMILIES = (FAMILY_FILE, FAMILY_DEFINITION, FAMILY_ERROR, FAMILY_COMMAND, FAMILY_DECISION)

KIND_READ = "read"
KIND_CHANGED = "changed"
KIND_DEFINITION = "definition"
KIND_OPEN_ERROR = "open_error"
KIND_CLOSED_ERROR = "closed_error"
KIND_COMMAND = "command"
KIND_DECISION = "decision"
WORK_KINDS = (
    KIND_READ,
    KIND_CHANGED,
    KIND_DEFINITION,
    KIND_OPEN_ERROR,
    KIND_CLOSED_ERROR,
    KIND_COMMAND,
    KIND_DECISION,
)
#: What a run may not lose (issue 48): losing one of these fails a run whose scenario is gated.
GATED_KINDS = (KIND_CHANGED, KIND_OPEN_ERROR, KIND_DECISION)
KIND_LABELS: Mapping[str, str] = MappingProxyType(
    {
        KIND_READ: "files read",
        KIND_CHANGED: "files changed",
        KIND_DEFINITION: "definitions",
        KIND_OPEN_ERROR: "open errors",
        KIND_CLOSED_ERROR: "closed errors",
        KIND_COMMAND: "commands",
        KIND_DECISION: "decisions",
    }
)

#: How a needle is matched: a path (the file rule of the module docstring), a word (whole, case sensitive: a
#: name, a code, a command) or a phrase (whole, any case: a decision's terms).
PATH = "path"
WORD = "word"
PHRASE = "phrase"


@dataclass(frozen=True)
class Needle:
    """One thing to find: a path, a word or a phrase (see :data:`PATH`)."""

    text: str
    how: str = WORD

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        escaped = re.escape(self.text)
        if self.how == PATH:
            return re.compile(rf"(?<![\w./-]){escaped}(?![\w/-]|\.\w)")
        return re.compile(rf"(?<![\w-]){escaped}(?![\w-])", re.IGNORECASE if self.how == PHRASE else 0)

    def found(self, text: str) -> bool:
        """Whether ``text`` holds the needle (a path also in a group by folder: the module docstring)."""
        if self._pattern.search(text) is not None:
            return True
        return self.how == PATH and _in_folder_group(self.text, text)


_BULLET = re.compile(r"^\s*(?:[-*\u2022+]|\d+[.)])?\s")


def _in_folder_group(path: str, text: str) -> bool:
    """A folder of ``path`` followed, on its line or on the indented or bulleted lines under it, by the rest."""
    parts = path.split("/")
    if len(parts) < 2 or parts[-1] not in text:
        return False
    lines = text.splitlines()
    for k in range(len(parts) - 1, 0, -1):
        folder, rest = "/".join(parts[:k]), "/".join(parts[k:])
        if folder not in text:
            continue
        head = re.compile(rf"(?<![\w./-]){re.escape(folder)}(?:/(?![\w.-])|(?![\w./-]))")
        tail = re.compile(rf"(?<![\w./-]){re.escape(rest)}(?![\w/-]|\.\w)")
        for n, line in enumerate(lines):
            match = head.search(line)
            if match is None:
                continue
            group = [line[match.end() :]]
            for below in lines[n + 1 :]:
                if not _BULLET.match(below):
                    break
                group.append(below)
            if any(tail.search(g) for g in group):
                return True
    return False


@dataclass(frozen=True)
class WorkItem:
    """One piece of the agent's work, and how a reader recognises it in a request (the module docstring)."""

    id: str
    family: str
    #: Every group must be found (one of its alternatives), in one message, or on one line for a decision.
    needles: tuple[tuple[Needle, ...], ...]
    #: A decision: its sentence as the assistant wrote it (found anywhere, it is kept).
    sentence: str | None = None

    def kept_in(self, messages: Sequence[str]) -> bool:
        if self.sentence is not None and any(self.sentence in m for m in messages):
            return True
        units: Iterable[str] = (
            (line for m in messages for line in m.splitlines()) if self.family == FAMILY_DECISION else messages
        )
        return any(all(any(n.found(unit) for n in group) for group in self.needles) for unit in units)


def file(path: str) -> WorkItem:
    """A file of the session (read or changed: its kind comes from the events), by its path from the root."""
    return WorkItem(path, FAMILY_FILE, ((Needle(path, PATH),),))


def definition(name: str, path: str) -> WorkItem:
    """A class or function ``name`` of the file ``path``."""
    return WorkItem(f"{name} ({path})", FAMILY_DEFINITION, ((Needle(name),), (Needle(path, PATH),)))


def error(ident: str, where: Sequence[Needle], what: Sequence[Needle]) -> WorkItem:
    """An error: one of ``where`` (a ``path:line`` as a path, a test's name as a word) and one of ``what``."""
    return WorkItem(ident, FAMILY_ERROR, (tuple(where), tuple(what)))


def command(line: str) -> WorkItem:
    """A command the agent ran, by its command line."""
    return WorkItem(line, FAMILY_COMMAND, ((Needle(line),),))


def decision(ident: str, sentence: str, *gist: str) -> WorkItem:
    """A decision or commitment of the assistant: its sentence, and the terms a faithful rewording keeps."""
    return WorkItem(ident, FAMILY_DECISION, tuple((Needle(term, PHRASE),) for term in gist), sentence=sentence)


# What a turn does to an item (WorkEvent.does).
SEES = "sees"  #: the item appears: a file read, a definition looked at, a command run, a decision stated
CHANGES = "changes"  #: a file changed or created (a definition changed is seen)
FAILS = "fails"  #: an error printed: open from here
FIXES = "fixes"  #: the run that shows an error gone: closed from here


@dataclass(frozen=True)
class WorkEvent:
    """What one scripted turn does to one item: recorded by the script's generator, never read from text."""

    item: WorkItem
    does: str = SEES
    #: The event is in the assistant's reply, which joins the history after the turn's request: it reaches
    #: the request of the next turn. Else it is in the turn's own request (a tool call or its result).
    in_reply: bool = False


#: The kind of an item whose kind does not change: a definition, a command, a decision.
_STEADY_KINDS: Mapping[str, str] = MappingProxyType(
    {FAMILY_DEFINITION: KIND_DEFINITION, FAMILY_COMMAND: KIND_COMMAND, FAMILY_DECISION: KIND_DECISION}
)


@dataclass(frozen=True)
class Tracked:
    """An item with the turns (0-based) of the first request that carries it and of the one that changes its
    kind (a file's first change, an error's fix), or None."""

    item: WorkItem
    appears: int
    shifts: int | None = None

    def kind_at(self, turn: int) -> str | None:
        """The item's kind in the request of ``turn``, None before it appears."""
        if turn < self.appears:
            return None
        shifted = self.shifts is not None and self.shifts <= turn
        family = self.item.family
        if family == FAMILY_FILE:
            return KIND_CHANGED if shifted else KIND_READ
        if family == FAMILY_ERROR:
            return KIND_CLOSED_ERROR if shifted else KIND_OPEN_ERROR
        return _STEADY_KINDS[family]


def track(events_by_turn: Iterable[Sequence[WorkEvent]]) -> list[Tracked]:
    """Every item of a script, in the order it first appears, from each turn's events (turn by turn)."""
    appears: dict[str, int] = {}
    shifts: dict[str, int] = {}
    items: dict[str, WorkItem] = {}
    for turn, events in enumerate(events_by_turn):
        for event in events:
            at = turn + 1 if event.in_reply else turn
            key = f"{event.item.family}:{event.item.id}"
            known = items.setdefault(key, event.item)
            if known != event.item:
                raise ValueError(f"two items named {key!r} with different needles")
            appears[key] = min(appears.get(key, at), at)
            if event.does in (CHANGES, FIXES):
                shifts[key] = min(shifts.get(key, at), at)
            if event.does == CHANGES and items[key].family != FAMILY_FILE:
                raise ValueError(f"{key}: only a file is changed")
            if event.does in (FAILS, FIXES) and items[key].family != FAMILY_ERROR:
                raise ValueError(f"{key}: only an error fails or is fixed")
    return [Tracked(items[k], appears[k], shifts.get(k)) for k in sorted(items, key=lambda k: (appears[k], k))]


@dataclass(frozen=True)
class WorkStatus:
    """One item in one request: its kind then, and whether it reached the request."""

    tracked: Tracked
    kind: str
    kept: bool


def _unrooted(text: str, root: str | None) -> str:
    """``text`` with the session's working directory taken off the paths under it (its leading slash optional:
    ``/home/dev/payments/src/x.py`` and ``home/dev/payments/src/x.py`` both name ``src/x.py``)."""
    if not root:
        return text
    return re.sub(rf"(?<![\w./-])/?{re.escape(root.strip('/'))}/", "", text)


def kept(item: WorkItem, messages: Sequence[str], root: str | None = None) -> bool:
    """Whether ``item`` reaches a request whose messages (texts, system prompt excluded) are ``messages``."""
    return item.kept_in([_unrooted(m, root) for m in messages])


def assess_work(timeline: Sequence[Tracked], turn: int, messages: Sequence[str], root: str | None) -> list[WorkStatus]:
    """Every item that has appeared by the request of ``turn`` (0-based), with its kind and whether it is kept."""
    texts = [_unrooted(m, root) for m in messages]
    out: list[WorkStatus] = []
    for tracked in timeline:
        kind = tracked.kind_at(turn)
        if kind is not None:
            out.append(WorkStatus(tracked, kind, tracked.item.kept_in(texts)))
    return out


def count_work(statuses: Iterable[WorkStatus]) -> dict[str, list[int]]:
    """kind -> [kept, checked] over ``statuses`` (every kind, zeros included)."""
    counts = {kind: [0, 0] for kind in WORK_KINDS}
    for status in statuses:
        counts[status.kind][1] += 1
        counts[status.kind][0] += int(status.kept)
    return counts
