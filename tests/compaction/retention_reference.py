"""The retention check as it was before its speed-up (main at 50da101, otel_context/compaction/retention.py,
verbatim below this docstring but for it): the oracle tests/compaction/test_retention.py compares the new one
with, item for item, on random histories. Not used by the package.

Since then, the extractors learnt more forms (issue 39, tool-result artifacts), written here the plain way:
compiler locations in paths (``Legend.tsx(41,7)``) and a denser path sample (:data:`PATH_HITS_PER_WINDOW`);
error lines of ``Failed to``, ``failed:``, coded diagnostics, log levels, ``Server Error`` (whole lines where the
subject comes first), pytest's ``E   `` lines and a traceback's exception line; then (issue 48) a linter's row
(eslint's ``12:5  error  ...``) whole, and per-line noise left out (progress lines, spinners, headings, XFAIL)."""

# ruff: noqa

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.formats.base import WireFormatAdapter

__all__ = ["CAPS", "LOST_EVENT_CAP", "Retention", "annotate", "check", "check_microcompact", "measure", "salient_items"]

Item = Mapping[str, Any]

#: The most items checked per kind (an evenly spaced sample, oldest to newest, beyond that).
CAPS: Mapping[str, int] = {
    semconv.RETENTION_KIND_INSTRUCTION: 24,
    semconv.RETENTION_KIND_ERROR: 16,
    semconv.RETENTION_KIND_PATH: 24,
    semconv.RETENTION_KIND_IDENTIFIER: 16,
    semconv.RETENTION_KIND_NUMBER: 12,
}
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
_ERROR_ANCHORS = (
    re.compile(r":(?:(?<=rror:|atal:|anic:)|(?<=ception:)|(?<=ERR:)|(?<=rror\[E\d{4}\]:))"),
    re.compile(r"ERR(?:!|OR\b)"),
    re.compile(r"FAIL(?:ED)?[: ]"),
    re.compile(r"ailed(?:(?P<said>(?<=[Ff]ailed):)|(?<=Failed) to (?<![A-Za-z]Failed to )(?<![a-z.,;!?] Failed to ))"),
    re.compile(
        r'rror(?:[ "\n.](?:(?<=rror )[A-Z]{1,4}\d{1,6}:|'
        r'(?P<line>(?<=level=error )|(?<="level":"error")|(?<="level": "error")|(?<=\d  error )(?= )|(?<=\d   error )(?= )|'
        r"(?<=\d    error )(?= )|(?<=\d     error )(?= )))|(?P<whole>(?<=Server Error)(?![\w-])))"
    ),
)
_PYTEST_E = re.compile(r"(?<=\n)E   (?=\S)")
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
#: Literal-led scans read at most this many matches in each of this many parts of the text (see _windows).
WINDOWS = 32
HITS_PER_WINDOW = 8
PATH_HITS_PER_WINDOW = 16
#: What an error word is made of, read backwards from its anchor (``java.lang.NullPointerException``,
#: ``error[E0308]``).
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$[]")


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


