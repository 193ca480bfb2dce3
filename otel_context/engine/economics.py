"""What a compaction costs and what it saves: each layer acts only when it repays what it breaks.

Why: a compaction changes the prompt's prefix, so the provider's prompt cache is written again from the first
changed token on (at its write price) where the next call would have read it (at its read price), and a summary
adds the summarizer's call. Clearing old tool results (microcompaction) one at a time as they age, on a warm
cache, rewrote the whole prompt for a few thousand tokens each time: on a tool-heavy loop at a 20,000-token
window it cost 1.08-1.4x what no microcompaction cost (issue 49). The policy:

- **A cold cache makes clearing free** (the last call ended longer ago than its cache lives, or left nothing in
  it): microcompaction clears as the contract says, past half the effective window.
- **Below the threshold, on a warm cache**, it clears only when the reads it saves until the threshold (the
  cleared tokens at the read price, on each call until the conversation's growth per call reaches the
  threshold) pay for the rewrite (the tokens after its first change at the write price, less their read).
- **At the threshold**, microcompaction alone is chosen over a summary when it brings the context below the
  threshold at no more cost per token of headroom it buys (its rewrite) than the summary (its rewrite, and the
  summarizer's call: its input, mostly read from the cache, and its output). A summary that buys more room for
  its price is made (after the clearing, which costs nothing more in the same request).
- **A background summary starts only when it will be used**: with microcompaction on, not while the threshold's
  choice, projected to the crossing, is microcompaction alone (:func:`micro_will_do`).

Prices are ratios to the call's model's input price, so one token of it is the unit (no currency needed). They
come from the price source (:mod:`otel_context.pricing`: genai-prices, or the user's own table): the cache
write and read multipliers of the call's model, and the summary model's read and output prices against the
call's model's input price. Where it knows no price (a model it does not list, Python 3.10 without the
library), the defaults below apply, per provider (list prices, December 2026):

- Anthropic: a cache write 1.25x the input price (5-minute entries; 2x when the last call wrote 1-hour ones), a
  read 0.1x, an output token 5x (every current Claude model).
- OpenAI: a prefix rewritten is billed as plain input (1x: no write premium); a cached read is 0.1x (``gpt-5``
  family), 0.25x (``gpt-4.1``, ``o3``, ``o4-mini``), 0.5x (``gpt-4o``, ``o1``); an output token 4x (8x for the
  ``gpt-5`` family).
- Others: writes 1x, reads 0.25x, outputs 4x.
"""

from __future__ import annotations

import sys
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from otel_context import cache, pricing, process_state, semconv, telemetry
from otel_context.compaction import alerts, cascade
from otel_context.compaction.budget import Budget
from otel_context.compaction.job import CompactionJob
from otel_context.compaction.summary import choose_cut
from otel_context.conversation import ConversationState
from otel_context.engine.call import CallState
from otel_context.fork_safe import new_lock
from otel_context.formats.base import CLEARED_PLACEHOLDER
from otel_context.settings import summary_model_for
from otel_context.tokens import IMAGE_TOKENS, estimate_fixed, estimate_items, estimate_text

Item = Mapping[str, Any]


@dataclass(frozen=True)
class Prices:
    """The prices a compaction's choice weighs, as ratios to the call's model's input price."""

    #: A prompt token written to the cache (what a changed prefix costs from its first change on).
    write: float
    #: A prompt token read from the cache.
    read: float
    #: An output token of the summarizer (the summary).
    output: float
    #: A token the summarizer reads from the cache (it shares the call's prefix).
    summary_read: float


ANTHROPIC_5M = Prices(write=1.25, read=0.1, output=5.0, summary_read=0.1)
ANTHROPIC_1H = Prices(write=2.0, read=0.1, output=5.0, summary_read=0.1)
OTHER = Prices(write=1.0, read=0.25, output=4.0, summary_read=0.25)
#: OpenAI's cached-input discount and output price by model prefix (the longest prefix wins).
_OPENAI: Mapping[str, Prices] = MappingProxyType(
    {
        "gpt-5": Prices(write=1.0, read=0.1, output=8.0, summary_read=0.1),
        "gpt-4.1": Prices(write=1.0, read=0.25, output=4.0, summary_read=0.25),
        "gpt-4o": Prices(write=1.0, read=0.5, output=4.0, summary_read=0.5),
        "o1": Prices(write=1.0, read=0.5, output=4.0, summary_read=0.5),
        "o3": Prices(write=1.0, read=0.25, output=4.0, summary_read=0.25),
        "o4-mini": Prices(write=1.0, read=0.25, output=4.0, summary_read=0.25),
    }
)


