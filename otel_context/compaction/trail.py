"""The work trail: what the agent itself did, kept beside every summary whatever the summarizer writes.

The repair (:mod:`.repair`) keeps the user's words; what a long session also loses is the agent's own work: the
files it read and changed, the definitions it looked at, the errors its commands printed and whether they were
fixed, the commands it ran, and what it decided. A summarizer that does not know which of these the next turn
needs drops them after two or three compactions. So every summary message carries a trail of them, built
deterministically from the conversation alone (no LLM call):

- the files the agent **changed**, **created** and **read** (a read of a file later changed is folded into the
  change), each with the top-level **definitions** (classes, functions, types) changed there, read there and
  mentioned in the assistant's text (``mentioned RefundPolicy``: the last to go), and read there;
- the definitions a search **found** (``path:line:def name(``);
- each **error** its commands printed, where and what (``src/money.rs:22:20 error[E0308]: mismatched types``),
  open until a later run of the same target passes (or of one that covers it: ``pytest tests/`` covers
  ``pytest tests/test_x.py``) or the agent says it is fixed, naming it; then one closed line;
- each **command** with its last outcome (``ok`` or ``failed``);
- the assistant's **decisions and commitments** (what it decided, chose, plans, will or will not do), each its
  whole sentence, values and dates kept.

**Anchored.** The trail is a block of the summary message (:data:`~.prompt.WORK_TRAIL_HEADER`), after the summary
and the repair's block, outside the anchor the next summarizer updates. The next compaction finds it in the span
it replaces (the previous summary message is that span's head), parses it back (:func:`parse`) and merges the
newly replaced span into it: the trail is updated, never re-derived from spans that are gone, so what it held
survives any number of compactions, whatever each summary keeps.

**One read.** The trail is built from the retention check's own walk of the span (:func:`.retention.walk`, whose
pass also collects the tool calls and results: :class:`~otel_context.formats.base.ToolUse`); it reads the texts
it needs from there: a read's result for its definitions, a command's result for its errors (only one that holds
an error word is scanned), the assistant's text for its decisions (only one that holds a decision's word).
Nothing is added to a call that does not compact.

**Bounded** (:func:`trail_budget`), and compressed the way a reader would before anything is dropped (:func:`render`):
paths grouped by folder (``src/orders/handlers/: refund.py, refunds.py``) and written from the tools' root
(``Paths from /home/dev/app/:``), closed errors to one line, a file's definitions the agent did not mention, the
definitions of the oldest files, the oldest reads to their folder (``docs/: 4 files read``), the oldest
commands; an open error, a changed or created file and a decision are never dropped while a read remains. What
could not be kept is counted by kind (:attr:`WorkTrail.dropped`, on the ``compact`` span).

**Measured.** The retention check counts what the trail holds of the span (its decisions, commands and
definitions: :func:`checked_items`) and a path the trail lists grouped or from the root as kept
(:attr:`WorkTrail.carried`); it does not read the trail block itself, which is carried on whole.
"""

from __future__ import annotations

import functools
import json
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain
from json.scanner import make_scanner
from typing import Any

from opentelemetry.trace import Span

from otel_context import process_state, semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import retention as retention_mod
from otel_context.compaction.prompt import WORK_TRAIL_HEADER, is_summary_message, restored_artifact_lines
from otel_context.compaction.repair import DECISION_LABEL, sentences
from otel_context.formats.base import ToolUse
from otel_context.settings import Settings
from otel_context.tokens import estimate_text

__all__ = [
    "MIN_TRAIL_TOKENS",
    "Trail",
    "WorkTrail",
    "annotate",
    "build",
    "checked_items",
    "parse",
    "render",
    "trail_budget",
]

#: The smallest trail worth its place (a handful of files, an error and a decision); as for the repair, the scaled
#: budget is not taken below it where an eighth of the effective window has room for it.
MIN_TRAIL_TOKENS = 600

# The kinds the trail counts (on the span: what it holds, and what did not fit).
KIND_CHANGED = semconv.TRAIL_KIND_CHANGED
KIND_CREATED = semconv.TRAIL_KIND_CREATED
KIND_READ = semconv.TRAIL_KIND_READ
KIND_DEFINITION = semconv.TRAIL_KIND_DEFINITION
KIND_OPEN_ERROR = semconv.TRAIL_KIND_OPEN_ERROR
KIND_CLOSED_ERROR = semconv.TRAIL_KIND_CLOSED_ERROR
KIND_COMMAND = semconv.TRAIL_KIND_COMMAND
KIND_DECISION = semconv.TRAIL_KIND_DECISION

_READ, _CHANGED, _CREATED = "read", "changed", "created"

#: The longest line of each kind kept whole (a longer one is cut: an error's message, a command's arguments).
MAX_ERROR_CHARS = 220
MAX_COMMAND_CHARS = 160
MAX_DECISION_CHARS = 400
#: The most definitions kept for one file (those the agent named first, then its classes): a module of sixty
#: functions is not kept whole (and the block lists fewer when it must: :class:`_Plan`).
MAX_DEFINITIONS_PER_FILE = 24


def trail_budget(settings: Settings, window: int | None, effective: int | None) -> int:
    """Tokens the trail may take in a summary message: ``trail_budget`` (25,000 at a 200K window: an eighth of the
    window), scaled below it like the repair's but not below :data:`MIN_TRAIL_TOKENS` (nor above the setting: 0
    turns the trail off), and at most an eighth of the effective window. Why an eighth: the trail of a 200-turn
    session on a 30,000-token window (85 files, 8 open and 7 closed errors, 35 commands, 18 decisions and the 38
    definitions the agent mentioned; the eval's ``long``) is ~3,100 tokens, compressed as :func:`render` does,
    10 % of that window; an eighth leaves it room. With the repair's twentieth and the user's words' tenth, what
    a compaction keeps outside the summarizer stays under three tenths of the window (Claude Code re-reads up to a
    quarter of it in files after each compaction)."""
    return budget_mod.block_budget(settings.trail_budget, MIN_TRAIL_TOKENS, window, effective)


# -- the state ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _File:
    path: str
    action: str  #: read, changed or created
    last: int  #: when it was last touched (the trail's clock)
    defs: list[str] = field(default_factory=list)  #: definitions read there, in order
    changed_defs: list[str] = field(default_factory=list)  #: definitions changed there
    named: set[str] = field(default_factory=set)  #: those of ``defs`` the assistant's text names


@dataclass(slots=True)
class _Error:
    text: str  #: where and what, one line
    target: str  #: the command that printed it last ("" unknown)
    open: bool
    last: int
    closed_by: str = ""  #: how it was closed: the command that passed, or "said fixed"
    #: Every command that printed it (a suite and the file's own run print the same failure).
    targets: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Command:
    line: str
    outcome: str  #: ok or failed
    last: int


