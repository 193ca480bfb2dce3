"""What a compaction kept: the salient items of the dropped span, looked up in the new request; no LLM call.

A summary that reads well can still have lost the one path, error or instruction the next turn needs, and
nothing else in the telemetry says so (the ``compact`` span's figures are sizes). So every successful
compaction collects, deterministically, the salient items of what it dropped and checks which of them
reach the request that goes out instead (the summary, the kept messages, the user messages carried beside
the summary, the rehydrated files, the system prompt): the fraction found is
``otel_context.compaction.retention`` (docs/telemetry.md).

Salient items, by kind (:data:`otel_context.semconv.RETENTION_KINDS`):

- ``path``: file paths with a known extension (``src/app/main.py``, ``config.yaml``, a compiler's location
  ``src/x.ts(12,5)`` without its position), anywhere;
- ``error``: error lines, anywhere, from the error word to the end of the line: ``ValueError: ...``,
  ``java.lang.NullPointerException: ...``, ``error[E0308]: ...``, ``error: ...``, ``fatal: ...``,
  ``panic: ...``, ``npm ERR! ...``, ``ERROR ...``, ``FAILED tests/...``, ``FAIL: ...``, a compiler's coded
  diagnostic (``error TS2322: ...``, ``error CS0103: ...``), ``Failed to ...`` that does not continue a
  sentence; whole, where the subject comes first: ``deploy-preview failed: ...`` and ``Failed: ...`` (not in
  a quoted string: that is code), a log record of level error (``level=error msg=...``,
  ``"level":"error"``), ``500 Internal Server Error``; after its prefix, pytest's ``E   ...`` (its first
  level); a linter's row whole (eslint's ``12:5  error  'x' is never used  no-unused-vars``); and a Python
  traceback's exception line, whatever the exception's name (``decimal.InvalidOperation: ...``). Not prose
  that mentions an error (``the error handling``, ``errors: 0``), nor code (``except ValueError:``,
  ``log.error(...)``), nor per-line noise: a progress line (pytest's ``FAILED   [ 44%]``, a bar), a spinner's
  frame, a report's heading (``____ ERROR at setup of test_x ____``), an expected failure (``XFAIL``), what
  follows a carriage return;
- ``identifier``: identifiers in inline code spans (`` `parse_config` ``) of what the user and the model wrote;
- ``number``: numbers with units (``250 ms``, ``4 GiB``, ``95%``) of what the user and the model wrote;
- ``instruction``: the sentences of the user's own messages (three words or more), not tool results and
  not our summary message.

Numbers, code spans and sentences are read only from what the user and the model wrote: in tool results
(file contents, logs) they are mostly noise, and those are the bulk of a long context. Items are deduplicated
and capped per kind (:data:`CAPS`; an evenly spaced sample, oldest to newest, when there are more), so the
check costs about the same on any history.

Why this shape (fast and stable): every extractor is anchored on a literal (``.py``, ``rror``, ``ailed``,
``Traceback``, a backtick), which Python's ``re`` finds at memory-scan speed, instead of a pattern that
starts with a character class and is tried at every position (an alternation of literals is such a pattern:
each literal has a scan of its own); the dropped span is walked once (the adapter's ``item_texts``,
:func:`walk`; the repair hands the same walk to its candidates) and each distinct match is worked on once; a
literal-led scan reads at most a few matches in each of 32 parts of the text (:data:`HITS_PER_WINDOW`,
:data:`PATH_HITS_PER_WINDOW`: paths are named densely), reading a little past each part's end so that a match
across the cut is whole; the new request is joined into one text once, and each item is a plain substring
test of it. What is left (see benchmarks/README.md) is one regex scan per extractor over the span's text and a
Python step per distinct match, and the walk's step per item: linear in the span.

An item found verbatim counts as kept (a paraphrase does not: the summarizer is asked to keep paths, errors
and the user's messages verbatim). Our own wrappers (the summary message's header and footer) give no item.
Extraction and lookup are apart (:func:`salient_items`, then :func:`measure_items` or :func:`lookup`), so
that a caller extracts once and measures several requests: a summary before its repair and after (the
figure after it from the one before, :func:`lookup_added`: only the lost items, in the added block alone).

Microcompact: the tool results it cleared or cut are dropped content too; their items (paths and error
lines) are checked against the new request the same way (``cut_index`` is 0: nothing was replaced by a
summary). A compaction done by the provider is not checked (its result is opaque).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER, restored_user_lines, without_work_trail
from otel_context.formats.base import ToolUse, WireFormatAdapter

__all__ = [
    "CAPS",
    "LOST_EVENT_CAP",
    "REPAIR_CAPS",
    "UNCAPPED",
    "Retention",
    "also_kept",
    "annotate",
    "check",
    "check_microcompact",
    "cut_at_stops",
    "error_lines",
    "lookup",
    "lookup_added",
    "measure",
    "measure_items",
    "request_text",
    "salient_by_kind",
    "salient_items",
    "sample",
    "sample_kinds",
    "stands_alone",
    "walk",
]

Item = Mapping[str, Any]

#: The most items checked per kind (an evenly spaced sample, oldest to newest, beyond that).
CAPS: Mapping[str, int] = {
    semconv.RETENTION_KIND_INSTRUCTION: 24,
    semconv.RETENTION_KIND_ERROR: 16,
    semconv.RETENTION_KIND_PATH: 24,
    semconv.RETENTION_KIND_IDENTIFIER: 16,
    semconv.RETENTION_KIND_NUMBER: 12,
}
#: The caps of the repair's candidates (:mod:`.repair`): it looks at more than the figure samples, since
#: what it restores must not depend on where a sample falls.
REPAIR_CAPS: Mapping[str, int] = {kind: cap * 8 for kind, cap in CAPS.items()}
#: No cap: every item, for a caller that samples them itself (:func:`sample`).
UNCAPPED: Mapping[str, int] = {kind: 1 << 30 for kind in CAPS}
#: The most lost items the ``otel_context.compaction.lost`` event names, and their length each.
LOST_EVENT_CAP = 20
LOST_ITEM_CHARS = 200
#: Longest item kept whole; longer error lines and sentences are checked by their first characters.
MAX_ITEM_CHARS = 160

#: File extensions a path may end with (a bare ``name.ext`` counts too): the path is read backwards from the
#: extension (see :func:`_paths`).
_EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|vue|svelte|go|rs|java|kt|kts|scala|swift|c|h|cc|cpp|cxx|hpp|cs|rb|php|"
    "pl|lua|jl|dart|ex|exs|erl|hs|ml|clj|sh|bash|zsh|ps1|sql|md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|conf|"
    "env|lock|xml|html|htm|css|scss|sass|less|csv|tsv|log|proto|gradle|tf|hcl|graphql"
)
#: Not followed by a word character, ``-`` or ``(``, but for a compiler's location (``Legend.tsx(41,7)``,
#: ``Program.cs(10,5)``): ``call.py(`` is a call.
_PATH_END = re.compile(r"\.(?:" + _EXTENSIONS + r")(?![\w-]|\((?!\d))")
#: The characters of a path, read backwards from its extension (the text is reversed once).
_PATH_BACK = re.compile(r"[\w./~@+-]{1,200}")
_CODE_SPAN = re.compile(r"`([^`\s]{1,80})`")  # an identifier: no space inside
_LETTER = re.compile(r"[^\W\d_]")
#: A number with a unit, found in the UTF-8 bytes of the text with every digit turned into ``0`` (one
#: byte-table translation): the pattern is then led by the literal ``0`` (a leading ``0+`` repeat would not
#: be a prefix the engine searches for), found at memory speed, where a pattern led by ``\d`` is tried at
#: every position (~30 ns a character); right after it, a look back rejects a digit inside a word, a version
#: or a longer number at once, and a look ahead a digit run that no unit follows. ``µs`` is spelled in its
#: UTF-8 bytes.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NUMBER = re.compile(
    rb"0(?:(?<=[^\w.]0)|(?<=^0))0*(?:[.,]00*)* ?(?=[munshdwkKMGTPbtlf%prexHqUE\xc2])"
    rb"(?:ms|\xc2\xb5s|us|ns|s|secs?|seconds?|mins?|minutes?|hrs?|hours?|h|days?|weeks?|"
    rb"[kKMGTP]i?B|bytes?|tokens?|lines?|files?|%|px|rem|em|x|[kKM]|GHz|MHz|Hz|rps|qps|USD|EUR)(?![\w%])"
)
#: Error words, each pattern led by a literal (found at memory-scan speed, where a pattern led by a character
#: class is tried at every position): a colon after ``...Error``, ``error``, ``error[E0308]``,
#: ``...Exception``, ``fatal``, ``panic``, ``ERR``; ``ERR!``, ``ERROR``; ``FAILED``, ``FAIL:``; ``Failed to``
#: that does not continue a sentence (at the start of a line, after a prefix such as ``: `` or a timestamp);
#: a compiler's coded diagnostic (``error TS2322:``, ``error CS0103:``, ``error C2065:``). Not ``errors``,
#: ``self.error(``, ``except ValueError`` (no colon right after the word), ``error handling`` (no code).
#: These give the item from the error word on. Forms whose subject comes first give the whole line: group
#: ``said``, ``failed:`` / ``Failed:`` (``deploy-preview failed: ...``), unless a quote comes before it on the
#: line (``log.error('fetch failed: %s')`` is code); group ``line``, a log record of level error
#: (``level=error msg=...``, ``"level":"error"``) and an HTTP ``500 Internal Server Error``.
_ERROR_ANCHORS = (
    # The one-character look back first: most colons (``try:``, ``path:12:``) are rejected by it at once.
    re.compile(r":(?<=[lcnrR\]]:)(?:(?<=rror:|atal:|anic:)|(?<=ception:)|(?<=ERR:)|(?<=rror\[E\d{4}\]:))"),
    re.compile(r"ERR(?:!|OR\b)"),
    re.compile(r"FAIL(?:ED)?[: ]"),
    re.compile(r"ailed(?:(?P<said>(?<=[Ff]ailed):)|(?<=Failed) to (?<![A-Za-z]Failed to )(?<![a-z.,;!?] Failed to ))"),
    # One pass for the rarer ``...rror`` forms: the character after the word rejects most at once. A linter's
    # row (eslint's ``12:5  error  'x' is never used  no-unused-vars``) is the whole line: its position first.
    re.compile(
        r'rror(?:[ "\n.](?:(?<=rror )[A-Z]{1,4}\d{1,6}:|'
        r'(?P<line>(?<=level=error )|(?<="level":"error")|(?<="level": "error")|'
        r"(?:(?<=\d  error )|(?<=\d   error )|(?<=\d    error )|(?<=\d     error ))(?= )))"
        r"|(?P<whole>(?<=Server Error)(?![\w-])))"
    ),
)
#: A progress line: a test runner's per-test line (pytest's ``FAILED   [ 44%]``), a bar (``[=====>   ]``),
#: a spinner's frame (a braille character first): noise that says again what the run's summary says.
_PROGRESS = re.compile(r"\[\s*\d{1,3}%\]\s*$|\[[ .>~-]*[=#]{2,}[=#>~. -]*\]")
_SPINNERS = range(0x2800, 0x2900)
#: A section rule of a report (pytest's ``____ ERROR at setup of test_x ____``): a heading, not an error.
_RULES = ("___", "===", "---")
#: pytest's explanation of a failure: ``E   `` then the line (its first level; a nested line is indented
#: further); the item is the line after the prefix.
_PYTEST_E = re.compile(r"E   (?<=\nE   )(?=\S)")
#: A Python traceback: the item is its exception line, the first line after the header that is not indented
#: (``decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]``, whatever the exception's name).
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_UNINDENTED = re.compile(r"\n(?=\S)")
#: How far after its header a traceback's exception line is looked for.
_TRACEBACK_LOOK = 20_000
#: Literal-led scans read at most this many matches in each of this many parts of the text (see _windows).
WINDOWS = 32
HITS_PER_WINDOW = 8
#: How far past its part a scan reads: more than the longest match and its look-ahead.
_REACH = 64
#: Paths are read more densely: a listing, a grep or a test run names several in every few lines, and at 8
#: a part a path named once among them went unread. A mention whose last characters before the extension
#: were read already (the same path, most often) is skipped before any other work.
PATH_HITS_PER_WINDOW = 16
#: The characters before an extension that identify a short path's mention (see :func:`_paths`).
_PATH_KEY = 16
#: What an error word is made of, read backwards from its anchor (``java.lang.NullPointerException``,
#: ``error[E0308]``).
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$[]")
_WORD_BACK = re.compile(r"[a-zA-Z0-9_.$\[\]]*")  # the same characters, matched on the reversed text
_WORD_LOOK = 64  # characters read back at once (an error word is rarely longer)


@dataclass(frozen=True)
class Retention:
    """The result of one check."""

    #: Items found in the new request / items checked (None when there was nothing to check).
    retention: float | None
    items_checked: int
    #: The items not found, as ``(kind, text)``, oldest first.
    lost: tuple[tuple[str, str], ...]


def _spread(items: list[str], cap: int) -> list[str]:
    """At most ``cap`` of ``items``, evenly spaced from the first to the last (deterministic)."""
    n = len(items)
    if n <= cap:
        return items
    return [items[i * n // cap] for i in range(cap)]


def _windows(pattern: re.Pattern[str], text: str, hits: int = HITS_PER_WINDOW) -> list[re.Match[str]]:
    """Matches of ``pattern`` in ``text``, at most ``hits`` (:data:`HITS_PER_WINDOW`) in each of :data:`WINDOWS` equal
    parts: a transcript full of one path (a grep, a listing) costs no more than one that names it once, and
    the sample still spans the text from its start to its end. (``islice`` stops each part's scan at its
    budget without a Python step per match.)"""
    n = len(text)
    parts = WINDOWS if n > WINDOWS * 256 else 1
    budget = hits * (WINDOWS // parts)
    matches: list[re.Match[str]] = []
    for part in range(parts):
        # Each part's scan reads on past its end (:data:`_REACH`), so that a match across the cut is whole (and
        # its look-ahead sees the real next character); what starts after the end is the next part's.
        end = (part + 1) * n // parts
        taken = list(islice(pattern.finditer(text, part * n // parts, min(n, end + _REACH)), budget))
        while taken and taken[-1].start() >= end:
            taken.pop()
        matches.extend(taken)
    return matches


def _paths(text: str, found: dict[str, None]) -> None:
    # Mentions read already whose path is shorter than the key (the characters before the extension, with
    # it): the key then holds the whole path and where it starts, so the same key gives the same path.
    seen: set[str] = set()
    for match in _windows(_PATH_END, text, PATH_HITS_PER_WINDOW):
        start = match.start()
        if start == 0:
            continue
        mention = text[max(0, start - _PATH_KEY) : match.end()]
        if mention in seen:
            continue
        # The path read backwards from its extension, at the regex engine's speed: the longest run
        # _PATH_BACK takes is 200 characters, so the reversed 200 before the extension are enough (one short
        # slice a match instead of the whole text reversed).
        back = _PATH_BACK.match(text[max(0, start - 200) : start][::-1])
        if back is None:
            continue
        if back.end() < _PATH_KEY:
            seen.add(mention)
        path = text[start - back.end() : match.end()].lstrip("./~")
        if path in found:
            continue
        stem = path[path.rfind("/") + 1 : path.rfind(".")]
        if stem.strip("._-~@+") and len(path) <= MAX_ITEM_CHARS:
            found[path] = None


def error_lines(text: str) -> dict[str, int]:
    """The error lines of ``text`` (:func:`_error_lines`), each with where its line starts in ``text``: for a
    reader of one tool result that needs the error's place too (the work trail: the location before the error
    word, a compiler's ``-->`` line after it)."""
    found: dict[str, None] = {}
    where: dict[str, int] = {}
    _error_lines(text, found, where)
    return where