def prices_of(call: CallState) -> Prices:
    """The prices of this call's model and its summary model: from the price source, else the defaults (see
    the module docstring)."""
    provider, model = call.request.provider, call.model
    usage = _last_usage(call)
    one_hour = usage is not None and usage.cache_write_1h_tokens > usage.cache_write_5m_tokens
    found = pricing.multipliers(provider, model)
    base = pricing.rates(provider, model)
    summarizer = pricing.rates(provider, summary_model_for(call.request.settings, call.adapter.provider, model))
    if found is not None and base is not None and base.input > 0:
        writer = summarizer if summarizer is not None else base
        return Prices(
            write=found.write_1h if one_hour else found.write,
            read=found.read,
            output=writer.output / base.input,
            summary_read=writer.read / base.input,
        )
    return _defaults(provider, model, one_hour)


def _defaults(provider: str, model: str, one_hour: bool) -> Prices:
    if provider == semconv.PROVIDER_ANTHROPIC:
        return ANTHROPIC_1H if one_hour else ANTHROPIC_5M
    if provider == semconv.PROVIDER_OPENAI:
        known = [prefix for prefix in _OPENAI if model.startswith(prefix)]
        if known:
            return _OPENAI[max(known, key=len)]
    return OTHER


def _last_usage(call: CallState) -> Any:
    snapshot = call.resolution.snapshot
    return snapshot.usage if snapshot is not None else None


def warm(call: CallState) -> bool:
    """Whether the conversation's prompt cache still holds its prefix: its last call ended within the cache's
    life (5 minutes; an hour when it wrote 1-hour entries) and left something in it."""
    ended, usage = call.state.last_call_ended, _last_usage(call)
    if ended is None or usage is None or not cache.leaves_cache(call.adapter.automatic_caching, usage):
        return False
    ttl = 3600.0 if usage.cache_write_1h_tokens else cache.DEFAULT_TTL_SECONDS
    return cache.monotonic() - ended <= ttl


@dataclass(frozen=True)
class Clearing:
    """What a microcompaction of a call would do, in the call's estimate (provider tokens)."""

    #: The context after it.
    after: int
    #: The tokens it removes.
    cleared: int
    #: The tokens from its first change to the end of the request, after it: what the cache writes again.
    rewritten: int


def clearing_of(call: CallState, before: Sequence[Item], after: Sequence[Item]) -> Clearing:
    """The :class:`Clearing` of ``after`` (a microcompaction's items) for ``before`` (what the call sends)."""
    adapter, factor = call.adapter, max(call.state.estimate_factor, 1.0)
    first = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a is not b and a != b), len(after))
    cleared = int((estimate_items(adapter, before) - estimate_items(adapter, after)) * factor)
    rewritten = int(estimate_items(adapter, after[first:]) * factor)
    return Clearing(max(0, call.estimated_tokens - cleared), max(0, cleared), rewritten)


@dataclass
class _Ledger:
    """What one conversation's compactions taught (in :data:`_ledgers`): where its last compaction left it (the
    reference of its growth per call), what its last summary left and wrote, and when it compacted lately."""

    #: The conversation's calls ended when its last compaction was made, and the context it left.
    ref_calls: int = -1
    ref_tokens: int = 0
    #: The context the last summary left when a call sent it, and the tokens its summarizer wrote (0: none yet).
    summary_after: int = 0
    summary_tokens: int = 0
    #: The last clearing at the threshold (None: none yet).
    cleared: Clearing | None = None
    #: The calls (the conversation's count of calls ended before each) that compacted lately, newest last.
    compacting: deque[int] = field(default_factory=lambda: deque(maxlen=LOOP_COMPACTIONS))
    #: Whether it compacts on most calls now (said once when it starts: see :func:`compacted`).
    looping: bool = False


#: A compaction loop: this many compactions within :data:`LOOP_CALLS` consecutive calls.
LOOP_COMPACTIONS = 6
LOOP_CALLS = 8

_lock = new_lock(sys.modules[__name__], "_lock")
_ledgers: weakref.WeakKeyDictionary[ConversationState, _Ledger] = weakref.WeakKeyDictionary()


def _ledger(state: ConversationState) -> _Ledger:
    """The state's ledger, made when missing (``_lock`` held)."""
    ledger = _ledgers.get(state)
    if ledger is None:
        ledger = _ledgers[state] = _Ledger()
    return ledger


def growth_per_call(call: CallState) -> float | None:
    """How many tokens a call of this conversation adds, on average since its last compaction (since its
    first call before any): the pace at which a saving is used up. None on the call that compacted last."""
    state = call.state
    with _lock:
        ledger = _ledgers.get(state)
        ref_calls, ref_tokens = (ledger.ref_calls, ledger.ref_tokens) if ledger is not None else (-1, 0)
    calls = state.calls - ref_calls
    if calls <= 0:
        return None
    return max(0.0, (call.estimated_tokens - ref_tokens) / calls)


