"""Summary compaction on plain data: where to cut, the summarizer's request and its overflow, the new head.

Written "sans I/O" (see :mod:`otel_context.flow`): :func:`summarize` is a generator that yields a
:class:`~otel_context.flow.SummaryRequest` whenever it needs the summarizer and receives a
:class:`~otel_context.flow.SummaryResult`. Telemetry, the breaker and hooks live in
:mod:`otel_context.compaction.cascade`; this module only decides and builds. It reads the cascade's
:class:`~otel_context.compaction.job.CompactionJob` as it is (a new input of the summary is one field there: see
:mod:`otel_context.compaction.job`) and returns a :class:`SummaryOutcome`, which the cascade's outcome carries
whole.

Keep-recent policy: the last ``keep_recent_messages`` items (default 6) stay verbatim, and never fewer
than the last user turn (the last genuine user message and everything after it), cutting only at the
adapter's round boundaries (which never split a tool call from its result, a parallel batch or a thinking
turn). Only when that leaves nothing to summarize (one giant turn) does the cut fall inside the last turn,
still at a round boundary.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from otel_context import semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import repair as repair_mod
from otel_context.compaction import retention as retention_mod
from otel_context.compaction import trail as trail_mod
from otel_context.compaction.job import CompactionJob
from otel_context.compaction.prompt import (
    PINNED_PREFIX,
    REHYDRATED_HEADER,
    VERBATIM_NOTE_PREFIX,
    SummaryParseError,
    build_prompt,
    is_summary_message,
    parse_summary,
    summary_message_text,
    summary_of_message,
)
from otel_context.compaction.repair import prose_and_paste, repair_budget
from otel_context.conversation import pins as conversation_pins
from otel_context.flow import SummaryRequest, SummaryResult
from otel_context.formats.base import ToolUse, WireFormatAdapter
from otel_context.settings import Settings, summary_model_for
from otel_context.tokens import ITEM_OVERHEAD_TOKENS, estimate_fixed, estimate_item, estimate_items, estimate_text
from otel_context.usage import TokenUsage

Item = Mapping[str, Any]

#: Times a summarizer request the provider found too long is cut in two (each half summarized in turn).
MAX_OVERFLOW_RETRIES = 3
#: The least output room a summary is ever asked with (an app's ``max_tokens`` may be smaller).
MIN_SUMMARY_TOKENS = 1_024
#: Headroom on a summarizer request sized in provider tokens (see :func:`request_tokens`).
SCALE_MARGIN = 1.02
#: error.type of a compaction whose summary stopped at its length limit twice (a cut summary loses its last
#: fields: pending tasks, current work).
SUMMARY_TRUNCATED = "summary_truncated"
#: The normalized finish reason of a reply cut at its ``max_tokens``.
FINISH_LENGTH = "length"
#: The retry of a summary cut at its length limit gets at least this many times the room that cut it.
RETRY_ROOM_FACTOR = 2


class CompactionError(Exception):
    """A compaction could not produce a result; ``kind`` is the error.type put on the compact span.

    ``finish_reason``: the last summarizer reply's (normalized), when one came back before the failure.
    """

    def __init__(self, kind: str, message: str, finish_reason: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.finish_reason = finish_reason


def is_user_turn_start(adapter: WireFormatAdapter, item: Item) -> bool:
    """Whether ``item`` is a genuine user message (not only tool results)."""
    return bool(adapter.user_text_items([item]))


def choose_cut(adapter: WireFormatAdapter, items: Sequence[Item], keep_recent: int, min_index: int = 0) -> int | None:
    """The index to cut at: ``items[:cut]`` is summarized, ``items[cut:]`` kept. None: nothing to cut.

    ``min_index``: the cut must lie strictly after it (after the head of an earlier compaction, which
    would otherwise be summarized into itself with no progress).
    """
    n = len(items)
    boundaries = adapter.round_boundaries(items)
    last_user = next((i for i in range(n - 1, min_index - 1, -1) if is_user_turn_start(adapter, items[i])), None)
    limit = n - keep_recent
    if last_user is not None:
        limit = min(limit, last_user)
    preferred = [b for b in boundaries if min_index < b <= limit]
    if preferred:
        return max(preferred)
    inside = [b for b in boundaries if min_index < b < n]
    return max(inside) if inside else None


#: Share of the target the kept messages may use; the rest is for the summary and the next turns.
KEPT_SHARE = 0.6


def deepen_cut(
    adapter: WireFormatAdapter, body: Mapping[str, Any], items: Sequence[Item], cut: int, target_tokens: int
) -> int:
    """Move the cut towards the end when the kept messages alone would fill the target.

    The keep-recent policy keeps the last user turn whole; in an agentic turn with many large tool results
    that turn alone can be above the threshold, and a summary of what precedes it would not help (a
    compaction that leaves the context above the threshold is thrashing). Then cut at later round
    boundaries, keeping at least the newest round.
    """
    budget_for_kept = int(target_tokens * KEPT_SHARE) - estimate_fixed(adapter, body)
    sizes = [estimate_item(adapter, item) for item in items[cut:]]
    kept = sum(sizes)
    if kept <= budget_for_kept:
        return cut
    later = [b for b in adapter.round_boundaries(items) if cut < b < len(items)]
    for boundary in later:
        kept -= sum(sizes[: boundary - cut])
        sizes = sizes[boundary - cut :]
        cut = boundary
        if kept <= budget_for_kept:
            break
    return cut


def drop_oldest_rounds(
    adapter: WireFormatAdapter, transcript: Sequence[Item], tokens_to_drop: int
) -> list[Item] | None:
    """``transcript`` without its oldest complete rounds covering ``tokens_to_drop`` (at most all but the
    newest round); None when it is a single round already."""
    boundaries = [b for b in adapter.round_boundaries(transcript) if 0 < b < len(transcript)]
    dropped = 0
    previous = 0
    for boundary in boundaries:
        dropped += estimate_items(adapter, transcript[previous:boundary])
        previous = boundary
        if dropped >= tokens_to_drop:
            return list(transcript[boundary:])
    # Not enough to drop by whole rounds: keep only the newest round (still worth a try), if any.
    return list(transcript[boundaries[-1] :]) if boundaries else None


@dataclass(frozen=True)
class Rehydration:
    """Recently read files restored after the summary."""

    text: str
    files: int
    tokens: int


def _rehydrate_scale(window: int | None) -> float:
    return 1.0 if window is None or window >= budget_mod.REFERENCE_WINDOW else window / budget_mod.REFERENCE_WINDOW


def rehydrate_cap(settings: Settings, window: int | None) -> int:
    """The most tokens of files restored after a summary (``rehydrate_max_tokens_total``, scaled)."""
    return max(1, int(settings.rehydrate_max_tokens_total * _rehydrate_scale(window)))


def rehydrate_most(settings: Settings, window: int | None) -> int:
    """The most tokens of files a summary may restore: the total cap, or fewer files at their own cap."""
    per_file = max(1, int(settings.rehydrate_max_tokens_per_file * _rehydrate_scale(window)))
    return min(rehydrate_cap(settings, window), max(0, settings.rehydrate_max_files) * per_file)


def rehydrate_files(
    adapter: WireFormatAdapter,
    items: Sequence[Item],
    cut: int,
    settings: Settings,
    window: int | None,
    room: int | None = None,
) -> Rehydration:
    """The newest files read by file-reading tools in ``items[:cut]`` and not read again in the kept part.

    Limits: ``rehydrate_max_files`` files (5), ``rehydrate_max_tokens_per_file`` (5,000) each,
    ``rehydrate_max_tokens_total`` (50,000) in all; the token limits shrink in proportion for windows
    under 200K, as the thresholds do (50K of files would not even fit a 30K window), and never exceed
    ``room`` (what is left under the threshold once the summary and the kept messages are counted).
    """
    if settings.rehydrate_max_files <= 0 or not settings.file_read_tools:
        return Rehydration("", 0, 0)
    per_file = max(1, int(settings.rehydrate_max_tokens_per_file * _rehydrate_scale(window)))
    total_cap = rehydrate_cap(settings, window)
    if room is not None:
        # Never let restored files push the result back over the threshold (that would thrash).
        total_cap = min(total_cap, room)
        if total_cap <= 0:
            return Rehydration("", 0, 0)
    refs = adapter.tool_results(items)
    kept_paths: set[str] = set()
    candidates: list[tuple[str, str]] = []
    for ref in reversed(refs):
        if ref.tool_name not in settings.file_read_tools or ref.tool_input is None:
            continue
        path = next(
            (ref.tool_input[k] for k in settings.file_path_keys if isinstance(ref.tool_input.get(k), str)), None
        )
        if path is None:
            continue
        if ref.item_index >= cut:
            kept_paths.add(path)
            continue
        if ref.cleared or not ref.text.strip() or path in kept_paths or any(p == path for p, _ in candidates):
            continue
        candidates.append((path, ref.text))
    parts: list[str] = []
    used = 0
    files = 0
    for path, text in candidates:
        if files >= settings.rehydrate_max_files:
            break
        room = min(per_file, total_cap - used)
        if room <= 0:
            break
        tokens = estimate_text(text)
        if tokens > room:
            text = text[: room * 3] + "\n[... file content truncated after compaction ...]"
            tokens = room
        parts.append(f'<file path="{path}">\n{text}\n</file>')
        used += tokens
        files += 1
    if not parts:
        return Rehydration("", 0, 0)
    return Rehydration("\n".join([REHYDRATED_HEADER, *parts]), files, used)


def user_messages_budget(settings: Settings, window: int | None, effective: int | None) -> int:
    """Tokens of the user's own messages kept verbatim beside a summary: ``user_messages_budget`` (20,000),
    scaled below a 200K window like the other buffers, and never more than a quarter of the effective
    window (the summary, the kept turns and the next ones need the rest)."""
    budget = int(settings.user_messages_budget * _rehydrate_scale(window))
    if effective is not None:
        budget = min(budget, effective // 4)
    return max(0, budget)


def user_messages(adapter: WireFormatAdapter, items: Sequence[Item]) -> list[str]:
    """The text of every message the user wrote in ``items``, oldest first: not tool results, not our own
    summary messages (an app that kept a compacted history sends them back as user messages), not the pins
    a compaction placed (they are carried as pins)."""
    return [
        text
        for text in adapter.user_text_items(items)
        if not is_summary_message(text) and not text.startswith(PINNED_PREFIX)
    ]


def pins_of(
    adapter: WireFormatAdapter, items: Sequence[Item], pinned: Sequence[str], unpinned: frozenset[str]
) -> list[str]:
    """The conversation's pins: those an earlier compaction placed in ``items`` (the head it replaces: shared
    with the fleet like the rest of it), then those pinned since, each once, less those unpinned here."""
    carried = [t[len(PINNED_PREFIX) :].strip() for t in adapter.user_text_items(items) if t.startswith(PINNED_PREFIX)]
    out: list[str] = []
    for text in (*carried, *pinned):
        if text not in out and text not in unpinned:
            out.append(text)
    return out


@dataclass(frozen=True)
class KeptUserMessages:
    """The user's messages kept verbatim beside a summary: the first ``first`` of ``texts`` are the
    conversation's first messages, the rest its newest; ``omitted`` were left out in between."""

    texts: tuple[str, ...] = ()
    first: int = 0
    omitted: int = 0
    #: The messages left out, oldest first.
    left_out: tuple[str, ...] = ()
    #: Of those, how many the summarizer did not read either (the oldest, made way for the summary's room).
    unread: int = 0

    @property
    def note(self) -> str:
        """The line of the summary message that says what follows it (empty: nothing follows)."""
        if not self.texts:
            return ""
        line = f"{VERBATIM_NOTE_PREFIX} The user's own messages of that part precede this one, verbatim, oldest first"
        if not self.omitted:
            return line + "."
        kept = f"{line}: the first {self.first} and the newest {len(self.texts) - self.first}; the {self.omitted} "
        if not self.unread:
            return kept + "in between are left out here and covered by the summary above."
        return (
            f"{kept}in between are left out here; {self.unread} of them did not fit in what the summarizer read, "
            "and the summary above covers the rest."
        )

    @property
    def prompt_line(self) -> str:
        """What the summarizer is told about them (so that it does not spend its room on them)."""
        if not self.texts:
            return ""
        if not self.omitted:
            which = f"all {len(self.texts)} of the user's messages in the conversation above"
        else:
            which = (
                f"the user's first {self.first} and newest {len(self.texts) - self.first} messages in the "
                f"conversation above (the {self.omitted} in between are not kept: cover those in the summary)"
            )
        return (
            f"The app keeps {which} verbatim beside your summary, as the user wrote them: do not spend the "
            "summary on repeating them, spend it on everything else."
        )


