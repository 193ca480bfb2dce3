"""Summary compaction on plain data: where to cut, the summarizer's request and its overflow, the new head.

Written "sans I/O" (see :mod:`otel_context.flow`): :func:`summarize` is a generator that yields a
:class:`~otel_context.flow.SummaryRequest` whenever it needs the summarizer and receives a
:class:`~otel_context.flow.SummaryResult`. Telemetry, the breaker and hooks live in
:mod:`otel_context.compaction.cascade`; this module only decides and builds.

Keep-recent policy: the last ``keep_recent_messages`` items (default 6) stay verbatim, and never fewer
than the last user turn (the last genuine user message and everything after it), cutting only at the
adapter's round boundaries (which never split a tool call from its result, a parallel batch or a thinking
turn). Only when that leaves nothing to summarize (one giant turn) does the cut fall inside the last turn,
still at a round boundary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from otel_context import semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction.prompt import (
    REHYDRATED_HEADER,
    VERBATIM_NOTE_PREFIX,
    SummaryParseError,
    build_prompt,
    is_summary_message,
    parse_summary,
    summary_message_text,
    summary_of_message,
)
from otel_context.flow import SummaryRequest, SummaryResult
from otel_context.formats.base import WireFormatAdapter
from otel_context.formats.too_long import overflow_gap
from otel_context.settings import Settings, summary_model_for
from otel_context.tokens import ITEM_OVERHEAD_TOKENS, estimate_fixed, estimate_item, estimate_items, estimate_text

Item = Mapping[str, Any]

#: Retries of a summarizer request that was itself too long (each drops the oldest rounds).
MAX_OVERFLOW_RETRIES = 3
#: Share of the transcript dropped per overflow retry when the error does not say by how much.
OVERFLOW_DROP_FRACTION = 0.2
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
    summary messages (an app that kept a compacted history sends them back as user messages)."""
    return [text for text in adapter.user_text_items(items) if not is_summary_message(text)]


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


def select_user_messages(texts: Sequence[str], budget: int, unread: int = 0) -> KeptUserMessages:
    """The user's messages to keep verbatim within ``budget`` tokens: all of them when they fit; else the
    first ones (the task and its first constraints, up to a quarter of the budget) and the newest (the rest),
    each whole (a message cut in half is not what the user wrote).

    ``unread``: the first ``unread`` messages include some the summarizer did not read (the oldest rounds
    of its request made way for the summary's room): those may take the whole budget, oldest first, since
    the summary cannot cover them; the newest it did read get what is left."""
    sizes = [estimate_text(t) + ITEM_OVERHEAD_TOKENS for t in texts]
    if sum(sizes) <= budget:
        return KeptUserMessages(tuple(texts), len(texts), 0)
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
    kept = (*texts[:first], *texts[start:])
    unread_left_out = max(0, min(unread, start) - first)
    return KeptUserMessages(tuple(kept), first, start - first, tuple(texts[first:start]), unread_left_out)


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


def _prompt_item(adapter: WireFormatAdapter, body: Mapping[str, Any], items: Sequence[Item], prompt: str) -> Item:
    """The prompt as the last user turn of a cache-sharing request. Anthropic reads its cache only at a
    breakpoint (or up to 20 blocks before one): the app's newest breakpoint is on the messages kept after
    the cut, so the prompt gets one, when the app marks its messages and the limit of four allows it."""
    item = adapter.make_user_item(prompt)
    if adapter.name != "anthropic_messages":
        return item
    marks = '"cache_control"'
    if marks not in json.dumps(adapter.items(body), default=str):
        return item
    used = json.dumps([body.get("system"), body.get("tools"), list(items)], default=str).count(marks)
    if used >= 4:  # Anthropic's limit of breakpoints per request
        return item
    return {"role": "user", "content": [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]}


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
    request = dict(adapter.with_items(body, [*items, _prompt_item(adapter, body, items, prompt)]))
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
    """A successful summary: the new head of the conversation and its figures."""

    cut: int  #: index in the input items; items[:cut] were replaced
    #: the user's own messages kept verbatim, then the summary message (+ rehydrated files)
    head: tuple[Item, ...]
    summary: str
    summary_tokens: int  #: the summarizer's output tokens (reported, else estimated)
    files_rehydrated: int
    attempts: int
    #: Provider tokens per estimated token, measured on the summarizer's request (None: not measured,
    #: e.g. another summary model or no usage reported). See :func:`budget.calibration`.
    calibration: float | None = None
    #: The summarizer reply's finish reason, normalized (``stop``; None when it reported none).
    finish_reason: str | None = None
    #: The user's messages carried verbatim in the head (before the summary message).
    user_messages_kept: int = 0