def compacted(call: CallState) -> None:
    """The call sends a compaction it made or took (automatic, reactive, a background summary): the reference of
    the conversation's growth, and its recent compactions. When it compacts on most calls (a loop: each one
    leaves too little room for the next calls), the call's span says so and, as it starts, a metric and one
    warning do: compacting on every other call costs a cache rewrite each time, and the fix is the app's (a
    larger window, smaller tool results, a summary model that writes less)."""
    state = call.state
    with _lock:
        ledger = _ledger(state)
        ledger.ref_calls, ledger.ref_tokens = state.calls, call.estimated_tokens
        if ledger.compacting and ledger.compacting[-1] == state.calls:
            looping, started = ledger.looping, False  # this call compacted already (clearing, then a summary)
        else:
            ledger.compacting.append(state.calls)
            recent = ledger.compacting
            looping = len(recent) == LOOP_COMPACTIONS and recent[-1] - recent[0] < LOOP_CALLS
            started, ledger.looping = looping and not ledger.looping, looping
    if looping:
        call.attributes[semconv.COMPACTION_LOOP] = True
    if started:
        provider = call.request.provider
        telemetry.get().instruments.compaction_loops.add(
            1, {semconv.GEN_AI_PROVIDER_NAME: provider, semconv.GEN_AI_REQUEST_MODEL: call.model}
        )
        budget = call.budget
        alerts.compaction_loop(state.key, call.model, LOOP_COMPACTIONS, LOOP_CALLS, budget.window if budget else None)


def summarized(call: CallState, summary_tokens: int) -> None:
    """The call sends a summary (made inline, or in the background): the context it leaves and what its
    summarizer wrote, the next choice's figures of a summary (a summary prepared in the background leaves more
    than one made at the threshold: it covers what the conversation had when it started)."""
    with _lock:
        ledger = _ledger(call.state)
        ledger.summary_after, ledger.summary_tokens = call.estimated_tokens, summary_tokens


def cleared_at_threshold(call: CallState, clearing: Clearing) -> None:
    """The call crossed the threshold and cleared tool results: what that left and rewrote (about what the next
    crossing's clearing will, but for what is appended until then that a clearing cannot take back)."""
    with _lock:
        _ledger(call.state).cleared = clearing


def repays_below_threshold(call: CallState, budget: Budget, clearing: Clearing) -> bool:
    """Below the threshold, on a warm cache: whether the reads a clearing saves until the threshold pay for its
    rewrite. The cleared tokens are not read on each call until the conversation reaches the threshold (where
    the clearing there would clear them anyway); the rewrite writes the tokens after the first change, which
    the call would have read (with explicit breakpoints, Anthropic's, the threshold's clearing rewrites the
    whole prompt whatever came before; with a prefix cache, OpenAI's, it rewrites less for this one)."""
    if clearing.cleared <= 0:
        return False
    growth = growth_per_call(call)
    if growth is None:
        return False  # no pace known yet: the threshold decides
    p = prices_of(call)
    calls = max(1.0, (budget.auto_threshold - clearing.after) / max(growth, 1.0))
    saved = p.read * clearing.cleared * calls
    cost = p.write * clearing.rewritten - p.read * (clearing.rewritten + clearing.cleared)
    if call.adapter.automatic_caching:
        # A prefix cache (OpenAI's) keeps what precedes a change: the threshold's clearing, which would have
        # rewritten from this result on, rewrites from the next one instead.
        cost -= p.write * clearing.cleared
    return saved >= cost


def micro_suffices(call: CallState, budget: Budget, clearing: Clearing, is_warm: bool | None = None) -> bool:
    """At the threshold: whether the clearing alone does. It must bring the context below the threshold, and
    cost no more per token of headroom it leaves (its rewrite) than a summary per token of its headroom (its
    rewrite and its summarizer's call: see :func:`_summary_figures`). A cold cache makes the clearing free."""
    threshold = budget.auto_threshold
    room = threshold - clearing.after
    if room <= 0:
        return False
    if not (warm(call) if is_warm is None else is_warm):
        return True
    after, written = _summary_figures(call, budget)
    summary_room = threshold - after
    if summary_room <= 0:
        return True
    p = prices_of(call)
    # The summarizer reads the context (from the cache, sharing the call's prefix) and writes the summary.
    summary_cost = p.write * after + p.summary_read * call.estimated_tokens + p.output * written
    micro_cost = p.write * clearing.rewritten
    return micro_cost * summary_room <= summary_cost * room