def verbatim_form(text: str) -> str:
    """A user message as it is kept verbatim: whole, or, when it pastes code, a log or a file beside its
    prose, the prose with one line saying how much was pasted (the paste is an artifact: its paths, errors
    and identifiers are the repair's, its sentences are not what the user asked)."""
    prose, paste = prose_and_paste(text)
    said = "\n".join(prose).strip()
    if not paste or not said:
        return text
    lines = len(paste)
    form = f"{said}\n[{lines} pasted line{'s' if lines != 1 else ''} left out here; the summary covers them]"
    return form if len(form) <= len(text) * 2 // 3 else text  # a paste too small to be worth a message cut


def select_user_messages(texts: Sequence[str], budget: int, unread: int = 0) -> KeptUserMessages:
    """The user's messages to keep verbatim within ``budget`` tokens: all of them when they fit; else the
    first ones (the task and its first constraints, up to a quarter of the budget) and the newest (the rest),
    each whole (a message cut in half is not what the user wrote) or, when it pastes code or a log, first as
    its prose (:func:`verbatim_form`): sentences before pastes. The room left then goes to the pastes of the
    kept messages, newest first.

    ``unread``: the first ``unread`` messages include some the summarizer did not read (the oldest rounds
    of its request made way for the summary's room): those may take the whole budget, oldest first, since
    the summary cannot cover them; the newest it did read get what is left."""
    full = [estimate_text(t) + ITEM_OVERHEAD_TOKENS for t in texts]
    if sum(full) <= budget:
        return KeptUserMessages(tuple(texts), len(texts), 0)
    forms = [verbatim_form(t) for t in texts]
    sizes = [
        full[i] if form is text else estimate_text(form) + ITEM_OVERHEAD_TOKENS
        for i, (form, text) in enumerate(zip(forms, texts, strict=True))
    ]
    first = used = 0
    while first < len(texts) and used + sizes[first] <= (budget if first < unread else budget // 4):
        used += sizes[first]
        first += 1
    if first == 0 and sizes and sizes[0] <= budget // 2:
        used, first = sizes[0], 1  # the task itself, even when it is long
    start = len(texts)
    while start > first and used + sizes[start - 1] <= budget:
        start -= 1
        used += sizes[start]
    chosen = [*range(first), *range(start, len(texts))]
    for index in sorted(chosen, reverse=True):  # the pastes of the kept messages, newest first, in what is left
        extra = full[index] - sizes[index]
        if 0 < extra <= budget - used:
            forms[index] = texts[index]
            used += extra
    kept = tuple(forms[i] for i in chosen)
    unread_left_out = max(0, min(unread, start) - first)
    return KeptUserMessages(kept, first, start - first, tuple(texts[first:start]), unread_left_out)


def to_cover(
    adapter: WireFormatAdapter, items: Sequence[Item], kept: KeptUserMessages, anchor_end: int, cut: int, budget: int
) -> list[str]:
    """The user's messages left out of the verbatim list that no earlier summary was asked to cover: those
    the previous compaction kept verbatim (its head, ``items[:anchor_end]``) and those of the span dropped
    now. They go into the prompt itself, where a summarizer that reads only the end of its input reads them
    too; at most ``budget`` tokens of them, oldest first. None at a first compaction (``anchor_end`` 0): the
    whole conversation is the transcript, and the prompt says to cover what is left out."""
    if not kept.left_out or not anchor_end:
        return []
    fresh = set(user_messages(adapter, items[:cut]))  # the previous verbatim list and the span
    candidates = [t for t in kept.left_out if t in fresh]
    out: list[str] = []
    used = 0
    for text in candidates:
        used += estimate_text(text) + ITEM_OVERHEAD_TOKENS
        if used > budget:
            break
        out.append(text)
    return out


#: Request parameters that would make a cache-sharing summary request fail or call a tool.
_FORCING = ("thinking", "reasoning", "response_format", "text", "parallel_tool_calls", "previous_response_id")


def summary_room(max_output: int, reserve: int | None) -> int:
    """The output room a summary is always given: the budget's reserve (``window - effective``, that is
    ``min(max_output, 20,000)`` of the call, at most half the window), at least :data:`MIN_SUMMARY_TOKENS`,
    at most what the summarizer may write (``max_output``).

    The thresholds leave this reserve free on purpose, so the summarizer's input is what has to make way for
    it (the oldest rounds are dropped), never the room itself.
    """
    return min(max_output, max(reserve or 0, MIN_SUMMARY_TOKENS))


def provider_scale(
    adapter: WireFormatAdapter, body: Mapping[str, Any], items: Sequence[Item], estimated_tokens: int | None
) -> float:
    """Provider tokens per estimated token for this history, from the engine's estimate of the request.

    Our estimates pad chars/4 by 4/3 (they gate compaction, where undercounting is the costly error), but the
    engine's own estimate of a call is anchored on the provider's count of the conversation. Sizing the
    summarizer's input with the padded figure made a request at the threshold look larger than the window,
    and the summary got the floor instead of the reserve the thresholds leave for it. 1.0 (the padded figure)
    when nothing better is known (a first call, the explicit API without a count).
    """
    if not estimated_tokens or estimated_tokens <= 0:
        return 1.0
    padded = estimate_fixed(adapter, body) + estimate_items(adapter, items)
    if padded <= 0:
        return 1.0
    return max(budget_mod.MIN_CALIBRATION, estimated_tokens / padded)


def request_tokens(adapter: WireFormatAdapter, request: Mapping[str, Any], scale: float) -> int:
    """The summarizer request's input in provider tokens: our estimate of it times ``scale``, plus
    :data:`SCALE_MARGIN`, since ``scale`` is an average over the conversation and the request also carries
    the prompt (prose, verbatim lists, the anchor), which may count a little denser."""
    padded = estimate_fixed(adapter, request) + estimate_items(adapter, adapter.items(request))
    return math.ceil(padded * scale * SCALE_MARGIN)


def shared_prefix_request(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    items: Sequence[Item],
    prompt: str,
    max_output: int,
    window: int | None,
    room: int = MIN_SUMMARY_TOKENS,
    scale: float = 1.0,
) -> dict[str, Any] | None:
    """The call's own request (same system, tools, messages and cache breakpoints) up to the cut (``items``),
    plus the prompt as a last user turn: its prefix is byte-identical to what the provider has just cached,
    so the summarizer reads the conversation from the cache instead of paying for it again (the cost spike
    users report around compaction). The messages kept after the cut are not sent: a summarizer that
    favours the end of its input would summarize them instead of what they replace. None when that is
    unsafe: a forced tool choice, thinking/reasoning or output-format settings, or a window that does not
    leave ``room`` tokens for the summary beside the request (sized in provider tokens: our estimate times
    ``scale``, see :func:`provider_scale`).
    """
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none") and not (
        isinstance(choice, Mapping) and choice.get("type") in ("auto", "none")
    ):
        return None
    if any(key in body for key in _FORCING):
        return None
    request = dict(adapter.with_items(body, [*items, adapter.summary_prompt_item(body, items, prompt)]))
    for key in ("stream", "stream_options", "n", "stop", "stop_sequences"):
        request.pop(key, None)
    max_tokens = max_output
    if window is not None:
        left = window - request_tokens(adapter, request, scale)
        if left < room:
            return None
        max_tokens = min(max_output, left)
    return adapter.with_output_cap(request, max_tokens)


