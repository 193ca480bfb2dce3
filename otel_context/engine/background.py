"""Compaction off the critical path: the summary is prepared in the background, applied at the threshold.

Why: an inline compaction makes the call that crosses the threshold wait for the summarizer (a full LLM
call over most of the window: seconds to tens of seconds) before its own answer. Here, once a
conversation's estimate passes the start point (``background_start_pct`` of the auto threshold, 80 % by
default), the summary of the history as it stands is prepared in the background: the engine yields a
:class:`~otel_context.flow.BackgroundStart` and the instrumentation runs it on a worker thread (sync
clients) or a task on the running loop (async clients), through the same client with the recursion guard.

This module only decides (sans I/O): when to start, whether a prepared summary still covers what a call
sends, how it is applied, when it is dropped. A prepared summary is a memo entry in waiting: the app's
items it replaced (kept by reference, compared by value, as strong as the memo's content hash) and the new
head. At the threshold it is applied at once when it covers a prefix of the call's history and nothing
newer replaced it: the head replaces that prefix, the turns appended since are kept verbatim, the pairing
is validated, and the memo remembers it so that the following calls reuse it byte-identically. When it is
not ready yet, a request that still fits below the blocking limit goes out unchanged (the summary is
applied when it lands); one that does not fit waits for it (bounded by ``summarizer_timeout_seconds``),
then compacts inline. A failed summary counts on the breaker like an inline one, and the threshold then
compacts inline. A summary that is never applied is dropped, its ``compact`` span ending with
``outcome=discarded``.

One prepared summary per conversation state at a time, so never two summaries of one prefix.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.cache import monotonic
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.compaction.summary import KEPT_SHARE, CompactionError
from otel_context.conversation import STORE, ConversationState
from otel_context.conversation.memo import MemoEntry, items_hash
from otel_context.engine.call import EngineCall
from otel_context.flow import BackgroundStart, BackgroundWait, SummaryRequest, SummaryResult
from otel_context.tokens import estimate_items

Item = Mapping[str, Any]

#: Seconds between sweeps for prepared summaries of conversations the store no longer tracks.
SWEEP_SECONDS = 5.0


@dataclass(eq=False)
class Prepared:
    """One background summary of one conversation state: running, ready, failed or dropped."""

    job: cascade.CompactionJob
    #: The app's items when it started (never mutated; a later call's prefix is compared with them).
    items: Sequence[Item]
    #: The memo entry the job's items started with (its head is inside the prepared summary).
    base: MemoEntry | None
    done: threading.Event = field(default_factory=threading.Event)
    out: cascade.CompactionOutcome | None = None
    #: The memo entry to apply once the summary succeeded.
    entry: MemoEntry | None = None
    discarded: bool = False
    settled: bool = False


_lock = threading.Lock()
_prepared: dict[ConversationState, Prepared] = {}
_last_sweep = 0.0


def enabled(call: EngineCall) -> bool:
    """Background compaction is on (settings), the driver of this plan can run it (the instrumentation), and
    the conversation's state is this process's own. With a shared store (many workers) each worker would
    prepare a summary of its own: until the store's lock also covers preparing, the fleet compacts inline,
    one worker per threshold crossing (:func:`otel_context.engine.fleet.once`)."""
    return call.request.background and call.request.settings.background_compaction and call.store is None


def start_point(budget: Budget, pct: float) -> int:
    """The estimate at which a conversation's summary starts in the background."""
    return max(1, int(budget.auto_threshold * pct / 100))


def pending(state: ConversationState) -> Prepared | None:
    """The background summary of ``state``, if any (tests and the demo look at it)."""
    with _lock:
        return _prepared.get(state)


