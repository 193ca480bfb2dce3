"""Compaction off the critical path: the summary is prepared in the background, applied at the threshold.

Why: an inline compaction makes the call that crosses the threshold wait for the summarizer (a full LLM
call over most of the window: seconds to tens of seconds) before its own answer. Here, once a
conversation's estimate passes the start point (``background_start_pct`` of the auto threshold, 80 % by
default; earlier when the summary, at the conversation's pace and as long as summaries take, would land
after the blocking limit), the summary of the history as it stands is prepared in the background, aimed so
that the context it leaves at the threshold is about what an inline compaction would leave: the engine yields a
:class:`~otel_context.flow.BackgroundStart` and the instrumentation runs it on a worker thread (sync
clients) or a task on the running loop (async clients), through the same client with the recursion guard.

This module keeps the summaries' lives (sans I/O): whether a prepared summary still covers what a call
sends, how it is applied, when it is dropped. When one is due and where it cuts is the policy's
(:mod:`otel_context.engine.pacing`); the life of each is one phase moved by one table of transitions
(:mod:`otel_context.engine.preparation`), whatever reaches it: the call, the worker thread or loop task, the
store's forget listener, reset, the interpreter's exit. A prepared summary is a memo entry in waiting: the app's
items it replaced (kept by reference, compared by value, as strong as the memo's content hash) and the new
head. At the threshold it is applied at once when it covers a prefix of the call's history, nothing newer
replaced it, and it makes the request smaller than what the call sends already: the head replaces that
prefix, the turns appended since are kept verbatim, the pairing is validated, and the memo remembers it so
that the following calls reuse it byte-identically. When it is
not ready yet, a request that still fits below the blocking limit goes out unchanged (the summary is
applied when it lands); one that does not fit waits for it (bounded by ``summarizer_timeout_seconds``),
then compacts inline. A failed summary counts on the breaker like an inline one, and the threshold then
compacts inline. A summary that is never applied is dropped, its ``compact`` span ending with
``outcome=discarded``.

One prepared summary per conversation state at a time, so never two summaries of one prefix. It is kept
with the conversation's pace and what is known of the fleet in one record per state, in this module's table
keyed weakly by state (:data:`_records`), not on the state: the conversation layer keeps only the
conversation's own state. The record goes with the state, and the process's conversation table tells this
module as soon as it forgets the state (evicted, idle, cleared: its
:meth:`~otel_context.conversation.table.ConversationTable.on_forget` listeners), which drops its prepared
summary, ending a ready one's ``compact`` span as ``discarded`` right then.

What the conversation shares with other workers is asked of the call's sync
(:class:`~otel_context.engine.call.PreparationSync`, and the inline path's one summary of
:class:`~otel_context.engine.call.ConversationSync`), never of a store: without one
(:class:`~otel_context.engine.call.LocalSync`) this process prepares every summary, nothing is published
and nothing is read, without a round trip. With a shared store (many workers,
:class:`~otel_context.engine.fleet.StoreSync`), one worker prepares per conversation: the one that takes the
store's prepare lock (:meth:`~otel_context.engine.call.PreparationSync.claim`) past the start point. When its
summary is ready it publishes it in the conversation's ``prepared`` part (the memo entry it makes, verified by
content hash by any worker, and its ``compact`` span's context), ends that span (the fleet's one background
compaction) and lets the lock go. At the threshold a worker with no summary of its own reads that part (one
round trip, only then), and applies it as a local one is applied (the memo remembers it, so it travels on to
the other workers with the shared memo); the applying call links to the ``compact`` span. When none covers, a
request that still fits goes out unchanged while another worker prepares, else the fleet's inline path runs
(:meth:`~otel_context.engine.call.ConversationSync.once`). The reactive path (the provider said too long) with
no summary of this worker's own reads that part too (one round trip, only on that rare path) and applies a
covering one the same way. A stale published summary (the history was edited or rewound below its cut, or a
newer compaction covered it before any call applied it) is removed from the store by the worker that reads it
(atomically, so one worker of the fleet) and reported there as a ``discarded`` compaction of its own, linked
to the publishing span: that span ended at publish, so that no span stays open across processes.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import weakref
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, TraceFlags

from otel_context import process_state, semconv, telemetry
from otel_context.compaction import cascade, viewers
from otel_context.compaction.budget import Budget
from otel_context.compaction.job import CompactionJob
from otel_context.compaction.summary import CompactionError
from otel_context.conversation import CONVERSATIONS, ConversationState
from otel_context.conversation.memo import MemoEntry, scope_of
from otel_context.conversation.shared import Published
from otel_context.conversation.state_store import Lease
from otel_context.engine import economics, pacing
from otel_context.engine.call import CallState, PreparationSync
from otel_context.engine.preparation import GIVEN_UP, GONE, IN_FLIGHT, Effect, Event, Lifecycle, Phase
from otel_context.flow import BackgroundStart, BackgroundWait, Step, StoreRequest, SummaryRequest
from otel_context.fork_safe import new_lock
from otel_context.tokens import estimate_items, estimate_text

Item = Mapping[str, Any]


@dataclass(eq=False)
class Prepared:
    """One background summary of one conversation state; its phase is :attr:`life`'s (see
    :mod:`otel_context.engine.preparation`), moved only by :func:`_move`."""

    job: CompactionJob
    #: The app's items when it started (never mutated; a later call's prefix is compared with them).
    items: Sequence[Item]
    #: What the conversation shares: the sync of the call that started it (it publishes the summary).
    sync: PreparationSync
    #: The auto threshold of the call that started it (the job aimed below it, for the turns to come).
    threshold: int = 0
    life: Lifecycle = field(default_factory=Lifecycle)
    #: Set when its flow ended (landed, or closed): what a call at the blocking limit waits on.
    landed: threading.Event = field(default_factory=threading.Event)
    #: What the summary made (set when it lands) and the memo entry it makes (None: nothing to apply).
    out: cascade.CompactionOutcome | None = None
    entry: MemoEntry | None = None
    #: The fleet's prepare lock this worker still holds (None: none was taken, or given back). A resource,
    #: not a phase: taken off with :func:`_take_lease`, so it is given back once, whatever the phase.
    lease: Lease | None = None
    #: Its ``compact`` span, opened by the call that starts it (see :func:`maybe_start`); the summary's flow
    #: takes it over, and the interpreter's exit ends it while that flow still runs or never started.
    span: Span | None = None
    #: Why it was dropped (``semconv.DISCARD_*``), set by the drop: its ``discarded`` span and count say it.
    reason: str = semconv.DISCARD_ABANDONED

    @property
    def phase(self) -> Phase:
        return self.life.phase


@dataclass
class _Fleet:
    """What this worker knows of a conversation's preparation elsewhere in the fleet (saves the store's
    round trips on the calls between the start point and the threshold)."""

    #: Until when another worker holds the prepare lock (monotonic seconds).
    busy_until: float = 0.0
    #: The prefix length a published summary covers (0: none known).
    ready_len: int = 0


@dataclass(eq=False)
class _Record:
    """What background compaction keeps of one conversation state (in :data:`_records`): its prepared
    summary, its pace, and what is known of the fleet."""

    prepared: Prepared | None = None
    pace: pacing.Pace = field(default_factory=pacing.Pace)
    fleet: _Fleet = field(default_factory=_Fleet)
    #: The calls seen past a quarter of the threshold (the clock of the back-off below).
    calls: int = 0
    #: Summaries discarded in a row for a reason of the conversation's own (see :data:`_BACK_OFF_REASONS`),
    #: and the call before which no new one starts at the start point (one that would land after the
    #: blocking limit still starts): 1, 2, 4 … calls after each.
    discards: int = 0
    held_until: int = 0


#: Guards every record's fields, every summary's phase and lease, and the module's tables.
_lock = new_lock(sys.modules[__name__], "_lock")
#: Each state's record, made by its first call that concerns background compaction. Keyed weakly: a record
#: goes with its state (a state the conversation table forgot lives on while a call still holds it, and so does its
#: record, its prepared summary dropped: see :func:`_forgotten`). A call that holds a record across a reset
#: (it waits for the store) writes only to that record, which the reset took out of the table: nothing of it
#: reaches the conversation's next calls.
_records: weakref.WeakKeyDictionary[ConversationState, _Record] = weakref.WeakKeyDictionary()
#: The summaries whose flow runs (their ``compact`` span may be open), for the interpreter's exit.
_running: set[Prepared] = set()
#: Discards that say the summary was started for nothing, so the next start waits (and waits longer each time).
#: The others (forgotten, abandoned, exit) are the app's doing, not a misjudged start.
_BACK_OFF_REASONS = frozenset(
    {
        semconv.DISCARD_STALE,
        semconv.DISCARD_SUPERSEDED,
        semconv.DISCARD_NO_GAIN,
        semconv.DISCARD_LATE,
        semconv.DISCARD_UNUSABLE,
    }
)
#: Phases of a summary that a drop reports as discarded (now, or when it lands).
_UNSENT = frozenset({Phase.RUNNING, Phase.PUBLISHING, Phase.READY, Phase.CUT_SHORT})
#: The longest back-off, in calls (after six discards in a row).
_MAX_HOLD_CALLS = 32


def _record(state: ConversationState) -> _Record:
    """The state's record, made when missing (``_lock`` held)."""
    record = _records.get(state)
    if record is None:
        record = _records[state] = _Record()
    return record