def plain_request(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    transcript: Sequence[Item],
    prompt: str,
    model: str,
    *,
    max_output: int,
    window: int | None,
    room: int,
    scale: float,
) -> tuple[dict[str, Any], list[Item]]:
    """The summarizer's request without tools (the transcript as text) and the transcript it summarizes.

    Its output cap is ``max_output``, or what the window leaves beside the request when that is less, but
    never less than ``room``: when the window does not leave ``room`` beside the whole transcript, its
    oldest rounds are dropped until it does (the reserve stays whole; the summary then covers less of the
    oldest history, as after a too-long summarizer request). A transcript that is one round already goes out
    with what is left; under :data:`MIN_SUMMARY_TOKENS` the compaction fails.
    """
    current = list(transcript)
    while True:
        request = adapter.make_summary_request(body, current, prompt, max_output, model)
        if window is None:
            return request, current
        left = window - request_tokens(adapter, request, scale)
        if left >= room:
            return adapter.with_output_cap(request, min(max_output, left)), current
        shorter = drop_oldest_rounds(adapter, current, math.ceil((room - left) / scale))
        if not shorter or len(shorter) >= len(current):
            if left < MIN_SUMMARY_TOKENS:
                raise CompactionError(
                    "summary_too_long", f"the summarizer's request leaves no room for the summary ({left} tokens)"
                )
            return adapter.with_output_cap(request, left), current
        current = shorter