def maybe_start(span: Span, call: EngineCall, budget: Budget) -> Generator[SummaryRequest, SummaryResult, None]:
    """Below the threshold: start the summary in the background when the start point is passed."""
    _sweep()
    state = call.state
    if call.estimated_tokens < start_point(budget, call.request.settings.background_start_pct):
        return
    if state.breaker.open:
        return
    with _lock:
        existing = _prepared.get(state)
    if existing is not None:
        if not existing.done.is_set() or existing.entry is None or _covers(existing, call):
            # One at a time; a ready one waits for the threshold; after a failed one the threshold compacts
            # inline (the breaker counted the failure; retrying in the background on every call would not).
            return
        _drop(existing)
    if cascade.not_understood_reason(call.adapter, call.body, call.sent_items, budget):
        return  # the threshold reports the reason (and compacts nothing) as today
    job = call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens)
    job.mode, job.deferred = semconv.MODE_BACKGROUND, True
    # The turns appended until the threshold are kept too: aim the cut so that what is kept then is what
    # an inline compaction at the threshold would keep (else the result is larger and compacts sooner again).
    growth = max(0, budget.auto_threshold - call.estimated_tokens)
    target = max(1, budget.auto_threshold - int(growth / KEPT_SHARE))
    job.budget = dataclasses.replace(budget, auto_threshold=target)
    prepared = Prepared(job, call.items, call.entry)
    with _lock:
        if state in _prepared:  # another call of this conversation started one meanwhile
            return
        _prepared[state] = prepared
    yield BackgroundStart(body={}, steps=_run(prepared, call))


def _run(prepared: Prepared, call: EngineCall) -> Generator[SummaryRequest, SummaryResult, None]:
    """The background summary itself (run by the instrumentation): the cascade's summary, kept for later."""
    try:
        out = yield from cascade.run_summary(prepared.job)
        prepared.out = out
        if out.outcome == semconv.OUTCOME_SUCCESS and out.items is not None and out.open_span is not None:
            entry = _entry(prepared, call, out)
            with _lock:
                discarded = prepared.discarded
                prepared.entry = entry
            if discarded or entry is None:
                _settle(prepared, semconv.OUTCOME_DISCARDED)
    finally:
        prepared.done.set()


def _entry(prepared: Prepared, call: EngineCall, out: cascade.CompactionOutcome) -> MemoEntry | None:
    """The memo entry a successful summary makes (as :meth:`EngineCall.adopt` would); None: unusable."""
    base = prepared.base
    min_index = len(base.replacement) if base is not None else 0
    if out.cut < min_index or list(out.items or ()) != [*out.head, *prepared.job.items[out.cut :]]:
        return None  # the pairing repair touched the kept part: leave it to an inline compaction
    original_cut = base.to_original_index(out.cut) if base is not None else out.cut
    items = prepared.items
    return MemoEntry(original_cut, items_hash(items[:original_cut]), tuple(out.head), out.summary)


def _covers(prepared: Prepared, call: EngineCall) -> bool:
    """Whether the ready summary applies to this call: same content up to its cut (compared by value, as
    strong as the memo's hash), and no newer compaction already covers as much."""
    entry = prepared.entry
    if entry is None:
        return False
    n = entry.prefix_len
    items = call.items
    if len(items) < n or (call.entry is not None and call.entry.prefix_len >= n):
        return False
    head = items[:n] if type(items) is list else list(items[:n])
    started = prepared.items[:n] if type(prepared.items) is list else list(prepared.items[:n])
    return head == started


def at_threshold(span: Span, call: EngineCall, budget: Budget) -> Generator[SummaryRequest, SummaryResult, bool]:
    """The threshold is crossed: apply the prepared summary when it covers this call. True when nothing more
    is to be done (applied and below the threshold, or not ready and the request still fits); False: compact
    inline as today (no prepared summary, it failed, it is stale, or the rest is still above the threshold)."""
    _sweep()
    state = call.state
    with _lock:
        prepared = _prepared.get(state)
    if prepared is None:
        return False
    waited = 0.0
    if not prepared.done.is_set():
        if call.estimated_tokens < budget.blocking_limit:
            return True  # sent unchanged; the summary is applied by the first call after it lands
        began = time.perf_counter()
        yield BackgroundWait(body={}, done=prepared.done, timeout=call.request.settings.summarizer_timeout_seconds)
        waited = time.perf_counter() - began
        if not prepared.done.is_set():
            # Still running: compact inline now (a longer prefix); the late one is dropped when it lands.
            _drop(prepared)
            return False
    if not apply(span, call, prepared, waited, budget):
        _drop(prepared)
        return False
    return call.estimated_tokens < budget.auto_threshold