def _summary_figures(call: CallState, budget: Budget) -> tuple[int, int]:
    """What a summary would leave and its summarizer write: what the conversation's last summary left when a
    call sent it, and wrote. Before any: the system prompt and tools, a head of an eighth of the threshold (the
    summary message and the user's messages kept verbatim; the summary is that eighth too), and the messages
    the keep-recent policy keeps, at the size of this conversation's messages since its last compaction (their
    mean: not the newest few, whose size depends on where a round ends)."""
    with _lock:
        ledger = _ledgers.get(call.state)
        if ledger is not None and ledger.summary_after > 0:
            return ledger.summary_after, max(ledger.summary_tokens, 1)
    adapter, entry = call.adapter, call.entry
    items = call.sent_items[len(entry.replacement) if entry is not None else 0 :]
    head = budget.auto_threshold // 8
    mean = estimate_items(adapter, items) / len(items) if items else 0.0
    kept = int(mean * min(len(items), call.request.settings.keep_recent_messages))
    return int((estimate_fixed(adapter, call.body) + head + kept) * max(call.state.estimate_factor, 1.0)), head


#: Tokens of the summarizer's request besides the history it summarizes (its prompt, and the previous summary
#: it updates, repeated where a summarizer reads).
SUMMARY_PROMPT_TOKENS = 2_000


def summary_fits(call: CallState, budget: Budget) -> bool:
    """Whether what a summary now summarizes (the history before the keep-recent policy's cut, with the system
    prompt and tools it shares) fits one summarizer request beside its output room (the effective window)."""
    adapter, items, entry = call.adapter, call.sent_items, call.entry
    cut = choose_cut(adapter, items, call.request.settings.keep_recent_messages, len(entry.replacement) if entry else 0)
    if cut is None:
        return True
    kept = int(estimate_items(adapter, items[cut:]) * max(call.state.estimate_factor, 1.0))
    return call.estimated_tokens - kept + SUMMARY_PROMPT_TOKENS <= budget.effective


def clearing(call: CallState, job: CompactionJob) -> Clearing | None:
    """What a microcompaction of the call's ``job`` would do (None: nothing to clear or cap)."""
    after = cascade.microcompacted(job)
    return clearing_of(call, job.items, after) if after is not None else None


def micro_will_do(call: CallState, budget: Budget) -> bool:
    """Below the threshold, for a background summary about to start: whether the threshold's choice, when the
    conversation gets there, will be microcompaction alone (then no summary is started: it would be thrown
    away). The context the clearing there leaves is what the last one there left, or before any, projected
    (:func:`projected_after_clearing`)."""
    with _lock:
        ledger = _ledgers.get(call.state)
        measured = ledger.cleared if ledger is not None else None
    if measured is not None:
        return micro_suffices(call, budget, measured)
    after = projected_after_clearing(call, budget)
    if after is None:
        return False
    return micro_suffices(call, budget, Clearing(after, max(0, call.estimated_tokens - after), after))


def projected_after_clearing(call: CallState, budget: Budget) -> int | None:
    """The context right after the clearing at the call that crosses the threshold, projected from this call:
    what is appended until the threshold, its tool results at the mean size of today's (in the share of
    tool results of what was appended since the last compaction), pushes as many of today's results out of the
    newest ``microcompact_keep_recent``, and the crossing's clearing clears them with every older one. None
    when the conversation has no tool result to clear."""
    adapter, settings, entry = call.adapter, call.request.settings, call.entry
    items = call.sent_items[len(entry.replacement) if entry is not None else 0 :]
    allowed = settings.microcompact_tools
    sizes = [
        estimate_text(ref.text) + IMAGE_TOKENS * ref.image_count
        for ref in adapter.tool_results(items)
        if not ref.cleared and (not allowed or ref.tool_name in allowed)
    ]
    if not sizes:
        return None
    factor = max(call.state.estimate_factor, 1.0)
    total = estimate_items(adapter, items)
    grown = max(0, budget.auto_threshold - call.estimated_tokens) / factor  # item tokens, as the sizes
    keep = settings.microcompact_keep_recent
    mean = sum(sizes) / len(sizes)  # results differ in size: the newest few alone would say little
    arriving = int(grown * min(1.0, sum(sizes) / total) / mean) if total and mean else 0
    stay = min(len(sizes), max(0, keep - arriving))
    gone = len(sizes) - stay
    cleared = max(0, sum(sizes[:gone]) - estimate_text(CLEARED_PLACEHOLDER) * gone)
    return max(0, int(call.estimated_tokens + (grown - cleared) * factor))


def forget_all() -> None:
    """Every ledger forgotten (``engine.reset()``)."""
    with _lock:
        _ledgers.clear()


# Reset: every ledger forgotten. A fork's child keeps them (the same conversations, the same figures).
process_state.register(__name__, ("_ledgers",), on_reset=forget_all, in_forked_child=None)