def _finish_reason(result: SummaryResult) -> str | None:
    """The reply's finish reason, normalized (``length`` for a reply cut at its ``max_tokens``)."""
    for reason in result.finish_reasons:
        return semconv.FINISH_REASON_MAP.get(reason, reason)
    return None


@dataclass(frozen=True)
class SummaryOutcome:
    """A successful summary: the new head of the conversation and its figures. The cascade's
    ``CompactionOutcome`` carries it whole (``summarized``): a new figure of the summary is one field here, set
    by :func:`finish_summary` and put on the ``compact`` span by ``cascade._close_span``."""

    cut: int  #: index in the input items; items[:cut] were replaced
    #: the user's own messages kept verbatim, then the summary message (+ restored items, rehydrated files)
    head: tuple[Item, ...]
    summary: str  #: as the summarizer wrote it, and the repair's block after it (what the summary message holds)
    summary_tokens: int  #: the summarizer's output tokens (reported, else estimated), all parts together
    files_rehydrated: int
    attempts: int
    #: Provider tokens per estimated token, measured on the summarizer's request (None: not measured,
    #: e.g. another summary model or no usage reported). See :func:`budget.calibration`.
    calibration: float | None = None
    #: The summarizer reply's finish reason, normalized (``stop``; None when it reported none).
    finish_reason: str | None = None
    #: The user's messages carried verbatim in the head (before the summary message).
    user_messages_kept: int = 0
    #: Of the user's messages selected for the verbatim list, how many made way because the head would not
    #: have been smaller than what it replaces (the lowest in the repair's priority first).
    user_messages_dropped: int = 0
    #: The app's pins placed before the verbatim list, and those over their cap (half the verbatim budget).
    pinned_kept: int = 0
    pinned_dropped: int = 0
    #: What the repair checked and restored (None: not run, e.g. a budget of 0 and nothing to measure).
    repair: repair_mod.Repair | None = None
    #: Requests the span was summarized in (1, or more when it did not fit one summarizer request).
    parts: int = 1
    #: The work trail the summary message carries (:mod:`.trail`).
    trail: trail_mod.WorkTrail | None = None