def _prepared_of(state: ConversationState) -> Prepared | None:
    """The state's prepared summary (``_lock`` held)."""
    record = _records.get(state)
    return record.prepared if record is not None else None


def _move(prepared: Prepared, event: Event) -> Effect | None:
    """The one way a summary's phase changes: one transition under the lock (see
    :mod:`otel_context.engine.preparation`). A phase that is the end of it for this conversation takes the
    summary out of its record at once. The effect is for the caller to carry out (:func:`_carry_out`)."""
    with _lock:
        effect = prepared.life.step(event)
        if effect is not None and prepared.phase in GONE:
            state = prepared.job.state
            record = _records.get(state) if state is not None else None
            if record is not None and record.prepared is prepared:
                record.prepared = None
    return effect


def _carry_out(
    prepared: Prepared, effect: Effect | None, parent: Span | None = None, trigger: str = semconv.TRIGGER_AUTO
) -> None:
    """What a transition asks for about the summary's ``compact`` span (``SEND`` is the caller's own).
    ``parent``: the chat span of the call that dropped it (None: no call did, so the report is a trace of its
    own); ``trigger``: the path that dropped it."""
    out, job = prepared.out, prepared.job
    if effect is Effect.END_SUCCESS or effect is Effect.END_DISCARDED:
        if out is not None and out.open_span is not None:
            if effect is Effect.END_SUCCESS:
                outcome = semconv.OUTCOME_SUCCESS
                _count(semconv.BACKGROUND_PREPARED, job.provider, job.model)
            else:
                outcome = semconv.OUTCOME_DISCARDED
                _count(semconv.BACKGROUND_DISCARDED, job.provider, job.model, prepared.reason)
            reason = prepared.reason if outcome == semconv.OUTCOME_DISCARDED else None
            cascade.settle(job, out.open_span, dataclasses.replace(out, outcome=outcome, discard_reason=reason))
    elif effect is Effect.END_AT_EXIT:
        _end_discarded(prepared, semconv.DISCARD_EXIT)
    elif effect is Effect.REPORT_DISCARDED and out is not None and out.open_span is not None:
        cascade.record_discarded(
            parent if parent is not None else trace.INVALID_SPAN,
            job.provider,
            job.model,
            job.state,
            trigger,
            out.open_span.get_span_context(),
            prepared.threshold,
            prepared.reason,
            out.cost,
        )
        _count(semconv.BACKGROUND_DISCARDED, job.provider, job.model, prepared.reason)


