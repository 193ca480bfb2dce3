"""The plan of one chat call: which conversation it continues, what to send, and what to learn after.

:func:`plan` (the engine's entry point, see :mod:`otel_context.contract`) composes stages that each return a
value, so that each can be read and tested alone:
1. resolve (:func:`resolve`, the only stage that yields store steps, through the call's
   :class:`~otel_context.engine.call.ConversationSync`, and only with a shared store): the conversation
   (explicit id, derived key or a continued stored response), its snapshot read once;
2. decide (:func:`decide`): the call's budget and whether compaction may rewrite it;
3. the memo (:func:`reuse_memo`, transparent mode: a prefix compacted on an earlier call is replaced by the
   very same summary objects, so nothing is summarized twice and the prefix stays cacheable);
4. estimate (:func:`estimate`): the context tokens (last reported usage + what was appended since);
5. prepare: the context attributes on the chat span (:func:`describe`), the automatic cascade when due
   (:func:`cascade_due`, :mod:`otel_context.engine.auto`), then the context state and the cache fingerprint
   (:func:`ready`).
The returned :class:`EnginePlan` compacts reactively on a too-long rejection
(:mod:`otel_context.engine.reactive`) and, after the response, commits the conversation's new snapshot,
records the utilization, checks for a prompt-cache break and reports a compaction the provider did.

Nothing raised in here reaches the app: ``plan`` and ``on_too_long`` fall back to "send the request unchanged",
and ``on_response``'s one caller (the call's end, in the instrumentation) logs what it raises and ends the span.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import trace
from opentelemetry.trace import Span

from otel_context import cache, pricing, semconv, telemetry
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.contract import CallPlan, CallRequest, Spent
from otel_context.conversation import CONVERSATIONS, ChainLink, ConversationState, Resolution, Snapshot
from otel_context.conversation import resolve as resolve_conversation
from otel_context.conversation.memo import MemoEntry
from otel_context.engine import auto, diagnostics, fleet, provider_compaction, reactive, windows
from otel_context.engine.call import CallState, ConversationSync, rewrites
from otel_context.engine.provider_compaction import observe_provider_compaction, usage_shows_compaction
from otel_context.flow import Step
from otel_context.formats import for_format
from otel_context.formats.base import ChatFormat, Item, WireFormatAdapter
from otel_context.tokens import estimate_fixed, estimate_item, estimate_items
from otel_context.usage import CacheDiagnosis, TokenUsage

#: The link of a stored conversation (Responses ``conversation``) is named after it, with this prefix: its newest
#: response's, which the conversation's next call continues (a response's link is named after the response).
CONVERSATION_LINK = "conversation:"


class EnginePlan(CallState):
    """The plan of one call: the contract's hooks (see :class:`~otel_context.contract.CallPlan`)."""

    def on_too_long(self, span: Span, error: BaseException) -> Generator[Step, Any, Mapping[str, Any] | None]:
        try:
            asked = self.unasked is not None
            if self.unasked is not None:
                self.body = self.unasked  # the summarizer's request is ours: it asks the provider nothing
            body = provider_compaction.after_rejection(span, self, error)
            if body is None:
                body = yield from reactive.compact(span, self, error)
            if body is not None and asked:
                # The retry asks as the call did (and the response is read against what was sent).
                self.unasked, body = body, diagnostics.ask(self.adapter, body, self.compared_with)
                self.body = body
            return body
        except Exception:
            telemetry.log_once(
                "engine.on_too_long", "otel_context: reactive compaction failed unexpectedly", exc_info=True
            )
            return None

    def on_cost(self, amount: float) -> Spent | None:
        state = self.state
        with state.lock:  # concurrent calls of one conversation add to one total
            state.spend += amount
            total = state.spend
        entry = self.entry
        if entry is None or not entry.tokens_saved:
            return Spent(total, 0.0)
        # The history's tokens this call did not send, at what a warm cache would have charged for them.
        found = pricing.rates(self.request.provider, self.model)
        return Spent(total, entry.tokens_saved * found.read if found is not None else 0.0)

    def on_response(
        self,
        span: Span,
        usage: TokenUsage | None,
        response: Mapping[str, Any] | None,
        response_id: str | None = None,
        diagnosis: CacheDiagnosis | None = None,
    ) -> None:
        # No guard of its own: its one caller (the call's end, in the instrumentation) logs what it raises and
        # ends the span as usual.
        ended = cache.monotonic()
        provider = self.request.provider
        anchor = usage if usage is not None and usage.input_tokens > 0 else None
        sync = self.sync
        chain = sync.chain_for(self.resolution, self.items)
        replies = (
            diagnostics.replies_of(self.adapter, self.resolution.snapshot, self.items, response, response_id)
            if self.request.settings.cache_diagnostics
            else ()
        )
        snapshot = Snapshot(self.items, anchor, self.entry, self.history_tokens, chain, replies)
        # The state that holds this call's history from now on (a new branch when another history of the
        # same derived key moved the one this call read): the cache check below stays on the state whose
        # detector fingerprinted the request.
        committed = CONVERSATIONS.commit(self.resolution, snapshot, ended)
        made: ChainLink | None = None
        if response_id and usage is not None and self.adapter.stores_response(self.request.body):
            made = _remember_response(self, committed, response_id, usage)
        state = self.state
        if usage is not None and self.budget is not None and usage.input_tokens > 0:
            utilization = usage.input_tokens / self.budget.effective
            # With the plan's other attributes: InstrumentedCall.end writes them to the span in one call after this.
            self.attributes[semconv.CONTEXT_UTILIZATION] = utilization
            context = self.request.context
            telemetry.get().instruments.context_utilization.record(
                utilization,
                {semconv.GEN_AI_PROVIDER_NAME: provider, semconv.GEN_AI_REQUEST_MODEL: self.model},
                # In the chat span's context: a stream ends in the app's, and the exemplar must point here.
                context=context if context is not None else trace.set_span_in_context(span),
            )
        # The response is read for compaction blocks and edits only when the request asked the provider to
        # manage its context (the app, or this plan); usage's compaction figures are always looked at (here
        # first: most calls have none). Before the cache check: a compaction the provider did explains the miss.
        read = response if self.engaged is not None or _asks_provider_to_compact(self.request) else None
        if read is not None or (usage is not None and usage_shows_compaction(usage)):
            done = observe_provider_compaction(
                span, provider, self.model, usage, read, state, before=self.estimated_tokens, threshold=self.engaged
            )
            if done and self.engaged is not None and usage is not None and self.budget is not None:
                # As after a compaction of ours, the span's context is the compacted one (the provider's count).
                self.compacted(usage.input_tokens)
                self.attributes[semconv.CONTEXT_STATE] = self.budget.state(
                    usage.input_tokens, compaction_available=True
                )
        # Read before the check (and before forget_uncached) clears it: a compaction changed this call's prefix.
        compacted = state.detector is not None and state.detector.compaction_pending
        if usage is not None and state.detector is not None and self.fingerprint_deferred:
            if not cache.leaves_cache(self.adapter.automatic_caching, usage):
                state.detector.forget_uncached()  # what the check would conclude, without the fingerprint
            else:
                self.refingerprint()  # the first call that caches: the baseline of the next call's check
        diagnosis = self.adapter.settle_diagnosis(self.body, diagnosis)
        brk: cache.CacheBreak | None = None
        try:
            if usage is not None and state.detector is not None and self.fingerprint is not None:
                brk = state.detector.check(self.fingerprint, usage, self.started, ended)
            # The provider's diagnosis beside the detector's reason: on the span, on the break's event, counted.
            side_by_side = (
                cache.diagnosis_attributes(diagnostics.detector_reason(brk, compacted), diagnosis)
                if diagnosis is not None
                else None
            )
            if brk is not None:
                cache.record_unexpected_break(span, brk, provider, self.model, side_by_side)
            if side_by_side is not None:
                self.attributes.update(side_by_side)
                cache.count_diagnosis(side_by_side, provider, self.model)
        except Exception:
            telemetry.log_once("engine.cache_check", "otel_context: the cache-break check failed", exc_info=True)
        sync.commit(self, snapshot, made)