def find_anchor(items: Sequence[Item], adapter: WireFormatAdapter, cut: int) -> tuple[str, int] | None:
    """The newest summary message of ours in ``items[:cut]`` (an app that keeps the compacted history sends
    it back, e.g. the explicit API's result): its summary and the index after it, or None."""
    for index in range(cut - 1, -1, -1):
        for text in adapter.user_text_items([items[index]]):
            found = summary_of_message(text)
            if found is not None:
                return found, index + 1
    return None


@dataclass(frozen=True)
class _Plan:
    """What a summary decides before it asks: where to cut, what it updates, the user's messages it keeps,
    what the summarizer reads and the limits of its requests."""

    cut: int
    anchor: str | None
    anchor_end: int
    replaced: int  #: estimated tokens of ``items[:cut]``
    budget: int  #: tokens of the user's messages kept verbatim (after the pins)
    pinned: tuple[str, ...]  #: the pins kept, within their cap, before the verbatim list
    pins_dropped: int  #: pins over that cap
    texts: list[str]  #: the user's messages of the compacted part, oldest first
    kept: KeptUserMessages
    transcript: list[Item]  #: what the summarizer reads: the span dropped since the anchor, or all to the cut
    covering: list[str]  #: the user's messages leaving the verbatim list, quoted in the (last) prompt
    summary_model: str
    max_output: int
    model_limit: int  #: all the summary model may write (a retry after a reply cut at its limit)
    output_room: int
    scale: float


@dataclass(frozen=True)
class _Reply:
    """The summarizer's answer for one part, or None for ``summary`` when the provider said too long."""

    summary: str | None
    summary_tokens: int
    attempts: int
    finish: str | None
    request: Mapping[str, Any]
    usage: TokenUsage | None
    read: list[Item]  #: what of the part the request held (its oldest rounds may have made way)
    parts: int = 1  #: requests the whole transcript took (set on the last part's reply)


#: Tokens the head keeps under what it replaces (the estimate of a whole message rounds above its parts').
HEAD_MARGIN = 8
#: The most requests one span is summarized in (each a summarizer call); past it the oldest parts go unread,
#: as a too-long span did before parts existed, and the verbatim list keeps their user messages first.
MAX_PARTS = 6
#: Share of a part's room its transcript fills (the rendered transcript counts a little differently).
PART_FILL = 0.9


def summarize(job: CompactionJob) -> Generator[SummaryRequest, SummaryResult, SummaryOutcome]:
    """Summarize ``job.items[:cut]``; raise CompactionError. Four steps:

    1. :func:`plan_summary`: the cut, the anchor (an anchored summary updates the previous one with only the
       span dropped since), the user's messages kept verbatim (:func:`select_user_messages`);
    2. :func:`ask_summarizer`: the summarizer's requests, the span in parts (oldest first, each anchored on
       the summary of the part before) when it does not fit one request, length-cut and too-long retries;
    3. the unread accounting: what no request held (only when one round alone outgrows the window);
    4. :func:`finish_summary`: the head (the user's verbatim messages, the summary message), checked by the
       retention check and repaired from it (:mod:`.repair`) before anything uses it, and the files restored.
    """
    plan = plan_summary(job)
    reply = yield from ask_summarizer(job, plan)
    kept = _kept_after_reading(job.adapter, plan, reply.read)
    return finish_summary(job, plan, reply, kept)