def _count(event: str, provider: str, model: str, reason: str | None = None) -> None:
    """One event of a background summary's life on ``otel_context.compaction.background_summaries``."""
    attributes = {
        semconv.BACKGROUND_EVENT: event,
        semconv.GEN_AI_PROVIDER_NAME: provider,
        semconv.GEN_AI_REQUEST_MODEL: model,
    }
    if reason is not None:
        attributes[semconv.COMPACTION_DISCARD_REASON] = reason
    telemetry.get().instruments.background_summaries.add(1, attributes)


def _drop(prepared: Prepared, reason: str, parent: Span | None = None, trigger: str = semconv.TRIGGER_AUTO) -> None:
    """Forget a prepared summary, for ``reason`` (``semconv.DISCARD_*``): a running one ends its span as
    ``discarded`` when it lands; a made one (its span ended as ``success``) is reported as a ``discarded``
    compaction of its own, linked to that span, under ``parent`` (see :func:`_carry_out`). A reason of the
    conversation's own holds the next start back (see :func:`_back_off`)."""
    with _lock:
        unsent = prepared.phase in _UNSENT  # its discard is yet to be reported (now, or when it lands)
        if unsent:
            prepared.reason = reason
    effect = _move(prepared, Event.DROP)
    if effect is not None and unsent and reason in _BACK_OFF_REASONS:
        _back_off(prepared.job.state)
    _carry_out(prepared, effect, parent, trigger)


def _back_off(state: ConversationState | None) -> None:
    """A summary was discarded for nothing it could help: the next start waits 1, 2, 4 … calls (at most
    :data:`_MAX_HOLD_CALLS`), counting the discards in a row (an applied summary resets them)."""
    with _lock:
        record = _records.get(state) if state is not None else None
        if record is None:
            return
        record.discards += 1
        record.held_until = record.calls + min(_MAX_HOLD_CALLS, 2 ** (record.discards - 1))


def _held(state: ConversationState) -> bool:
    """Whether the conversation's next start is held back after discards (see :func:`_back_off`)."""
    with _lock:
        record = _records.get(state)
        return record is not None and record.calls < record.held_until


def _forgotten(state: ConversationState) -> None:
    """The conversation table forgot ``state`` (evicted, idle, cleared): its prepared summary can never be applied,
    so it is dropped at once (a ready one's ``compact`` span ends as ``discarded`` now). The rest of its record
    stays with the state, for a call that still holds it."""
    with _lock:
        prepared = _prepared_of(state)
    if prepared is not None:
        _drop(prepared, semconv.DISCARD_FORGOTTEN)


CONVERSATIONS.on_forget(_forgotten)


def enabled(call: CallState) -> bool:
    """Background compaction is on (settings) and the driver of this plan can run it (the instrumentation).
    With a shared store too: the store's prepare lock makes one worker of the fleet prepare."""
    return call.request.background and call.request.settings.background_compaction


def pending(state: ConversationState) -> Prepared | None:
    """The background summary of ``state``, if any (tests and the demo look at it)."""
    with _lock:
        return _prepared_of(state)


def underway(call: CallState) -> bool:
    """Whether this worker prepares a summary of the call's conversation (running) or holds one ready that
    covers the call: the threshold may count on it."""
    with _lock:
        prepared = _prepared_of(call.state)
    if prepared is None:
        return False
    return prepared.phase in IN_FLIGHT or (prepared.phase is Phase.READY and _covers(prepared, call))