def _remember_response(
    call: EnginePlan, committed: ConversationState, response_id: str, usage: TokenUsage
) -> ChainLink:
    """Link a response the provider stored to the state that now holds its conversation, for the calls that
    continue it (with a shared store, for every worker). A chain is named by a hash of its first response's id
    (a provider id is never put in a shared store), and an explicit conversation id is never written there:
    the app names it in every worker."""
    continued = call.continued_link
    if continued is not None:
        chain, turn = continued.chain, continued.turn + 1
    else:
        chain, turn = hashlib.sha256(response_id.encode("utf-8", "surrogatepass")).hexdigest()[:32], 1
    # A stored conversation's next call names the conversation, not this response: the link is its newest.
    conversation = call.adapter.continued_conversation(call.request.body)
    name = response_id if conversation is None else CONVERSATION_LINK + conversation
    link = ChainLink(name, committed.key, committed.serial, usage.input_tokens, usage.output_tokens, chain, turn)
    CONVERSATIONS.link(link)
    call.sync.put_link(link, committed.explicit)
    return link


def _after_reply(adapter: WireFormatAdapter, items: Sequence[Item], known: int) -> int:
    """The index after the model's items that open what was appended at ``known``: the previous call's reply,
    when the app appended it (Responses: its reasoning and calls too)."""
    end = known
    while end < len(items) and adapter.is_model_output(items[end]):
        end += 1
    return end