def _error_lines(text: str, found: dict[str, None], where: dict[str, int] | None = None) -> None:
    """Lines that report an error, from the error word on (``E   ValueError: x`` gives ``ValueError: x``), or
    whole (see :data:`_ERROR_ANCHORS`); with ``where``, each item's line start, for :func:`error_lines`."""
    starts: dict[int, int] = {}  # line start -> where its item starts (the first error word in it)
    rfind = text.rfind

    def note(line: int, pos: int) -> None:
        if pos < starts.get(line, pos + 1):
            starts[line] = pos

    for anchor in _ERROR_ANCHORS:
        for match in _windows(anchor, text):
            pos = match.start()
            line = rfind("\n", 0, pos) + 1
            group = match.lastgroup
            if group is None:
                note(line, pos)
            elif group != "said" or ("'" not in text[line:pos] and '"' not in text[line:pos]):
                note(line, line)  # the whole line
    for match in _windows(_PYTEST_E, text):
        note(match.start(), match.end())
    if text.startswith("E   ") and text[4:5].strip():  # the first line has no line break before it
        note(0, 4)
    for match in _windows(_TRACEBACK, text):
        exception = _UNINDENTED.search(text, match.end(), match.end() + _TRACEBACK_LOOK)
        if exception is not None:
            note(exception.end(), exception.end())
    for line in sorted(starts):
        pos = starts[line]
        if pos == line:  # the whole line: from its first character that is not a space or a list's bullet
            while text[pos : pos + 1] in (" ", "\t", "-", "*"):
                pos += 1
        else:
            # The error word read backwards from its anchor (a reversed slice, one regex match; a word longer
            # than the slice, rare, is read on character by character).
            lead = text[max(line, pos - _WORD_LOOK) : pos]
            pos -= _WORD_BACK.match(lead[::-1]).end()  # type: ignore[union-attr]  # `*`: always matches
            while pos > line and text[pos - 1] in _WORD_CHARS:
                pos -= 1
        end = text.find("\n", pos)
        if end < 0:
            end = len(text)
        escaped = text.find("\\n", pos, end)  # a line break written as ``\n`` (JSON, a repr) ends it too
        if escaped >= 0:
            end = escaped
        ret = text.find("\r", pos, end)  # a carriage return too: what follows overwrote the line on a terminal
        item = text[pos : end if ret < 0 else ret].strip()
        word = item.split(None, 1)[0] if item else ""
        if len(item) < len(word) + 4:  # an error word with a message after it
            continue
        if (
            _PROGRESS.search(item)
            or item.endswith(_RULES)
            or word == "XFAIL"
            or ord(text[line : line + 1] or " ") in _SPINNERS
        ):
            continue  # per-line noise: a progress line, a heading, an expected failure, a spinner
        found[item[:MAX_ITEM_CHARS]] = None
        if where is not None:
            where.setdefault(item[:MAX_ITEM_CHARS], line)


