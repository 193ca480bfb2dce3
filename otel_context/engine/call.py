"""One chat call as the engine sees it: the app's items, what is sent instead, the helpers every path
of the engine (the plan, the automatic cascade, the reactive retry) uses to run and adopt a compaction, and
what its conversation shares with other workers (:class:`ConversationSync`, and for background preparation
:class:`PreparationSync`; a call carries both as one :class:`CallSync`).

Why the sync is here, beside the call: every one of its operations is asked by a call and reads the call
(its state, items, scope, settings), and the call carries the sync its plan picked; one module keeps the
two without an import cycle. The store-backed implementation is :class:`otel_context.engine.fleet.StoreSync`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.compaction.job import CompactionJob
from otel_context.contract import CallPlan, CallRequest
from otel_context.conversation import ChainLink, Resolution, Snapshot
from otel_context.conversation.memo import MemoEntry, items_hash, scope_of
from otel_context.conversation.shared import Published
from otel_context.conversation.state_store import Lease
from otel_context.flow import StoreRequest
from otel_context.formats.base import ChatFormat
from otel_context.settings import Settings

Item = Mapping[str, Any]
Steps = Generator[Any, Any, Any]


def rewrites(settings: Settings) -> bool:
    """Whether compaction may change requests at all (mode auto and no global kill switch)."""
    return settings.compaction == "auto" and not settings.disable_compact


def scope_for(adapter: ChatFormat, body: Mapping[str, Any], model: str) -> str:
    """What a summary of a call is made for besides its items: its system prompt, tools and model (see
    :func:`~otel_context.conversation.memo.scope_of`)."""
    return scope_of(adapter.system_text(body), body.get("tools"), model)


def skip(span: Span | None, reason: str) -> None:
    """A history we leave alone: the reason on the span, logged once per kind of reason."""
    if span is not None:
        span.set_attribute(semconv.CONTEXT_COMPACTION_SKIPPED_REASON, reason)
    telemetry.log_once("engine.skip:" + reason.split(":", 1)[0], "otel_context: history sent unchanged: %s", reason)


class Claim(NamedTuple):
    """What :meth:`ConversationSync.claim` found past the background start point."""

    #: Whether this worker prepares the conversation's summary (no other worker does, and none covers it).
    prepare: bool
    #: The fleet's prepare lock this worker now holds (None: none to give back).
    lease: Lease | None = None
    #: When not preparing: a summary another worker published that covers a longer prefix of this call.
    ready: Published | None = None
    #: A published summary that does not cover this call (the caller drops it: the one it prepares replaces it).
    stale: Published | None = None
    #: When another worker prepares: how long it may hold the lock at most (the calls until then skip the store).
    busy_for: float = 0.0


class ConversationSync(ABC):
    """What one call's conversation shares with other workers, asked by every call: its state, read before the
    request and written after the response, and the one summary of a threshold crossing. With
    :class:`PreparationSync` the one place that knows whether there are other workers: the engine asks them and
    never tests for a store.
    """

    @abstractmethod
    def link_of(self, response_id: str) -> Generator[StoreRequest, Any, ChainLink | None]:
        """The conversation of a stored response this process did not make, if another worker told."""

    @abstractmethod
    def take(
        self,
        request: CallRequest,
        resolution: Resolution,
        items: Sequence[Item],
        adapter: ChatFormat,
        link: ChainLink | None,
        model: str,
    ) -> Generator[StoreRequest, Any, tuple[Resolution, str]]:
        """Bring the call's state up to date with what other workers did since, and say where it came from."""

    @abstractmethod
    def chain_for(self, resolution: Resolution, items: Sequence[Item]) -> tuple[str, ...]:
        """The content hash chain the call's snapshot keeps, if the next commit needs one."""

    @abstractmethod
    def commit(self, call: CallState, snapshot: Snapshot, made: ChainLink | None) -> None:
        """After the response: share what the call left (``made``: the link of a response it had stored)."""

    @abstractmethod
    def put_link(self, link: ChainLink, explicit: bool) -> None:
        """Tell other workers the conversation of a stored response (``explicit``: the app names it by id)."""

    @abstractmethod
    def once(self, span: Span, call: CallState, budget: Budget, summary: Steps) -> Steps:
        """Run ``summary`` (the automatic cascade's summary step) as the one summary of this threshold crossing."""