def _asks_provider_to_compact(request: CallRequest) -> bool:
    """Whether the response can carry a compaction the provider did: only when the request asked for it,
    with ``context_management`` (Anthropic context editing and compaction, OpenAI server-side compaction)
    or an Anthropic compaction / context-management beta flag."""
    if "context_management" in request.body:
        return True
    betas = request.headers.get("anthropic-beta") or request.body.get("betas")
    return bool(betas) and ("compact" in str(betas) or "context-management" in str(betas))


class Found(NamedTuple):
    """The resolve stage's answer: which conversation the call continues, and where its state came from."""

    resolution: Resolution
    #: The link of the stored response the call continues (Responses ``previous_response_id``), when known.
    link: ChainLink | None
    #: Where the state came from (``semconv.STATE_SOURCE_*``), for the chat span.
    source: str


def resolve(
    sync: ConversationSync, request: CallRequest, adapter: ChatFormat, items: Sequence[Item], model: str
) -> Generator[Step, Any, Found]:
    """The resolve stage: the conversation the call continues (its explicit id, its derived key, or the stored
    response it continues) and its snapshot, read once; then ``sync`` brings it up to date with what other
    workers did (with a shared store, one read of it: see fleet.py; in-process, no step at all)."""
    body = request.body
    # A call that continues a response (or a conversation) the provider stored belongs to its conversation.
    continued = adapter.continued_response(body)
    conversation = adapter.continued_conversation(body) if continued is None else None
    if conversation is not None:
        continued = CONVERSATION_LINK + conversation
    link = CONVERSATIONS.link_of(continued) if continued is not None else None
    if continued is not None and (link is None or conversation is not None):
        # Another worker may have made that response; a conversation's link moves on with every call, wherever
        # it is served: the fleet's is taken unless this process's own is newer (its write not landed yet).
        shared_link = yield from sync.link_of(continued)
        if shared_link is not None and (
            link is None or link.chain != shared_link.chain or link.turn < shared_link.turn
        ):
            link = shared_link
    resolution = resolve_conversation(adapter, request.provider, items, request.settings, link)
    resolution, source = yield from sync.take(request, resolution, items, adapter, link, model)
    return Found(resolution, link, source)


class Decision(NamedTuple):
    """The decide stage's answer: the call's budget and what compaction may do to its history."""

    budget: Budget | None
    #: Compaction may change what is sent (mode auto, no kill switch, a known window).
    rewrite: bool
    #: The automatic cascade may run on this call (``rewrite`` and it is not disabled).
    automatic: bool
    #: The provider holds the history (Responses ``previous_response_id`` / ``conversation``): its items are
    #: never rewritten; the provider is asked to compact it instead (:mod:`.provider_compaction`).
    provider_holds: bool


