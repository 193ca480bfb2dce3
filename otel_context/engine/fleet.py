"""The engine's side of a shared state store: many workers serve one conversation as one process would.

:class:`StoreSync` is the store-backed :class:`~otel_context.engine.call.CallSync` (both the
:class:`~otel_context.engine.call.ConversationSync` every call asks and the
:class:`~otel_context.engine.call.PreparationSync` of background preparation): the plan picks it
(:func:`sync_for`) when ``OTEL_CONTEXT_STATE_STORE`` / ``instrument(state_store=...)`` names a store; with the
in-process default none of this runs (:class:`~otel_context.engine.call.LocalSync` answers instead). One
is made per call: it carries the call's store deadline and the name of the state the call read. What a worker
knows of a conversation's shared value besides its in-process state (its revision, the name of its
preparations, what it last wrote: :class:`~otel_context.conversation.shared.SharedRecord`) is kept here, in a
table keyed weakly by the state: it goes with the state, and a process without a store keeps none of it.

Why it yields :class:`~otel_context.flow.StoreRequest` instead of calling the store: the engine is sans
I/O, and one implementation serves sync and async clients. The driver runs the store's blocking call on a
sync client's thread and awaits its asyncio twin on an async client's loop, so the loop never blocks on
the store; the store itself bounds every call by its short timeout and falls back when it fails. (A
prefetch before planning would have needed the conversation key outside the engine, and could not take the
summary lock, which is only known to be needed in the middle of the plan.)

Round trips: one ``GET`` of the small ``state`` part of the conversation's history before the request goes
out (named after that history: :func:`read_address`), and a second one, of a summary (a ``memo`` part named
after its content address), only when the state names a summary of this very history that this worker does
not hold (another worker compacted); the write after the response goes through ``put_later`` (a background
thread: the caller never waits for it) and carries the summaries only when they changed. A threshold
crossing adds the lock (``SET NX PX``), synchronous writes of the new summary and the state before the lock
is let go (so the next worker finds them), and the release.

Background compaction (:mod:`otel_context.engine.background`) has its own lock, ``prepare``: past the start
point one worker takes it (:meth:`StoreSync.claim`), prepares the summary, writes it to the conversation's
``prepared`` part (:meth:`StoreSync.publish`) and lets the lock go; at the threshold a worker reads that part
once (:meth:`StoreSync.read_prepared`) and applies it when it covers its history, or removes it when it is
stale (:meth:`StoreSync.remove_prepared`, atomic: one worker of the fleet reports it as discarded).
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from functools import partial
from typing import Any

from opentelemetry.trace import Span

from otel_context import process_state, semconv
from otel_context.cache import CacheBreakDetector
from otel_context.compaction.budget import Budget
from otel_context.contract import CallRequest
from otel_context.conversation import ChainLink, ConversationState, Resolution, Snapshot, shared
from otel_context.conversation.memo import MemoEntry
from otel_context.conversation.state_store import Lease, Loaded, StateStore
from otel_context.engine import economics, windows
from otel_context.engine.call import (
    IN_PROCESS,
    STORE_UNAVAILABLE,
    CallState,
    CallSync,
    Claim,
    Steps,
    scope_for,
)
from otel_context.flow import StoreRequest
from otel_context.fork_safe import new_lock
from otel_context.formats.base import ChatFormat
from otel_context.settings import Settings
from otel_context.tokens import estimate_fixed, estimate_items

#: Beyond the summarizer's own time budget, how long a lease outlives a summary that is under way.
LEASE_MARGIN_SECONDS = 5.0
#: The store's lock taken by the one worker that prepares a conversation's summary in the background.
PREPARE_LOCK = "prepare"
#: A stored response's link to its conversation: under its own name (the response id, hashed by the store).
_LINK_PREFIX = "response:"
_LINK = "link"


def lease_seconds(settings: Settings) -> float:
    """How long a summary lock is held at most: the summarizer's whole time budget, and a margin."""
    return settings.summarizer_timeout_seconds * (settings.summarizer_max_retries + 1) + LEASE_MARGIN_SECONDS


