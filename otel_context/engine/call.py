"""One chat call as the engine sees it: the app's items, what is sent instead, and the helpers every path
of the engine (the plan, the automatic cascade, the reactive retry) uses to run and adopt a compaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from otel_context import semconv, telemetry
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.contract import CallPlan, CallRequest
from otel_context.conversation import ChainLink, Resolution
from otel_context.conversation.memo import MemoEntry, items_hash, scope_of
from otel_context.formats.base import ChatFormat
from otel_context.settings import Settings

if TYPE_CHECKING:
    from otel_context.conversation.state_store import StateStore

Item = Mapping[str, Any]


def rewrites(settings: Settings) -> bool:
    """Whether compaction may change requests at all (mode auto and no global kill switch)."""
    return settings.compaction == "auto" and not settings.disable_compact


def skip(span: Span | None, reason: str) -> None:
    """A history we leave alone: the reason on the span, logged once per kind of reason."""
    if span is not None:
        span.set_attribute(semconv.CONTEXT_COMPACTION_SKIPPED_REASON, reason)
    telemetry.log_once("engine.skip:" + reason.split(":", 1)[0], "otel_context: history sent unchanged: %s", reason)


class EngineCall(CallPlan):
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
    #: The shared state store, when one is configured (None: this process's state only).
    store: StateStore | None = None
    #: With a store: when this call stops waiting for it and for other workers (``time.monotonic()``; the
    #: plan's first store operation plus ``state_store_max_wait_seconds``).
    store_deadline = 0.0
    #: When the request was ready to go (the cache check measures the gap since the previous call from here).
    started = 0.0
    #: The link of the stored response this call continues (Responses ``previous_response_id``), if known.
    continued_link: ChainLink | None = None
    #: With a shared store: the name of the stored state this call read (its conversation's history up to
    #: the previous call; "" for an explicit id's one state), which a summary of this call updates.
    shared_address = ""
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
            body = self.request.body
            scope = self._scope = scope_of(self.adapter.system_text(body), body.get("tools"), self.model)
        return scope

    def job(self, span: Span | None, trigger: str, estimated: int) -> cascade.CompactionJob:
        """A compaction of what this call would send now."""
        return cascade.CompactionJob(
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
            min_index=len(self.entry.replacement) if self.entry is not None else 0,
            parent=span,
            history=self.items,
            history_shift=self.entry.prefix_len - len(self.entry.replacement) if self.entry is not None else 0,
            anchor=(self.entry.summary or None) if self.entry is not None else None,
            anchor_end=min(self.entry.summary_head, len(self.entry.replacement)) if self.entry is not None else 0,
        )

    def adopt(self, out: cascade.CompactionOutcome) -> bool:
        """Send a successful compaction's result and remember it in the memo; True when adopted."""
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
        min_index = len(self.entry.replacement) if self.entry is not None else 0
        if cut >= min_index and list(out.items) == [*head, *self.sent_items[cut:]]:
            original_cut = self.entry.to_original_index(cut) if self.entry is not None else cut
            prefix = items_hash(self.items[:original_cut])
            entry = MemoEntry(original_cut, prefix, tuple(head), summary, summary_head=summary_head, scope=self.scope)
            self.state.memo.remember(entry)
            self.entry = entry
        self.sent_items = out.items
        self.body = self.adapter.with_items(self.request.body, out.items)
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