def ready(call: CallState) -> bool:
    """Whether this worker holds a summary of the call's conversation that is ready and covers the call."""
    with _lock:
        prepared = _prepared_of(call.state)
    return prepared is not None and prepared.phase is Phase.READY and _covers(prepared, call)


def _observe(call: CallState) -> None:
    """One sample of the conversation's pace (see :meth:`pacing.Pace.observe`)."""
    # Wall time (the summarizer's duration is wall time too), not the cache's clock, which a test may drive.
    now = time.monotonic()
    with _lock:
        record = _record(call.state)
        record.pace.observe(now, call.estimated_tokens)
        record.calls += 1


def _steps_of(state: ConversationState) -> pacing.Steps:
    """A reader of the conversation's pace for the policy: a copy of its steps, taken under the lock only
    when the policy needs them (most calls past a quarter of the threshold do not)."""

    def steps() -> list[tuple[float, int]]:
        with _lock:
            record = _records.get(state)
            return list(record.pace.steps) if record is not None else []

    return steps


def maybe_start(span: Span, call: CallState, budget: Budget) -> Generator[Step, Any, None]:
    """Below the threshold: start the summary in the background when the start point is passed."""
    _observe(call)
    state = call.state
    steps = _steps_of(state)
    if not pacing.due(call, budget, steps, held=_held(state)):
        return
    if state.breaker.open:
        return
    if call.request.settings.microcompact and economics.micro_will_do(call, budget):
        return  # clearing tool results will do at the threshold: a summary now would be thrown away
    with _lock:
        existing = _prepared_of(state)
    if existing is not None:
        phase = existing.phase
        if phase in IN_FLIGHT or phase is Phase.FAILED or (phase is Phase.READY and _covers(existing, call)):
            # One at a time; a ready one waits for the threshold; after a failed one the threshold compacts
            # inline (the breaker counted the failure; retrying in the background on every call would not).
            return
        if phase in GIVEN_UP:
            # Given up midway, it could not let the fleet's prepare lock go (that path makes no store round
            # trip): let it go now, or this conversation prepares nothing in the background until the lease ends.
            yield from _let_go(existing)
            _drop(existing, semconv.DISCARD_ABANDONED, span)  # prepared again now
        else:
            # The history changed below it: dropped, and the next one waits for a later call (see _back_off).
            _drop(existing, _uncovered(call, existing), span)
            return
    if cascade.not_understood_reason(call.adapter, call.body, call.sent_items, budget):
        return  # the threshold reports the reason (and compacts nothing) as today
    aimed = pacing.aim(call, budget, steps)
    if aimed is None:
        return  # nothing to summarize yet: the threshold compacts inline (and says why) as today
    context = span.get_span_context()
    job = dataclasses.replace(
        call.job(span, semconv.TRIGGER_AUTO, call.estimated_tokens),
        mode=semconv.MODE_BACKGROUND,
        # A trace of its own, linked to this call's span: the summary outlives this call, and a child that ends
        # after its parent is drawn wrongly by trace viewers. The call that applies it links to it in turn.
        parent=trace.INVALID_SPAN,
        links=(context,) if context.is_valid else (),
        cut=aimed.cut,
        rehydrate_room=aimed.rehydrate_room,
        # What fits under the threshold once the turns appended until then are counted too: the size the result
        # aims at. The threshold stays the call's: the breaker judges the summary against it, as an inline one
        # (against the aim, a slow summarizer, whose aim is far below, counted every summary as thrashing).
        target_tokens=max(1, budget.auto_threshold - aimed.growth),
    )
    prepare, lease = yield from _claim(span, call)
    if not prepare:
        return  # another worker prepares (or published) this conversation's summary
    prepared = Prepared(job, call.items, call.sync, budget.auto_threshold, lease=lease)
    with _lock:
        raced = _prepared_of(state) is not None  # another call of this conversation started one meanwhile
        if not raced:
            _record(state).prepared = prepared
    # Registered first, then checked: a table that evicts the state after this sees the summary and
    # discards it; one that evicted it before is seen here (it would never be applied: not started).
    if not raced and not CONVERSATIONS.tracks(state):
        with _lock:
            record = _records.get(state)
            if record is not None and record.prepared is prepared:
                record.prepared = None
        raced = True
    if raced:
        yield from _let_go(prepared)
        return
    # Its compact span opens now, while this call's span is open, so that each names the other (any viewer
    # then leads from one to the other, links or not); the summary runs on (see _run, _end_unstarted).
    compact = prepared.span = cascade.start_background_span(job)
    telemetry.name_span(
        span, semconv.COMPACTION_STARTED_TRACE_ID, semconv.COMPACTION_STARTED_SPAN_ID, compact.get_span_context()
    )
    yield BackgroundStart(_run(prepared, call))