def stands_alone(kind: str, text: str) -> bool:
    """Whether the item ``(kind, text)`` is found again in its own text: not so an error line known by where it
    stood (after pytest's ``E   ``, the last line of a traceback: ``decimal.InvalidOperation: ...``), which a
    later check reads only where a repair restored it (:mod:`.repair`)."""
    if kind != semconv.RETENTION_KIND_ERROR:
        return True
    found: dict[str, None] = {}
    _error_lines(text, found)
    return text in found


def _identifiers(text: str, found: dict[str, None]) -> None:
    if "`" not in text:
        return
    # Each distinct span once, in the order of its first occurrence (the same order its item gets).
    for span in dict.fromkeys(_CODE_SPAN.findall(text)):
        if span.endswith("()"):
            span = span[:-2]
        if _LETTER.search(span):
            found[span] = None


def _numbers(text: str, found: dict[str, None]) -> None:
    raw = text.encode()
    spans = [match.span() for match in _NUMBER.finditer(raw.translate(_DIGITS_AS_ZERO))]
    if len(raw) != len(text):  # not all ASCII
        # After a letter that is not ASCII (the pattern itself rejects v1.2 s, 2x3, mod12): not a number.
        spans = [(start, end) for start, end in spans if not (start and raw[start - 1] >= 0x80)]
    # Each distinct number once, in the order of its first occurrence.
    for number in dict.fromkeys([raw[start:end] for start, end in spans]):
        found[" ".join(number.decode().split())] = None