def _read_point(adapter: ChatFormat, items: Sequence[Any]) -> int:
    """How many leading ``items`` the previous call of their conversation sent: those before the model's
    last reply (the last run of model output with the app's own items after it); all of them when the model
    has not answered yet (a first call)."""
    i = n = len(items)
    while i > 0 and not adapter.is_model_output(items[i - 1]):
        i -= 1
    if i == 0:
        return n
    while i > 0 and adapter.is_model_output(items[i - 1]):
        i -= 1
    return i or n


def sync_for(settings: Settings) -> CallSync:
    """What a call's conversation shares, picked once per call from the settings: the store-backed sync when a
    store is named and opens, else the in-process one (saying ``fallback`` when the named store did not open)."""
    if settings.state_store is None:
        return IN_PROCESS
    store = shared.store_for(settings)
    if store is None:
        return STORE_UNAVAILABLE
    # Every wait of this call for the store and for other workers ends by then (see left()).
    return StoreSync(store, time.monotonic() + settings.state_store_max_wait_seconds)


#: Each state's shared record (see the module's docstring), made by the first call with a store.
_records: weakref.WeakKeyDictionary[ConversationState, shared.SharedRecord] = weakref.WeakKeyDictionary()
_records_lock = new_lock(sys.modules[__name__], "_records_lock")
# Kept through reset and fork, as the fields were when they lived on the state: a record goes with its state
# (weakly keyed), a reset drops the states, and a fork's child keeps the parent's states and what they shared.
process_state.register(__name__, ("_records",), on_reset=None, in_forked_child=None)


def record_of(state: ConversationState) -> shared.SharedRecord:
    """The shared record of ``state``, made when missing."""
    record = _records.get(state)
    if record is None:
        with _records_lock:
            record = _records.setdefault(state, shared.SharedRecord())
    return record


def read_address(
    adapter: ChatFormat,
    resolution: Resolution,
    items: Sequence[Any],
    link: ChainLink | None,
    scope: Callable[[], str],
) -> tuple[str, tuple[str, ...]]:
    """The name of the stored state a call reads, and the hash chain of ``items`` computed for it.

    An explicit id has one state ("": its name is the id's). A call that continues a stored response reads
    its chain's state at that response's turn. Any other call reads the state of its own history up to the
    previous call (see :func:`_read_point`) under its scope (system prompt, tools, model): a content
    address (:func:`shared.address_of`), so a worker never reads the state of a conversation that merely
    opens alike, that parted from it since, or that the model reads under another system prompt or tools.
    """
    state = resolution.state
    if state.explicit:
        return "", ()
    if link is not None:
        return f"chain:{link.chain}:{link.turn}", ()
    if not items:
        return "empty", ()
    k = _read_point(adapter, items)
    snapshot = resolution.snapshot
    written = record_of(state).written
    if (
        written is not None
        and written[0] is snapshot
        and snapshot is not None
        and k == len(snapshot.items)
        and resolution.unchanged >= k - 1  # only a moved marker, for a derived key: the same name
        and written[1] == scope()
    ):
        return written[2], ()  # this worker wrote the state of the previous call: its name is known
    known = snapshot.chain[: resolution.unchanged] if snapshot is not None else ()
    chain = shared.extend(known, items, k - 1)
    return shared.address_of(state.key, scope(), chain, items, k), chain


#: A call's store deadline once a wait of it ran out: no time is left, and it goes on as without a store.
_WAITED_OUT = float("-inf")