def _windows(pattern: re.Pattern[str], text: str, hits: int = HITS_PER_WINDOW) -> Iterator[re.Match[str]]:
    """Matches of ``pattern`` in ``text``, at most :data:`HITS_PER_WINDOW` in each of :data:`WINDOWS` equal
    parts: a transcript full of one path (a grep, a listing) costs no more than one that names it once, and
    the sample still spans the text from its start to its end."""
    n = len(text)
    parts = WINDOWS if n > WINDOWS * 256 else 1
    budget = hits * (WINDOWS // parts)
    for part in range(parts):
        end = (part + 1) * n // parts
        for taken, match in enumerate(pattern.finditer(text, part * n // parts, min(n, end + 64))):
            if taken >= budget or match.start() >= end:
                break
            yield match


def _paths(text: str, found: dict[str, None]) -> None:
    reverse: str | None = None
    n = len(text)
    for match in _windows(_PATH_END, text, PATH_HITS_PER_WINDOW):
        start = match.start()
        if start == 0:
            continue
        if reverse is None:
            reverse = text[::-1]  # read the path backwards from its extension, at the regex engine's speed
        back = _PATH_BACK.match(reverse, n - start)
        if back is None:
            continue
        path = text[start - (back.end() - back.start()) : match.end()].lstrip("./~")
        stem = path[path.rfind("/") + 1 : path.rfind(".")]
        if stem.strip("._-~@+") and len(path) <= MAX_ITEM_CHARS:
            found[path] = None


def _error_lines(text: str, found: dict[str, None]) -> None:
    """Lines that report an error, from the error word on (``E   ValueError: x`` gives ``ValueError: x``), or
    whole."""
    starts: dict[int, int] = {}  # line start -> first error word in it

    def note(line: int, pos: int) -> None:
        if pos < starts.get(line, pos + 1):
            starts[line] = pos

    for anchor in _ERROR_ANCHORS:
        for match in _windows(anchor, text):
            pos = match.start()
            line = text.rfind("\n", 0, pos) + 1
            if match.lastgroup is None:
                note(line, pos)
            elif match.lastgroup != "said" or not ({"'", '"'} & set(text[line:pos])):
                note(line, line)
    for match in _windows(_PYTEST_E, text):
        note(match.start(), match.end())
    if re.match(r"E   \S", text):
        note(0, 4)
    for match in _windows(_TRACEBACK, text):
        for offset, char in enumerate(text[match.end() : match.end() + 20_000]):
            at = match.end() + offset
            if char == "\n" and at + 1 < min(len(text), match.end() + 20_000) and not text[at + 1].isspace():
                note(at + 1, at + 1)
                break
    for line in sorted(starts):
        pos = starts[line]
        if pos == line:
            while pos < len(text) and text[pos] in " \t-*":
                pos += 1
        else:
            while pos > line and text[pos - 1] in _WORD_CHARS:
                pos -= 1
        end = text.find("\n", pos)
        item = text[pos : end if end >= 0 else len(text)].split("\\n", 1)[0].split("\r", 1)[0].strip()
        word = item.split(None, 1)[0] if item else ""
        if len(item) < len(word) + 4:  # an error word with a message after it
            continue
        progress = re.search(r"\[\s*\d{1,3}%\]\s*$", item) or re.search(r"\[[ .>~-]*[=#]{2,}[=#>~. -]*\]", item)
        spinner = 0x2800 <= ord(text[line]) < 0x2900 if line < len(text) else False
        if progress or spinner or word == "XFAIL" or item.endswith(("___", "===", "---")):
            continue  # per-line noise (issue 48): a progress line, a spinner, an expected failure, a heading
        found[item[:MAX_ITEM_CHARS]] = None


def _identifiers(text: str, found: dict[str, None]) -> None:
    if "`" not in text:
        return
    for span in _CODE_SPAN.findall(text):
        if span.endswith("()"):
            span = span[:-2]
        if _LETTER.search(span):
            found[span] = None


def _numbers(text: str, found: dict[str, None]) -> None:
    raw = text.encode()
    zeros = raw.translate(_DIGITS_AS_ZERO)
    for match in _NUMBER.finditer(zeros):
        start = match.start()
        if start and raw[start - 1] >= 0x80:
            continue  # after a letter that is not ASCII (the pattern itself rejects v1.2 s, 2x3, mod12)
        found[" ".join(raw[start : match.end()].decode().split())] = None


def _sentences(text: str, found: dict[str, None]) -> None:
    """Sentences end at ``.``, ``!`` or ``?`` followed by a space, and at line breaks (plain replacements,
    not a regex tried at every position)."""
    for sentence in text.replace(". ", ".\n").replace("! ", "!\n").replace("? ", "?\n").splitlines():
        sentence = sentence.strip()
        if len(sentence) >= 12 and sentence.count(" ") >= 2:
            found[sentence[:MAX_ITEM_CHARS]] = None


def _texts(adapter: WireFormatAdapter, dropped: Iterable[Item]) -> tuple[list[str], list[str], list[str]]:
    """The dropped span's text as (everything, what the user and the model wrote, the user's own words), in
    the order of the span."""
    everything: list[str] = []
    written: list[str] = []
    said: list[str] = []
    for item in dropped:
        text = adapter.item_text(item)
        if not text:
            continue
        everything.append(text)
        if adapter.is_model_output(item):
            written.append(text)
            continue
        for user in adapter.user_text_items([item]):
            written.append(user)
            if not user.lstrip().startswith(SUMMARY_MESSAGE_HEADER):  # our summary message: not the user's words
                said.append(user)
    return everything, written, said


def salient_items(
    adapter: WireFormatAdapter, dropped: Iterable[Item], *, tool_texts: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The salient items of ``dropped`` (and of ``tool_texts``, tool results' former contents), as
    ``(kind, text)``: deduplicated, capped per kind (:data:`CAPS`), in kind order then oldest first."""
    everything, written, said = _texts(adapter, dropped)
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
    items: list[tuple[str, str]] = []
    for kind, cap in CAPS.items():
        items.extend((kind, text) for text in _spread(list(found[kind]), cap))
    return items


def _kept(kind: str, text: str, haystack: str) -> bool:
    if kind == semconv.RETENTION_KIND_NUMBER:
        return _number_kept(text, haystack)
    return text in haystack


#: Occurrences of a number's digits looked at before falling back to two plain searches.
_NUMBER_LOOKS = 32


def _number_kept(text: str, haystack: str) -> bool:
    """``250 ms`` written ``250 ms`` or ``250ms``: one search for the digits, each occurrence checked for the
    unit after it (a lost number costs one scan of the request, not two)."""
    unit = text.lstrip("0123456789.,")
    digits = text[: len(text) - len(unit)]
    unit = unit.lstrip()
    pos = haystack.find(digits)
    for _ in range(_NUMBER_LOOKS):
        if pos < 0:
            return False
        after = pos + len(digits)
        if haystack.startswith(unit, after) or (
            haystack[after : after + 1] == " " and haystack.startswith(unit, after + 1)
        ):
            return True
        pos = haystack.find(digits, pos + 1)
    return f"{digits} {unit}" in haystack or f"{digits}{unit}" in haystack


def _measure(
    items: list[tuple[str, str]], adapter: WireFormatAdapter, body: Mapping[str, Any], after: Sequence[Item]
) -> Retention:
    if not items:
        return Retention(None, 0, ())
    haystack = "\n".join([adapter.system_text(body), *(adapter.item_text(item) for item in after)])
    lost = tuple((kind, text) for kind, text in items if not _kept(kind, text, haystack))
    return Retention((len(items) - len(lost)) / len(items), len(items), lost)


def check(
    adapter: WireFormatAdapter, body: Mapping[str, Any], dropped: Sequence[Item], after: Sequence[Item]
) -> Retention:
    """Which salient items of ``dropped`` (the items a summary replaced) reach ``after`` (the new request's
    items: summary head, kept messages, ...) or the system prompt of ``body``."""
    return _measure(salient_items(adapter, dropped), adapter, body, after)


def check_microcompact(
    adapter: WireFormatAdapter, body: Mapping[str, Any], before: Sequence[Item], after: Sequence[Item]
) -> Retention:
    """Which salient items of the tool results microcompact changed (cleared or cut) reach ``after``."""
    now = {ref.call_id: ref.text for ref in adapter.tool_results(after)}
    changed = [ref.text for ref in adapter.tool_results(before) if now.get(ref.call_id, ref.text) != ref.text]
    return _measure(salient_items(adapter, (), tool_texts=changed), adapter, body, after)


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