def _claim(span: Span, call: CallState) -> Generator[StoreRequest, Any, tuple[bool, Lease | None]]:
    """Whether this worker prepares the conversation's summary, and the fleet's prepare lock it took for it
    (see :meth:`PreparationSync.claim`); not when another worker prepares or a published summary covers
    this call already (remembered, so the next calls skip the store)."""
    state, now = call.state, time.monotonic()
    sent = call.entry.prefix_len if call.entry is not None else 0
    with _lock:
        known = _record(state).fleet
    if known.busy_until > now or known.ready_len > sent:
        return False, None
    claim = yield from call.sync.claim(call)
    if claim.stale is not None:
        yield from _drop_published(span, call, claim.stale, semconv.TRIGGER_AUTO)
    if not claim.prepare:
        with _lock:
            if claim.ready is not None:
                known.ready_len = claim.ready.entry.prefix_len
            else:
                known.busy_until = now + claim.busy_for
    return claim.prepare, claim.lease


def _run(prepared: Prepared, call: CallState) -> Generator[SummaryRequest | StoreRequest, Any, None]:
    """The background summary itself (run by the instrumentation): the cascade's summary, kept for later
    (with a shared store: published for the fleet, then the prepare lock is let go). Its ``compact`` span
    ends when the summary is ready: ``success``, or ``discarded`` when it can never be applied."""
    with _lock:
        if prepared.landed.is_set():
            return  # closed before it started (uninstrument(), the interpreter's exit): its span ended then
        _running.add(prepared)
    try:
        out = yield from cascade.run_summary(prepared.job, prepared.span)
        prepared.out = out
        if out.outcome == semconv.OUTCOME_SUCCESS and out.items is not None and out.open_span is not None:
            pacing.learn(pacing.summary_model(call), out.duration_ms / 1000.0)
            entry = prepared.entry = _entry(prepared, out)
            if entry is None:
                prepared.reason, event = semconv.DISCARD_UNUSABLE, Event.UNUSABLE
            else:
                event = Event.MADE_TO_PUBLISH if prepared.lease is not None else Event.MADE
            effect = _move(prepared, event)
            _carry_out(prepared, effect)
            if effect is Effect.END_SUCCESS and prepared.phase is Phase.PUBLISHING and entry is not None:
                yield from _publish(prepared, call, entry, out.open_span)
        else:
            _move(prepared, Event.FAILED)  # the cascade ended its span and counted it on the breaker
        yield from _let_go(prepared)
    except GeneratorExit:
        # Given up midway (uninstrument(), or the app closed a client it had to share): it will never land,
        # so a later call of the conversation lets its fleet lease go (see maybe_start; uninstrument() and
        # the interpreter's exit let it go at once, see release_leases) and may prepare it again (a failed
        # one may not). No lock here: this may run as the generator's finalizer, on a thread that holds it.
        running = prepared.phase in IN_FLIGHT
        prepared.life.abandon()
        if running:  # its span ended as discarded (the cascade's); counted here, as every discard is
            job = prepared.job
            _count(semconv.BACKGROUND_DISCARDED, job.provider, job.model, semconv.DISCARD_ABANDONED)
        raise
    finally:
        _running.discard(prepared)  # no lock (see above): one call on a set, atomic
        prepared.landed.set()


def _publish(prepared: Prepared, call: CallState, entry: MemoEntry, compact_span: Span) -> Generator[Any, Any, None]:
    """Publish a ready summary for the fleet (its ``compact`` span ended as it became ready: the one
    background compaction of this crossing, counted once). Once stored it is the fleet's: this worker applies
    it from the store at the threshold like any other (a worker that finds it stale reports it: see
    :func:`_drop_published`). Not stored (the store failed): it stays this worker's own."""
    context = compact_span.get_span_context()
    link = (context.trace_id, context.span_id, int(context.trace_flags)) if context.is_valid else None
    stored = yield from prepared.sync.publish(call, entry, link)
    moved = _move(prepared, Event.STORED if stored else Event.NOT_STORED)
    if moved is None or not stored:
        return  # dropped meanwhile (and reported then), or not stored
    with _lock:
        record = _records.get(call.state)
        if record is not None:
            record.fleet.ready_len = max(record.fleet.ready_len, entry.prefix_len)


def _entry(prepared: Prepared, out: cascade.CompactionOutcome) -> MemoEntry | None:
    """The memo entry a successful summary makes (see :meth:`MemoEntry.of_compaction`); None: unusable (the
    pairing repair touched the kept part: left to an inline compaction)."""
    job = prepared.job
    scope = scope_of(job.adapter.system_text(job.body), job.body.get("tools"), job.model)
    return MemoEntry.of_compaction(
        prepared.items,
        job.base,
        job.items,
        out.items or (),
        out.cut,
        out.head,
        out.summary,
        out.summary_head,
        scope,
        out.input_tokens - out.output_tokens,
    )


def _covers(prepared: Prepared, call: CallState) -> bool:
    """Whether the ready summary applies to this call (see :meth:`CallState.covers_prepared`: compared by
    value with the items it was made from; across a microcompaction since, which changed only content)."""
    entry = prepared.entry
    return entry is not None and call.covers_prepared(entry, prepared.items, prepared.job.base)