class PreparationSync(ABC):
    """What a conversation's background preparation asks of other workers, and only it: one worker prepares,
    every worker applies (see :mod:`otel_context.engine.background`)."""

    @abstractmethod
    def claim(self, call: CallState) -> Generator[StoreRequest, Any, Claim]:
        """Past the background start point: whether this worker prepares the conversation's summary."""

    @abstractmethod
    def publish(
        self, call: CallState, entry: MemoEntry, link: tuple[int, int, int] | None
    ) -> Generator[StoreRequest, Any, bool]:
        """Give a summary prepared in the background to every worker; True when they can read it."""

    @abstractmethod
    def read_prepared(self, call: CallState) -> Generator[StoreRequest, Any, tuple[Published | None, Published | None]]:
        """A summary another worker published: (it, None) when it covers this call, (None, it) when it is
        stale, (None, None) when there is none."""

    @abstractmethod
    def remove_prepared(self, call: CallState, got: Published) -> Generator[StoreRequest, Any, bool]:
        """Remove the stale published summary ``got``; True when this call removed it (it reports it)."""

    @abstractmethod
    def preparing(self, call: CallState) -> Generator[StoreRequest, Any, bool]:
        """Whether another worker's summary of this conversation is under way."""

    @abstractmethod
    def wait_prepared(self, call: CallState, timeout: float) -> Generator[StoreRequest, Any, Published | None]:
        """Wait (bounded) for another worker's summary that covers this call."""

    @abstractmethod
    def release(self, lease: Lease) -> Generator[StoreRequest, Any, None]:
        """Let the prepare lock ``lease`` go, as a step of a call's flow."""

    @abstractmethod
    def give_back(self, lease: Lease) -> None:
        """Let the prepare lock ``lease`` go now, off any flow (reset, the interpreter's exit); never raises."""


class CallSync(ConversationSync, PreparationSync, ABC):
    """Both: what a call carries (:attr:`CallState.sync`), picked once per call by its plan.

    Two implementations: :class:`LocalSync` (this process alone, no shared store: nothing to read or publish,
    the summary step runs as it is, a preparation is this process's own) and
    :class:`otel_context.engine.fleet.StoreSync` (a :class:`~otel_context.conversation.state_store.StateStore`
    many workers share: the same questions, answered with round trips yielded as
    :class:`~otel_context.flow.StoreRequest` steps, so the engine stays sans I/O).
    """


class LocalSync(CallSync):
    """No shared store: the conversation is this process's alone. Nothing is read or written, the summary
    step runs as it is, and this process prepares every summary itself: no round trip, no lock."""

    def __init__(self, source: str) -> None:
        #: What the chat span's ``state.source`` says (a store-backed read says where its value came from).
        self.source = source

    def link_of(self, response_id: str) -> Generator[StoreRequest, Any, ChainLink | None]:
        yield from ()
        return None

    def take(
        self,
        request: CallRequest,
        resolution: Resolution,
        items: Sequence[Item],
        adapter: ChatFormat,
        link: ChainLink | None,
        model: str,
    ) -> Generator[StoreRequest, Any, tuple[Resolution, str]]:
        yield from ()
        return resolution, self.source

    def chain_for(self, resolution: Resolution, items: Sequence[Item]) -> tuple[str, ...]:
        return ()

    def commit(self, call: CallState, snapshot: Snapshot, made: ChainLink | None) -> None:
        return None

    def put_link(self, link: ChainLink, explicit: bool) -> None:
        return None

    def once(self, span: Span, call: CallState, budget: Budget, summary: Steps) -> Steps:
        return (yield from summary)

    def claim(self, call: CallState) -> Generator[StoreRequest, Any, Claim]:
        yield from ()
        return _PREPARE_HERE

    def publish(
        self, call: CallState, entry: MemoEntry, link: tuple[int, int, int] | None
    ) -> Generator[StoreRequest, Any, bool]:
        yield from ()
        return False  # no other worker: the summary stays this process's own

    def read_prepared(self, call: CallState) -> Generator[StoreRequest, Any, tuple[Published | None, Published | None]]:
        yield from ()
        return None, None

    def remove_prepared(self, call: CallState, got: Published) -> Generator[StoreRequest, Any, bool]:
        yield from ()
        return False

    def preparing(self, call: CallState) -> Generator[StoreRequest, Any, bool]:
        yield from ()
        return False

    def wait_prepared(self, call: CallState, timeout: float) -> Generator[StoreRequest, Any, Published | None]:
        yield from ()
        return None

    def release(self, lease: Lease) -> Generator[StoreRequest, Any, None]:
        yield from ()

    def give_back(self, lease: Lease) -> None:
        return None