@dataclass
class Trail:
    """The trail of a conversation so far: built from a span (:func:`build`), parsed back from a summary message
    (:func:`parse`), merged (:meth:`merge`). Mutable while it is built; :func:`render` writes it."""

    files: dict[str, _File] = field(default_factory=dict)  #: the oldest touched first
    #: Reads folded to their folder by an earlier compaction (folder -> how many files).
    folders: dict[str, int] = field(default_factory=dict)
    found: dict[str, str] = field(default_factory=dict)  #: a definition a search found -> where (path:line)
    errors: dict[str, _Error] = field(default_factory=dict)  #: by text
    commands: dict[str, _Command] = field(default_factory=dict)
    decisions: dict[str, int] = field(default_factory=dict)  #: sentence -> when
    #: What earlier compactions left out, by kind (said in the block, carried on).
    left_out: dict[str, int] = field(default_factory=dict)
    clock: int = 0
    #: The words of the assistant's text of the span the trail is built from: the definitions it mentions are the
    #: last to go (:meth:`name_first`).
    spoken: set[str] = field(default_factory=set, repr=False)
    #: Every tail of a known path after one of its ``/`` -> that path (a path named absolute by one tool and
    #: relative by another is one file).
    _tails: dict[str, str] = field(default_factory=dict, repr=False)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    # -- files ----------------------------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        """The key ``path`` is known by: the same file may be named absolute by one tool and relative by
        another (``/home/dev/app/src/a.py``, ``src/a.py``)."""
        if path in self.files:
            return path
        known = self._tails.get(path)  # a known absolute path ends with "/" + path
        if known is not None or path[:1] not in _ABSOLUTE:
            return known or path
        at = path.find("/", 1)
        while at >= 0:  # path, absolute, ends with "/" + a known path
            if path[at + 1 :] in self.files:
                return path[at + 1 :]
            at = path.find("/", at + 1)
        return path

    def touch(
        self,
        path: str,
        action: str,
        defs: Iterable[str] = (),
        changed: Iterable[str] = (),
        whole: bool = False,
        named: Iterable[str] = (),
    ) -> None:
        """``path`` read, changed or created; ``defs``: the definitions read there (``whole``: the file read
        whole, whose definitions they are now), ``changed``: those changed, ``named``: those of ``defs`` the
        assistant named."""
        path = path.strip()
        if not path:
            return
        key = self._key(path)
        entry = self.files.get(key)
        self.clock += 1
        when = self.clock
        if entry is None:
            entry = self.files[key] = _File(key, action, when)  # the files are kept newest last
            at = key.find("/", 1) if key[:1] in _ABSOLUTE else -1
            while at >= 0:
                self._tails.setdefault(key[at + 1 :], key)
                at = key.find("/", at + 1)
        else:
            entry.last = when
            self.files[key] = self.files.pop(key)  # the newest last
            if action != _READ and entry.action == _READ:
                entry.action = action  # a read later changed is folded into the change
        if whole:
            entry.defs = list(defs)
        else:
            for name in defs:
                if name not in entry.defs:
                    entry.defs.append(name)
        if len(entry.defs) > MAX_DEFINITIONS_PER_FILE:  # the newest, on a file read in parts
            del entry.defs[: len(entry.defs) - MAX_DEFINITIONS_PER_FILE]
        if changed:
            for name in changed:
                if name not in entry.changed_defs:
                    entry.changed_defs.append(name)
            del entry.changed_defs[: max(0, len(entry.changed_defs) - MAX_DEFINITIONS_PER_FILE)]
        if named:
            entry.named.update(named)

    def knows(self, path: str) -> bool:
        return self._key(path) in self.files

    # -- errors and commands --------------------------------------------------------------------------------

    def ran(self, line: str, failed: bool, errors: Sequence[str]) -> None:
        when = self.tick()
        self.commands.pop(line, None)  # the newest last
        self.commands[line] = _Command(line, "failed" if failed else "ok", when)
        if not failed:
            for error in self.errors.values():
                if error.open and any(_covers(line, target) for target in error.targets or [error.target] if target):
                    error.open, error.closed_by, error.last = False, f"`{line}` ok", when
            return
        for text in errors:
            printed = self.errors.pop(text, None) or _Error(text, line, True, when)
            printed.open, printed.closed_by, printed.last, printed.target = True, "", when, line
            if line not in printed.targets:
                printed.targets.append(line)
            self.errors[text] = printed

    def name_first(self) -> None:
        """The definitions the assistant's text mentions marked as such in each file (the agent's own attention:
        they are listed first, and the last to go). The block says which (``mentioned``), so a later compaction
        reads it back."""
        named = self.spoken
        if named:
            for entry in self.files.values():
                if not named.isdisjoint(entry.defs):  # most files: none of theirs
                    entry.named.update(name for name in entry.defs if name in named)
        self.spoken = set()

    def has_open_errors(self) -> bool:
        return any(error.open for error in self.errors.values())

    def said_fixed(self, sentence: str) -> None:
        """The agent says an error is fixed: each open error the sentence names (a path, a test, a code, a
        distinctive name of it) is closed."""
        for error in self.errors.values():
            if error.open and any(token in sentence for token in _distinctive(error.text)):
                error.open, error.closed_by, error.last = False, "said fixed", self.tick()

    def decided(self, sentence: str) -> None:
        self.decisions.pop(sentence, None)
        self.decisions[sentence] = self.tick()

    # -- merging --------------------------------------------------------------------------------------------

    def merge(self, other: Trail) -> None:
        """``other`` (a trail parsed from a summary message, the older) folded into this one, in its order."""
        for entry in sorted(other.files.values(), key=lambda f: f.last):
            self.touch(entry.path, entry.action, entry.defs, entry.changed_defs, named=entry.named)
        for folder, count in other.folders.items():
            self.folders[folder] = self.folders.get(folder, 0) + count
        self.found.update(other.found)
        for text, error in other.errors.items():
            self.errors.pop(text, None)
            targets = list(error.targets or ([error.target] if error.target else []))
            self.errors[text] = _Error(error.text, error.target, error.open, self.tick(), error.closed_by, targets)
        for line, command in other.commands.items():
            self.commands.pop(line, None)
            self.commands[line] = _Command(line, command.outcome, self.tick())
        for sentence in other.decisions:
            self.decided(sentence)
        for kind, count in other.left_out.items():
            self.left_out[kind] = self.left_out.get(kind, 0) + count

    def counts(self) -> dict[str, int]:
        """How many items of each kind the trail holds (a folder of folded reads counts its files)."""
        actions = Counter(entry.action for entry in self.files.values())
        out = {KIND_CHANGED: actions[_CHANGED], KIND_CREATED: actions[_CREATED], KIND_READ: actions[_READ]}
        out[KIND_READ] += sum(self.folders.values())
        out[KIND_DEFINITION] = sum(
            len(set(f.defs).union(f.changed_defs)) if f.changed_defs else len(set(f.defs)) for f in self.files.values()
        ) + len(self.found)
        out[KIND_OPEN_ERROR] = sum(1 for e in self.errors.values() if e.open)
        out[KIND_CLOSED_ERROR] = len(self.errors) - out[KIND_OPEN_ERROR]
        out[KIND_COMMAND] = len(self.commands)
        out[KIND_DECISION] = len(self.decisions)
        return out


#: How an absolute path starts (a tool of the agent's names the file absolute, another relative to the root).
_ABSOLUTE = ("/", "~")


_KIND_OF_ACTION = {_READ: KIND_READ, _CHANGED: KIND_CHANGED, _CREATED: KIND_CREATED}


# -- reading the span ------------------------------------------------------------------------------------------

#: Tool names: a file read, a file written whole, a file edited in place, a shell command, a search, a patch.
_READ_TOOLS = re.compile(r"read|view|open|cat|get_?file|fetch_?file|show_?file", re.IGNORECASE)
_WRITE_TOOLS = re.compile(r"write|create|save|put_?file", re.IGNORECASE)
_EDIT_TOOLS = re.compile(r"edit|replace|insert|modify|update|change|str_replace", re.IGNORECASE)
_PATCH_TOOLS = re.compile(r"patch|apply_?diff", re.IGNORECASE)
_SEARCH_TOOLS = re.compile(r"grep|search|find|rg\b|ripgrep|glob", re.IGNORECASE)
_COMMAND_KEYS = ("command", "cmd", "script", "commands")
#: What the text editor tool's ``command`` says it does (Anthropic's ``str_replace_based_edit_tool``).
_EDITOR_COMMANDS = {"view": _READ, "create": _CREATED, "str_replace": _CHANGED, "insert": _CHANGED}

#: A top-level definition in a file's text (a read's result): at the start of a line and not indented (a method
#: is its class's), after the modifiers a language puts first. Three forms, each led by one literal character so
#: that the engine finds the few candidates at memory speed: a plain file's lines (a line break, then a letter),
#: and the ``cat -n`` lines agents read files as (a number, then a tab, or Claude Code's arrow: ``  12→class X``).
_MODIFIERS = (
    r"(?:export (?:default )?|pub(?:\([\w:]+\))? |(?:public|private|protected|internal|abstract|final|static|sealed|"
    r"async|unsafe|data) )*"
)
_KEYWORD = (
    r"(class|def|function|fn|func|struct|interface|enum|trait|type|protocol|record|module) "
    r"(?:\([^)\n]{0,80}\) )?([A-Za-z_]\w*)"
)
_TOP_DEFINITION = re.compile(r"\n(?=[a-z])" + _MODIFIERS + _KEYWORD)
_NUMBERED_TAB = re.compile(r"\t(?<=\d\t)(?=[a-z])" + _MODIFIERS + _KEYWORD)
_NUMBERED_ARROW = re.compile("\u2192(?<=\\d\u2192)(?=[a-z])" + _MODIFIERS + _KEYWORD)
_NUMBERED = re.compile("^ *\\d+([\t\u2192])")
#: A definition anywhere in a snippet (an edit's old and new text, a patch's lines): snippets are indented.
_ANY_DEFINITION = re.compile(
    r"(?:^|\n)[ \t+-]*(?:export (?:default )?|pub(?:\([\w:]+\))? |(?:public|private|protected|async|static) )*"
    r"(class|def|function|fn|func|struct|interface|enum|trait|type) (?:\([^)\n]{0,80}\) )?([A-Za-z_]\w*)"
)
#: A search hit that is a definition: ``path:line:def name(`` (grep -n, ripgrep, a Grep tool's content).
_FOUND_DEFINITION = re.compile(
    r"^([\w./~@+-]+\.\w{1,6}):(\d+)[:-]\s*(?:export |pub |async |public |private )*"
    r"(?:class|def|function|fn|func|struct|interface|enum|trait|type) ([A-Za-z_]\w*)",
    re.MULTILINE,
)
#: A patch's files (Codex's ``apply_patch``, a unified diff).
_PATCH_FILE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+)$|^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
#: What says a command failed when no error line does (a count of failures, an exit status).
_FAILED = re.compile(
    r"\b[1-9]\d* (?:failed|failing|errors?|failures?)\b|\bFAILED\b|\bTraceback \(most recent call last\)"
    r"|\b(?:exit code|exit status|exited with(?: code)?|returned non-zero exit status)[: ]+[1-9]",
    re.IGNORECASE,
)
#: Words every error line holds one of: a result without any is not scanned for error lines.
_ERROR_HINTS = ("rror", "ERR", "FAIL", "ailed", "atal", "anic", "ception", "Traceback")
#: A shell command's reading and writing of files.
_READS_FILE = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "view"})
_WRITES_FILE = frozenset({"tee", "touch", "rm", "mv", "cp", "truncate"})
_PATH_TOKEN = re.compile(r"^[\w./~@+-]*[\w-]\.[A-Za-z0-9]{1,6}$|^[\w.~@+-]*/[\w./~@+-]*$")


#: ``json.loads``' own scanner (the C one, as :class:`json.JSONDecoder` makes it), for :func:`_json_object`.
_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _json_object(text: str) -> Any:
    """``json.loads(text)`` for a ``text`` that starts with ``{`` (the arguments of an OpenAI call): the same value,
    and a :class:`ValueError` where it raises one, without its three Python steps around the scan (``loads``,
    ``decode``, ``raw_decode``: ~0.9 µs a call where the scan of a call's arguments takes ~0.2; a span has a call
    every few items)."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except StopIteration:  # no value at 0 (raw_decode's "Expecting value")
        raise ValueError(text) from None
    if end != len(text) and text[end:].strip(" \t\n\r"):  # after the value, JSON's white space alone
        raise ValueError(text)  # json.loads' "Extra data"
    return value


def _arguments(use: ToolUse) -> Mapping[str, Any]:
    arguments = use.arguments
    if isinstance(arguments, str):  # OpenAI's JSON; a str is no Mapping (whose test is an ABC's, slower)
        if arguments[:1] == "{":
            try:
                parsed = _json_object(arguments)
            except ValueError:
                return {"input": arguments}
            return parsed if isinstance(parsed, Mapping) else {}
        return {"input": arguments}
    return arguments if isinstance(arguments, Mapping) else {}


def _path_of(arguments: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _command_of(arguments: Mapping[str, Any]) -> str | None:
    for key in _COMMAND_KEYS:
        value = arguments.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            # ["bash", "-lc", "cargo test"]: the script, not the shell that runs it
            value = value[-1] if len(value) >= 3 and value[-2] in ("-c", "-lc") else " ".join(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


#: A read's arguments that ask for a part of the file (its definitions then add to those known).
_PART_KEYS = frozenset(
    {"offset", "limit", "view_range", "start_line", "end_line", "line_start", "line_end", "lines", "range"}
)


def _whole(arguments: Mapping[str, Any]) -> bool:
    if _PART_KEYS.isdisjoint(arguments):  # most reads: a path alone
        return True
    return not any(arguments[key] is not None for key in arguments.keys() & _PART_KEYS)


def _definitions(text: str, pattern: re.Pattern[str] = _TOP_DEFINITION) -> list[str]:
    """The definitions of ``text`` as ``kind name`` for a class-like one (``class RefundHandler``), the name
    alone for a function (``refund_amount``), classes first, each once, at most :data:`MAX_DEFINITIONS_PER_FILE`."""
    if pattern is _TOP_DEFINITION:
        numbered = _NUMBERED.match(text)
        if numbered is None:
            text = "\n" + text
        else:
            pattern = _NUMBERED_TAB if numbered.group(1) == "\t" else _NUMBERED_ARROW
    types: list[str] = []
    functions: list[str] = []
    for kind, name in pattern.findall(text):
        if kind in ("def", "function", "fn", "func"):
            if name not in functions:
                functions.append(name)
        elif name not in types:
            types.append(name)
    return [*types, *functions][:MAX_DEFINITIONS_PER_FILE]


def _normalized(command: str) -> str:
    """A command line as one line, cut to :data:`MAX_COMMAND_CHARS`."""
    line = " ".join(command.split())
    return line if len(line) <= MAX_COMMAND_CHARS else line[: MAX_COMMAND_CHARS - 1] + "…"


_WRAPPERS = frozenset({"time", "env", "sudo", "nice", "uv", "poetry", "pipenv", "npx", "pnpx", "bunx", "hatch"})
_RUNNERS = frozenset({"run", "exec", "x"})
_SUBCOMMANDS = frozenset(
    {"cargo", "npm", "pnpm", "yarn", "go", "make", "git", "dotnet", "mvn", "gradle", "bun", "deno", "mix", "swift"}
)


def _target(command: str) -> tuple[str, list[str]]:
    """What a command runs and on what: its program (and subcommand) and its arguments that are not flags,
    without the shell around it (``cd x &&``, ``VAR=1``, ``2>&1``, ``| tail -n 20``)."""
    line = command.split("&&")[-1].split("|")[0].split(";")[0]
    tokens = [t for t in line.split() if "=" not in t or t.startswith("-")]
    while tokens and (tokens[0] in _WRAPPERS or tokens[0] in _RUNNERS or tokens[0] == "timeout" or tokens[0].isdigit()):
        tokens.pop(0)
    if len(tokens) >= 3 and tokens[0].startswith("python") and tokens[1] == "-m":
        tokens = tokens[2:]
    if not tokens:
        return "", []
    program = tokens[0].rsplit("/", 1)[-1]
    rest = tokens[1:]
    if program in _SUBCOMMANDS and rest and not rest[0].startswith("-"):
        program, rest = f"{program} {rest[0]}", rest[1:]
    return program, [t for t in rest if not t.startswith("-") and not t.startswith(("2>", ">", "<"))]


def _covers(later: str, earlier: str) -> bool:
    """Whether a run of ``later`` that passes shows ``earlier``'s errors gone: the same program, on everything
    (no arguments) or on what ``earlier`` ran on or a part of it that holds it (``tests/`` holds
    ``tests/test_x.py``, ``tests/test_x.py`` holds ``tests/test_x.py::test_y``)."""
    if later == earlier:
        return True
    program, args = _target(later)
    before, before_args = _target(earlier)
    if not program or program != before:
        return False
    return not args or all(any(b.startswith(a) for a in args) for b in before_args)


#: Generic names that do not tell one error from another (the agent's "fixed the KeyError" names none).
_GENERIC = frozenset(
    {
        "Error",
        "Exception",
        "AssertionError",
        "ValueError",
        "TypeError",
        "KeyError",
        "IndexError",
        "RuntimeError",
        "AttributeError",
        "NameError",
        "ImportError",
        "ModuleNotFoundError",
        "SyntaxError",
        "OSError",
        "FAILED",
        "ERROR",
    }
)
_TOKEN = re.compile(r"[A-Za-z_][\w.:/-]*\w")


def _distinctive(text: str) -> list[str]:
    """The names of an error that tell it from others: a path (without its position), a test, a code
    (``E0308``, ``TS2322``), a name with an underscore, a digit or inner capitals (``DivisionUndefined``)."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        token = token.split("::")[-1] if "::" in token else token
        token = re.sub(r"(?::\d+)+$", "", token).rstrip(":.")
        if len(token) < 4 or token in _GENERIC:
            continue
        if "/" in token or "_" in token or any(c.isdigit() for c in token) or sum(c.isupper() for c in token) >= 2:
            out.append(token)
    return out


#: Where an error is, read around its line when the line does not say it: a compiler's ``--> file:line``
#: after it, a linter's file header before its rows, a traceback's last frame.
_ARROW = re.compile(r"\n\s*--> ([^\s]+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _located(text: str, item: str, line_start: int) -> str:
    """The error line ``item`` with where it is: the whole line when something stands before the error word
    (``src/app.ts:41:7 - error TS2322: ...``), or the location found around it."""
    end = text.find("\n", line_start)
    line = text[line_start : end if end >= 0 else len(text)].strip()
    before = line[: line.find(item)] if item in line else ""
    where = ""
    if any(c.isdigit() for c in before) or "/" in before or "::" in before:
        where = before.strip().rstrip(":-").strip()
    elif item.startswith(("error[", "error:", "warning:")) or (item[:5] == "error" and "TS" in item[:10]):
        arrow = _ARROW.search(text, line_start, line_start + 400)
        if arrow is not None:
            where = arrow.group(1)
    elif item[:1].isdigit() and "error" in item[:20]:  # a linter's row: its file is the header above its rows
        where = _header_above(text, line_start)
    elif ":" in item and not before:
        frames = _FRAME.findall(text, max(0, line_start - 2_000), line_start)
        if frames:
            where = f"{frames[-1][0]}:{frames[-1][1]}"
    out = f"{where} {item}" if where and where not in item else item
    return out if len(out) <= MAX_ERROR_CHARS else out[: MAX_ERROR_CHARS - 1] + "…"


def _header_above(text: str, line_start: int) -> str:
    """The file a linter's rows are under: the nearest line above, not indented, that is one path."""
    for line in reversed(text[max(0, line_start - 4_000) : line_start].splitlines()[-60:]):
        if line and not line[0].isspace():
            return line.strip() if " " not in line.strip() and ("/" in line or "." in line) else ""
    return ""


#: Error forms of a command's output beside the retention check's error lines (:func:`.retention.error_lines`),
#: read here only, where a command's result is read whole: a Rust panic (``thread 'x' panicked at file:line:col:``
#: and its message on the next line), and an exception a log prints on a line of its own
#: (``ledger.exceptions.PostingRejected: LGR-7731 ...``, a module of ``exceptions`` or ``errors``).
_PANIC = re.compile(r"^thread '[^'\n]+' panicked at [^\n]+?:?\n[^\n]*", re.MULTILINE)
_LOGGED_EXCEPTION = re.compile(r"^\s*(?:[a-z_]\w*\.)+(?:exceptions|errors)\.[A-Z]\w*: [^\n]+", re.MULTILINE)
#: A lint's name, in the lines a compiler prints under its error (``#[deny(clippy::cast_possible_truncation)]``,
#: a help link ``.../index.html#cast_possible_truncation``): what the error is.
_LINT = re.compile(r"#\[(?:deny|warn|forbid)\(([\w:]+)\)\]|index\.html#(\w+)")


def _errors_of(result: str) -> list[str]:
    """The error lines a command's result prints, each with where it is (and a lint's name), the ones said again
    by a longer one left out (pytest's ``AssertionError: x`` beside ``FAILED tests/t.py::test_a - AssertionError:
    x``)."""
    if not any(hint in result for hint in _ERROR_HINTS):
        return []
    located = []
    for item, start in retention_mod.error_lines(result).items():
        error = _located(result, item, start)
        if item.startswith(("error", "warning")) and ("#[" in result or "index.html#" in result):
            lint = _LINT.search(result, start, start + 1_500)
            if lint is not None:
                error += f" [{(lint.group(1) or lint.group(2)).rsplit(':', 1)[-1]}]"
        located.append(error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…")
    if "panicked at" in result:
        located += [" ".join(m.split()) for m in _PANIC.findall(result)]
    if "exceptions." in result or "errors." in result:
        located += [m.strip() for m in _LOGGED_EXCEPTION.findall(result)]
    located = list(dict.fromkeys(e[:MAX_ERROR_CHARS] for e in located))
    return [e for e in located if not any(e != other and e in other for other in located)]


# -- decisions ------------------------------------------------------------------------------------------------

#: The assistant commits to something, decides or plans: "I will", "we'll", "I won't", "let's go with", "we
#: decided", "I chose", "Plan: ...", "Decision: ...", "going forward", "we switch to", "we never".
_DECISION = re.compile(
    r"\b(?:i|we)(?: will| shall|'ll| won't| will not| am going to|'m going to| are going to|'re going to| plan to|"
    r" intend to| decided| have decided|'ve decided| chose| have chosen|'ve chosen| agreed| settled on| opted|"
    r" never| always| must| switch| switched| moved| migrate| standardi[sz]e)\b"
    r"|\b(?:i'm|i am|we're|we are)(?: now| also| just)? \w+ing\b"
    r"|\blet(?:'s| us) (?!see\b|look\b|check\b|run\b|read\b|open\b|try\b|start\b|begin\b|dig\b|take\b|have\b|find\b|"
    r"figure\b|inspect\b|review\b|verify\b|confirm\b|quickly\b|now\b|first\b)\w"
    r"|^(?:decision|plan|the plan|our plan|my plan|approach|my approach|our approach|policy|convention|decided|"
    r"going forward|from now on|from here on|next steps?)\b\s*[:,-]"
    r"|\b(?:going|go) with\b|\bthe plan is\b|\bdecided to\b|\bgoing forward\b|\bfrom now on\b"
)
#: The words one of which every decision holds, whatever the case of its first letter, each with the words of a
#: text (split at punctuation, :data:`_WORD_BREAKS`) that say it may be there: a text without any is passed over
#: at memory speed, and a hint that no word of the span announces is not looked for at all.
_DECISION_HINTS: Mapping[str, tuple[str, ...]] = {
    "will": ("will",),
    "'ll": ("ll",),
    "won't": ("won",),
    "shall": ("shall",),
    "oing": ("going", "Going"),
    "lan": ("plan", "Plan", "plans", "planned", "planning"),
    "ecid": ("decide", "decided", "Decided", "decides", "decision", "Decision"),
    "chose": ("chose", "chosen"),
    "agreed": ("agreed",),
    "settled": ("settled",),
    "opted": ("opted",),
    "never": ("never",),
    "always": ("always",),
    "must": ("must",),
    "witch": ("switch", "Switch", "switched", "switching"),
    "moved": ("moved",),
    "igrat": ("migrate", "Migrate", "migrated", "migrating"),
    "tandardi": ("standardize", "standardise", "standardized", "standardised"),
    "et's": ("let", "Let"),
    "et us": ("let", "Let"),
    "rom now on": ("now",),
    "orward": ("forward", "Forward"),
    "o with": ("go", "Go"),
    "'m ": ("m",),
    " am ": ("am",),
    "'re ": ("re",),
    "e are ": ("are",),
    "pproach": ("approach", "Approach"),
    "olicy": ("policy", "Policy"),
    "onvention": ("convention", "Convention"),
}
#: A commitment to the next step of the work (read, run, look, fix ...) or to "that"/"it" the user said: the
#: narration of a turn, not a decision, unless it carries a value or a date.
_MOMENT = re.compile(
    r"\b(?:i|we)(?: will|'ll| am going to|'m going to| are going to|'re going to)(?: now| first| next| then| also| just|"
    r" quickly)? (?:look|read|check|run|rerun|re-run|open|search|grep|see|try|start|begin|continue|proceed|inspect|"
    r"examine|review|investigate|dig|take|have|go|get|fix|update|edit|add|remove|rename|write|create|apply|patch|"
    r"test|debug|verify|confirm|retry|do|keep that|follow that|note that|remember that|keep it|keep this)\b"
    r"|\b(?:i|we)(?: will|'ll)(?: \w+)? (?:that|this|it|them)\b"
    r"|\b(?:i'm|i am|we're|we are)(?: now| first| just| also)? (?:looking|reading|checking|running|rerunning|opening|"
    r"searching|grepping|seeing|getting|noticing|wondering|thinking|trying|starting|beginning|continuing|proceeding|"
    r"inspecting|examining|reviewing|investigating|digging|taking|having|waiting|done|going to (?:look|read|check|"
    r"run|open|see|try))\b"
)
_DATE_OR_VALUE = re.compile(r"\d{4}-\d{2}-\d{2}|\b\d+(?:\.\d+)?\s?[%\w]|`[^`]+`|\b(?:never|always|instead|only)\b")
#: The agent says an error is gone.
_FIXED = re.compile(
    r"\b(?:fixed|resolved|solved|now pass(?:es)?|pass(?:es)? now|no longer (?:fails?|raises?|errors?)|is gone|"
    r"are gone|green now|now green|goes away)\b",
    re.IGNORECASE,
)
_FIXED_HINTS: Mapping[str, tuple[str, ...]] = {
    "ixed": ("fixed", "Fixed"),
    "olved": ("solved", "resolved", "Resolved", "Solved"),
    "pass": ("pass", "passes"),
    "gone": ("gone",),
    "green": ("green",),
    "no longer": ("longer",),
}
_NOT_FIXED = re.compile(r"\b(?:not|n't|still|yet to|until)\b", re.IGNORECASE)


def _is_decision(sentence: str) -> bool:
    lowered = sentence.lower()
    if _DECISION.search(lowered) is None:
        return False
    return _MOMENT.search(lowered) is None or _DATE_OR_VALUE.search(sentence) is not None


def _read_assistant(trail: Trail, text: str, calls: Sequence[str], hinted: bool, fixing: bool) -> None:
    """Decisions (``hinted``: the text holds a word of one) and "fixed" statements (``fixing``) in the assistant's
    text, its tool calls' lines left out (an item's text holds each call as ``name {arguments}``)."""
    if calls:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(tuple(f"{c} " for c in calls)))
    for sentence in sentences(text):
        if fixing and _FIXED.search(sentence) and not _NOT_FIXED.search(sentence):
            trail.said_fixed(sentence)
        if hinted and len(sentence) <= MAX_DECISION_CHARS and _is_decision(sentence):
            trail.decided(sentence)


# -- the tools ------------------------------------------------------------------------------------------------


def _failed_edit(result: str) -> bool:
    head = result[:200].lower()
    return "tool_use_error" in head or head.startswith(("error", "failed")) or "not found in file" in head


def _shell(trail: Trail, command: str, result: str) -> None:
    """A shell command: the files it reads or writes (``cat``, ``sed -i``, ``> file``, ``touch``), a search's
    definitions, its outcome and errors."""
    line = _normalized(command)
    words = command.replace(";", " ; ").split()
    first = words[0].rsplit("/", 1)[-1] if words else ""
    paths = [w.strip("'\"") for w in words[1:] if _PATH_TOKEN.match(w.strip("'\""))]
    if first in _READS_FILE or (first == "sed" and "-n" in words):
        for path in paths:
            trail.touch(path, _READ, _definitions(result), whole=first == "cat" and len(paths) == 1)
        trail.ran(line, False, ())  # a read: what it printed is the file's, not the command's errors
        return
    if first in ("grep", "rg", "ag", "ack") or words[:2] == ["git", "grep"]:
        _found(trail, result)
        trail.ran(line, False, ())  # a search: the lines it found, errors or not, are the files'
        return
    if first in _WRITES_FILE or (first in ("sed", "perl") and any(w.startswith("-i") or w == "-pi" for w in words)):
        for path in paths:
            trail.touch(path, _CREATED if first == "touch" and not trail.knows(path) else _CHANGED)
    for marker in (">", ">>"):
        if marker in words:
            at = words.index(marker)
            if at + 1 < len(words) and _PATH_TOKEN.match(words[at + 1]):
                target = words[at + 1]
                trail.touch(target, _CHANGED if trail.knows(target) else _CREATED)
    errors = _errors_of(result)
    trail.ran(line, bool(errors) or _FAILED.search(result) is not None, errors)


def _found(trail: Trail, result: str) -> None:
    if "def" in result or "class" in result or "fn " in result or "func" in result or "type " in result:
        for path, number, name in _FOUND_DEFINITION.findall(result):
            trail.found[name] = f"{path}:{number}"


def _patch(trail: Trail, patch: str) -> None:
    """Codex's ``apply_patch`` (``*** Update File: path``), or a unified diff (``+++ b/path``): the files it
    changes, adds or deletes, and the definitions of its added lines."""
    matches = list(_PATCH_FILE.finditer(patch))
    for index, match in enumerate(matches):
        path = (match.group(2) or match.group(3) or "").strip()
        if not path or path == "/dev/null":
            continue
        end = matches[index + 1].start() if index + 1 < len(matches) else len(patch)
        added = "\n".join(line[1:] for line in patch[match.end() : end].splitlines() if line.startswith("+"))
        action = _CREATED if match.group(1) == "Add" else _CHANGED
        trail.touch(path, action, changed=_definitions(added, _ANY_DEFINITION))


_PATCH, _WRITE, _EDIT, _SEARCH, _OTHER = "patch", "write", "edit", "search", "other"
#: What a tool does by its name (and the app's file-reading tools), worked out once per name.
_KINDS: dict[tuple[str, frozenset[str]], str] = {}


def _tool_kind(name: str, read_tools: frozenset[str]) -> str:
    key = (name, read_tools)
    kind = _KINDS.get(key)
    if kind is None:
        if _PATCH_TOOLS.search(name):
            kind = _PATCH
        elif name in read_tools or (_READ_TOOLS.search(name) and not _EDIT_TOOLS.search(name)):
            kind = _READ
        elif _WRITE_TOOLS.search(name):
            kind = _WRITE
        elif _EDIT_TOOLS.search(name):
            kind = _EDIT
        elif _SEARCH_TOOLS.search(name):
            kind = _SEARCH
        else:
            kind = _OTHER
        if len(_KINDS) < 1_024:  # tool names are few; a stream of odd names is not remembered
            _KINDS[key] = kind
    return kind


# Kept by a reset and in a fork's child: each answer is a pure function of its key (the tool's name and the
# app's file-reading tools), right in any process and under any settings.
process_state.register(__name__, ("_KINDS",), on_reset=None, in_forked_child=None)


def _tool(trail: Trail, name: str, arguments: Mapping[str, Any], result: str, settings: Settings) -> None:
    """One tool call and its result, by what the tool does (its name, its arguments)."""
    keys = settings.file_path_keys
    kind = _tool_kind(name, settings.file_read_tools)
    path = _path_of(arguments, keys)
    if kind == _READ and path is not None and "command" not in arguments:  # most calls: a read
        trail.touch(path, _READ, _definitions(result), whole=_whole(arguments))
        return
    command = _command_of(arguments)
    editor = arguments.get("command") if isinstance(arguments.get("command"), str) else None
    if path is not None and editor in _EDITOR_COMMANDS:  # the text editor tool: its command says what it does
        action = _EDITOR_COMMANDS[editor]
        if action == _READ:
            trail.touch(path, _READ, _definitions(result), whole=_whole(arguments))
        elif not _failed_edit(result):
            content = str(arguments.get("file_text") or arguments.get("new_str") or "")
            trail.touch(path, action, changed=_definitions(content, _ANY_DEFINITION))
        return
    if kind == _PATCH:
        text = arguments.get("input") or arguments.get("patch") or arguments.get("diff") or ""
        if isinstance(text, str) and not _failed_edit(result):
            _patch(trail, text)
        return
    if path is not None and kind == _READ:
        trail.touch(path, _READ, _definitions(result), whole=_whole(arguments))
        return
    if path is not None and kind == _WRITE:
        if not _failed_edit(result):
            content = str(arguments.get("content") or arguments.get("file_text") or arguments.get("text") or "")
            action = _CHANGED if trail.knows(path) else _CREATED
            trail.touch(path, action, changed=_definitions(content, _ANY_DEFINITION))
        return
    if path is not None and kind == _EDIT:
        if not _failed_edit(result):
            snippets = [str(v) for k, v in arguments.items() if k not in keys and isinstance(v, str)]
            for edit in arguments.get("edits") or ():
                if isinstance(edit, Mapping):
                    snippets += [str(v) for v in edit.values() if isinstance(v, str)]
            trail.touch(path, _CHANGED, changed=_definitions("\n".join(snippets), _ANY_DEFINITION))
        return
    if command is not None:
        _shell(trail, command, result)
        return
    if kind == _SEARCH:
        _found(trail, result)


#: What splits the assistant's text into words at C speed (punctuation to spaces, then ``str.split``): the words
#: say which of the hints' texts to look for at all, and which definitions the agent mentions.
_WORD_BREAKS = str.maketrans(dict.fromkeys("`'\"()[]{},.;:!?<>=+*/\\|&^%$#@~\u2192", " "))


def _present(hints: Mapping[str, tuple[str, ...]], words: set[str]) -> list[str]:
    """The hints (:data:`_DECISION_HINTS`, :data:`_FIXED_HINTS`) that may occur in a text of ``words``: one of the
    words each comes with is there (a text without any is not scanned for the hint)."""
    return [hint for hint, among in hints.items() if any(word in words for word in among)]


def _holding(texts: Sequence[str], *lists: Sequence[str]) -> list[set[int]]:
    """For each of ``lists`` (of words), the indices of ``texts`` that hold one of its words: each word looked for
    in one joined text, at memory speed, jumping to the next text at a hit (most of an agent's texts hold none:
    each tested word by word cost more than the rest of the trail). The texts are joined once for all the lists,
    and not at all when no list has a word (a span whose texts hold none of the hints: the join and its offsets
    cost ~0.14 ms on ~700 texts)."""
    hits: list[set[int]] = [set() for _ in lists]
    if not texts or not any(lists):
        return hits
    joined = "\x00".join(texts)
    starts = list(accumulate((len(t) + 1 for t in texts[:-1]), initial=0))
    last = len(texts) - 1
    for words, hit in zip(lists, hits, strict=True):
        for word in words:
            at = joined.find(word)
            while at >= 0:
                index = bisect_right(starts, at) - 1
                hit.add(index)
                if index == last:
                    break
                at = joined.find(word, starts[index + 1])
    return hits


def build(walked: Sequence[tuple[str, bool, str]], tools: Sequence[ToolUse], settings: Settings) -> Trail:
    """The trail of a span from its walk (:func:`.retention.walk` with ``tools``, which lists them in the order of
    the items): the trail an earlier compaction wrote into a summary message of the span, parsed back, then what
    the span's items did, in order."""
    trail = Trail()
    spoken = [(index, text) for index, (text, model_output, _) in enumerate(walked) if model_output and text]
    texts = [text for _, text in spoken]
    words = set("\n".join(texts).translate(_WORD_BREAKS).split())  # the assistant's words, once
    trail.spoken = words
    decide_at, fix_at = _holding(texts, _present(_DECISION_HINTS, words), _present(_FIXED_HINTS, words))
    deciding = {spoken[k][0] for k in decide_at}
    fixing = {spoken[k][0] for k in fix_at}
    summaries = [i for i, (_, _, user) in enumerate(walked) if user and is_summary_message(user)]
    # Only the items that say something of the work are visited, in order: a summary message (the trail it
    # carries), a tool call or result, an assistant's text that holds a word of a decision or of a fix.
    visits = sorted({*summaries, *(use.item_index for use in tools), *deciding, *fixing})
    calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
    position, count = 0, len(tools)
    for index in visits:
        if summaries and index == summaries[0]:
            summaries.pop(0)
            user = walked[index][2]
            if WORK_TRAIL_HEADER in user:
                trail.merge(parse(user))
            for line in restored_artifact_lines(user):  # a decision an earlier version restored there
                if line.startswith(DECISION_LABEL):
                    trail.decided(line[len(DECISION_LABEL) :])
        called: list[str] = []
        while position < count and tools[position].item_index == index:
            use = tools[position]
            position += 1
            if use.result is None:
                calls[use.call_id] = (use.name or "", _arguments(use))
                called.append(use.name or "")
            elif use.call_id in calls:
                name, arguments = calls.pop(use.call_id)
                _tool(trail, name, arguments, use.result, settings)
        decides = index in deciding
        if decides or index in fixing:
            text = walked[index][0]
            fixes = index in fixing and trail.has_open_errors() and _FIXED.search(text) is not None
            if decides or fixes:
                _read_assistant(trail, text, called, decides, fixes)
    trail.name_first()
    return trail


# -- writing and reading the block ----------------------------------------------------------------------------

_SECTIONS = {
    _CHANGED: "Files changed:",
    _CREATED: "Files created:",
    _READ: "Files read:",
}
_FOUND_LINE = "Definitions found:"
_OPEN_LINE = "Errors open:"
_CLOSED_LINE = "Errors closed:"
_COMMANDS_LINE = "Commands, last outcome:"
_DECISIONS_LINE = "Decisions and commitments:"
_LEFT_OUT_PREFIX = "Not listed for room:"
_ALSO_CLOSED = "also closed: "
_FOLDED = re.compile(r"^(.+/): (\d+) files? read$")


#: Opens a file's definitions changed there, and those read there that the assistant's text mentions.
_CHANGED_DEFS = "changed "
_NAMED_DEFS = "mentioned "


def _definition_lists(entry: _File) -> tuple[list[str], list[str], list[str]]:
    """A file's definitions as its block lists them: those changed there, those read there that the assistant's
    text mentions, and the others read there."""
    changed = entry.changed_defs
    if not changed and not entry.named:  # the usual read: its definitions are the others, as they are
        return changed, [], entry.defs
    named = [d for d in entry.defs if d in entry.named and d not in changed]
    others = [d for d in entry.defs if d not in entry.named and d not in changed]
    return changed, named, others


def _definitions_written(changed: list[str], named: list[str], others: list[str], most: int) -> tuple[str, int]:
    """`` (changed a, b; mentioned C, D; e, f)`` after a file's path: the definitions changed there, those read
    there that the assistant's text mentions, and ``most`` of the others (:func:`_definition_lists`); "" for none.
    And how many it leaves out."""
    shown = others[:most]
    parts = []
    if changed:
        parts.append(_CHANGED_DEFS + ", ".join(changed))
    if named:
        parts.append(_NAMED_DEFS + ", ".join(named))
    if shown:
        parts.append(", ".join(shown))
    return (f" ({'; '.join(parts)})" if parts else ""), len(others) - len(shown)


#: Per file, worked out once per render (a render writes the block several times while it compresses it): the
#: path as written (from the root, :func:`_root`) and its folder.
_Parts = Mapping[str, tuple[str, str]]
#: Opens the line that says which folder the paths are written from.
_ROOT_PREFIX = "Paths from "


def _root(trail: Trail) -> str:
    """The folder every absolute path of the trail's files is in (``/home/dev/payments/``, the root an agent's
    tools name files from), when there are two of them at least and it is two folders deep at least; else ""."""
    absolute = [path.split("/")[:-1] for path in trail.files if path[:1] == "/"]
    if len(absolute) < 2:
        return ""
    common = absolute[0]
    for parts in absolute[1:]:
        size = 0
        while size < min(len(common), len(parts)) and common[size] == parts[size]:
            size += 1
        common = common[:size]
    return "/".join(common) + "/" if len(common) >= 3 else ""  # "", "home", "dev": two folders


def _parts(trail: Trail, root: str) -> dict[str, tuple[str, str]]:
    """Each file's path as written (from ``root``) and its folder ("" for none)."""
    out: dict[str, tuple[str, str]] = {}
    for path in trail.files:
        shown = path[len(root) :] if root and path.startswith(root) else path
        out[path] = (shown, shown[: shown.rfind("/") + 1])
    return out


def _file_lines(entries: Sequence[_File], grouped: bool, parts: _Parts, defs: Mapping[str, str]) -> list[str]:
    """The lines of ``entries`` (``defs``: the definitions part of each that lists its definitions)."""
    if not grouped:
        return [f"- {parts[e.path][0]}{defs.get(e.path, '')}" for e in entries]
    by_folder: dict[str, list[_File]] = {}
    for entry in entries:
        by_folder.setdefault(parts[entry.path][1], []).append(entry)
    lines: list[str] = []
    for folder, group in by_folder.items():
        if len(group) == 1 or not folder:
            lines += [f"- {parts[e.path][0]}{defs.get(e.path, '')}" for e in group]
            continue
        listed = ", ".join(f"{parts[e.path][0][len(folder) :]}{defs.get(e.path, '')}" for e in group)
        lines.append(f"- {folder}: {listed}")
    return lines


def _error_line(error: _Error) -> str:
    if error.open:
        return f"- {error.text} [`{error.target}`]" if error.target else f"- {error.text}"
    return f"- {error.text} [{error.closed_by or 'closed'}]"


#: What an error is, in a word: a code (``error[E0308]``, ``TS2322``, ``CS0103``, mypy's ``[arg-type]``, a lint's
#: ``[cast_possible_truncation]``, eslint's ``react-hooks/exhaustive-deps``), an exception's name, a panic.
_WHAT = re.compile(
    r"error\[E\d{4}\]|\b(?:TS|CS|E|C)\d{3,5}\b|\[[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+\]|\b(?:@?[\w-]+/)?[a-z]+(?:-[a-z]+)+$"
    r"|\b[\w.]*[A-Z]\w*(?:Error|Exception|Failure|Undefined|Rejected|Interrupt)\b|\bpanicked\b"
)
#: Where it is: a path with a line (``src/money.rs:22:20``, ``Report.tsx(88,14)``), a test (``tests/t.py::test_x``,
#: a Rust test's ``'posting::tests::x'``).
_WHERE = re.compile(
    r"[\w./~@+-]+\.\w{1,6}(?:::[\w\[\].-]+|\(\d+,\d+\)|(?::\d+)+)|[\w./~@+-]+::[\w\[\].-]+|'[\w:]+::\w+'"
)


def _short_error(error: _Error) -> str:
    """A closed error in a few words for the one line of them: where it was and what it was (``src/money.rs:22:20
    error[E0308]``, ``tests/test_refunds.py::test_x InvalidOperation``), else its first words."""
    where, what = _WHERE.search(error.text), _WHAT.search(error.text)
    if where is not None and what is not None:
        short = f"{where.group(0).strip(chr(39))} {what.group(0)}"
    else:
        short = error.text if len(error.text) <= 60 else error.text[:60].rsplit(" ", 1)[0]
    return short.replace("; ", ", ")


@dataclass(frozen=True)
class _Plan:
    """How much of the trail a render writes: the compression steps taken so far (see :func:`_steps`). Every
    ``*_kept`` is how many of the newest of its kind are listed (all of them by default)."""

    grouped: bool = False
    closed_folded: bool = False
    #: The most definitions listed for one file besides those changed there and those the assistant named.
    defs_per_file: int = MAX_DEFINITIONS_PER_FILE
    defs_kept: int = 1 << 30  #: the files whose definitions are listed (a changed file's before a read's)
    reads_kept: int = 1 << 30  #: the reads listed by name (the older ones folded to their folder)
    commands_kept: int = 1 << 30
    folders_kept: int = 1 << 30
    found_kept: int = 1 << 30
    closed_kept: int = 1 << 30
    decisions_kept: int = 1 << 30
    open_kept: int = 1 << 30
    changed_kept: int = 1 << 30


def _newest(items: Sequence[Any], kept: int) -> tuple[list[Any], list[Any]]:
    """(the oldest that go, the newest ``kept``) of ``items`` (oldest first)."""
    cut = max(0, len(items) - kept)
    return list(items[:cut]), list(items[cut:])


def _write(writer: _Writer, plan: _Plan) -> tuple[list[str], dict[str, int], set[str]]:
    """The block's lines under ``plan``, what it leaves out by kind, and the paths it lists (whole, grouped by
    folder or from the root: each as the retention check reads a path, for the check and the repair)."""
    trail, parts, files, root = writer.trail, writer.parts, writer.files, writer.root
    left: dict[str, int] = {}

    def leave(kind: str, count: int) -> None:
        if count > 0:
            left[kind] = left.get(kind, 0) + count

    gone, work = _newest(writer.work, plan.changed_kept)
    for entry in gone:
        leave(_KIND_OF_ACTION[entry.action], 1)
        leave(KIND_DEFINITION, writer.definition_counts[entry.path])
    folded_reads, reads = _newest(writer.reads, plan.reads_kept)
    folded = dict(trail.folders)
    for entry in folded_reads:
        folder = parts[entry.path][1] or "./"
        folded[folder] = folded.get(folder, 0) + 1
        leave(KIND_READ, 1)
        leave(KIND_DEFINITION, len(entry.defs))
    gone_folders, folder_lines = _newest(list(folded.items()), plan.folders_kept)
    del gone_folders  # the reads in them are counted above (the folded) or by an earlier compaction
    listed = work + reads
    # The files that list their definitions (a changed file's before a read's, the newest first), of those listed.
    if plan.defs_kept >= len(listed):
        show_defs: Container[str] = writer.paths
    else:
        ranked = writer.ranked
        if len(listed) < len(files):
            shown = {f.path for f in listed}
            ranked = [f for f in ranked if f.path in shown]
        show_defs = {f.path for f in ranked[: plan.defs_kept]}
    written = writer.definitions(plan.defs_per_file)
    defs: dict[str, str] = {}
    cut = 0
    for entry in listed:
        path = entry.path
        if path in show_defs:
            defs[path], left_out = written[path]
            cut += left_out
        else:
            cut += writer.definition_counts[path]
    leave(KIND_DEFINITION, cut)
    # As the retention check reads a path.
    carried = writer.carried if len(listed) == len(files) else {writer.carried_of[f.path] for f in listed}
    lines = [WORK_TRAIL_HEADER]
    if root:
        lines.append(f"{_ROOT_PREFIX}{root}:")
    for action in (_CHANGED, _CREATED, _READ):
        group = [f for f in (reads if action == _READ else work) if f.action == action]
        if group or (action == _READ and folder_lines):
            lines.append(_SECTIONS[action])
            lines += _file_lines(group, plan.grouped, parts, defs)
            if action == _READ:
                lines += [f"- {folder}: {count} file{'s' if count != 1 else ''} read" for folder, count in folder_lines]
    gone_found, found = _newest(list(trail.found.items()), plan.found_kept)
    leave(KIND_DEFINITION, len(gone_found))
    if found:
        lines.append(_FOUND_LINE)
        lines += [
            f"- {name}: {where[len(root) :] if root and where.startswith(root) else where}" for name, where in found
        ]
    errors = sorted(trail.errors.values(), key=lambda e: e.last)
    gone_open, opened = _newest([e for e in errors if e.open], plan.open_kept)
    leave(KIND_OPEN_ERROR, len(gone_open))
    if opened:
        lines.append(_OPEN_LINE)
        lines += [_error_line(e) for e in opened]
    gone_closed, closed = _newest([e for e in errors if not e.open], plan.closed_kept)
    leave(KIND_CLOSED_ERROR, len(gone_closed))
    if closed:
        lines.append(_CLOSED_LINE)
        if plan.closed_folded:
            lines.append("- " + _ALSO_CLOSED + "; ".join(_short_error(e) for e in closed))
        else:
            lines += [_error_line(e) for e in closed]

    # The commands that failed last are the newest kept (they say what is still broken).
    ranked_commands = sorted(trail.commands.values(), key=lambda c: (c.outcome == "failed", c.last))
    gone_commands, commands = _newest(ranked_commands, plan.commands_kept)
    leave(KIND_COMMAND, len(gone_commands))
    if commands:
        lines.append(_COMMANDS_LINE)
        lines += [f"- `{c.line}`: {c.outcome}" for c in sorted(commands, key=lambda c: c.last)]
    gone_decisions, decisions = _newest(list(trail.decisions), plan.decisions_kept)
    leave(KIND_DECISION, len(gone_decisions))
    if decisions:
        lines.append(_DECISIONS_LINE)
        lines += [f"- {d}" for d in decisions]
    total = dict(trail.left_out)
    for kind, count in left.items():
        total[kind] = total.get(kind, 0) + count
    if any(total.values()):
        said = ", ".join(f"{count} {_LABELS[kind]}" for kind, count in total.items() if count)
        lines.append(f"{_LEFT_OUT_PREFIX} {said}.")
    return lines, left, carried


_LABELS = {
    KIND_CHANGED: "files changed",
    KIND_CREATED: "files created",
    KIND_READ: "files read",
    KIND_DEFINITION: "definitions",
    KIND_OPEN_ERROR: "open errors",
    KIND_CLOSED_ERROR: "closed errors",
    KIND_COMMAND: "commands",
    KIND_DECISION: "decisions",
}
_KIND_OF_LABEL = {label: kind for kind, label in _LABELS.items()}
#: Characters per token of :func:`~otel_context.tokens.estimate_text` (chars / 4, padded by 4/3): a step is
#: tried on the lines' length first, and estimated only when that fits.
CHARS_PER_TOKEN = 3


def _with(plan: _Plan, name: str, kept: int) -> _Plan:
    """``plan`` keeping ``kept`` of the kind ``name`` (a field of :class:`_Plan`)."""
    changes: dict[str, Any] = {name: kept}
    return replace(plan, **changes)


class _Writer:
    """The writes of one render: each file's parts worked out once, each block written once (the search for the plan
    that fits asks for the same one more than once, plans that differ in a step that changes nothing of this
    trail's block write the same one, and the render writes the one it found)."""

    def __init__(self, trail: Trail) -> None:
        self.trail = trail
        self.root = _root(trail)
        self.parts = _parts(trail, self.root)
        self.writes: dict[_Plan, tuple[list[str], dict[str, int], set[str]]] = {}
        self.sizes: dict[_Plan, int] = {}
        self.definition_parts: dict[int, dict[str, tuple[str, int]]] = {}
        self.files = list(trail.files.values())  # oldest first
        self.work = [f for f in self.files if f.action != _READ]
        self.reads = [f for f in self.files if f.action == _READ]
        self.paths = trail.files.keys()
        #: How many of each kind there are: a plan keeping more writes what keeping all of them writes.
        self.bounds = {
            "defs_per_file": max((len(f.defs) for f in self.files), default=0),
            "defs_kept": len(self.files),
            "reads_kept": len(self.reads),
            "commands_kept": len(trail.commands),
            "folders_kept": len(trail.folders) + len(self.reads),
            "found_kept": len(trail.found),
            "closed_kept": sum(1 for e in trail.errors.values() if not e.open),
            "decisions_kept": len(trail.decisions),
            "open_kept": sum(1 for e in trail.errors.values() if e.open),
            "changed_kept": len(self.work),
        }
        #: Grouping by folder changes the block only where a folder holds two files (or two have none).
        self.groups = len({folder for _, folder in self.parts.values()}) < len(self.parts)

    @functools.cached_property
    def ranked(self) -> list[_File]:
        """The files in the order their definitions are kept: a changed file's before a read's, the newest first."""
        return sorted(self.files, key=lambda f: (f.action != _READ, f.last), reverse=True)

    @functools.cached_property
    def definition_counts(self) -> dict[str, int]:
        """Each file's definitions, as counted when its block leaves them out."""
        return {f.path: len(set(f.defs) | set(f.changed_defs)) for f in self.files}

    @functools.cached_property
    def carried_of(self) -> dict[str, str]:
        """Each file's path as the retention check reads a path."""
        return {path: path.lstrip("./~") for path in self.paths}

    @functools.cached_property
    def carried(self) -> set[str]:
        """The paths of all the files, as the retention check reads a path."""
        return set(self.carried_of.values())

    @functools.cached_property
    def definition_lists(self) -> list[tuple[str, tuple[list[str], list[str], list[str]]]]:
        return [(f.path, _definition_lists(f)) for f in self.files]

    def definitions(self, most: int) -> dict[str, tuple[str, int]]:
        """Each file's definitions part listing ``most`` of the others (:func:`_definitions_written`), worked out
        once per ``most``."""
        written = self.definition_parts.get(most)
        if written is None:
            written = {}
            for path, (changed, named, others) in self.definition_lists:
                if changed or named:
                    written[path] = _definitions_written(changed, named, others, most)
                else:  # the usual read (as _definitions_written writes it)
                    shown = others[:most]
                    written[path] = (f" ({', '.join(shown)})" if shown else ""), len(others) - len(shown)
            self.definition_parts[most] = written
        return written

    def key(self, plan: _Plan) -> _Plan:
        """``plan`` as the block it writes: a step that changes nothing of this trail's block (grouping where no
        folder holds two files, folding closed errors where there are none, keeping more of a kind than there
        is) as not taken."""
        bounds = self.bounds
        changes: dict[str, Any] = {name: bound for name, bound in bounds.items() if getattr(plan, name) > bound}
        if plan.grouped and not self.groups:
            changes["grouped"] = False
        if plan.closed_folded and not bounds["closed_kept"]:
            changes["closed_folded"] = False
        return replace(plan, **changes) if changes else plan

    def write(self, plan: _Plan) -> tuple[list[str], dict[str, int], set[str]]:
        key = self.key(plan)
        written = self.writes.get(key)
        if written is None:
            written = self.writes[key] = _write(self, key)
        return written

    def size(self, plan: _Plan) -> int:
        """The block's length under ``plan``, in characters (its lines and their line breaks)."""
        key = self.key(plan)
        size = self.sizes.get(key)
        if size is None:
            lines = self.write(key)[0]
            size = self.sizes[key] = sum(map(len, lines)) + len(lines)
        return size

    def most_kept(self, plan: _Plan, name: str, count: int, limit: int) -> _Plan:
        """``plan`` keeping the most of the kind ``name`` (up to ``count``) whose block is at most ``limit``
        characters; ``plan`` itself must fit. The size grows about linearly with what is kept, so the search
        guesses where the limit falls between what fits and what does not, and halves the interval when a guess
        gains little: a few writes of the block, not one per halving of a long list."""
        low, high = getattr(plan, name), min(count, 1 << 30)
        if low >= high:
            return plan
        size_high = self.size(_with(plan, name, high))
        if size_high <= limit:
            return _with(plan, name, high)
        size_low = self.size(plan)
        guessing = True
        while high - low > 1:
            if guessing:
                guess = low + int((limit - size_low) * (high - low) / max(1, size_high - size_low))
            else:
                guess = (low + high) // 2
            guess = min(high - 1, max(low + 1, guess))
            size = self.size(_with(plan, name, guess))
            width = high - low
            if size <= limit:
                low, size_low = guess, size
            else:
                high, size_high = guess, size
            guessing = (high - low) * 2 <= width  # a guess that did not halve the interval: halve it next
        return _with(plan, name, low)

    def plan(self, budget: int) -> _Plan:
        """The least compressed plan whose block fits ``budget`` tokens (by its length: see
        :data:`CHARS_PER_TOKEN`), taking the steps in order, each as far as it must:

        1. paths grouped by folder; 2. closed errors to one line; 3. the definitions of the oldest files; 4. the
        oldest reads folded to their folder; 5. the oldest commands (a failing one last); 6. the folded folders,
        the found definitions and the closed errors, oldest first; only then, no read being left, 7. the oldest
        decisions, open errors and changed files, in turn."""
        trail, limit = self.trail, budget * CHARS_PER_TOKEN
        plan = _Plan(grouped=True)
        if self.size(plan) <= limit:
            return plan
        plan = replace(plan, closed_folded=True)
        if self.size(plan) <= limit:
            return plan
        reads = sum(1 for f in trail.files.values() if f.action == _READ)
        closed = sum(1 for e in trail.errors.values() if not e.open)
        # A file lists at most this many definitions besides those changed there and those named (a search
        # between this and MAX_DEFINITIONS_PER_FILE would write the same block at every step).
        most_defs = max((len(f.defs) for f in trail.files.values()), default=0)
        families = [
            ("defs_per_file", min(MAX_DEFINITIONS_PER_FILE, most_defs)),
            ("defs_kept", len(trail.files)),
            ("reads_kept", reads),
            ("commands_kept", len(trail.commands)),
            ("folders_kept", len(trail.folders) + reads),
            ("found_kept", len(trail.found)),
            ("closed_kept", closed),
        ]
        for index, (name, count) in enumerate(families):
            plan = _with(plan, name, 0)
            if self.size(plan) > limit:
                continue
            plan = self.most_kept(plan, name, count, limit)
            # What an earlier step gave up wholly may partly come back now that this one made room (the
            # definitions of the newest files, once the oldest reads are folded).
            for earlier, total in reversed(families[:index]):
                plan = self.most_kept(plan, earlier, total, limit)
            return plan
        # Nothing but decisions, open errors and changed files is left: the oldest of each go in turn.
        kept = {
            "decisions_kept": len(trail.decisions),
            "open_kept": len(trail.errors) - closed,
            "changed_kept": len(trail.files) - reads,
        }
        while any(kept.values()):
            for name in kept:
                if kept[name]:
                    kept[name] -= 1
                    plan = _with(plan, name, kept[name])
                    if self.size(plan) <= limit:
                        return plan
        return plan


@dataclass(frozen=True)
class WorkTrail:
    """The trail as written into one summary message, with its figures (the ``compact`` span's)."""

    text: str = ""
    tokens: int = 0
    budget: int = 0
    #: What it holds, by kind (:data:`otel_context.semconv.TRAIL_KINDS`), and what did not fit this time.
    counts: Mapping[str, int] = field(default_factory=dict)
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: The paths it lists, as the retention check reads a path: listed grouped by folder or from the root, they
    #: are not the check's text, but they reach the model (the check counts them kept, the repair leaves them).
    carried: frozenset[str] = frozenset()
    #: What the retention check counts of the trail's own kinds (the span's decisions, commands and definitions,
    #: those of the trail it read back included): ``(kind, text)``, a sample per kind (:data:`CHECKED_CAPS`).
    checked: tuple[tuple[str, str], ...] = ()


#: The most items of each of the trail's kinds the retention check counts (an evenly spaced sample, oldest to
#: newest, beyond that), as it caps its own kinds.
CHECKED_CAPS: Mapping[str, int] = {
    semconv.RETENTION_KIND_DECISION: 12,
    semconv.RETENTION_KIND_COMMAND: 12,
    semconv.RETENTION_KIND_DEFINITION: 16,
}


def checked_items(trail: Trail) -> tuple[tuple[str, str], ...]:
    """The trail's decisions, commands and definitions as the retention check's items (a definition by its name),
    oldest first, sampled per kind (:data:`CHECKED_CAPS`)."""
    definitions = dict.fromkeys(
        chain.from_iterable(f.changed_defs + f.defs if f.changed_defs else f.defs for f in trail.files.values())
    )
    definitions.update(dict.fromkeys(trail.found))
    commands = sorted(trail.commands.values(), key=lambda c: c.last)
    by_kind = {
        semconv.RETENTION_KIND_DECISION: list(trail.decisions),
        semconv.RETENTION_KIND_COMMAND: [c.line for c in commands],
        semconv.RETENTION_KIND_DEFINITION: list(definitions),
    }
    return tuple(retention_mod.sample_kinds(by_kind, CHECKED_CAPS))


def render(trail: Trail, budget: int) -> WorkTrail:
    """The block of ``trail`` within ``budget`` tokens, compressed as far as it must (:meth:`_Writer.plan`); empty
    when the trail is or the budget is 0."""
    counts = trail.counts()
    if budget <= 0 or not any(counts.values()):
        return WorkTrail(budget=max(0, budget), counts=counts, checked=checked_items(trail))
    writer = _Writer(trail)
    plan = _Plan()
    target = budget
    while True:
        lines, left, carried = writer.write(plan)
        text = "\n".join(lines)
        tokens = estimate_text(text)
        if tokens <= budget:
            return WorkTrail(text, tokens, budget, counts, left, frozenset(carried), checked_items(trail))
        if plan != _Plan():  # the length said it fits, the estimate (a tokenizer's) says not: ask for less
            target -= tokens - budget
        if target <= 0:
            return WorkTrail(budget=budget, counts=counts, dropped=dict(counts), checked=checked_items(trail))
        plan = writer.plan(target)


def parse(message: str) -> Trail:
    """The trail a summary message holds (:func:`render`'s block), as a trail to merge into: every form the
    render writes is read back (grouped paths, definitions, folded reads, errors with their target or how they
    were closed, the one line of closed errors, commands, decisions, the count of what was left out)."""
    trail = Trail()
    start = message.rfind(WORK_TRAIL_HEADER)  # the last: a summary that quotes an older trail comes before it
    if start < 0:
        return trail
    section = root = ""
    for line in message[start + len(WORK_TRAIL_HEADER) :].splitlines():
        if not line.strip():
            if section:
                break
            continue
        if not line.startswith("- "):
            if line.startswith(_LEFT_OUT_PREFIX):
                _parse_left_out(trail, line[len(_LEFT_OUT_PREFIX) :])
                break
            if line.startswith(_ROOT_PREFIX) and line.endswith("/:"):
                root = line[len(_ROOT_PREFIX) : -1]
                continue
            section = line
            continue
        body = line[2:]
        if section in _SECTIONS.values():
            action = next(a for a, s in _SECTIONS.items() if s == section)
            folded = _FOLDED.match(body)
            if folded is not None:  # kept as written: a folded folder is only counted
                trail.folders[folded.group(1)] = trail.folders.get(folded.group(1), 0) + int(folded.group(2))
                continue
            for path, defs, changed, named in _parse_files(body):
                trail.touch(path if path[:1] in _ABSOLUTE else root + path, action, defs, changed, named=named)
        elif section == _FOUND_LINE and ": " in body:
            name, where = body.split(": ", 1)
            trail.found[name] = where if where[:1] in _ABSOLUTE else root + where
        elif section == _OPEN_LINE:
            text, target = _bracket(body)
            target = target[1:-1] if target.startswith("`") and target.endswith("`") else target
            trail.errors[text] = _Error(text, target, True, trail.tick(), targets=[target] if target else [])
        elif section == _CLOSED_LINE:
            if body.startswith(_ALSO_CLOSED):
                for text in body[len(_ALSO_CLOSED) :].split("; "):
                    trail.errors[text] = _Error(text, "", False, trail.tick(), "closed")
                continue
            text, how = _bracket(body)
            target = how[1:].split("`", 1)[0] if how.startswith("`") else ""
            trail.errors[text] = _Error(text, target, False, trail.tick(), how)
        elif section == _COMMANDS_LINE and body.startswith("`") and "`: " in body:
            command, outcome = body[1:].rsplit("`: ", 1)
            trail.commands[command] = _Command(command, outcome, trail.tick())
        elif section == _DECISIONS_LINE:
            trail.decided(body)
    return trail


def _bracket(body: str) -> tuple[str, str]:
    """``text [what]`` as (text, what); (body, "") without a trailing bracket."""
    if body.endswith("]") and " [" in body:
        text, what = body.rsplit(" [", 1)
        return text, what[:-1]
    return body, ""


def _parse_left_out(trail: Trail, said: str) -> None:
    for part in said.rstrip(".").split(", "):
        count, _, label = part.strip().partition(" ")
        kind = _KIND_OF_LABEL.get(label)
        if kind is not None and count.isdigit():
            trail.left_out[kind] = trail.left_out.get(kind, 0) + int(count)


def _split_top(text: str) -> list[str]:
    """``text`` split at ``, `` outside parentheses."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0 and text[index + 1 : index + 2] == " ":
            parts.append(text[start:index])
            start = index + 2
    parts.append(text[start:])
    return parts


def _parse_file(part: str) -> tuple[str, list[str], list[str], list[str]]:
    """``path (changed a, b; mentioned C, D; e, f)`` as (path, read definitions, changed ones, mentioned ones)."""
    if not part.endswith(")") or " (" not in part:
        return part.strip(), [], [], []
    path, inner = part[:-1].split(" (", 1)
    changed: list[str] = []
    named: list[str] = []
    others: list[str] = []
    for piece in inner.split("; "):
        if piece.startswith(_CHANGED_DEFS):
            changed = [d for d in piece[len(_CHANGED_DEFS) :].split(", ") if d]
        elif piece.startswith(_NAMED_DEFS):
            named = [d for d in piece[len(_NAMED_DEFS) :].split(", ") if d]
        else:
            others = [d for d in piece.split(", ") if d]
    return path.strip(), [*named, *others], changed, named


def _parse_files(body: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    """A line of files: one path (with its definitions), or a folder and its files (``folder/: a.py, b.py``)."""
    if "/: " in body:
        folder, rest = body.split("/: ", 1)
        if " " not in folder:
            return [
                (f"{folder}/{path}", defs, changed, named)
                for path, defs, changed, named in (_parse_file(p) for p in _split_top(rest))
            ]
    return [_parse_file(body)]


def annotate(span: Span, written: WorkTrail) -> None:
    """The trail's attributes on the ``compact`` span: its size and budget, what it holds by kind, and what did
    not fit at this compaction, in all and by kind."""
    span.set_attribute(semconv.COMPACTION_TRAIL_TOKENS, written.tokens)
    span.set_attribute(semconv.COMPACTION_TRAIL_BUDGET, written.budget)
    for kind in semconv.TRAIL_KINDS:
        span.set_attribute(semconv.COMPACTION_TRAIL_PREFIX + kind, written.counts.get(kind, 0))
    span.set_attribute(semconv.COMPACTION_TRAIL_DROPPED, sum(written.dropped.values()))
    for kind, count in written.dropped.items():
        span.set_attribute(semconv.COMPACTION_TRAIL_DROPPED_PREFIX + kind, count)