def find_anchor(items: Sequence[Item], adapter: WireFormatAdapter, cut: int) -> tuple[str, int] | None:
    """The newest summary message of ours in ``items[:cut]`` (an app that keeps the compacted history sends
    it back, e.g. the explicit API's result): its summary and the index after it, or None."""
    for index in range(cut - 1, -1, -1):
        for text in adapter.user_text_items([items[index]]):
            found = summary_of_message(text)
            if found is not None:
                return found, index + 1
    return None


def summarize(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    items: Sequence[Item],
    *,
    settings: Settings,
    model: str,
    window: int | None,
    min_index: int = 0,
    extra_instructions: str | None = None,
    cut: int | None = None,
    target_tokens: int | None = None,
    share_prefix: bool = False,
    rehydrate_room: int | None = None,
    estimated_tokens: int | None = None,
    effective: int | None = None,
    history: Sequence[Item] | None = None,
    history_shift: int = 0,
    anchor: str | None = None,
    anchor_end: int = 0,
) -> Generator[SummaryRequest, SummaryResult, SummaryOutcome]:
    """Summarize ``items[:cut]`` (cut chosen by the keep-recent policy unless given); raise CompactionError.

    ``target_tokens``: the context size the result should stay under (the threshold); it bounds the
    rehydrated files, and so does ``rehydrate_room`` (tokens) when given. ``share_prefix``: first ask with
    the call's own request up to the cut plus the prompt (see :func:`shared_prefix_request`), which the
    provider serves from its prompt cache; when that is not possible, too long, or answered with a tool
    call, ask with the plain transcript (no tools).

    Output room: the budget's reserve (``window - effective``); the summary is always asked with at
    least that much (:func:`summary_room`), up to 20,000 tokens where the window leaves more. The request is
    sized in provider tokens, scaled from ``estimated_tokens`` (the engine's estimate of the call, anchored
    on the provider's count; see :func:`provider_scale`). A reply stopped by its length limit is never a
    summary: it is asked again once, the plain way, with all the room the window leaves beside the transcript
    (up to the model's output limit) and at least twice the room that cut it (the oldest rounds making way
    when the window leaves less); a second cut, or no more room, fails the compaction (``summary_truncated``).

    The user's own messages: the head carries those of the compacted part verbatim, before the summary
    message, within :func:`user_messages_budget` (``effective``: the effective window). They are taken from
    ``history``, the conversation as the app sent it (``items`` may start with the head of an earlier
    compaction; ``items[i]`` is ``history[i + history_shift]`` after it), never from a summary.

    ``anchor``: the previous summary, whose head ends at ``anchor_end`` in ``items``. The summarizer then
    updates it with ``items[anchor_end:cut]``, the span dropped since (anchored iterative summary), instead
    of summarizing the summary again. Without one, a summary message of ours found in ``items[:cut]`` is
    the anchor (the app sent a compacted history back).
    """
    if cut is None:
        cut = choose_cut(adapter, items, settings.keep_recent_messages, min_index)
        if cut is not None and target_tokens is not None:
            cut = deepen_cut(adapter, body, items, cut, target_tokens)
    if cut is None or cut <= min_index:
        raise CompactionError("nothing_to_compact", "no round boundary leaves anything to summarize")
    if anchor is None or anchor_end > cut:
        found = find_anchor(items, adapter, cut)
        anchor, anchor_end = found if found is not None else (None, 0)
    source = history if history is not None else items
    # At most half of what the summary replaces: the user's words alone must never undo the compaction
    # (in an agent's conversation they are a small part of it; in a chat of long questions, not).
    replaced = estimate_items(adapter, items[:cut])
    budget = min(user_messages_budget(settings, window, effective), replaced // 2)
    texts = user_messages(adapter, source[: cut + history_shift])
    if anchor is not None:  # an app that sent the previous summary back as a message of its own
        texts = [t for t in texts if t.strip() != anchor.strip()]
    kept = select_user_messages(texts, budget)
    # Anchored: only the span dropped since the previous summary is conversation to summarize.
    transcript: list[Item] = list(items[anchor_end:cut] if anchor is not None else items[:cut])
    covering = to_cover(adapter, items, kept, anchor_end if anchor is not None else 0, cut, budget)
    prompt = build_prompt(extra_instructions, anchor=anchor, kept_verbatim=kept.prompt_line or None, to_cover=covering)
    summary_model = summary_model_for(settings, adapter.name, model)
    spec = budget_mod.lookup_model(summary_model)
    max_output = (
        budget_mod.SUMMARY_RESERVE_TOKENS if spec is None else min(budget_mod.SUMMARY_RESERVE_TOKENS, spec.max_output)
    )
    # After a reply cut at its length limit: all the model may write (the window permitting).
    model_limit = max_output if spec is None else max(max_output, spec.max_output)
    # The budget's reserve (window - effective) is the summary's room.
    output_room = summary_room(max_output, window - effective if window is not None and effective is not None else None)
    scale = provider_scale(adapter, body, items, estimated_tokens)
    shared = share_prefix and summary_model == model
    attempts = 0
    overflow_retries = 0
    cut_short: int | None = None  #: the output cap of a reply stopped by its length limit
    finish: str | None = None
    read = transcript  # what the summarizer's request holds of the span (its oldest rounds may make way)
    while True:
        attempts += 1
        request: dict[str, Any] | None = None
        if shared:
            request = shared_prefix_request(adapter, body, items[:cut], prompt, max_output, window, output_room, scale)
            shared = request is not None
        if request is None:
            cap, floor = max_output, output_room
            if cut_short is not None:
                # All the model may write, and at least twice the room that cut the summary: where the window
                # leaves less, the oldest rounds make way (a summary of less history, rather than one without
                # its last fields, or none).
                cap, floor = model_limit, min(model_limit, max(output_room, RETRY_ROOM_FACTOR * cut_short))
            request, transcript = plain_request(
                adapter,
                body,
                transcript,
                prompt,
                summary_model,
                max_output=cap,
                window=window,
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
            # Cut short: its last fields (pending tasks, current work) are missing. Once, ask again with more room
            # (see above), the request sized by the provider's own count of this one.
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
        shared = False
        if result.error is not None or result.too_long:
            if result.too_long and overflow_retries < MAX_OVERFLOW_RETRIES:
                overflow_retries += 1
                gap = overflow_gap(str(result.error) if result.error is not None else "")
                fraction = int(estimate_items(adapter, transcript) * OVERFLOW_DROP_FRACTION)
                shorter = drop_oldest_rounds(adapter, transcript, max(gap or 0, fraction, 1))
                if shorter:
                    transcript = shorter
                    continue
            if result.too_long:
                raise CompactionError(
                    "summary_too_long", f"the summarizer's request stayed too long after {attempts} tries"
                )
            error = result.error
            kind = type(error).__module__ + "." + type(error).__qualname__ if error is not None else "summarizer_error"
            raise CompactionError(kind, f"the summarizer call failed: {error}") from error
        assert summary is not None
        summary_tokens = result.usage.output_tokens if result.usage is not None else estimate_text(result.text)
        if len(transcript) < len(read):
            # The summarizer did not read the oldest rounds of the span, so the summary cannot cover their user
            # messages. At a first compaction they are the conversation's first messages: the verbatim budget
            # goes to them first (then the newest, which the summary covers). Past one, they follow messages
            # the previous summary (the anchor) covers, and the budget stays with the first and the newest (the
            # newest may hold a later instruction); the note says how many of those left out nobody read.
            unread = len(user_messages(adapter, read)) - len(user_messages(adapter, transcript))
            before = max(0, len(texts) - len(user_messages(adapter, read)))
            if before == 0:
                kept = select_user_messages(texts, budget, unread)
            else:
                left = range(kept.first, kept.first + kept.omitted)
                kept = replace(kept, unread=len(set(left) & set(range(before, before + unread))))
        verbatim = tuple(adapter.make_user_item(text) for text in kept.texts)
        room = None
        if target_tokens is not None:
            used = estimate_fixed(adapter, body) + estimate_items(adapter, items[cut:])
            used += estimate_text(summary_message_text(summary, "", kept.note)) + ITEM_OVERHEAD_TOKENS
            used += estimate_items(adapter, verbatim)
            # Keep a quarter of the remaining room free for the turns that follow.
            room = int((target_tokens - used) * 0.75)
        if rehydrate_room is not None:
            room = rehydrate_room if room is None else min(room, rehydrate_room)
        rehydration = rehydrate_files(adapter, items, cut, settings, window, room)
        # The user's messages first, then the summary (as Codex does): the summary message, right before the
        # kept turns, reads "continue from where the work stopped", and a derived conversation key (the first
        # user message) is unchanged when the app keeps the compacted history.
        head = (*verbatim, adapter.make_user_item(summary_message_text(summary, rehydration.text, kept.note)))
        if verbatim and estimate_items(adapter, head) >= replaced:
            # A short prefix whose summary is as long as it: the summary alone, or nothing is gained.
            verbatim = ()
            head = (adapter.make_user_item(summary_message_text(summary, rehydration.text)),)
        # The summarizer's request holds (nearly) the conversation itself, just counted by the provider: the
        # cascade sizes the compacted context with it. Only the call's own model shares its tokenizer.
        measured = None
        if result.usage is not None and summary_model == model:
            measured = budget_mod.calibration(adapter, request, result.usage.input_tokens)
        return SummaryOutcome(
            cut=cut,
            head=head,
            summary=summary,
            summary_tokens=summary_tokens,
            files_rehydrated=rehydration.files,
            attempts=attempts,
            calibration=measured,
            finish_reason=finish,
            user_messages_kept=len(verbatim),
        )