def decide(request: CallRequest, adapter: ChatFormat, model: str) -> Decision:
    """The decide stage: the call's budget, and whether the memo and the automatic cascade may touch it."""
    settings = request.settings
    budget = windows.budget_of(request, adapter, model)
    rewrite = rewrites(settings) and budget is not None
    return Decision(
        budget,
        rewrite,
        rewrite and not settings.disable_auto_compact,
        adapter.server_state_reason(request.body) is not None,
    )


class Sent(NamedTuple):
    """What a call sends: the memo entry its items start with (None: the app's items), those items, the body."""

    entry: MemoEntry | None
    items: Sequence[Item]
    body: Mapping[str, Any]


def reuse_memo(call: CallState) -> Sent | None:
    """Transparent mode: an earlier compaction of this very prefix (proven by the call's snapshot, or by hashing
    its own items), sent on the call instead (:meth:`~otel_context.engine.call.CallState.send`) and returned as
    what it sends; None when there is none. Only for a call that may be rewritten (see :class:`Decision`)."""
    state, snapshot = call.state, call.resolution.snapshot
    if not len(state.memo) and (snapshot is None or snapshot.entry is None):
        return None  # most calls: nothing was ever compacted in this conversation
    items = call.items
    entry = state.memo.find(
        items, snapshot.entry if snapshot is not None else None, call.resolution.unchanged, call.scope
    )
    if entry is None:
        return None
    call.send(entry)
    return Sent(entry, call.sent_items, call.body)


class Estimate(NamedTuple):
    """The estimate stage's answer."""

    #: The context tokens the call would send.
    tokens: int
    #: Estimated tokens of the app's items (what the call's snapshot keeps alive, for the table's byte bound).
    history_tokens: int


def estimate(adapter: ChatFormat, items: Sequence[Item], sent: Sent, found: Found) -> Estimate:
    """The estimate stage: the context tokens of what the call sends (``sent``, the app's ``items`` after the
    memo), anchored on the last reported usage when the history only grew since, counted from scratch
    otherwise. A pure function of its inputs."""
    resolution, link = found.resolution, found.link
    factor = resolution.state.estimate_factor
    snapshot, unchanged = resolution.snapshot, resolution.unchanged
    if link is not None:
        # The history is at the provider, and the usage of the response this call continues counts it
        # whole (that reply included): only this call's own items are new.
        appended = estimate_items(adapter, items)
        return Estimate(link.input_tokens + link.output_tokens + int(appended * factor), appended)
    if snapshot is not None and snapshot.usage is not None and unchanged > 0 and sent.entry is snapshot.entry:
        # (Only when this call sends the summary the previous call sent, or none as it did: a summary made
        # under another system prompt or tools is not sent, and one taken from the fleet since is, so the
        # reported usage did not count these items; they are estimated below instead.)
        last = snapshot.items
        known = len(last)
        # What the app appended since: first, usually, the previous call's reply. Its usage's output tokens
        # count that reply already ("the messages added since" the last response, docs/compaction.md), so only
        # what follows it is estimated. Estimating the reply's characters too overstated every later call
        # by one reply (+40 % in a short chat; thousands of tokens for an agent's long answer or thinking).
        reply = appended = 0
        if len(items) > known:
            after_reply = _after_reply(adapter, items, known)
            reply = estimate_items(adapter, items[known:after_reply])
            appended = estimate_items(adapter, items[after_reply:])
        if unchanged < known:
            # The previous call's last item came back changed (a moved cache_control marker): the reported
            # usage already counts its old version, so only the difference is new. Counting it whole again
            # overstated the context by a whole tool result (+77 % in the demo) and compacted too early.
            appended += max(
                0,
                estimate_item(adapter, items[unchanged]) - estimate_item(adapter, last[unchanged]),
            )
        usage = snapshot.usage
        # The app's history this call keeps alive grows by what was appended.
        return Estimate(
            usage.input_tokens + usage.output_tokens + int(appended * factor), snapshot.tokens + reply + appended
        )
    items_tokens = estimate_items(adapter, sent.items)
    return Estimate(
        int((estimate_fixed(adapter, sent.body) + items_tokens) * factor),
        items_tokens if sent.entry is None else estimate_items(adapter, items),
    )