def cut_at_stops(text: str) -> str:
    """``text`` with a line break for the space after each ``.``, ``!`` and ``?``: where sentences end, beside the
    line breaks (plain replacements, not a regex tried at every position). A text without a ``!`` (a ``?``) is
    not searched for ``! `` (``? ``): one character is found by ``memchr`` at memory speed, where the search for
    two (that ``str.replace`` does even when there is none) steps a few characters at a time, ~0.15 ms for each
    on a request of ~200,000 characters."""
    text = text.replace(". ", ".\n")
    if "!" in text:
        text = text.replace("! ", "!\n")
    if "?" in text:
        text = text.replace("? ", "?\n")
    return text


def _sentences(text: str, found: dict[str, None]) -> None:
    """Sentences end at ``.``, ``!`` or ``?`` followed by a space, and at line breaks (:func:`cut_at_stops`); each
    distinct line is read once."""
    lines = cut_at_stops(text).splitlines()
    for sentence in dict.fromkeys(lines):
        sentence = sentence.strip()
        if len(sentence) >= 12 and sentence.count(" ") >= 2:
            found[sentence[:MAX_ITEM_CHARS]] = None


#: Our summary message, told by its header (after any leading white space: ``\s`` is ``str.isspace``).
_SUMMARY_START = re.compile(r"\s*" + re.escape(SUMMARY_MESSAGE_HEADER))


