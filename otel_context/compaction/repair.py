"""Repair a summary from the retention check: what it dropped of the user's words and the artifacts goes back.

A summary is written by a model that does not know which line the next turn needs; the retention check
(:mod:`.retention`) knows, without an LLM call, which of the replaced span's salient items the new request
no longer holds. So before a summary is used (inline: before the request goes out; background: before it
is applied, stored or published) the compactor puts back what it lost, deterministically, within the repair
budget (:func:`repair_budget`):

- the user's lost **sentences**, verbatim and whole (a sentence is the unit of an instruction: a whole message
  would spend the budget on the paste or the chatter around it, a phrase would not be what the user wrote);
- the lost **artifacts** (error lines, file paths, identifiers) as a compact list, one a line as found (an
  identifier in backticks): a label (``error: ...``) would be an error word itself.

They form one block of the summary message (:data:`~.prompt.RESTORED_HEADER`), after the summary. The next
compaction reads the block's user lines as the user's words again (:func:`.prompt.restored_user_lines`) and
its artifact lines as artifacts again (:func:`.prompt.restored_artifact_lines`, whole, however long the span),
so what was restored once is checked, and restored if lost, at every compaction after it: it does not depend
on the next summarizer either. An error line known only by where it stood (after pytest's ``E   ``, a
traceback's last line: :func:`.retention.stands_alone`) is restored even when the summary kept it, since no
later check would find it there.

When the budget cannot hold everything, the priority (:func:`candidates`) decides: the user's corrections (a value
changed), then their constraints, preferences and pending tasks, then statements that carry a value (a path,
a number, an identifier), then error lines, paths and identifiers of the work, then the rest of what the user
said, pasted lines last; newest first within a rank. What did not fit is counted on the span by kind.

A user who changes a value leaves the model one current value: when a restored or kept sentence really changes
what an earlier one states (:func:`replaces`: a statement with a word of change, on the same subject, giving a
value another or naming a choice as replaced; never a request of the moment such as "Run the tests for X now."),
the earlier is shown as replaced (``(replaced by a later message)``), or, when it is not in the block (kept
verbatim before the summary), the later one says which statement it replaces. In doubt, both stand unmarked.

Its cost (it holds the GIL, like the check): the span is walked once for the check's extraction and for the
candidates (:func:`.retention.walk`); every sentence of the user's is cut and ranked, an ASCII one by fast
forms of the ranking's patterns that say the same (lower case, case-sensitive, the words grouped by first
letter; :data:`_VALUE` one literal-led alternative at a time), a rank remembered by the sentence's text
(:func:`_sentence_priority`); the figure after the repair is the one before plus the lost items looked up in
the block alone (:func:`.retention.lookup_added`). A user message's sentences and their ranks are remembered
by its text (:func:`_user_sentences`): in transparent mode every compaction reads the user's messages of the
whole conversation, so without it the cost grew with the session. Which statement replaces which is worked
out once per repair (:class:`_Subjects`), not again for every render of the block nor for every correction
found. What is left is ~5 µs of regex per sentence met for the first time, a full scan of the request per
lost candidate, and the check's extraction (benchmarks/README.md).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import retention as retention_mod
from otel_context.compaction.prompt import (
    RESTORED_ARTIFACTS_LINE,
    RESTORED_HEADER,
    RESTORED_USER_LINE,
    SUPERSEDED_MARK,
    is_summary_message,
    restored_artifact_lines,
    restored_user_lines,
)
from otel_context.formats.base import WireFormatAdapter
from otel_context.settings import Settings
from otel_context.tokens import estimate_text

Item = Mapping[str, Any]

#: The kinds the repair restores (numbers alone, without their sentence, would not say what they measure).
REPAIRED_KINDS = (
    semconv.RETENTION_KIND_INSTRUCTION,
    semconv.RETENTION_KIND_ERROR,
    semconv.RETENTION_KIND_PATH,
    semconv.RETENTION_KIND_IDENTIFIER,
)
#: The longest sentence restored whole; a longer "sentence" is a paste without full stops.
MAX_SENTENCE_CHARS = 600
#: The most candidates looked up per compaction (newest first within a rank): the cost stays bounded on any
#: history, and what a budget of this size cannot hold is not worth a lookup.
MAX_CANDIDATES = 400

_CHANGE_WORDS = (
    r"now|instead|no longer|anymore|any more|changed|switched|actually|from now on|updated|replaced|"
    r"rather than|correction|scratch that"
)
_DURABLE_WORDS = (
    r"must|mustn't|never|always|don't|do not|does not|doesn't|should|shouldn't|need to|needs to|have to|"
    r"has to|required?|only|avoid|prefer(?:red|s)?|rather|keep|remember|make sure|ensure|note that|"
    r"important|later|after|once|before|when|pending|todo|to-do|still|follow[- ]up|next|not allowed|forbidden|"
    r"I want|I'd like|we want|I need|we need|no more|without|please use|use .{1,40} (?:not|instead)"
)
_ACTION_WORDS = (
    r"open|run|read|show|check|rename|look|find|grep|search|list|print|give|tell|explain|try|go|ok|okay|"
    r"thanks|thank|great|good|nice|cool|yes|no|sure|let's|lets|continue|proceed|what|where|why|how|which|who|"
    r"can|could|would|is|are|do|does|decide|fix|add|remove|delete|move|format|rerun|retry|carry on|go on"
)
# The ranking's patterns, as they are defined (any text: matched ignoring case). They are the reference: an
# ASCII sentence, nearly every one, is matched by their fast forms below, which say the same.
_CHANGE = re.compile(rf"\b(?:{_CHANGE_WORDS})\b", re.IGNORECASE)
#: One scan a sentence: a word of change, or else of a durable instruction (the first found decides).
_MARKERS = re.compile(rf"\b(?:(?P<change>{_CHANGE_WORDS})|(?P<durable>{_DURABLE_WORDS}))\b", re.IGNORECASE)
#: A value worth keeping in a statement: a path, a number, an identifier-like token, a code span or a quote.
_VALUE = re.compile(
    r"[\w/-]+\.[a-z]{1,5}\b|\d|\b[A-Z]{2,}[-_][A-Z0-9]+\b|`[^`]+`|\"[^\"]+\"|\b\w+_\w+\b|/\w+/|\b\w+-\w+-\w+\b"
)
#: Sentences that are a request for the moment (a question, or an action to do now): the chatter of a session.
_ACTION_START = re.compile(rf"^(?:{_ACTION_WORDS})\b", re.IGNORECASE)


def _by_first_letter(words: str, bounded: bool = False) -> str:
    """The alternation ``words`` (``a|b|...``, lower case) regrouped by first letter, in its order within each
    letter (``now|no longer|instead`` -> ``n(?:ow|o longer)|i(?:nstead)``): at one position only the
    alternatives of its letter can match, and they are tried in the same order, so the match is the same; the
    engine tells a letter group from the position's character at once, where it tried each word in turn.

    ``bounded``: each word starts at a word boundary (``\\b`` before the alternation), written after its first
    letter as ``(?<!\\w\\w)`` (``n(?<!\\w\\w)(?:ow|o longer)``): before a letter, a boundary is a character
    that is no word character, or none. The alternation then starts with a letter, which the engine finds at
    the speed of a character-set test: led by ``\\b``, it tried the boundary and the letter groups at every
    position (~30 ns a character: ~1 µs a sentence, at every one of the user's sentences a compaction ranks)."""
    alternatives: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(words):
        depth += char == "("
        depth -= char == ")"
        if char == "|" and depth == 0:
            alternatives.append(words[start:index])
            start = index + 1
    alternatives.append(words[start:])
    groups: dict[str, list[str]] = {}
    for alternative in alternatives:
        groups.setdefault(alternative[0], []).append(alternative[1:])
    boundary = r"(?<!\w\w)" if bounded else ""
    return "|".join(f"{re.escape(first)}{boundary}(?:{'|'.join(rests)})" for first, rests in groups.items())


# Their fast forms, for an ASCII sentence: matched case-sensitively on the sentence in lower case. For ASCII
# text this is what ignoring case means (the letters re.IGNORECASE also takes for an ASCII one, U+212A for
# ``k``, U+017F for ``s``, U+0130 and U+0131 for ``i``, are not ASCII; lower case keeps every position and every
# word boundary). With re.IGNORECASE the engine enters every word of the alternation at every word boundary;
# with case, and the words grouped by first letter, one character test passes over a group: ~3x faster.
# Their words start at a word boundary, written after each first letter (``bounded``), so that the engine skips to
# the letters that start a word of theirs. _MARKERS_LOWER has no groups (a group around the words would hide their
# first letters from the engine): the change words come first within each letter, as they come first in
# _MARKERS, so a word of change is found where _MARKERS' group ``change`` is, and told by its text
# (:data:`_CHANGE_WORDS_LOWER`: a word of change it matches is one of them, as written; a durable word it
# matches is none, or the change word would have matched first).
_CHANGE_LOWER = re.compile(rf"(?:{_by_first_letter(_CHANGE_WORDS.lower(), bounded=True)})\b")
_MARKERS_LOWER = re.compile(
    rf"(?:{_by_first_letter(_CHANGE_WORDS.lower() + '|' + _DURABLE_WORDS.lower(), bounded=True)})\b"
)
_CHANGE_WORDS_LOWER = frozenset(_CHANGE_WORDS.lower().split("|"))  # plain words: no pattern in them
_ACTION_START_LOWER = re.compile(rf"^(?:{_by_first_letter(_ACTION_WORDS.lower())})\b")
#: Whether :data:`_VALUE` matches, one alternative at a time (any of them matching is the union matching),
#: each rewritten to be led by a literal or a character class (the engine starts a match only there), where
#: ``[\w/-]+``, ``\b\w+`` are tried at every position and re-read the rest of each word: ``[\w/-]+\.x`` exists
#: when the character before the dot is one of ``[\w/-]``; ``\b\w+_\w+\b`` when an underscore has a word
#: character on each side (the underscore is one itself, so both are in its word); ``\b\w+-\w+-\w+\b`` when
#: two hyphens with a word between them have a word character outside each.
_VALUE_PARTS = (
    re.compile(r"\d"),
    re.compile(r"`[^`]+`"),
    re.compile(r'"[^"]+"'),
    re.compile(r"/\w+/"),
    re.compile(r"\.(?<=[\w/-]\.)[a-z]{1,5}\b"),
    re.compile(r"_(?<=\w_)\w"),
    re.compile(r"-(?<=\w-)\w+-\w"),
    # ``\b[A-Z]{2,}``: a capital that no word character precedes, then one or more.
    re.compile(r"[A-Z](?<![\w][A-Z])[A-Z]+[-_][A-Z0-9]+\b"),
)
#: A content word: four letters or more, or an acronym (``API``, ``CI``).
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'-]{3,}|\b[A-Z]{2,3}\b")
_STOP = frozenset(
    [
        "this",
        "that",
        "with",
        "from",
        "have",
        "will",
        "would",
        "should",
        "could",
        "there",
        "their",
        "them",
        "they",
        "then",
        "than",
        "what",
        "when",
        "where",
        "which",
        "into",
        "onto",
        "also",
        "just",
        "only",
        "keep",
        "make",
        "sure",
        "please",
        "each",
        "every",
        "about",
        "after",
        "before",
        "still",
        "here",
        "more",
        "most",
        "some",
        "such",
        "very",
        "your",
        "yours",
        "ours",
        "mine",
        "being",
        "been",
        "were",
        "does",
        "done",
        "doing",
    ]
)
#: Shared content words that make two statements one subject (the later may then replace the earlier, when it
#: changes a value or a choice the earlier states: :func:`replaces`).
SAME_SUBJECT_WORDS = 2
#: The values of a statement, as :func:`replaces` compares them: a number with what is glued to it (``3``,
#: ``v2``, ``8443``, ``2024-03-11``), a code span, a quote, a path, an upper-case id, a snake_case name.
_VALUE_TOKENS = re.compile(
    r"`[^`]+`|\"[^\"]+\"|[\w.:/-]*\d[\w.:/%-]*|[\w/-]+\.[a-z]{1,5}\b|\b[A-Z]{2,}[-_][A-Z0-9]+\b|\b\w+_\w+\b"
)
#: What a changed choice names as replaced: "instead of X", "rather than X", "no longer (use) X", "switch from
#: X", "replace X".
_REPLACED_CHOICE = re.compile(
    r"\b(?:instead of|rather than|no longer(?: uses?| using| with)?|(?:switch|switched|move|moved|migrate|"
    r"migrated|change|changed|go|went) from|replace|replaced|drop|dropped)\s+(?:the |a |an |our |your )?([\w.@/-]+)",
    re.IGNORECASE,
)
#: A statement that withdraws an earlier one without a new value ("we no longer need ...").
_WITHDRAWN = re.compile(r"\b(?:no longer|any ?more|scratch that|never mind|forget about)\b", re.IGNORECASE)
#: What may lead a request of the moment before its verb ("Now run the tests", "OK, open it").
_LEAD_IN = re.compile(
    r"^(?:(?:now|ok|okay|so|then|and|also|alright|right|actually|please|next|first|great|good|thanks)\b[,:;.!]?\s*)+",
    re.IGNORECASE,
)
#: Words that are no subject of their own: the words of change (two statements do not share a subject by saying
#: "instead") and units ("the cache timeout is now 30 seconds" is not about "the request timeout of 10 seconds").
_NOT_SUBJECT = frozenset(
    {"instead", "anymore", "longer", "changed", "switched", "actually", "updated", "replaced", "rather", "correction"}
    | {"seconds", "second", "minutes", "minute", "hours", "hour", "days", "weeks", "months", "years", "attempts"}
    | {"attempt", "times", "percent", "bytes", "tokens", "lines", "items", "records", "entries", "words"}
)

_PRIORITY_CORRECTION = 0
_PRIORITY_DURABLE = 1
_PRIORITY_STATEMENT = 2
_PRIORITY_ERROR = 3
_PRIORITY_PATH = 4
_PRIORITY_IDENTIFIER = 5
_PRIORITY_CHATTER = 7
_PRIORITY_PASTE = 8
#: The label of a decision of the assistant's that an earlier version restored into the block (the work trail,
#: :mod:`.trail`, keeps the decisions now, and reads such lines back as its own).
DECISION_LABEL = "decision: "


#: The smallest repair block worth its place (a handful of the user's sentences and the work's lines): the
#: scaled budget is not taken below it, where an eighth of the effective window has room for it (below a
#: 12,000-token window the scaled budget would hold the user's facts and crowd out the artifacts).
MIN_REPAIR_TOKENS = 600


def repair_budget(settings: Settings, window: int | None, effective: int | None) -> int:
    """Tokens the repair may add to a summary message: ``repair_budget`` (10,000 at a 200K window), scaled
    below it like the other buffers but not below :data:`MIN_REPAIR_TOKENS` (nor above the setting: 0 turns
    the repair off), and at most an eighth of the effective window (the summary, the user's verbatim messages
    and the kept turns need the rest)."""
    return budget_mod.block_budget(settings.repair_budget, MIN_REPAIR_TOKENS, window, effective)


# Made for every sentence of the user's (thousands at a compaction of a long session): not frozen, whose
# __init__ sets each field through object.__setattr__ (~4x the cost). Nothing changes one once made.
@dataclass(slots=True)
class _Candidate:
    kind: str
    text: str
    position: int  #: order of appearance in the replaced span
    priority: int
    paste: bool = False


@dataclass(frozen=True)
class Repair:
    """What the repair did to one summary."""

    #: The retention figure of the summary as written, and after the repair (the one the span reports).
    before: retention_mod.Retention
    after: retention_mod.Retention
    #: The block added to the summary message ("" when nothing was lost or the budget is 0).
    text: str = ""
    tokens: int = 0
    budget: int = 0
    #: Items restored, and items lost that did not fit the budget, by kind.
    restored: Mapping[str, int] = field(default_factory=dict)
    left_out: Mapping[str, int] = field(default_factory=dict)
    #: Restored sentences marked as replaced by a later one (the model is left one current value).
    superseded: int = 0
    #: The items the figure checks (the retention check's sample of the replaced span), to measure the request
    #: as finally sent (with the files restored after the summary, and what hooks add).
    checked: tuple[tuple[str, str], ...] = ()
    #: The work trail the summary message carries beside the block (:mod:`.trail`): in the request as sent,
    #: not in the summary as the summarizer wrote it; and the paths it lists (grouped by folder, from a root).
    trail: str = ""
    trail_paths: frozenset[str] = frozenset()

    def measured(self, request: str) -> Repair:
        """This repair with both figures measured on ``request``, the text of the request as finally sent:
        after (as it is) and before the repair (without the block and the work trail)."""
        written = request
        for added in (self.text, self.trail):
            written = written.replace(added, "") if added else written
        after = retention_mod.lookup(self.checked, request)
        if self.trail and self.trail in request:
            after = retention_mod.also_kept(after, self.trail_paths)
        return replace(self, before=retention_mod.lookup(self.checked, written), after=after)


#: What a prose line is mostly made of (ASCII letters and spaces), deleted to count the rest at C speed.
_PROSE_CHARS = str.maketrans("", "", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
_DIGITS = str.maketrans("", "", "0123456789")
_DIGIT_RUN = re.compile(r"[0-9]+")
#: A line whose shape (its digits aside) recurs this often in one message is a row of pasted data or a log,
#: whatever its words: people do not write the same sentence three times with other numbers.
_REPEATED_SHAPE = 3


#: The same two tables for an ASCII line, deleted from its bytes (a byte table: no lookup a character).
_PROSE_BYTES = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ "
_DIGIT_BYTES = b"0123456789"


def _is_paste_line(line: str) -> bool:
    """A line of pasted code, log or data rather than prose: indented, a fence or prompt, or mostly symbols
    (a digit counts half: ``Turn 3. Step-2.`` is prose, a timestamped log line is not)."""
    if line.startswith(("    ", "\t", "```", "$ ", ">>> ", "+", "@@")):
        return True
    if line.isascii():  # nearly every line: the same counts, ~5x faster than str.translate's mapping
        others_bytes = line.encode("ascii").translate(None, _PROSE_BYTES)
        others, symbols = len(others_bytes), len(others_bytes.translate(None, _DIGIT_BYTES))
    else:
        others_text = line.translate(_PROSE_CHARS)
        others, symbols = len(others_text), len(others_text.translate(_DIGITS))
    return symbols + (others - symbols) / 2 > 0.3 * len(line) and bool(line.strip())


def prose_and_paste(text: str) -> tuple[list[str], list[str]]:
    """The lines of a user message split into prose and paste (fenced blocks, code, logs, rows of data: lines
    of one shape that recurs), in order."""
    if "\n" not in text:
        return ([], [text]) if _is_paste_line(text) else ([text], [])  # one line: most of what users write
    lines = text.splitlines()
    shapes: dict[str, int] = {}
    for line in lines:
        shape = _DIGIT_RUN.sub("0", line.strip())
        shapes[shape] = shapes.get(shape, 0) + 1
    prose: list[str] = []
    paste: list[str] = []
    fenced = False
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            paste.append(line)
            continue
        repeated = bool(line.strip()) and shapes[_DIGIT_RUN.sub("0", line.strip())] >= _REPEATED_SHAPE
        (paste if fenced or repeated or _is_paste_line(line) else prose).append(line)
    return prose, paste


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` as the retention check cuts them (``.``, ``!``, ``?`` then a space, and line
    breaks): three words or more, whole."""
    lines = retention_mod.cut_at_stops(text).splitlines()
    # One comprehension over the stripped lines (the repair cuts every message of the user's at every compaction).
    return [s for s in map(str.strip, lines) if 12 <= len(s) <= MAX_SENTENCE_CHARS and s.count(" ") >= 2]


def _has_value(sentence: str) -> bool:
    """Whether :data:`_VALUE` finds a value in ``sentence`` (see :data:`_VALUE_PARTS`). A loop, not ``any()`` of a
    generator: the first part (a digit) decides most sentences, and the generator cost more than its search."""
    for part in _VALUE_PARTS:  # noqa: SIM110  (a loop: see the docstring)
        if part.search(sentence) is not None:
            return True
    return False


#: Sentences whose rank is remembered (each of MAX_SENTENCE_CHARS at most: a few MB at the very most, ~0.5 MB for
#: sentences of a hundred characters).
RANKED_SENTENCES_KEPT = 4096


@functools.lru_cache(maxsize=RANKED_SENTENCES_KEPT)
def _sentence_priority(sentence: str) -> int:
    """A sentence's rank (the scale of :func:`candidates`). Every sentence of the user's is ranked at every
    compaction (a long session has thousands): an ASCII one is matched in lower case by the fast forms of
    the patterns, any other by the patterns themselves; both give the same rank. A rank depends on the text
    alone, so it is remembered by the text (not by a message's identity, which an app may mutate): the
    user's sentences come back at every compaction after theirs (the whole conversation in transparent
    mode, the restored lines and the verbatim messages otherwise), and the verbatim list's trim ranks them
    just before the repair does."""
    if sentence.isascii():  # see _MARKERS_LOWER
        subject, change, action = sentence.lower(), _CHANGE_LOWER, _ACTION_START_LOWER
        marker = _MARKERS_LOWER.search(subject)
        changes = marker is not None and marker.group() in _CHANGE_WORDS_LOWER
    else:
        subject, change, action = sentence, _CHANGE, _ACTION_START
        marker = _MARKERS.search(subject)
        changes = marker is not None and marker.group("change") is not None
    if marker is not None:
        if changes or change.search(subject, marker.end()):
            return _PRIORITY_CORRECTION
        return _PRIORITY_DURABLE
    if sentence.endswith("?") or action.match(subject):
        return _PRIORITY_CHATTER
    if _has_value(sentence):
        return _PRIORITY_STATEMENT
    return _PRIORITY_CHATTER


#: User messages whose sentences and ranks are remembered (:func:`_user_sentences`), and the longest one
#: remembered: typed messages, not pastes (at most ~16 MB held in all, ~1 MB for messages of 200 characters).
USER_MESSAGES_KEPT = 4096
USER_MESSAGE_KEPT_CHARS = 2_000


def _cut_and_ranked(text: str) -> tuple[tuple[str, int, bool], ...]:
    """The sentences of a user message as the repair ranks them, in order: its prose's sentences with their
    rank, then its pasted lines' as pastes; each ``(sentence, rank, is_paste)``."""
    prose, paste = prose_and_paste(text)
    out = [(s, _sentence_priority(s), False) for s in sentences("\n".join(prose))] if prose else []
    if paste:
        out += [(s, _PRIORITY_PASTE, True) for s in sentences("\n".join(paste))]
    return tuple(out)


_cut_and_ranked_kept = functools.lru_cache(maxsize=USER_MESSAGES_KEPT)(_cut_and_ranked)


def _user_sentences(text: str) -> tuple[tuple[str, int, bool], ...]:
    """:func:`_cut_and_ranked`, remembered by the message's text for a typed message: in transparent mode the
    repair reads every message of the user's in the conversation at every compaction (``said``), so without
    it the cost of a compaction grew with the session, not with what it replaces (48 ms at the tenth
    compaction of a ~1,400-message span, 11 at the first). A pure function of an immutable string, so an app
    that edits its messages cannot make it wrong."""
    return _cut_and_ranked_kept(text) if len(text) <= USER_MESSAGE_KEPT_CHARS else _cut_and_ranked(text)


def message_priority(text: str) -> int:
    """A user message's rank (the scale of :func:`candidates`, lower first): that of its most important sentence; a
    message of pasted lines only ranks as a paste."""
    return min((rank for _, rank, is_paste in _user_sentences(text) if not is_paste), default=_PRIORITY_PASTE)


def _user_texts(user_texts: Sequence[str], said: Sequence[str] | None) -> list[str]:
    """What the user said up to the cut: the user lines an earlier repair restored into our summary message
    (the user's words again, for this check), then ``said`` (their messages as the app sent them: the
    whole conversation in transparent mode, where the engine has it) or, without it, their messages in the
    replaced span (``user_texts``: the user text of each of its items)."""
    restored: list[str] = []
    own: list[str] = []
    for text in user_texts:
        if is_summary_message(text):
            restored.extend(restored_user_lines(text))
        elif said is None:
            own.append(text)
    return [*restored, *(said if said is not None else own)]


def candidates(
    adapter: WireFormatAdapter,
    dropped: Sequence[Item],
    said: Sequence[str] | None = None,
    extracted: Sequence[tuple[str, str]] | None = None,
    walked: Sequence[tuple[str, bool, str]] | None = None,
) -> list[_Candidate]:
    """Everything the repair may restore, deduplicated, in rank order (newest first within a rank): the
    user's sentences (``said``: see :func:`_user_texts`), the error lines, paths and identifiers of the span
    (the assistant's decisions are the work trail's: :mod:`.trail`). ``extracted`` and ``walked``: the span's items (as
    :func:`.retention.salient_items` gives them, :data:`.retention.REPAIR_CAPS`) and its texts (as
    :func:`.retention.walk` gives them), when the caller has them: :func:`repair` walks the span once for the
    check and for this."""
    if walked is None:
        walked = retention_mod.walk(adapter, dropped)  # one walk of the span: the user's texts and the model's
    instruction = semconv.RETENTION_KIND_INSTRUCTION
    # The user's sentences, in order; a sentence said more than once is one candidate, at its last position.
    every_said = [
        cut for text in _user_texts([user for _, _, user in walked if user], said) for cut in _user_sentences(text)
    ]
    last_said = {cut[0]: (position, cut) for position, cut in enumerate(every_said, 1)}
    out = [
        _Candidate(instruction, sentence, position, priority, is_paste)
        for position, (sentence, priority, is_paste) in last_said.values()
    ]
    found: dict[tuple[str, str], _Candidate] = {}  # the work's items
    position = len(every_said)
    ranks = {
        semconv.RETENTION_KIND_ERROR: _PRIORITY_ERROR,
        semconv.RETENTION_KIND_PATH: _PRIORITY_PATH,
        semconv.RETENTION_KIND_IDENTIFIER: _PRIORITY_IDENTIFIER,
    }
    if extracted is None:
        extracted = retention_mod.salient_items(adapter, dropped, caps=retention_mod.REPAIR_CAPS, walked=walked)
    for kind, text in extracted:
        if kind in ranks:
            position += 1
            if (kind, text) not in found:
                found[kind, text] = _Candidate(kind, text, position, ranks[kind])
    # What an earlier repair restored into our summary message, read back whole (a long span's extraction may
    # not reach every line of it): older than anything in the span, so placed before it.
    restored = [
        _restored_item(line)
        for _, _, user in walked
        if user and is_summary_message(user)
        for line in restored_artifact_lines(user)
    ]
    for offset, (kind, text) in enumerate(restored):
        if kind in ranks:  # a decision an earlier version restored here is the work trail's now
            found.setdefault((kind, text), _Candidate(kind, text, offset - len(restored), ranks[kind]))
    out += found.values()
    # By rank, newest first within a rank (every position is another): two sorts by one attribute each, stable.
    out.sort(key=attrgetter("position"), reverse=True)
    out.sort(key=attrgetter("priority"))
    return out


def _restored_item(line: str) -> tuple[str, str]:
    """The kind and text of a line of the artifacts an earlier repair restored (:func:`_line` wrote it): an
    identifier in backticks, a path one word, an error line words; a decision an earlier version restored
    after its label (:data:`DECISION_LABEL`) is none of them."""
    if len(line) > 2 and line[0] == "`" and line[-1] == "`":
        return semconv.RETENTION_KIND_IDENTIFIER, line[1:-1]
    if line.startswith(DECISION_LABEL):
        return "decision", line[len(DECISION_LABEL) :]
    if not line.split(None, 1)[1:]:
        return semconv.RETENTION_KIND_PATH, line
    return semconv.RETENTION_KIND_ERROR, line


def _words(sentence: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(sentence)} - _STOP - _NOT_SUBJECT


def _values(sentence: str) -> frozenset[str]:
    return frozenset(v.rstrip(".,;:").lower() for v in _VALUE_TOKENS.findall(sentence))


def request_of_the_moment(sentence: str) -> bool:
    """A question, or a request to do something now ("Run the tests for X now.", "Now open src/a.py."): it
    changes no standing value, whatever word of change it holds."""
    if sentence.rstrip().endswith("?"):
        return True
    rest = _LEAD_IN.sub("", sentence, count=1)
    return _ACTION_START.match(rest) is not None


def can_replace(sentence: str) -> bool:
    """Whether ``sentence`` may replace an earlier statement: it has a word of change ("now", "instead", "no
    longer", ...) and is a statement, not a request of the moment (:func:`request_of_the_moment`)."""
    return _CHANGE.search(sentence) is not None and not request_of_the_moment(sentence)


@dataclass(frozen=True)
class _Statement:
    """What :func:`replaces` reads of a sentence, worked out once."""

    words: frozenset[str]
    values: frozenset[str]
    replaced: frozenset[str]  #: what it names as replaced (:data:`_REPLACED_CHOICE`), lower case
    withdraws: bool
    can_replace: bool


def _statement(sentence: str) -> _Statement:
    return _Statement(
        frozenset(_words(sentence)),
        _values(sentence),
        frozenset(m.lower().rstrip(".,;:") for m in _REPLACED_CHOICE.findall(sentence)),
        _WITHDRAWN.search(sentence) is not None,
        can_replace(sentence),
    )


def _replaces(later: _Statement, earlier: _Statement) -> bool:
    if not later.can_replace:
        return False
    shared = len(later.words & earlier.words)
    if shared < SAME_SUBJECT_WORDS:
        return False
    if earlier.values and later.values - earlier.values:
        return True  # a value of the subject changed: "the retry limit is now 5" after "... at 3"
    if later.replaced & (earlier.words | earlier.values):
        return True  # a choice changed: "date-fns instead of moment" after "use moment"
    return later.withdraws and shared > SAME_SUBJECT_WORDS  # withdrawn: "we no longer need to ..."


def replaces(later: str, earlier: str) -> bool:
    """Whether the user's statement ``later`` replaces ``earlier`` (marked as replaced, never read back as
    theirs): the later is a statement with a word of change (:func:`can_replace`), the two share their subject
    (:data:`SAME_SUBJECT_WORDS` content words), and the later changes what the earlier states: a value of
    the earlier's that the later gives another (``3`` -> ``5``), a choice it names as replaced ("instead of
    moment"), or the whole statement withdrawn ("we no longer need ...", on a subject of one more word).
    Two requests that share a subject and a word of change replace nothing ("Run the tests for X now." after
    "Make duplicate requests harmless in X."): when in doubt, both are shown, unmarked."""
    return _replaces(_statement(later), _statement(earlier))


def _line(candidate: _Candidate) -> str:
    """A line of the block. Artifacts as found, without a label: a label (``error: ...``) would be an error
    word itself, and the next compaction would read the line back one label longer each time; an identifier
    in backticks, so that it is read back as one."""
    if candidate.kind == semconv.RETENTION_KIND_IDENTIFIER:
        return f"- `{candidate.text}`"
    return f"- {candidate.text}"


class _Subjects:
    """Which of the user's statements replace which, for one repair (:func:`replaces`). Asked for the same
    sentences many times (the block is rendered again while it is over its budget, and every correction
    found in the request asks whether an earlier statement it replaces is there too), so each answer is
    worked out once: each sentence's words once, whether a sentence is replaced once, and the earlier
    statements a correction replaces scanned for only as far as a question needs (newest first). Without
    this the checks were redone for every render, each one over every statement of the conversation: a
    repair of 2,000 corrections took seconds."""

    def __init__(self, ranked: Sequence[_Candidate], newer: Callable[[], Sequence[str]]) -> None:
        self._ranked = ranked
        self._newer = newer  #: the sentences of the user's in the kept turns (read when first needed)
        self._statements: dict[str, _Statement] = {}
        self._superseded: dict[int, bool] = {}
        #: Per correction (by identity): the earlier statements it replaces found so far (newest first), and
        #: how far back in ``said_all`` the scan has read.
        self._replaced: dict[int, tuple[list[_Candidate], list[int]]] = {}

    @functools.cached_property
    def said_all(self) -> list[_Candidate]:
        """Every sentence of the user's among the candidates, by position (oldest first)."""
        return sorted(
            (c for c in self._ranked if c.kind == semconv.RETENTION_KIND_INSTRUCTION), key=lambda c: c.position
        )

    @functools.cached_property
    def _changes(self) -> tuple[list[_Candidate], list[int], list[str]]:
        """The corrections among them, their positions, and the kept turns' sentences with a word of change."""
        changes = [
            c for c in self.said_all if c.priority == _PRIORITY_CORRECTION and self.statement(c.text).can_replace
        ]
        return changes, [c.position for c in changes], [s for s in self._newer() if self.statement(s).can_replace]

    def statement(self, text: str) -> _Statement:
        found = self._statements.get(text)
        if found is None:
            found = self._statements[text] = _statement(text)
        return found

    def replaces(self, later: str, earlier: str) -> bool:
        return _replaces(self.statement(later), self.statement(earlier))

    def superseded(self, candidate: _Candidate) -> bool:
        """Whether a later statement of the user's (a correction among the candidates, or one in the kept turns:
        ``newer``) replaces ``candidate``."""
        key = id(candidate)
        known = self._superseded.get(key)
        if known is None:
            changes, positions, newer_changes = self._changes
            later = changes[bisect.bisect_right(positions, candidate.position) :]
            known = any(self.replaces(c.text, candidate.text) for c in later) or any(
                self.replaces(s, candidate.text) for s in newer_changes
            )
            self._superseded[key] = known
        return known

    def replaced_by(self, candidate: _Candidate) -> Iterator[_Candidate]:
        """The earlier statements ``candidate`` replaces, newest first (scanned for as far as the caller reads)."""
        found, scan = self._replaced.setdefault(id(candidate), ([], [len(self.said_all)]))
        yield from list(found)
        while scan[0] > 0:
            scan[0] -= 1
            earlier = self.said_all[scan[0]]
            if earlier.position < candidate.position and self.replaces(candidate.text, earlier.text):
                found.append(earlier)
                yield earlier

    def restates_a_change(self, candidate: _Candidate, haystack: str) -> bool:
        """Whether a correction of the user's, found in the request, is restated in the block all the same: when
        an earlier statement it replaces reaches the model too, the block (the end of the summary message)
        says which is the latest, so that the old value is never the last word (a summary or the verbatim list
        may hold it after, or without, the change)."""
        if candidate.priority != _PRIORITY_CORRECTION:
            return False
        return any(earlier.text in haystack for earlier in self.replaced_by(candidate))


def _said_block(chosen: Sequence[_Candidate], subjects: _Subjects) -> tuple[list[str], int]:
    """The user lines of the block, oldest first, each restored sentence marked when a later statement of the
    user (restored, kept verbatim, or in the kept turns) replaces it, or naming the earlier one it replaces
    when that one reaches the model outside the block (see :class:`_Subjects`)."""
    chosen_texts = {c.text for c in chosen}
    lines: list[str] = []
    superseded = 0
    for candidate in chosen:
        if subjects.superseded(candidate):
            lines.append(f"- {SUPERSEDED_MARK} {candidate.text}")
            superseded += 1
            continue
        if candidate.priority == _PRIORITY_CORRECTION:
            earlier = next((c.text for c in subjects.replaced_by(candidate) if c.text not in chosen_texts), None)
            if earlier is not None:
                lines.append(f'- {candidate.text} (the latest: it replaces the earlier "{earlier[:160]}")')
                superseded += 1
                continue
        lines.append(_line(candidate))
    return lines, superseded


def repair(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    dropped: Sequence[Item],
    head: Sequence[Item],
    kept: Sequence[Item],
    budget: int,
    said: Sequence[str] | None = None,
    walked: retention_mod.Walked | None = None,
    trail: str = "",
    trail_paths: frozenset[str] = frozenset(),
    trail_items: Sequence[tuple[str, str]] = (),
) -> Repair:
    """Check a summary's result (``head``: the user's verbatim messages and the summary message; ``kept``:
    the items after the cut) against the replaced span (``dropped``), and restore what it lost within
    ``budget`` tokens. ``said``: the user's messages up to the cut as the app sent them (see
    :func:`candidates`). ``walked``: the span's walk, when the caller has it (:func:`.retention.walk`: the work
    trail reads the same). ``trail``: the work trail the summary message will carry (:mod:`.trail`), and
    ``trail_paths`` the paths it lists: what it holds reaches the request, and is not restored again;
    ``trail_items``: the items of the trail's own kinds the figure counts too (decisions, commands, definitions:
    the trail's to keep, not the repair's to restore)."""
    # One walk of the span and one extraction for both: the figure's sample (CAPS) and the repair's candidates
    # (REPAIR_CAPS) are each an evenly spaced sample of the same deduplicated items; the candidates' user
    # sentences are read from the same walk.
    if walked is None:
        walked = retention_mod.walk(adapter, dropped)
    every = retention_mod.salient_by_kind(adapter, dropped, walked=walked)
    checked = [*retention_mod.sample_kinds(every, retention_mod.CAPS), *trail_items]
    written = retention_mod.request_text(adapter, body, [*head, *kept])
    before = retention_mod.lookup(checked, written)
    # The summary message's work trail is in the request too: what it holds is kept (the figure before the
    # repair is the summarizer's alone).
    haystack, found_before = written, before
    if trail:
        haystack = written + "\n" + trail
        found_before = retention_mod.also_kept(retention_mod.lookup_added(checked, before, written, trail), trail_paths)
    if budget <= 0:
        return Repair(before, found_before, budget=0, checked=tuple(checked), trail=trail, trail_paths=trail_paths)
    used = estimate_text(RESTORED_HEADER) + 2 * estimate_text(RESTORED_USER_LINE)
    ranked = candidates(adapter, dropped, said, retention_mod.sample_kinds(every, retention_mod.REPAIR_CAPS), walked)
    chosen: list[_Candidate] = []
    left_out: dict[str, int] = {}
    subjects = _Subjects(ranked, lambda: [s for text in adapter.user_text_items(kept) for s in sentences(text)])
    restored_text = ""  # what is chosen so far: an artifact inside a restored sentence needs no line of its own
    # The request's lines, cut where sentences are cut (a verbatim message, a quoted line): a candidate that is
    # one of them is found by a set lookup instead of a scan of the request. Each is a part of the request, so
    # a hit is a find; a miss (a sentence inside a line) is decided by the scan. The parts are not filtered
    # into sentences (sentences()): a Python step for each of the request's thousands of lines.
    whole = set(retention_mod.cut_at_stops(haystack).splitlines())
    # The checked items the lookup above already looked for (a plain substring test: all but numbers, which
    # are no candidates): a candidate of the same text is not scanned for again.
    lost = set(found_before.lost)
    known = {item[1]: item not in lost for item in checked if item[0] != semconv.RETENTION_KIND_NUMBER}
    for candidate in ranked[:MAX_CANDIDATES]:
        found = known.get(candidate.text)
        if found is None:
            found = candidate.text in whole or candidate.text in haystack or candidate.text in trail_paths
        if found and not retention_mod.stands_alone(candidate.kind, candidate.text) and candidate.text not in trail:
            found = False  # an error line known by its context: only the block (or the trail) carries it on
        if found and not subjects.restates_a_change(candidate, haystack):
            continue
        if candidate.kind != semconv.RETENTION_KIND_INSTRUCTION and candidate.text in restored_text:
            continue
        cost = estimate_text(candidate.text) + 2
        if used + cost > budget:
            left_out[candidate.kind] = left_out.get(candidate.kind, 0) + 1
            continue
        used += cost
        chosen.append(candidate)
        restored_text += "\n" + candidate.text
    text, superseded = _render(chosen, subjects)
    while chosen and estimate_text(text) > budget:  # the estimate of the whole may round above the parts'
        dropped_last = chosen.pop()  # the lowest in rank (chosen in rank order)
        left_out[dropped_last.kind] = left_out.get(dropped_last.kind, 0) + 1
        text, superseded = _render(chosen, subjects)
    if not chosen:
        return Repair(
            before,
            found_before,
            budget=budget,
            left_out=left_out,
            checked=tuple(checked),
            trail=trail,
            trail_paths=trail_paths,
        )
    restored: dict[str, int] = {}
    for candidate in chosen:
        restored[candidate.kind] = restored.get(candidate.kind, 0) + 1
    return Repair(
        before,
        retention_mod.lookup_added(checked, found_before, haystack, text),  # = lookup(checked, haystack + "\n" + text)
        text=text,
        tokens=estimate_text(text),
        budget=budget,
        restored=restored,
        left_out=left_out,
        superseded=superseded,
        checked=tuple(checked),
        trail=trail,
        trail_paths=trail_paths,
    )


def _render(chosen: Sequence[_Candidate], subjects: _Subjects) -> tuple[str, int]:
    """The block of ``chosen``, in the order of the conversation (the latest statement last), and how many of
    its sentences it marks as replaced; "" when nothing is chosen."""
    if not chosen:
        return "", 0
    chosen = sorted(chosen, key=lambda c: c.position)
    said = [c for c in chosen if c.kind == semconv.RETENTION_KIND_INSTRUCTION]
    work = [c for c in chosen if c.kind != semconv.RETENTION_KIND_INSTRUCTION]
    lines = [RESTORED_HEADER]
    superseded = 0
    if said:
        said_lines, superseded = _said_block(said, subjects)
        lines += [RESTORED_USER_LINE, *said_lines]
    if work:
        lines += [RESTORED_ARTIFACTS_LINE, *(_line(c) for c in work)]
    return "\n".join(lines), superseded


def annotate(span: Span, result: Repair) -> None:
    """The repair's attributes on the ``compact`` span (the figure after it is the retention check's own)."""
    if result.before.retention is not None:
        span.set_attribute(semconv.COMPACTION_RETENTION_BEFORE_REPAIR, result.before.retention)
    span.set_attribute(semconv.COMPACTION_REPAIR_BUDGET, result.budget)
    span.set_attribute(semconv.COMPACTION_REPAIR_TOKENS, result.tokens)
    span.set_attribute(semconv.COMPACTION_REPAIR_RESTORED, sum(result.restored.values()))
    for kind, count in result.restored.items():
        span.set_attribute(semconv.COMPACTION_REPAIR_RESTORED_PREFIX + kind, count)
    span.set_attribute(semconv.COMPACTION_REPAIR_LEFT_OUT, sum(result.left_out.values()))
    for kind, count in result.left_out.items():
        span.set_attribute(semconv.COMPACTION_REPAIR_LEFT_OUT_PREFIX + kind, count)
    if result.superseded:
        span.set_attribute(semconv.COMPACTION_REPAIR_SUPERSEDED, result.superseded)