def apply_ready(span: Span, call: EngineCall, budget: Budget) -> bool:
    """The reactive path: apply a prepared summary that is ready and covers this call; True when applied."""
    if not enabled(call):
        return False
    with _lock:
        prepared = _prepared.get(call.state)
    if prepared is None or not prepared.done.is_set():
        return False
    if apply(span, call, prepared, 0.0, budget, trigger=semconv.TRIGGER_REACTIVE):
        return True
    _drop(prepared)
    return False


def apply(
    span: Span,
    call: EngineCall,
    prepared: Prepared,
    waited: float,
    budget: Budget,
    trigger: str = semconv.TRIGGER_AUTO,
) -> bool:
    """Send the prepared summary on this call and remember it in the memo; False when it does not apply."""
    out, entry = prepared.out, prepared.entry
    if out is None or entry is None or out.open_span is None or not _covers(prepared, call):
        return False
    sent = [*entry.replacement, *call.items[entry.prefix_len :]]
    try:
        if cascade.checked(call.adapter, sent) != sent:
            return False  # needed a repair: not the byte-identical apply the memo promises
    except CompactionError:
        return False
    with _lock:
        if prepared.settled or prepared.discarded or _prepared.get(call.state) is not prepared:
            return False  # another call of this conversation applied (or dropped) it meanwhile
        del _prepared[call.state]
        prepared.settled = True
    adapter, state = call.adapter, call.state
    saved = estimate_items(adapter, call.sent_items) - estimate_items(adapter, sent)
    before = call.estimated_tokens
    state.memo.remember(entry)
    call.entry = entry
    call.sent_items = sent
    call.body = adapter.with_items(call.request.body, sent)
    call.estimated_tokens = max(0, before - int(saved * state.estimate_factor))
    call.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = call.estimated_tokens
    call.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] = True
    compact_span = out.open_span
    compact_span.set_attribute(semconv.COMPACTION_THRESHOLD_TOKENS, budget.auto_threshold)
    try:
        span.add_link(compact_span.get_span_context())
    except Exception:
        telemetry.log_once("background.link", "otel_context: could not link a compaction", exc_info=True)
    # The figures of what this call sends: the context before and after the applied summary.
    out.input_tokens, out.output_tokens = before, call.estimated_tokens
    out.outcome = semconv.OUTCOME_SUCCESS
    job = prepared.job
    job.budget = budget  # the breaker's thrashing test uses the threshold of the call it applies to
    cascade.settle(job, compact_span, out)
    cascade.record_wait(waited, trigger, semconv.MODE_BACKGROUND)
    return True


def _settle(prepared: Prepared, outcome: str) -> None:
    """End a ready summary's open ``compact`` span with ``outcome`` (once)."""
    out = prepared.out
    with _lock:
        if prepared.settled or out is None or out.open_span is None:
            return
        prepared.settled = True
    out.outcome = outcome
    cascade.settle(prepared.job, out.open_span, out)


def _drop(prepared: Prepared) -> None:
    """Forget a prepared summary; a ready one ends its span as ``discarded``, a running one when it lands."""
    with _lock:
        prepared.discarded = True
        state = prepared.job.state
        if state is not None and _prepared.get(state) is prepared:
            del _prepared[state]
        landed = prepared.entry is not None  # else _run settles it when it lands (it reads the flag)
    if landed:
        _settle(prepared, semconv.OUTCOME_DISCARDED)


def _sweep() -> None:
    """Drop the summaries of conversations the store forgot (idle, evicted): they will never be applied."""
    global _last_sweep
    now = monotonic()
    if now - _last_sweep < SWEEP_SECONDS:
        return
    _last_sweep = now
    with _lock:
        if not _prepared:
            return
    tracked = set(STORE.states())
    with _lock:
        gone = [p for state, p in _prepared.items() if state not in tracked]
    for prepared in gone:
        _drop(prepared)


def discard_all() -> None:
    """Drop every prepared summary (``engine.reset()``, ``uninstrument()``)."""
    with _lock:
        every = list(_prepared.values())
    for prepared in every:
        _drop(prepared)


def forget_all() -> None:
    """In a forked child: forget the parent's summaries without any telemetry (their spans are the parent's)."""
    global _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread at fork time
    _prepared.clear()