def _uncovered(call: CallState, prepared: Prepared) -> str:
    """Why a summary of this conversation does not cover this call: its prefix is this call's, but a newer
    compaction reaches past it (``superseded``), or the history changed below its cut (``stale``)."""
    entry = prepared.entry
    if entry is None:
        return semconv.DISCARD_STALE
    n, items, started = entry.prefix_len, call.items, prepared.items
    if n <= len(items) and entry.scope == call.scope and list(items[:n]) == list(started[:n]):
        return semconv.DISCARD_SUPERSEDED
    return semconv.DISCARD_STALE


def at_threshold(span: Span, call: CallState, budget: Budget) -> Generator[Step, Any, bool]:
    """The threshold is crossed: apply the prepared summary when it covers this call. True when nothing more
    is to be done (applied and below the threshold, or not ready and the request still fits); False: compact
    inline as today (no prepared summary, it failed, it is stale, or the rest is still above the threshold)."""
    _observe(call)
    state = call.state
    with _lock:
        prepared = _prepared_of(state)
    if prepared is None:
        return (yield from _fleet_threshold(span, call, budget))
    waited = 0.0
    if prepared.phase in IN_FLIGHT:
        if call.estimated_tokens < budget.blocking_limit:
            return True  # sent unchanged; the summary is applied by the first call after it lands
        began = time.perf_counter()
        yield BackgroundWait(prepared.landed, call.request.settings.summarizer_timeout_seconds)
        waited = time.perf_counter() - began
        if prepared.phase is Phase.PUBLISHED:  # it landed, and went to the fleet: apply it from there
            return (yield from _fleet_threshold(span, call, budget, waited))
        if prepared.phase in IN_FLIGHT:
            # Still running: compact inline now (a longer prefix); the late one is dropped when it lands.
            _drop(prepared, semconv.DISCARD_LATE, span)
            return False
    refused = apply(span, call, prepared, waited, budget)
    if refused is not None:
        _drop(prepared, refused, span)
        return False
    return call.estimated_tokens < budget.auto_threshold


def _fleet_threshold(
    span: Span, call: CallState, budget: Budget, waited: float = 0.0
) -> Generator[StoreRequest, Any, bool]:
    """The threshold with no summary of this worker's own: apply the one another worker published when it
    covers this call. Else, while another worker prepares, a request that still fits goes out unchanged, and
    one that does not waits (bounded) for it. False: the inline path runs (with a shared store, the fleet's).
    Without a store the sync answers "none, and none under way" without a round trip."""
    sync = call.sync
    got = yield from _read_published(span, call, semconv.TRIGGER_AUTO)
    if got is None:
        if not (yield from sync.preparing(call)):
            return False
        if call.estimated_tokens < budget.blocking_limit:
            return True  # sent unchanged; a later call applies the summary once it is published
        began = time.perf_counter()
        got = yield from sync.wait_prepared(call, call.request.settings.summarizer_timeout_seconds)
        waited += time.perf_counter() - began
        if got is None:
            return False
    if not _apply_published(span, call, got, waited, budget):
        return False
    return call.estimated_tokens < budget.auto_threshold


def _read_published(span: Span, call: CallState, trigger: str) -> Generator[StoreRequest, Any, Published | None]:
    """The summary another worker published when it covers this call (one round trip); a stale one is
    dropped on the way (see :func:`_drop_published`)."""
    got, stale = yield from call.sync.read_prepared(call)
    if stale is not None:
        yield from _drop_published(span, call, stale, trigger)
    return got


def _drop_published(span: Span, call: CallState, got: Published, trigger: str) -> Generator[StoreRequest, Any, None]:
    """Remove a published summary that does not cover this call from the store and, when no call applied
    it (the memo does not hold it: the history was edited or rewound below its cut, or a newer compaction
    covered it first), report it as discarded. The removal is atomic and only of that very summary, so one
    worker of the fleet reports it; its span (the publishing worker's) ended at publish."""
    applied = any(e.address == got.entry.address for e in call.state.memo.entries)
    if not (yield from call.sync.remove_prepared(call, got)) or applied:
        return
    with _lock:
        record = _records.get(call.state)
        known = record.fleet if record is not None else None
        if known is not None and known.ready_len == got.entry.prefix_len:
            known.ready_len = 0  # none is ready any more: this worker may prepare the next one
    budget = call.budget
    current = call.entry
    reason = (
        semconv.DISCARD_SUPERSEDED
        if current is not None and current.prefix_len >= got.entry.prefix_len
        else semconv.DISCARD_STALE
    )
    cascade.record_discarded(
        span,
        call.request.provider,
        call.model,
        call.state,
        trigger,
        _link_context(got.link),
        budget.auto_threshold if budget is not None else None,
        reason,
    )
    _count(semconv.BACKGROUND_DISCARDED, call.request.provider, call.model, reason)


def _link_context(link: tuple[int, int, int] | None) -> SpanContext | None:
    """The context of the publishing worker's ``compact`` span (another process: remote)."""
    if link is None:
        return None
    trace_id, span_id, flags = link
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def _apply_published(
    span: Span, call: CallState, got: Published, waited: float, budget: Budget, trigger: str = semconv.TRIGGER_AUTO
) -> bool:
    """Send a summary another worker published (already verified to cover this call); False when its
    pairing with the turns appended since would need a repair, or it would not make the request smaller (see
    :func:`_fits`). ``trigger``: the path that applies it."""
    fitted = _fits(call, got.entry)
    if isinstance(fitted, str):
        return False
    before = call.estimated_tokens
    _use(call, got.entry, fitted)
    _applied(span, call, _link_context(got.link), before, budget, trigger)
    cascade.record_wait(waited, trigger, semconv.MODE_BACKGROUND)
    return True


