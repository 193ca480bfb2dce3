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

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context.compaction import budget as budget_mod
from otel_context.compaction.prompt import SummaryParseError, build_prompt, parse_summary, summary_message_text
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


class CompactionError(Exception):
    """A compaction could not produce a result; ``kind`` is the error.type put on the compact span."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


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
    header = "Files read before the compaction (their latest content as read then):"
    return Rehydration("\n".join([header, *parts]), files, used)


#: Request parameters that would make a cache-sharing summary request fail or call a tool.
_FORCING = ("thinking", "reasoning", "response_format", "text", "parallel_tool_calls", "previous_response_id")


def shared_prefix_request(
    adapter: WireFormatAdapter,
    body: Mapping[str, Any],
    items: Sequence[Item],
    prompt: str,
    max_output: int,
    window: int | None,
) -> dict[str, Any] | None:
    """The call's own request (same system, tools, messages and cache breakpoints) plus the prompt as a last
    user turn: its prefix is byte-identical to what the provider has just cached, so the summarizer reads
    the conversation from the cache instead of paying for it again (the cost spike users report around
    compaction). None when that is unsafe: a forced tool choice, thinking/reasoning or output-format
    settings, or no room in the window for the prompt and the summary.
    """
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none") and not (
        isinstance(choice, Mapping) and choice.get("type") in ("auto", "none")
    ):
        return None
    if any(key in body for key in _FORCING):
        return None
    prompt_tokens = estimate_text(prompt)
    max_tokens = max_output
    if window is not None:
        used = estimate_fixed(adapter, body) + estimate_items(adapter, items) + prompt_tokens
        max_tokens = min(max_output, window - used)
        if max_tokens < 1_024:
            return None
    request = dict(adapter.with_items(body, [*items, adapter.make_user_item(prompt)]))
    for key in ("stream", "stream_options", "n", "stop", "stop_sequences"):
        request.pop(key, None)
    return adapter.with_output_cap(request, max_tokens)


@dataclass(frozen=True)
class SummaryOutcome:
    """A successful summary: the new head of the conversation and its figures."""

    cut: int  #: index in the input items; items[:cut] were replaced
    head: tuple[Item, ...]  #: the summary message (+ rehydrated files, + post_compact messages)
    summary: str
    summary_tokens: int  #: the summarizer's output tokens (reported, else estimated)
    files_rehydrated: int
    attempts: int
    #: Provider tokens per estimated token, measured on the summarizer's request (None: not measured,
    #: e.g. another summary model or no usage reported). See :func:`budget.calibration`.
    calibration: float | None = None


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
) -> Generator[SummaryRequest, SummaryResult, SummaryOutcome]:
    """Summarize ``items[:cut]`` (cut chosen by the keep-recent policy unless given); raise CompactionError.

    ``target_tokens``: the context size the result should stay under (the threshold); it bounds the
    rehydrated files, and so does ``rehydrate_room`` (tokens) when given. ``share_prefix``: first ask with
    the call's own request plus the prompt (see :func:`shared_prefix_request`), which the provider serves
    from its prompt cache; when that is not possible, too long, or answered with a tool call, ask with the
    plain transcript (no tools).
    """
    if cut is None:
        cut = choose_cut(adapter, items, settings.keep_recent_messages, min_index)
        if cut is not None and target_tokens is not None:
            cut = deepen_cut(adapter, body, items, cut, target_tokens)
    if cut is None or cut <= min_index:
        raise CompactionError("nothing_to_compact", "no round boundary leaves anything to summarize")
    transcript: list[Item] = list(items[:cut])
    prompt = build_prompt(extra_instructions)
    summary_model = summary_model_for(settings, adapter.name, model)
    spec = budget_mod.lookup_model(summary_model)
    max_output = (
        budget_mod.SUMMARY_RESERVE_TOKENS if spec is None else min(budget_mod.SUMMARY_RESERVE_TOKENS, spec.max_output)
    )
    shared = share_prefix and summary_model == model
    attempts = 0
    overflow_retries = 0
    while True:
        attempts += 1
        request: dict[str, Any] | None = None
        if shared:
            request = shared_prefix_request(adapter, body, items, prompt, max_output, window)
            shared = request is not None
        if request is None:
            max_tokens = max_output
            if window is not None:
                left = window - estimate_items(adapter, transcript) - estimate_text(prompt)
                left -= estimate_fixed(adapter, body)
                max_tokens = min(max_tokens, max(1_024, left))
            request = adapter.make_summary_request(body, transcript, prompt, max_tokens, summary_model)
        result = yield SummaryRequest(request)
        summary: str | None = None
        if result.error is None and not result.too_long:
            try:
                summary = parse_summary(result.text)
            except SummaryParseError as exc:
                if not shared:
                    raise CompactionError("no_summary", str(exc)) from exc
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
        room = None
        if target_tokens is not None:
            used = estimate_fixed(adapter, body) + estimate_items(adapter, items[cut:])
            used += estimate_text(summary_message_text(summary)) + ITEM_OVERHEAD_TOKENS
            # Keep a quarter of the remaining room free for the turns that follow.
            room = int((target_tokens - used) * 0.75)
        if rehydrate_room is not None:
            room = rehydrate_room if room is None else min(room, rehydrate_room)
        rehydration = rehydrate_files(adapter, items, cut, settings, window, room)
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
        )