#: Each item's ``(text, is_model_output, user text)``, as the adapter's ``item_texts`` gives them.
Walked = Sequence[tuple[str, bool, str]]


def walk(
    adapter: WireFormatAdapter, dropped: Iterable[Item], tools: list[ToolUse] | None = None
) -> list[tuple[str, bool, str]]:
    """The texts of ``dropped``'s items (one walk of them, the adapter's ``item_texts``): for a caller that
    reads them more than once (the repair: the extraction, the user's sentences; the work trail). With
    ``tools``, the same walk collects the tool calls and results it meets (the work trail's)."""
    return adapter.item_texts(list(dropped), tools)


def _texts(
    adapter: WireFormatAdapter, dropped: Iterable[Item], walked: Walked | None = None
) -> tuple[list[str], list[str], list[str]]:
    """The dropped span's text as (everything, what the user and the model wrote, the user's own words), in
    the order of the span."""
    everything: list[str] = []
    written: list[str] = []
    said: list[str] = []
    for text, model_output, user in walk(adapter, dropped) if walked is None else walked:  # one walk of the items
        if not text:
            continue
        if model_output:
            everything.append(text)
            written.append(text)
        elif user:
            if _SUMMARY_START.match(user) is None:  # our summary message: not the user's words
                everything.append(text)
                written.append(user)
                said.append(user)
            else:  # not the user's words, but for the lines a repair restored from them; and without its work
                # trail, which the next trail carries on whole (its items are counted as the trail's: trail.py)
                text, user = without_work_trail(text), without_work_trail(user)
                everything.append(text)
                written.append(user)
                said.extend(restored_user_lines(user))
        else:
            everything.append(text)
    return everything, written, said