def plan_summary(job: CompactionJob) -> _Plan:
    """Step 1 of :func:`summarize`: what to summarize and keep, and the limits of the summarizer's requests."""
    adapter, items, settings = job.adapter, job.items, job.settings
    cut = job.cut
    if cut is None:
        cut = choose_cut(adapter, items, settings.keep_recent_messages, job.min_index)
        if cut is not None and job.target is not None:
            cut = deepen_cut(adapter, job.body, items, cut, job.target)
    if cut is None or cut <= job.min_index:
        raise CompactionError("nothing_to_compact", "no round boundary leaves anything to summarize")
    anchor, anchor_end = job.anchor, job.anchor_end
    if anchor is None or anchor_end > cut:
        found = find_anchor(items, adapter, cut)
        anchor, anchor_end = found if found is not None else (None, 0)
    source = job.history if job.history is not None else items
    # At most half of what the summary replaces: the user's words alone must never undo the compaction
    # (in an agent's conversation they are a small part of it; in a chat of long questions, not).
    replaced = estimate_items(adapter, items[:cut])
    budget = min(user_messages_budget(settings, job.window, job.effective), replaced // 2)
    # Pins first, within half of that budget; the user's messages get the rest.
    pinned: list[str] = []
    named = job.state.key if job.state is not None and job.state.explicit else None  # only a named one has pins
    pins = pins_of(
        adapter, items[:cut], (*conversation_pins.pinned(named), *job.pinned), conversation_pins.unpinned(named)
    )
    used = 0
    for text in pins:
        size = estimate_item(adapter, adapter.make_user_item(f"{PINNED_PREFIX} {text}"))
        if used + size > budget // 2:
            break  # the oldest pins first: the span says how many did not fit
        pinned.append(text)
        used += size
    budget -= used
    texts = user_messages(adapter, source[: cut + job.history_shift])
    if anchor is not None:  # an app that sent the previous summary back as a message of its own
        texts = [t for t in texts if t.strip() != anchor.strip()]
    texts = [t for t in texts if t.strip() not in pinned]  # a pinned message goes out once, as its pin
    kept = select_user_messages(texts, max(0, budget))
    transcript = list(items[anchor_end:cut] if anchor is not None else items[:cut])
    covering = to_cover(adapter, items, kept, anchor_end if anchor is not None else 0, cut, budget)
    summary_model = summary_model_for(settings, adapter.provider, job.model)
    spec = budget_mod.lookup_model(summary_model)
    max_output = (
        budget_mod.SUMMARY_RESERVE_TOKENS if spec is None else min(budget_mod.SUMMARY_RESERVE_TOKENS, spec.max_output)
    )
    reserve = job.window - job.effective if job.window is not None and job.effective is not None else None
    return _Plan(
        cut=cut,
        anchor=anchor,
        anchor_end=anchor_end,
        replaced=replaced,
        budget=max(0, budget),
        pinned=tuple(pinned),
        pins_dropped=len(pins) - len(pinned),
        texts=texts,
        kept=kept,
        transcript=transcript,
        covering=covering,
        summary_model=summary_model,
        max_output=max_output,
        model_limit=max_output if spec is None else max(max_output, spec.max_output),
        output_room=summary_room(max_output, reserve),
        scale=provider_scale(adapter, job.body, items, job.estimated_tokens),
    )


def _prompt(job: CompactionJob, plan: _Plan, anchor: str | None, part: int = 1, parts: int = 1) -> str:
    """The prompt of part ``part`` of ``parts``: anchored on the previous part's summary (or the previous
    compaction's); the user's messages leaving the verbatim list are quoted in the last part's, at its end."""
    return build_prompt(
        job.instructions,
        anchor=anchor,
        kept_verbatim=plan.kept.prompt_line or None,
        to_cover=plan.covering if part == parts else (),
        part=(part, parts) if part > 1 else None,
    )


def split_parts(job: CompactionJob, plan: _Plan) -> list[list[Item]]:
    """The transcript in parts of whole rounds, oldest first, each of which fits one summarizer request beside
    the summary's room and an anchor as long as a summary (the previous part's): one part when it all fits.
    Summarized in parts, no round goes unread where before the oldest were dropped to make room."""
    adapter, transcript = job.adapter, plan.transcript
    if job.window is None:
        return [transcript]
    prompt = _prompt(job, plan, plan.anchor)
    whole = adapter.make_summary_request(job.body, transcript, prompt, plan.max_output, plan.summary_model)
    if job.window - request_tokens(adapter, whole, plan.scale) >= plan.output_room:
        return [transcript]
    empty = adapter.make_summary_request(job.body, [], prompt, plan.max_output, plan.summary_model)
    fixed = request_tokens(adapter, empty, plan.scale) + plan.output_room  # the room of a part's anchor
    capacity = int((job.window - plan.output_room - fixed) / (plan.scale * SCALE_MARGIN) * PART_FILL)
    if capacity <= 0:
        return [transcript]
    parts: list[list[Item]] = []
    start = previous = size = 0
    for boundary in [*(b for b in adapter.round_boundaries(transcript) if 0 < b < len(transcript)), len(transcript)]:
        tokens = estimate_items(adapter, transcript[previous:boundary])
        if size and size + tokens > capacity:
            parts.append(transcript[start:previous])
            start, size = previous, 0
        size += tokens
        previous = boundary
    parts.append(transcript[start:])
    return parts[-MAX_PARTS:]


def _split_in_two(adapter: WireFormatAdapter, part: Sequence[Item]) -> list[list[Item]] | None:
    """``part`` cut at the round boundary nearest its middle (by tokens), or None when it is one round."""
    inner = [b for b in adapter.round_boundaries(part) if 0 < b < len(part)]
    if not inner:
        return None
    half = estimate_items(adapter, part) / 2
    best = min(inner, key=lambda b: abs(estimate_items(adapter, part[:b]) - half))
    return [list(part[:best]), list(part[best:])]


def ask_summarizer(job: CompactionJob, plan: _Plan) -> Generator[SummaryRequest, SummaryResult, _Reply]:
    """Step 2 of :func:`summarize`: the summary of the whole transcript, in as many requests as it takes.

    One part is asked the cache-sharing way first when allowed (:func:`shared_prefix_request`), then the plain
    way. Parts are asked oldest first, each anchored on the summary of the one before (an anchored, iterative
    summary, as after a compaction). A part the provider still finds too long is cut in two, at most
    :data:`MAX_OVERFLOW_RETRIES` times in all; a single round that stays too long fails the compaction.
    """
    queue = split_parts(job, plan)
    single = len(queue) == 1
    anchor = plan.anchor
    attempts = splits = tokens = parts = 0
    read: list[Item] = []
    last: _Reply | None = None
    while queue:
        part = queue.pop(0)
        shared = single and not splits and job.share_prefix and plan.summary_model == job.model
        prompt = _prompt(job, plan, anchor, parts + 1, parts + 1 + len(queue))
        reply = yield from _ask_part(job, plan, part, prompt, shared)
        attempts += reply.attempts
        if reply.summary is None:
            halves = _split_in_two(job.adapter, reply.read)
            if halves is None or splits >= MAX_OVERFLOW_RETRIES:
                raise CompactionError(
                    "summary_too_long", f"the summarizer's request stayed too long after {attempts} tries"
                )
            splits += 1
            queue[:0] = halves
            continue
        anchor = reply.summary
        parts += 1
        tokens += reply.summary_tokens
        read += reply.read
        last = reply
    assert last is not None and last.summary is not None
    return replace(last, summary_tokens=tokens, attempts=attempts, read=read, parts=parts)


def _ask_part(
    job: CompactionJob, plan: _Plan, transcript: list[Item], prompt: str, shared: bool
) -> Generator[SummaryRequest, SummaryResult, _Reply]:
    """One part's summary: its request (cache-sharing, then plain), and once more with more room when the reply
    was cut at its length limit (a cut summary lacks its last fields: pending tasks, current work); a second
    cut, or no more room, fails the compaction (``summary_truncated``). ``summary`` None: too long."""
    adapter = job.adapter
    attempts = 0
    cut_short: int | None = None  #: the output cap of a reply stopped by its length limit
    finish: str | None = None
    scale = plan.scale
    while True:
        attempts += 1
        request: dict[str, Any] | None = None
        if shared:
            request = shared_prefix_request(
                adapter,
                job.body,
                job.items[: plan.cut],
                prompt,
                plan.max_output,
                job.window,
                plan.output_room,
                scale,
            )
            shared = request is not None
        if request is None:
            cap, floor = plan.max_output, plan.output_room
            if cut_short is not None:
                # All the model may write, and at least twice the room that cut the summary: where the window
                # leaves less, the oldest rounds make way (a summary of less history, rather than one without
                # its last fields, or none).
                cap, floor = (
                    plan.model_limit,
                    min(plan.model_limit, max(plan.output_room, RETRY_ROOM_FACTOR * cut_short)),
                )
            request, transcript = plain_request(
                adapter,
                job.body,
                transcript,
                prompt,
                plan.summary_model,
                max_output=cap,
                window=job.window,
                room=floor,
                scale=scale,
            )
            if cut_short is not None and (adapter.max_output_tokens(request) or 0) <= cut_short:
                raise CompactionError(
                    SUMMARY_TRUNCATED,
                    f"the summary reached its length limit ({cut_short} tokens) and the window leaves it no more room",
                    finish,
                )
        result = yield SummaryRequest(request)
        finish = _finish_reason(result)
        if result.error is None and not result.too_long and finish == FINISH_LENGTH:
            if cut_short is not None:
                raise CompactionError(
                    SUMMARY_TRUNCATED,
                    f"the summary reached its length limit twice ({adapter.max_output_tokens(request)} tokens)",
                    finish,
                )
            cut_short = adapter.max_output_tokens(request) or 0
            if result.usage is not None and result.usage.input_tokens > 0:
                scale = max(scale, budget_mod.calibration(adapter, request, result.usage.input_tokens) or scale)
            shared = False
            continue
        summary: str | None = None
        if result.error is None and not result.too_long:
            try:
                summary = parse_summary(result.text)
            except SummaryParseError as exc:
                if not shared:
                    raise CompactionError("no_summary", str(exc), finish) from exc
        if shared and summary is None and (result.too_long or result.error is None):
            # The cache-sharing request was too long or answered with a tool call instead of text:
            # ask again the plain way (no tools, transcript as text).
            shared = False
            continue
        if result.too_long:
            return _Reply(None, 0, attempts, finish, request, None, transcript)
        if result.error is not None:
            error = result.error
            kind = type(error).__module__ + "." + type(error).__qualname__
            raise CompactionError(kind, f"the summarizer call failed: {error}") from error
        assert summary is not None
        tokens = result.usage.output_tokens if result.usage is not None else estimate_text(result.text)
        return _Reply(summary, tokens, attempts, finish, request, result.usage, transcript)


def _kept_after_reading(adapter: WireFormatAdapter, plan: _Plan, read: Sequence[Item]) -> KeptUserMessages:
    """Step 3 of :func:`summarize`: the verbatim list once it is known what the summarizer read.

    When its requests did not hold the oldest rounds of the span, the summary cannot cover their user
    messages. At a first compaction they are the conversation's first messages: the verbatim budget goes to
    them first (then the newest, which the summary covers). Past one, they follow messages the previous
    summary (the anchor) covers, and the budget stays with the first and the newest (the newest may hold a
    later instruction); the note says how many of those left out nobody read."""
    kept = plan.kept
    if len(read) >= len(plan.transcript):
        return kept
    unread = len(user_messages(adapter, plan.transcript)) - len(user_messages(adapter, read))
    before = max(0, len(plan.texts) - len(user_messages(adapter, plan.transcript)))
    if before == 0:
        return select_user_messages(plan.texts, plan.budget, unread)
    left = range(kept.first, kept.first + kept.omitted)
    return replace(kept, unread=len(set(left) & set(range(before, before + unread))))


def _trim_verbatim(
    adapter: WireFormatAdapter, kept: KeptUserMessages, summary: str, replaced: int
) -> tuple[KeptUserMessages, int]:
    """The verbatim list made short enough that the head (it and the summary message) is smaller than what it
    replaces, or nothing is gained: the messages lowest in the repair's priority go first (chatter before a
    statement, a statement before an instruction; the first messages, the task, last). Returns the list and
    how many messages made way (their lost sentences are the repair's to restore)."""
    texts = list(kept.texts)
    sizes = [estimate_item(adapter, adapter.make_user_item(t)) for t in texts]
    fixed = estimate_item(adapter, adapter.make_user_item(summary_message_text(summary, "", kept.note))) + HEAD_MARGIN
    if not texts or sum(sizes) + fixed < replaced:
        return kept, 0
    order = sorted(
        range(len(texts)),
        key=lambda i: (-repair_mod.message_priority(texts[i]), i < kept.first, i),
    )
    gone: set[int] = set()
    total = sum(sizes)
    for index in order:
        if total + fixed < replaced:
            break
        gone.add(index)
        total -= sizes[index]
    first = sum(1 for i in range(kept.first) if i not in gone)
    remaining = tuple(t for i, t in enumerate(texts) if i not in gone)
    dropped = tuple(t for i, t in enumerate(texts) if i in gone)
    trimmed = replace(
        kept, texts=remaining, first=first, omitted=kept.omitted + len(gone), left_out=(*kept.left_out, *dropped)
    )
    return trimmed, len(gone)


def repair_and_trail(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    dropped: Sequence[Item],
    head: Sequence[Item],
    kept: Sequence[Item],
    settings: Settings,
    window: int | None,
    effective: int | None,
    room: int,
    said: Sequence[str] | None = None,
) -> tuple[repair_mod.Repair, trail_mod.WorkTrail]:
    """The retention check, the repair and the work trail of a summary (``head``, before its blocks) that
    replaces ``dropped``, on one walk of the span (:func:`.retention.walk`, its tools collected on the way), within
    ``room`` tokens: the trail first, within its budget and half the room at most, then the repair within its own
    and what the trail left (at least half the room: the user's words; it restores nothing the trail holds)."""
    tools: list[ToolUse] = []
    walked = retention_mod.walk(adapter, dropped, tools)
    work = trail_mod.render(
        trail_mod.build(walked, tools, settings), min(trail_mod.trail_budget(settings, window, effective), room // 2)
    )
    budget = min(repair_budget(settings, window, effective), room - work.tokens)
    fixed = repair_mod.repair(
        adapter,
        body,
        dropped,
        head,
        kept,
        budget,
        said=said,
        walked=walked,
        trail=work.text,
        trail_paths=work.carried,
        trail_items=work.checked,
    )
    return fixed, work


def finish_summary(job: CompactionJob, plan: _Plan, reply: _Reply, kept: KeptUserMessages) -> SummaryOutcome:
    """Step 4 of :func:`summarize`: the head, repaired and with its files.

    The user's messages first, then the summary message (as Codex does): the summary message, right before the
    kept turns, reads "continue from where the work stopped", and a derived conversation key (the first user
    message) is unchanged when the app keeps the compacted history. The verbatim list is trimmed by priority
    when the head would not be smaller than what it replaces (before, it was dropped whole); the repair then
    restores what the summary and the list lost, within what is left of the repair budget, before the files
    take the room left under the threshold."""
    adapter, items, cut = job.adapter, job.items, plan.cut
    summary = reply.summary
    assert summary is not None
    pins = tuple(adapter.make_user_item(f"{PINNED_PREFIX} {text}") for text in plan.pinned)
    kept, dropped = _trim_verbatim(adapter, kept, summary, plan.replaced - estimate_items(adapter, pins))
    verbatim = (*pins, *(adapter.make_user_item(text) for text in kept.texts))
    bare = (*verbatim, adapter.make_user_item(summary_message_text(summary, "", kept.note)))
    # What the repair and the work trail may add: never so much that the head stops being smaller than the span.
    room_left = max(0, plan.replaced - estimate_items(adapter, bare) - HEAD_MARGIN)
    # The user's words up to the cut as the app sent them (the whole conversation in transparent mode): what
    # a summarizer kept once is checked again at every compaction, not only what the repair restored.
    fixed, work = repair_and_trail(
        adapter,
        job.body,
        items[:cut],
        bare,
        items[cut:],
        job.settings,
        job.window,
        job.effective,
        room_left,
        plan.texts,
    )
    room = None
    if job.target is not None:
        used = estimate_fixed(adapter, job.body) + estimate_items(adapter, items[cut:])
        used += estimate_items(adapter, bare) + fixed.tokens
        # Keep a quarter of the remaining room free for the turns that follow.
        room = int((job.target - used) * 0.75)
    if job.rehydrate_room is not None:
        room = job.rehydrate_room if room is None else min(room, job.rehydrate_room)
    # Nor may the files make the head as large as what it replaces (nothing would be gained).
    room = min(room if room is not None else room_left, room_left - fixed.tokens - work.tokens)
    rehydration = rehydrate_files(adapter, items, cut, job.settings, job.window, room)
    # The repaired summary is the summary from now on: the anchor the next one updates, the memo's, the API's.
    repaired = f"{summary}\n\n{fixed.text}" if fixed.text else summary
    head = (*verbatim, adapter.make_user_item(summary_message_text(repaired, rehydration.text, kept.note, work.text)))
    if rehydration.files and estimate_items(adapter, head) + HEAD_MARGIN >= plan.replaced:
        # A file cut to a small room still carries its markers: without it, rather than no progress.
        rehydration = Rehydration("", 0, 0)
        head = (*verbatim, adapter.make_user_item(summary_message_text(repaired, "", kept.note, work.text)))
    # The summarizer's request holds (nearly) the conversation itself, just counted by the provider: the
    # cascade sizes the compacted context with it. Only the call's own model shares its tokenizer.
    measured = None
    if reply.usage is not None and plan.summary_model == job.model:
        measured = budget_mod.calibration(adapter, reply.request, reply.usage.input_tokens)
    return SummaryOutcome(
        cut=cut,
        head=head,
        summary=repaired,
        summary_tokens=reply.summary_tokens,
        files_rehydrated=rehydration.files,
        attempts=reply.attempts,
        calibration=measured,
        finish_reason=reply.finish,
        user_messages_kept=len(kept.texts),
        user_messages_dropped=dropped,
        pinned_kept=len(pins),
        pinned_dropped=plan.pins_dropped,
        repair=fixed,
        parts=reply.parts,
        trail=work,
    )