def _applied(
    span: Span, call: CallState, compact: SpanContext | None, before: int, budget: Budget, trigger: str
) -> None:
    """Record on this call's chat span that it sends a summary prepared in the background: a link to the
    summary's ``compact`` span (ended when the summary was ready, in a trace of its own), the
    ``otel_context.compaction.applied`` event with the context before and after on this call, what that saved
    (``otel_context.compaction.tokens_saved``: counted here, when it reaches the model, not when it was
    ready), and the intentional cache break (the cache detector must know the prefix changes on purpose)."""
    if compact is not None:
        try:
            span.add_link(compact)
        except Exception:
            telemetry.log_once("background.link", "otel_context: could not link a compaction", exc_info=True)
    telemetry.name_span(span, semconv.COMPACTION_APPLIED_TRACE_ID, semconv.COMPACTION_APPLIED_SPAN_ID, compact)
    telemetry.emit_event(
        span,
        semconv.COMPACTION_APPLIED_EVENT,
        {
            semconv.COMPACTION_TRIGGER_SOURCE: trigger,
            semconv.COMPACTION_MODE: semconv.MODE_BACKGROUND,
            semconv.COMPACTION_INPUT_TOKENS: before,
            semconv.COMPACTION_OUTPUT_TOKENS: call.estimated_tokens,
            semconv.COMPACTION_THRESHOLD_TOKENS: budget.auto_threshold,
        },
    )
    cascade.record_saved(before - call.estimated_tokens, trigger, semconv.STRATEGY_SUMMARY)
    _count(semconv.BACKGROUND_APPLIED, call.request.provider, call.model)
    state = call.state
    with _lock:
        record = _records.get(state)
        if record is not None:
            record.discards = record.held_until = 0  # a summary was used: the next one starts as usual
    if state.detector is not None:
        cascade.announce(span, state, call.request.provider, call.model, call.estimated_tokens)


@dataclass(frozen=True)
class _Fitted:
    """What a call sends with a summary applied, and the item tokens that saves against what it sent."""

    sent: list[Item]
    saved: int


def _fits(call: CallState, entry: MemoEntry) -> _Fitted | str:
    """What this call sends with ``entry`` applied, or why it does not send it: ``unusable`` when the pairing
    would need a repair (then it is not the byte-identical apply the memo promises), ``no_gain`` when it would
    not make the request smaller than what the call sends already (sending it would count as a compaction that
    saved nothing; on the reactive path, one that does not answer "too long"). Compared on what the call sends:
    after a microcompaction, its cleared results (``entry`` keeps them cleared, see :meth:`CallState.sending`)."""
    sent = entry.apply(call.items)
    try:
        if cascade.checked(call.adapter, sent) != sent:
            return semconv.DISCARD_UNUSABLE
    except CompactionError:
        return semconv.DISCARD_UNUSABLE
    adapter = call.adapter
    saved = estimate_items(adapter, call.sent_items) - estimate_items(adapter, sent)
    return _Fitted(sent, saved) if saved > 0 else semconv.DISCARD_NO_GAIN


def _use(call: CallState, entry: MemoEntry, fitted: _Fitted) -> None:
    """Send ``entry`` on this call and remember it in the memo (the estimate drops by what it saves)."""
    call.send(entry, fitted.sent, remember=True)
    call.compacted(max(0, call.estimated_tokens - int(fitted.saved * call.state.estimate_factor)))
    economics.compacted(call)
    economics.summarized(call, estimate_text(entry.summary))


def apply_ready(span: Span, call: CallState, budget: Budget) -> Generator[StoreRequest, Any, bool]:
    """The reactive path: apply a prepared summary that is ready and covers this call; True when applied.
    With a shared store and none of this worker's own, the one another worker published (one round trip,
    only on this rare path)."""
    if not enabled(call):
        return False
    with _lock:
        prepared = _prepared_of(call.state)
    if prepared is None:
        got = yield from _read_published(span, call, semconv.TRIGGER_REACTIVE)
        return got is not None and _apply_published(span, call, got, 0.0, budget, semconv.TRIGGER_REACTIVE)
    if prepared.phase in IN_FLIGHT:
        return False
    refused = apply(span, call, prepared, 0.0, budget, trigger=semconv.TRIGGER_REACTIVE)
    if refused is None:
        return True
    _drop(prepared, refused, span, semconv.TRIGGER_REACTIVE)
    return False