def describe(call: CallState, found: Found, estimated: Estimate) -> None:
    """The prepare stage, before the cascade: the conversation and the context attributes on the chat span
    (in the order the span always had them) and the estimate on the plan."""
    attributes = call.attributes
    state = call.state
    attributes[semconv.STATE_SOURCE] = found.source
    attributes[semconv.GEN_AI_CONVERSATION_ID] = state.key
    attributes[semconv.CONVERSATION_ID_SOURCE] = (
        semconv.ID_SOURCE_EXPLICIT if state.explicit else semconv.ID_SOURCE_DERIVED
    )
    call.estimated_tokens, call.history_tokens = estimated
    attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = estimated.tokens
    if state.breaker.open:
        attributes[semconv.COMPACTION_BREAKER_OPEN] = True
    budget = call.budget
    if budget is not None:
        attributes[semconv.CONTEXT_WINDOW] = budget.window
        attributes[semconv.CONTEXT_EFFECTIVE_WINDOW] = budget.effective


def cascade_due(call: CallState, decision: Decision) -> Budget | None:
    """The decide stage, once the estimate is known: the budget the automatic cascade runs against when it has
    anything to do for this call, else None (most calls)."""
    budget = decision.budget
    return budget if decision.automatic and budget is not None and auto.concerned(call, budget) else None


def ready(call: CallState, decision: Decision) -> None:
    """The prepare stage, after the cascade: the context state on the span (the breaker as the cascade left
    it), the cache fingerprint (deferred while the conversation caches nothing), and the send time."""
    state, budget = call.state, decision.budget
    if budget is not None:
        available = call.protected if decision.provider_holds else decision.automatic and not state.breaker.open
        call.attributes[semconv.CONTEXT_STATE] = budget.state(call.estimated_tokens, compaction_available=available)
    if state.detector is None:
        state.detector = cache.CacheBreakDetector()
    if call.request.settings.cache_diagnostics:
        # Asked for on the body that goes out (after the cascade, which rebuilds it from the app's).
        previous = diagnostics.previous_response(call.adapter, call.request.body, call.items, call.resolution)
        call.compared_with, call.unasked = previous, call.body
        call.body = diagnostics.ask(call.adapter, call.body, previous)
    if state.detector.nothing_cached():
        call.fingerprint_deferred = True  # most calls of a conversation that does not cache: no fingerprint
    else:
        call.refingerprint()
    call.started = cache.monotonic()


def plan(span: Span, request: CallRequest) -> Generator[Step, Any, CallPlan]:
    """Plan a chat call (see :mod:`otel_context.contract`); never raises, falls back to the no-op plan.

    The stages above, composed: resolve, decide, the memo and the estimate, then prepare (the cascade when
    due). One generator, with its guard inside; the stages are plain functions, except the two that may yield
    (:func:`resolve`, whose sync yields store steps only with a shared store, and the cascade, only when due):
    every chat call runs this, and each generator layer costs a frame and a delegation per call."""
    try:
        settings = request.settings
        adapter = for_format(request.wire_format)
        body = request.body
        items = adapter.items(body)
        model = str(request.model or body.get("model") or "")
        sync = fleet.sync_for(settings)
        found = yield from resolve(sync, request, adapter, items, model)
        decision = decide(request, adapter, model)
        p = EnginePlan(request, adapter, found.resolution, items, model, decision.budget)
        p.sync = sync
        cascade.precreate_counters(request.provider, model)
        sent = reuse_memo(p) if decision.rewrite and not decision.provider_holds else None
        if sent is None:
            sent = Sent(None, items, body)
        if found.link is not None:
            p.continued_link = found.link
        describe(p, found, estimate(adapter, items, sent, found))
        if decision.provider_holds:
            provider_compaction.engage(span, p, decision.budget, decision.automatic)
        else:
            due = cascade_due(p, decision)
            if due is not None:
                yield from auto.compact(span, p, due)
        ready(p, decision)
        return p
    except Exception:
        telemetry.log_once(
            "engine.plan", "otel_context: the context engine failed; request sent unchanged", exc_info=True
        )
        return CallPlan(request.body)
