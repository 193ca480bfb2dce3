"""One compaction to run, as one immutable value: every input of the cascade and of its summary.

A compaction's data flows one way, through frozen records, each made whole by the step that knows it and
never changed after (a step that refines one returns a new value, ``dataclasses.replace``):

1. :class:`CompactionJob` (here): what to compact and everything around it, made by the engine
   (:meth:`otel_context.engine.call.CallState.job`; a background summary refines it with
   ``dataclasses.replace``) or by the explicit API (``Compactor._prepare``, compaction/api.py);
2. ``summary._Plan`` (:func:`otel_context.compaction.summary.plan_summary`): what the summary decides before
   it asks (the cut, the anchor, the user's messages kept verbatim, the limits of its requests);
3. ``summary._Reply`` (:func:`~otel_context.compaction.summary.ask_summarizer`): what the summarizer answered;
4. :class:`~otel_context.compaction.summary.SummaryOutcome`
   (:func:`~otel_context.compaction.summary.finish_summary`): the new head and the summary's own figures;
5. :class:`~otel_context.compaction.cascade.CompactionOutcome` (:mod:`otel_context.compaction.cascade`): what
   the attempt did (the result sent, its outcome, its span), which carries the SummaryOutcome whole
   (``summarized``) rather than a copy of its figures.

**Where a new input of the summary goes** (the agent's work trail, say): one field of :class:`CompactionJob`,
with a default, so that a maker that does not know it is unchanged. It is given where its source is known
(``CallState.job`` for transparent mode, ``Compactor._prepare`` for the explicit API) and read where the summary
uses it: :func:`~otel_context.compaction.summary.plan_summary` before the summarizer is asked,
:func:`~otel_context.compaction.summary.finish_summary` after (the repair, the files restored, the summary
message). Nothing copies it on the way: the summary reads the job itself. What the previous compaction left is
no field of its own: the job carries its memo entry whole (:attr:`CompactionJob.base`: the summary, its head,
and whatever else a compaction's entry comes to carry), and the anchor, ``min_index`` and ``history_shift`` are
read from it. An input the summary derives from what the job holds already (the replaced span
``items[:cut]``, the previous summary message in the head) is no field at all: it is computed where it is used.
What the summary makes of it comes back as one field of ``SummaryOutcome``, which the ``CompactionOutcome``
carries as it is, and which ``cascade._close_span`` puts on the ``compact`` span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span, SpanContext

from otel_context import semconv
from otel_context.compaction.budget import Budget
from otel_context.conversation import ConversationState
from otel_context.conversation.memo import MemoEntry
from otel_context.formats.base import WireFormatAdapter
from otel_context.settings import Settings

Item = Mapping[str, Any]


@dataclass(frozen=True)
class CompactionJob:
    """One compaction to run: the history as it would be sent, and everything around it (see the module's
    docstring for where a new input goes)."""

    adapter: WireFormatAdapter
    body: Mapping[str, Any]  #: the body as it would be sent (after any memo replacement)
    items: Sequence[Item]  #: adapter.items(body)
    settings: Settings
    provider: str
    model: str
    trigger: str
    budget: Budget | None
    #: The engine's estimate of the call, anchored on the provider's count (the summary sizes its requests in
    #: provider tokens with it: :func:`~otel_context.compaction.summary.provider_scale`).
    estimated_tokens: int
    conversation_id: str | None = None
    state: ConversationState | None = None
    #: Parent for the compact span (the chat span); the current span when None; ``trace.INVALID_SPAN``: a
    #: trace of its own (a background summary, which outlives the call that started it).
    parent: Span | None = None
    #: Span links of the compact span (a background summary's: the chat span of the call that started it).
    links: tuple[SpanContext, ...] = ()
    #: Extra summarizer instructions (explicit API); merged with the pre_compact hook's.
    instructions: str | None = None
    #: ``inline`` (the caller waits) or ``background`` (prepared before the threshold: see :attr:`deferred`).
    mode: str = semconv.MODE_INLINE
    #: Where the summary cuts (None: the keep-recent policy chooses). A background summary aims its cut
    #: so that what is kept when it is applied at the threshold matches what an inline one would keep.
    cut: int | None = None
    #: At most this many tokens of files restored after the summary (None: what fits under the threshold).
    rehydrate_room: int | None = None
    #: The conversation as the app sent it (None: ``items``), where the user's messages kept verbatim come
    #: from; ``items[i]`` is ``history[i + history_shift]`` from ``min_index`` on.
    history: Sequence[Item] | None = None
    #: What the previous compaction left: the memo entry whose head ``items`` start with (None: none, or the
    #: explicit API, whose history carries its summary message itself: see ``summary.find_anchor``).
    base: MemoEntry | None = None
    #: Texts pinned for this compaction besides the conversation's own pins (the explicit API's ``pinned=``).
    pinned: tuple[str, ...] = ()
    #: The size the result should stay under (explicit API's ``target_tokens``); None: the threshold.
    target_tokens: int | None = None

    @property
    def min_index(self) -> int:
        """Items at the start that are the head of an earlier compaction (the cut must lie after them)."""
        return len(self.base.replacement) if self.base is not None else 0

    @property
    def history_shift(self) -> int:
        """``items[i]`` is ``history[i + history_shift]`` from :attr:`min_index` on."""
        return self.base.prefix_len - len(self.base.replacement) if self.base is not None else 0

    @property
    def anchor(self) -> str | None:
        """The previous summary, the anchor the summarizer updates (None: none known)."""
        return (self.base.summary or None) if self.base is not None else None

    @property
    def anchor_end(self) -> int:
        """Where the previous summary's head ends in ``items``: what follows is the span it adds to the anchor."""
        return min(self.base.summary_head, len(self.base.replacement)) if self.base is not None else 0

    @property
    def deferred(self) -> bool:
        """A background summary: a successful one leaves its ``compact`` span open (``open_span``) for its
        caller to settle when it is ready (``cascade.settle``, outcome ``success`` or ``discarded``); the cache
        announcement then belongs to the call that applies it (the moment it changes what is sent)."""
        return self.mode == semconv.MODE_BACKGROUND

    @property
    def window(self) -> int | None:
        """The context window (None: unknown, and the summarizer's requests are not sized)."""
        return self.budget.window if self.budget is not None else None

    @property
    def effective(self) -> int | None:
        """The effective window: the summary's room is ``window - effective``; the verbatim and repair budgets
        are bounded by it."""
        return self.budget.effective if self.budget is not None else None

    @property
    def threshold(self) -> int | None:
        """The auto-compaction threshold (None: no window known)."""
        return self.budget.auto_threshold if self.budget is not None else None

    @property
    def target(self) -> int | None:
        """The context size the result should stay under: ``target_tokens``, else the threshold. It bounds
        the files restored (so does ``rehydrate_room``) and deepens a cut whose kept messages fill it."""
        return self.target_tokens if self.target_tokens is not None else self.threshold

    @property
    def share_prefix(self) -> bool:
        """Whether the summarizer is first asked with the call's own request up to the cut plus the prompt,
        which the provider serves from its prompt cache (``summary.shared_prefix_request``): not when the
        provider rejected that request as too long (it cannot be resent whole)."""
        return self.trigger != semconv.TRIGGER_REACTIVE