def salient_items(
    adapter: WireFormatAdapter,
    dropped: Iterable[Item],
    *,
    tool_texts: Iterable[str] = (),
    caps: Mapping[str, int] = CAPS,
    walked: Walked | None = None,
) -> list[tuple[str, str]]:
    """The salient items of ``dropped`` (and of ``tool_texts``, tool results' former contents), as
    ``(kind, text)``: deduplicated, capped per kind (``caps``, :data:`CAPS` by default), in kind order then
    oldest first. ``walked``: ``dropped``'s texts when the caller has them (:func:`walk`)."""
    return sample_kinds(salient_by_kind(adapter, dropped, tool_texts=tool_texts, walked=walked), caps)


def salient_by_kind(
    adapter: WireFormatAdapter,
    dropped: Iterable[Item],
    *,
    tool_texts: Iterable[str] = (),
    walked: Walked | None = None,
) -> dict[str, list[str]]:
    """Every salient item of ``dropped`` (as :func:`salient_items` gives them, uncapped), by kind: for a caller
    that samples them more than once (:func:`sample_kinds`: the repair, for the figure and for its candidates)."""
    everything, written, said = _texts(adapter, dropped, walked)
    everything.extend(tool_texts)
    # One join per reading: the extractors scan long texts once instead of many short ones (a sentence never
    # spans two messages: the split also cuts at line breaks).
    all_text = "\n".join(everything)
    prose = "\n".join(written)
    found: dict[str, dict[str, None]] = {kind: {} for kind in CAPS}
    _sentences("\n".join(said), found[semconv.RETENTION_KIND_INSTRUCTION])
    _error_lines(all_text, found[semconv.RETENTION_KIND_ERROR])
    _paths(all_text, found[semconv.RETENTION_KIND_PATH])
    _identifiers(prose, found[semconv.RETENTION_KIND_IDENTIFIER])
    _numbers(prose, found[semconv.RETENTION_KIND_NUMBER])
    return {kind: list(texts) for kind, texts in found.items()}