#: The in-process claim: this process prepares, and holds no lock.
_PREPARE_HERE = Claim(prepare=True)
#: No store is configured: the state is this process's (``state.source`` says ``memory``).
IN_PROCESS = LocalSync(semconv.STATE_SOURCE_MEMORY)
#: A store is configured but could not be opened: the state stays in this process (``state.source`` says so).
STORE_UNAVAILABLE = LocalSync(semconv.STATE_SOURCE_FALLBACK)


class CallState(CallPlan):
    """The state of one call the engine planned, and how a compaction's result becomes what is sent."""

    # What most calls keep, as class-level defaults: an instance sets only what its call changes (one is
    # made per chat call, and each attribute written costs).
    #: The memo entry whose head the sent items start with (None: the app's items as they are).
    entry: MemoEntry | None = None
    estimated_tokens = 0
    #: Estimated tokens of the app's items (what this call's snapshot keeps alive).
    history_tokens = 0
    fingerprint: Any = None
    #: No fingerprint was taken before sending (nothing to break): taken after the response if needed.
    fingerprint_deferred = False
    #: Set once a reactive compaction was attempted: a call is compacted and retried at most once.
    reactive_done = False
    #: What this call's conversation shares and prepares with other workers (the plan picks it once, from the
    #: settings: :func:`otel_context.engine.fleet.sync_for`).
    sync: CallSync = IN_PROCESS
    #: When the request was ready to go (the cache check measures the gap since the previous call from here).
    started = 0.0
    #: The link of the stored response this call continues (Responses ``previous_response_id``), if known.
    continued_link: ChainLink | None = None
    #: The threshold at which this call asked the provider to compact the history it holds (None: it did not
    #: ask; see :mod:`otel_context.engine.provider_compaction`).
    engaged: int | None = None
    #: The provider holds this call's history and something compacts it as it nears the window (the app's own
    #: settings, or the provider's compaction the library engages): the context state is not ``error``.
    protected = False
    #: The previous response this call asked the provider to compare its prompt with (``cache_diagnostics``).
    compared_with: str | None = None
    #: The body before it asked for the diagnosis (a reactive compaction summarizes from it, and asks again).
    unasked: Mapping[str, Any] | None = None
    _scope: str | None = None

    def __init__(
        self,
        request: CallRequest,
        adapter: ChatFormat,
        resolution: Resolution,
        items: Sequence[Item],
        model: str,
        budget: Budget | None,
    ) -> None:
        super().__init__(request.body)
        self.request = request
        self.adapter = adapter
        self.resolution = resolution
        self.state = resolution.state
        self.items = items  #: the app's items (never mutated)
        self.sent_items: Sequence[Item] = items
        self.model = model
        self.budget = budget

    @property
    def scope(self) -> str:
        """What a summary of this call is made for besides its items (system prompt, tools, model; see
        :func:`~otel_context.conversation.memo.scope_of`); computed when first needed."""
        scope = self._scope
        if scope is None:
            scope = self._scope = scope_for(self.adapter, self.request.body, self.model)
        return scope

    def job(self, span: Span | None, trigger: str, estimated: int) -> CompactionJob:
        """A compaction of what this call would send now."""
        return CompactionJob(
            adapter=self.adapter,
            body=self.body,
            items=self.sent_items,
            settings=self.request.settings,
            provider=self.request.provider,
            model=self.model,
            trigger=trigger,
            budget=self.budget,
            estimated_tokens=estimated,
            conversation_id=self.state.key,
            state=self.state,
            parent=span,
            history=self.items,
            base=self.entry,
        )

    def send(self, entry: MemoEntry | None, sent: Sequence[Item] | None = None, *, remember: bool = False) -> None:
        """Send ``entry`` on this call: the app's items with its head in place of the prefix it replaced, or
        ``sent`` when the caller has them already (a compaction's result). ``remember``: a new entry, kept in
        the conversation's memo so that the following calls send it byte-identically.

        The one place a call's sent items change, whatever the entry's origin: the memo's reuse (the plan), a
        compaction this call adopts (:meth:`adopt`), a summary prepared in the background by this worker or
        published by another, a summary another worker stored at the threshold. The estimate is the caller's
        (:meth:`compacted`): each path knows it differently (the compaction's size, the saving, a recount)."""
        if remember and entry is not None:
            self.state.memo.remember(entry)
        self.entry = entry
        if sent is None:
            sent = entry.apply(self.items) if entry is not None else self.items
        self.sent_items = sent
        self.body = self.adapter.with_items(self.request.body, sent)

    def compacted(self, estimated: int) -> None:
        """The call sends a compacted history now, whose estimate is ``estimated``: on the span's attributes."""
        self.estimated_tokens = estimated
        self.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = estimated
        self.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] = True

    def covers(self, entry: MemoEntry, started: Sequence[Item] | None = None) -> bool:
        """Whether a summary prepared for this conversation (``entry``: this worker's, or one another worker
        published) applies to this call: made for its scope, of a longer prefix than the one it sends, and that
        prefix is this call's. Compared by value with ``started``, the items the summary was made from, when
        this worker kept them (as strong as the memo's hash, and no hashing); by content hash otherwise (all
        another worker's summary brings)."""
        current = self.entry
        if current is not None and current.prefix_len >= entry.prefix_len:
            return False
        return self._prefix_is(entry, started)

    def covers_prepared(self, entry: MemoEntry, started: Sequence[Item], base: MemoEntry | None) -> bool:
        """:meth:`covers`, for a summary this worker prepared from ``started`` over ``base`` (the entry those
        items were sent with): it applies across a microcompaction made since, which changed only the content
        of items and may reach past its cut (the call then sends it as :meth:`sending` says)."""
        current = self.entry
        if (
            current is not None
            and current.prefix_len >= entry.prefix_len
            and not current.changes_only_content_over(base)
        ):
            return False
        return self._prefix_is(entry, started)

    def _prefix_is(self, entry: MemoEntry, started: Sequence[Item] | None) -> bool:
        """Whether ``entry`` was made for this call's scope, and its prefix is this call's (see :meth:`covers`)."""
        n, items = entry.prefix_len, self.items
        if n > len(items) or entry.scope != self.scope:
            return False
        if started is None:
            return items_hash(items[:n]) == entry.prefix_hash
        head = items[:n] if type(items) is list else list(items[:n])
        kept = started[:n] if type(started) is list else list(started[:n])
        return head == kept

    def sending(self, entry: MemoEntry) -> MemoEntry:
        """The entry this call sends for a summary ``entry`` that :meth:`covers` it: the summary's own, or, when
        the call's entry reaches past the summary's cut (a microcompaction cleared tool results after it since
        the summary started), the summary over what that entry sends after the cut (:meth:`MemoEntry.beneath`):
        the results it cleared stay cleared."""
        current = self.entry
        if current is None or current.prefix_len < entry.prefix_len:
            return entry
        return entry.beneath(current)

    def adopt(self, out: cascade.CompactionOutcome) -> bool:
        """Send a successful compaction's result and remember it in the memo; True when adopted. A result the
        memo cannot replay (see :meth:`MemoEntry.of_compaction`) is still sent, on this call only."""
        if not out.changed or out.items is None:
            return False
        if out.strategy == semconv.STRATEGY_MICROCOMPACT:
            # Same length: the replacement is everything up to the last changed item.
            last_changed = max(
                i for i, (a, b) in enumerate(zip(out.items, self.sent_items, strict=False)) if a is not b and a != b
            )
            cut, head = last_changed + 1, tuple(out.items[: last_changed + 1])
            # The head of an earlier summary stays in front: it is still the next summary's anchor.
            summary, summary_head = (self.entry.summary, self.entry.summary_head) if self.entry else ("", 0)
        else:
            cut, head = out.cut, out.head
            summary, summary_head = out.summary, out.summary_head
        saved = out.input_tokens - out.output_tokens
        entry = MemoEntry.of_compaction(
            self.items, self.entry, self.sent_items, out.items, cut, head, summary, summary_head, self.scope, saved
        )
        if entry is not None:
            self.send(entry, out.items, remember=True)
        else:
            self.send(self.entry, out.items)  # the call's entry is left as it was
        return True

    def refingerprint(self) -> None:
        """Fingerprint what is sent now, for the cache-break check after the response."""
        self.fingerprint_deferred = False
        if self.state.detector is not None:
            try:
                self.fingerprint = self.state.detector.fingerprint(
                    self.adapter, self.body, headers=self.request.headers, items=self.sent_items
                )
            except Exception:
                telemetry.log_once("engine.fingerprint", "otel_context: cache fingerprint failed", exc_info=True)
                self.fingerprint = None