def apply(
    span: Span,
    call: CallState,
    prepared: Prepared,
    waited: float,
    budget: Budget,
    trigger: str = semconv.TRIGGER_AUTO,
) -> str | None:
    """Send the prepared summary on this call and remember it in the memo (None), or say why not
    (``semconv.DISCARD_*``: not of this call's history, or it would not make the request smaller, see
    :func:`_fits`; a summary not ready, or that another call of this conversation applied or dropped first,
    is refused too, and dropping it then changes nothing). Across a microcompaction since it was made, it is
    sent over the results that one cleared (:meth:`CallState.sending`)."""
    out, entry = prepared.out, prepared.entry
    if prepared.phase is not Phase.READY or out is None or entry is None or out.open_span is None:
        return semconv.DISCARD_STALE
    if not _covers(prepared, call):
        return _uncovered(call, prepared)
    entry = call.sending(entry)
    fitted = _fits(call, entry)
    if isinstance(fitted, str):
        return fitted
    if _move(prepared, Event.APPLY) is not Effect.SEND:
        return semconv.DISCARD_STALE
    before = call.estimated_tokens
    _use(call, entry, fitted)
    _applied(span, call, out.open_span.get_span_context(), before, budget, trigger)
    cascade.record_wait(waited, trigger, semconv.MODE_BACKGROUND)
    return None


def _take_lease(prepared: Prepared) -> Lease | None:
    """The prepare lock ``prepared`` still holds, taken off it: whoever takes it gives it back, once."""
    with _lock:
        lease, prepared.lease = prepared.lease, None
    return lease


def _let_go(prepared: Prepared) -> Generator[StoreRequest, Any, None]:
    """Give the fleet's prepare lock back, if ``prepared`` still holds it, as a step of the call's flow."""
    lease = _take_lease(prepared)
    if lease is not None:
        yield from prepared.sync.release(lease)


def _give_back(prepared: Prepared) -> None:
    """Give the fleet's prepare lock back now, with a synchronous store round trip (a short timeout, never
    raises): a summary that will never be published, so the other workers may prepare the conversation at
    once rather than compact it inline until the lease (the summarizer's whole budget) runs out."""
    lease = _take_lease(prepared)
    if lease is not None:
        prepared.sync.give_back(lease)


def _every_prepared() -> list[Prepared]:
    """Every prepared summary of this process (``_lock`` held)."""
    return [record.prepared for record in list(_records.values()) if record.prepared is not None]


def discard_all() -> None:
    """Drop every prepared summary, giving back the fleet's prepare locks they hold, and what was learned
    about paces and durations (``engine.reset()``, ``uninstrument()``): every record is forgotten."""
    with _lock:
        every = _every_prepared()
        _records.clear()
    pacing.forget_durations()  # reset does too (pacing's own registration); uninstrument() only here
    for prepared in every:
        _drop(prepared, semconv.DISCARD_ABANDONED)
        _end_unstarted(prepared, semconv.DISCARD_ABANDONED)
        _give_back(prepared)


def _end_unstarted(prepared: Prepared, reason: str) -> None:
    """End the ``compact`` span of a summary whose flow never started (its task cancelled first, or the
    interpreter exiting), as ``discarded``: the span opened when the call started it (see :func:`maybe_start`)
    and nothing else would end it. Its flow, if it starts after all, ends at once (see :func:`_run`)."""
    with _lock:
        if prepared in _running or prepared.landed.is_set():
            return  # running (it ends its span) or ended
        prepared.landed.set()
    _end_discarded(prepared, reason)


def _end_discarded(prepared: Prepared, reason: str) -> None:
    """End the summary's ``compact`` span, still open, as ``discarded`` for ``reason`` (it was given up before it
    was ready)."""
    span = prepared.span
    if span is not None and span.is_recording():
        span.set_attribute(semconv.COMPACTION_OUTCOME, semconv.OUTCOME_DISCARDED)
        span.set_attribute(semconv.COMPACTION_DISCARD_REASON, reason)
        viewers.describe_output(span, semconv.OUTCOME_DISCARDED)
        span.end()


def release_leases() -> None:
    """Give back every fleet prepare lock this worker's summaries hold (the interpreter exits: none of them
    will be published). Nothing else changes: no span ends, the exporters may be shut down already."""
    with _lock:
        every = _every_prepared()
    for prepared in every:
        _give_back(prepared)


def end_at_exit() -> None:
    """The interpreter exits: end the ``compact`` span of every summary still being made, as ``discarded``,
    so that it is exported (with its summarizer's span, which the instrumentation ends) before the tracer
    provider shuts down. Nothing else: no metric, no breaker; the summary is given up."""
    with _lock:
        running = list(_running)
        every = _every_prepared()
    for prepared in running:
        _carry_out(prepared, _move(prepared, Event.EXIT))
    for prepared in every:
        _end_unstarted(prepared, semconv.DISCARD_EXIT)


def forget_all() -> None:
    """In a forked child: forget the parent's records and summaries without any telemetry or transition (their
    spans are the parent's, and so are their leases). The durations learned are kept: the same summary models."""
    _records.clear()
    _running.clear()


# Reset: every prepared summary dropped (its lease given back), every record forgotten. A fork's child: the
# parent's records and summaries forgotten without telemetry (their spans are the parent's).
process_state.register(__name__, ("_records", "_running"), on_reset=discard_all, in_forked_child=forget_all)