def sample(items: Sequence[tuple[str, str]], caps: Mapping[str, int]) -> list[tuple[str, str]]:
    """``items`` (all of them, :data:`UNCAPPED`, in kind order) capped per kind as :func:`salient_items` caps
    them: the same list it gives with ``caps``."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in caps}
    for kind, text in items:
        by_kind.setdefault(kind, []).append(text)
    return sample_kinds(by_kind, caps)


def sample_kinds(by_kind: Mapping[str, list[str]], caps: Mapping[str, int]) -> list[tuple[str, str]]:
    """The items of ``by_kind`` (each kind's texts, oldest first) capped per kind as :func:`sample` caps them, in
    the order of ``caps``: for a caller that has its items by kind (the work trail's)."""
    out: list[tuple[str, str]] = []
    for kind, cap in caps.items():
        out.extend((kind, text) for text in _spread(by_kind.get(kind, []), cap))
    return out


def request_text(adapter: WireFormatAdapter, body: Mapping[str, Any], after: Sequence[Item]) -> str:
    """What a request carries, as the one text its items are looked up in: the system prompt of ``body`` and
    the text of each of ``after`` (its items), joined."""
    return "\n".join([adapter.system_text(body), *(text for text, _, _ in adapter.item_texts(after))])


def lookup(items: Sequence[tuple[str, str]], text: str) -> Retention:
    """Which of ``items`` (``(kind, text)``, as :func:`salient_items` gives them) are in ``text`` (see
    :func:`request_text`): an item found verbatim is kept; a number also with or without the space before
    its unit (``250 ms`` / ``250ms``). The lost ones keep their order and their whole text (an instruction:
    its sentence, cut at :data:`MAX_ITEM_CHARS` as extracted)."""
    if not items:
        return Retention(None, 0, ())
    number = semconv.RETENTION_KIND_NUMBER
    lost = tuple(item for item in items if not (_number_kept(item[1], text) if item[0] == number else item[1] in text))
    return Retention((len(items) - len(lost)) / len(items), len(items), lost)


def lookup_added(items: Sequence[tuple[str, str]], result: Retention, text: str, added: str) -> Retention:
    """What :func:`lookup` gives for ``items`` in ``text + "\\n" + added``, from ``result``, what it gave in
    ``text`` (a request, then the block a repair adds to it): an item found stays found, and a lost one
    without a line break (every item the extractors give) is found in the joined text only if it is in
    ``added`` (an occurrence cannot cross the line break between them), so only the lost ones are looked
    up, in ``added`` alone, instead of every item in the whole request again."""
    if not items or not result.lost:
        return result
    joined: str | None = None
    number = semconv.RETENTION_KIND_NUMBER
    lost: list[tuple[str, str]] = []
    for item in result.lost:
        haystack = added
        if "\n" in item[1]:  # could cross the line break: the joined text itself
            joined = text + "\n" + added if joined is None else joined
            haystack = joined
        if not (_number_kept(item[1], haystack) if item[0] == number else item[1] in haystack):
            lost.append(item)
    return Retention((len(items) - len(lost)) / len(items), len(items), tuple(lost))


def also_kept(result: Retention, paths: frozenset[str]) -> Retention:
    """``result`` with the lost paths that are among ``paths`` counted kept: a block that lists paths by folder
    (``src/orders/: a.py, b.py``) or from a root holds them, not as the check's text (the work trail's,
    :mod:`.trail`)."""
    if not paths or not result.lost:
        return result
    lost = tuple(item for item in result.lost if not (item[0] == semconv.RETENTION_KIND_PATH and item[1] in paths))
    if len(lost) == len(result.lost):
        return result
    return Retention((result.items_checked - len(lost)) / result.items_checked, result.items_checked, lost)


def measure_items(
    items: Sequence[tuple[str, str]], adapter: WireFormatAdapter, body: Mapping[str, Any], after: Sequence[Item]
) -> Retention:
    """Which of ``items`` (from :func:`salient_items`) reach the request made of ``body``'s system prompt and
    ``after``: the lookup alone, for a caller that extracts once and measures several requests (a summary
    before and after its repair). With the request's text at hand, :func:`lookup` skips the join."""
    if not items:
        return Retention(None, 0, ())
    return lookup(items, request_text(adapter, body, after))


def _number_kept(text: str, haystack: str) -> bool:
    """``250 ms`` written ``250 ms`` or ``250ms``: the form as extracted first (the usual one), then the other."""
    unit = text.lstrip("0123456789.,")
    digits = text[: len(text) - len(unit)]
    unit = unit.lstrip()
    spaced, joined = f"{digits} {unit}", f"{digits}{unit}"
    if text == joined:
        return joined in haystack or spaced in haystack
    return spaced in haystack or joined in haystack


def check(
    adapter: WireFormatAdapter, body: Mapping[str, Any], dropped: Sequence[Item], after: Sequence[Item]
) -> Retention:
    """Which salient items of ``dropped`` (the items a summary replaced) reach ``after`` (the new request's
    items: summary head, kept messages, ...) or the system prompt of ``body``."""
    return measure_items(salient_items(adapter, dropped), adapter, body, after)


def check_microcompact(
    adapter: WireFormatAdapter, body: Mapping[str, Any], before: Sequence[Item], after: Sequence[Item]
) -> Retention:
    """Which salient items of the tool results microcompact changed (cleared or cut) reach ``after``."""
    now = {ref.call_id: ref.text for ref in adapter.tool_results(after)}
    changed = [ref.text for ref in adapter.tool_results(before) if now.get(ref.call_id, ref.text) != ref.text]
    return measure_items(salient_items(adapter, (), tool_texts=changed), adapter, body, after)


def measure(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    before: Sequence[Item],
    after: Sequence[Item],
    cut: int,
    strategy: str,
) -> Retention:
    """The check of one compaction's result: ``before`` the items it was given, ``after`` the items it sends,
    ``cut`` the index in ``before`` up to which a summary replaced them (microcompact: the changed results)."""
    if strategy == semconv.STRATEGY_MICROCOMPACT:
        return check_microcompact(adapter, body, before, after)
    return check(adapter, body, before[:cut], after)


def annotate(span: Span, result: Retention, cut_index: int, capture_content: bool) -> None:
    """The check's attributes on the ``compact`` span; with content capture on, the ``lost`` event."""
    span.set_attribute(semconv.COMPACTION_ITEMS_CHECKED, result.items_checked)
    span.set_attribute(semconv.COMPACTION_CUT_INDEX, cut_index)
    if result.retention is not None:
        span.set_attribute(semconv.COMPACTION_RETENTION, result.retention)
    if capture_content and result.lost:
        shown = result.lost[:LOST_EVENT_CAP]
        telemetry.emit_event(
            span,
            semconv.COMPACTION_LOST_EVENT,
            {
                semconv.COMPACTION_LOST_ITEMS: [text[:LOST_ITEM_CHARS] for _, text in shown],
                semconv.COMPACTION_LOST_KINDS: [kind for kind, _ in shown],
                semconv.COMPACTION_LOST_COUNT: len(result.lost),
            },
        )