class StoreSync(CallSync):
    """The conversation's state in a store the fleet shares (see the module's docstring): one per call."""

    def __init__(self, store: StateStore, deadline: float) -> None:
        self.store = store
        #: When this call stops waiting for the store and for other workers (``time.monotonic()``; the plan's
        #: first store operation plus ``state_store_max_wait_seconds``), or :data:`_WAITED_OUT`.
        self.deadline = deadline
        #: The name of the stored state this call read (its conversation's history up to the previous call;
        #: "" for an explicit id's one state), which a summary of this call updates.
        self.address = ""

    # --- the conversation's state ---------------------------------------------------------------------

    def link_of(self, response_id: str) -> Generator[StoreRequest, Any, ChainLink | None]:
        """The conversation of a stored response another worker made (one round trip), if the store has it."""
        store, name = self.store, _LINK_PREFIX + response_id
        loaded = yield StoreRequest(partial(store.get, name, _LINK), partial(store.aget, name, _LINK))
        return shared.linked(loaded, response_id)

    def put_link(self, link: ChainLink, explicit: bool) -> None:
        """Tell the fleet the conversation of a stored response, off the caller's path (an explicit id is
        never written there: the app names it in every worker)."""
        if explicit:
            link = link._replace(key="")
        self.store.put_later(_LINK_PREFIX + link.response, shared.link_value(link), _LINK)

    def take(
        self,
        request: CallRequest,
        resolution: Resolution,
        items: Sequence[Any],
        adapter: ChatFormat,
        link: ChainLink | None,
        model: str,
    ) -> Generator[StoreRequest, Any, tuple[Resolution, str]]:
        """Read the shared value of the conversation's history (one round trip) and bring the local state up
        to date; remembers the name of what was read (:attr:`address`)."""
        provider = request.provider
        scope = partial(scope_for, adapter, request.body, model)  # computed only when a name needs it
        address, chain = read_address(adapter, resolution, items, link, scope)
        self.address = address
        state = resolution.state
        record = record_of(state)
        loaded, memo = yield from self._read(state, record, items, scope, None)
        taken = shared.take(resolution, record, loaded, items, memo, chain, linked=link is not None)
        if taken.window is not None:
            w_provider, model, tokens = taken.window
            known = windows.learned_window(w_provider, model)
            if w_provider == provider and (known is None or tokens < known):
                windows.learn_window(w_provider, model, tokens)
        if taken.cache is not None:
            state, snapshot = taken.resolution.state, taken.resolution.snapshot
            if state.detector is None:
                state.detector = CacheBreakDetector()
            intact = snapshot is not None and taken.resolution.unchanged >= len(snapshot.items) - 1
            state.detector.adopt_shared_baseline(taken.cache, intact=intact)
        return taken.resolution, taken.source

    def _read(
        self,
        state: ConversationState,
        record: shared.SharedRecord,
        items: Sequence[Any],
        scope: Callable[[], str],
        loaded: Loaded | None,
    ) -> Generator[StoreRequest, Any, tuple[Loaded, Loaded | None]]:
        """The state of the history this call read (read now unless given) and, only when it names a summary
        of this very history (by content address) that ``state`` does not hold, that summary."""
        store, key, part = self.store, state.key, shared.state_part(self.address)
        if loaded is None:
            loaded = yield StoreRequest(partial(store.get, key, part), partial(store.aget, key, part))
        wanted = shared.memo_wanted(state, record, loaded, items, scope)
        if not wanted:
            return loaded, None
        memo = yield StoreRequest(partial(store.get, key, wanted), partial(store.aget, key, wanted))
        return loaded, memo

    def chain_for(self, resolution: Resolution, items: Sequence[Any]) -> tuple[str, ...]:
        return shared.chain_for(resolution, items)

    def _written_address(self, call: CallState, snapshot: Snapshot, made: ChainLink | None, bare: str) -> str:
        """The name of the stored state a call writes after its response (what the next call reads: see
        :func:`read_address`); ``bare``: the hash of the last item without markers, when known."""
        state = call.state
        if state.explicit:
            return ""
        if made is not None:
            return f"chain:{made.chain}:{made.turn}"
        items = snapshot.items
        if not items or len(snapshot.chain) < len(items) - 1:
            return self.address or "empty"
        scope = call.scope
        address = shared.address_of(state.key, scope, snapshot.chain, items, len(items), bare)
        record_of(state).written = (snapshot, scope, address)
        return address

    def _value(self, call: CallState, snapshot: Snapshot) -> tuple[dict[str, Any], list[MemoEntry]]:
        provider = call.request.provider
        window = windows.learned_window(provider, call.model)
        detector = call.state.detector
        cache = detector.shared_baseline() if detector is not None else None
        return shared.value_of(
            call.state,
            record_of(call.state),
            snapshot,
            window=(provider, call.model, window) if window is not None else None,
            cache=cache,
            failures=self.store.failures,
        )

    def commit(self, call: CallState, snapshot: Snapshot, made: ChainLink | None) -> None:
        """After the response: the new shared value of the conversation's history (and its summaries the store
        may not hold yet, each under its own content address), written off the caller's path, in that order.
        ``made``: the link of the response the provider stored for this call, if any."""
        store, key = self.store, call.state.key
        value, memo = self._value(call, snapshot)
        for entry in memo:
            store.put_later(key, shared.entry_value(entry), shared.memo_part(entry.address))
        anchor = value["anchor"]
        bare = anchor["bare"] if anchor else ""
        part = shared.state_part(self._written_address(call, snapshot, made, bare))
        # The state this call read is superseded (the conversation's next call reads this one): kept a little
        # longer for calls still under way on that history, not a day for every call of every conversation.
        read = self.address
        retire = (shared.state_part(read),) if read and not call.state.explicit else ()
        store.put_later(key, value, part, renew=shared.renewed(value), retire=retire)
        if made is not None and call.continued_link is None and not call.state.explicit:
            # A stored response of a call that sent its whole history: the next call may continue it by id
            # (it reads the chain's name, above) or resend the history with the reply (it reads the history's
            # name): both find the state.
            history = shared.state_part(self._written_address(call, snapshot, None, bare))
            if history != part:
                store.put_later(key, value, history, renew=shared.renewed(value))

    # --- one summary per threshold crossing ---------------------------------------------------------------

    def once(self, span: Span, call: CallState, budget: Budget, summary: Steps) -> Steps:
        """Run ``summary`` (the summary step of the automatic cascade) as the one summary of this threshold
        crossing across the fleet.

        The worker that takes the conversation's lock summarizes, writes the result before letting go, and the
        others never make a second, different summary of the same prefix: a worker that finds the lock taken
        sends its request unchanged when it still fits the window (the summary will be in the memo for the
        next call), else waits (at most ``state_store_max_wait_seconds`` in all, see :meth:`_left`) for the
        holder's summary and sends that. Only when none comes in time (the holder is slow, gone, or unknown),
        and the request cannot be sent as it is, does it summarize itself, as without a store.
        """
        store = self.store
        if self._waited_out():
            # This call waited for another worker's summary that did not come in time: it summarizes as
            # without a store, and makes no more round trips before its request.
            yield from summary
            return
        key, lock = call.state.key, shared.summary_lock(self.address)
        lease_for = lease_seconds(call.request.settings)
        lease = yield StoreRequest(
            partial(store.acquire, key, lock, lease_for),
            partial(store.aacquire, key, lock, lease_for),
        )
        if lease is None:
            if call.estimated_tokens < budget.blocking_limit:
                return
            if (yield from self._theirs(call, self._left(call))):
                return
            yield from summary
            return
        release = self._release(lease)
        # Another worker may have summarized this crossing between this call's read and the lock: take its
        # summary instead of making a second one of the same prefix (the lock is held, so it is final).
        taken = lease.exclusive and (yield from self._apply_stored(call, None))
        if taken and call.estimated_tokens < budget.auto_threshold:
            yield release
            return
        try:
            yield from summary
        except Exception:
            yield release
            raise
        if lease.exclusive and call.entry is not None:
            # Before the lock goes: the next worker must find this summary, not make its own.
            value, memo = self._value(call, call.resolution.snapshot or Snapshot((), None))
            for entry in memo:
                stored, part = shared.entry_value(entry), shared.memo_part(entry.address)
                yield StoreRequest(partial(store.put, key, stored, part), partial(store.aput, key, stored, part))
            part, renew = shared.state_part(self.address), shared.renewed(value)
            yield StoreRequest(
                partial(store.put, key, value, part, renew=renew),
                partial(store.aput, key, value, part, renew=renew),
            )
        yield release

    def _left(self, call: CallState) -> float:
        """How long this call may still wait for a lock holder's summary: until its store deadline (the plan's
        first store operation plus ``state_store_max_wait_seconds``), less one store timeout (at most half the
        bound) for the poll that is in flight then, so that the call's waits together stay within the
        setting."""
        reserve = min(getattr(self.store, "timeout", 0.0), call.request.settings.state_store_max_wait_seconds / 2)
        return max(0.0, self.deadline - time.monotonic() - reserve)

    def _waited_out(self) -> bool:
        """Whether a wait of this call ran out without the summary it waited for (see :meth:`_left`)."""
        return self.deadline == _WAITED_OUT

    def _ran_out(self, call: CallState) -> bool:
        """After a wait that brought nothing: True (and remembered) when the call's time for waits is spent."""
        if self._left(call) > 0.0:
            return False  # it ended early: the lock was let go
        self.deadline = _WAITED_OUT
        return True

    def _theirs(self, call: CallState, timeout: float) -> Generator[StoreRequest, Any, bool]:
        """Wait (at most ``timeout``) for the lock holder's summary and send it; True when it applies to this
        call's items. No time left: False at once (the caller summarizes as without a store)."""
        if timeout <= 0.0:
            self.deadline = _WAITED_OUT
            return False
        store, key = self.store, call.state.key
        seen = record_of(call.state).seq
        part, lock = shared.state_part(self.address), shared.summary_lock(self.address)

        def newer(value: Mapping[str, Any]) -> bool:
            return isinstance(value.get("seq"), int) and value["seq"] > seen

        loaded = yield StoreRequest(
            partial(store.wait_for, key, newer, timeout, part, lock),
            partial(store.await_for, key, newer, timeout, part, lock),
        )
        if loaded.value is None and self._ran_out(call):
            return False  # none came in time: no more round trips
        return (yield from self._apply_stored(call, loaded if loaded.value is not None else None))

    def _apply_stored(self, call: CallState, loaded: Loaded | None) -> Generator[StoreRequest, Any, bool]:
        """Take what the store holds for the conversation (``loaded``: its state part, read now when None);
        when it has a summary of a longer prefix of this call's items than the one sent, send that summary
        (True)."""
        state, record = call.state, record_of(call.state)
        loaded, memo = yield from self._read(state, record, call.items, lambda: call.scope, loaded)
        shared.take(call.resolution, record, loaded, call.items, memo)
        entry = state.memo.find(call.items, scope=call.scope)
        if entry is None or (call.entry is not None and entry.prefix_len <= call.entry.prefix_len):
            return False
        adapter = call.adapter
        call.send(entry)  # in the memo already (taken from the store above)
        call.compacted(
            int((estimate_fixed(adapter, call.body) + estimate_items(adapter, call.sent_items)) * state.estimate_factor)
        )
        economics.compacted(call)
        return True

    # --- background preparation: one worker prepares, every worker applies -----------------------------

    def claim(self, call: CallState) -> Generator[StoreRequest, Any, Claim]:
        """Past the background start point: take the conversation's prepare lock, so that one worker of the
        fleet prepares its summary. Prepares when it got the lease; when the lock was free but a worker
        already published a summary for a longer prefix of this call's items, that one (``ready``: then none
        is prepared, the lock was let go again); and a published summary that does not cover this call
        (``stale``, for the caller to drop: the one it prepares replaces it)."""
        store = self.store
        key, lease_for = call.state.key, lease_seconds(call.request.settings)
        named = self._prepared_address(call)
        lock = shared.prepare_lock(named)
        lease = yield StoreRequest(
            partial(store.acquire, key, lock, lease_for), partial(store.aacquire, key, lock, lease_for)
        )
        if lease is not None and not lease.exclusive:
            return Claim(True, lease)
        # The fleet finds this conversation's preparations under this name, whichever worker holds the lock:
        # every worker's next write of the state carries it on.
        record_of(call.state).prepared = named
        if lease is None:
            return Claim(False, busy_for=lease_for)
        ready, other = yield from self.read_prepared(call)
        if ready is not None:
            yield self._release(lease)
            return Claim(False, ready=ready)
        return Claim(True, lease, stale=other)

    def _prepared_address(self, call: CallState) -> str:
        """The name of the conversation's background preparations: the one its state carries, else the
        history this call read (an explicit id's: "", the id's own)."""
        return record_of(call.state).prepared or self.address

    def _release(self, lease: Lease) -> StoreRequest:
        """The request that lets a lock go."""
        store = self.store
        return StoreRequest(partial(store.release, lease), partial(store.arelease, lease))

    def release(self, lease: Lease) -> Generator[StoreRequest, Any, None]:
        yield self._release(lease)

    def give_back(self, lease: Lease) -> None:
        """A synchronous store round trip (a short timeout, never raises)."""
        self.store.release(lease)

    def publish(
        self, call: CallState, entry: MemoEntry, link: tuple[int, int, int] | None
    ) -> Generator[StoreRequest, Any, bool]:
        """Publish a summary prepared in the background for every worker (synchronously: the lock is let go
        after it, and a worker that then finds the lock free must find the summary). True when stored."""
        store, value, key = self.store, shared.prepared_value(entry, link), call.state.key
        part = shared.prepared_part(self._prepared_address(call))
        stored = yield StoreRequest(partial(store.put, key, value, part), partial(store.aput, key, value, part))
        return bool(stored)

    def read_prepared(
        self, call: CallState
    ) -> Generator[StoreRequest, Any, tuple[shared.Published | None, shared.Published | None]]:
        """The summary another worker published (one round trip): (it, None) when it covers this call, (None,
        it) when it does not (stale: the history was edited or rewound below its cut, or a compaction as long
        or longer is already sent), (None, None) when there is none."""
        store, key, part = self.store, call.state.key, shared.prepared_part(self._prepared_address(call))
        loaded = yield StoreRequest(partial(store.get, key, part), partial(store.aget, key, part))
        got = shared.published(loaded)
        if got is None:
            return None, None
        return (got, None) if _covers(call, got) else (None, got)

    def remove_prepared(self, call: CallState, got: shared.Published) -> Generator[StoreRequest, Any, bool]:
        """Remove the published summary ``got`` from the store, only if the store still holds that very one
        (another worker may have published a newer one, or removed it); True when this call removed it, so
        that one worker of the fleet reports it."""
        if not got.ident:
            return False
        store, key, field = self.store, call.state.key, shared.PREPARED_ID
        part = shared.prepared_part(self._prepared_address(call))
        removed = yield StoreRequest(
            partial(store.remove_if, key, part, field, got.ident),
            partial(store.aremove_if, key, part, field, got.ident),
        )
        return bool(removed)

    def preparing(self, call: CallState) -> Generator[StoreRequest, Any, bool]:
        """Whether another worker holds the prepare lock (its summary is under way); False without a round
        trip when a wait of this call ran out (see :meth:`_waited_out`: then it goes on as without a store)."""
        if self._waited_out():
            return False
        store, key, lock = self.store, call.state.key, shared.prepare_lock(self._prepared_address(call))
        lease = yield StoreRequest(partial(store.acquire, key, lock, 1.0), partial(store.aacquire, key, lock, 1.0))
        if lease is None:
            return True
        yield self._release(lease)
        return False

    def wait_prepared(self, call: CallState, timeout: float) -> Generator[StoreRequest, Any, shared.Published | None]:
        """Wait (at most ``timeout`` and what is left of the call's store wait, see :meth:`_left`; early when
        the prepare lock is let go) for a published summary that covers this call."""
        store, key, named = self.store, call.state.key, self._prepared_address(call)
        part, lock = shared.prepared_part(named), shared.prepare_lock(named)
        timeout = min(timeout, self._left(call))
        if timeout <= 0.0:
            self.deadline = _WAITED_OUT
            return None

        def covers(value: Mapping[str, Any]) -> bool:
            return _covering(call, Loaded(dict(value), semconv.STATE_SOURCE_STORE)) is not None

        loaded = yield StoreRequest(
            partial(store.wait_for, key, covers, timeout, part, lock),
            partial(store.await_for, key, covers, timeout, part, lock),
        )
        got = _covering(call, loaded)
        if got is None:
            self._ran_out(call)
        return got


def _covers(call: CallState, got: shared.Published) -> bool:
    """Whether the published summary ``got`` applies to this call (see :meth:`CallState.covers`: verified by
    content hash, as the memo verifies)."""
    return call.covers(got.entry)


def _covering(call: CallState, loaded: Loaded) -> shared.Published | None:
    """The published summary of ``loaded`` when it covers this call (see :func:`_covers`), else None."""
    got = shared.published(loaded)
    return got if got is not None and _covers(call, got) else None
