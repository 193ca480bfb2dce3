"""The context engine: conversation state, budget, the compaction cascade and cache-break checks per call.

For each chat call (see :mod:`otel_context.contract`) :func:`plan`:
1. finds the conversation (explicit id or derived key) and its bounded state;
2. applies the compaction memo (transparent mode: a prefix compacted on an earlier call is replaced by
   the very same summary objects, so nothing is summarized twice and the prefix stays cacheable);
3. estimates the context tokens (last reported usage + what was appended since) and puts the context
   attributes on the chat span;
4. runs the cascade when the estimate reaches the auto threshold (microcompact when enabled, then the
   summary), unless the breaker is open, a kill switch is set, or the history is one we do not
   understand (then the reason goes on the span, logged once);
and returns an :class:`EnginePlan` whose ``on_too_long`` compacts reactively (one retry) and whose
``on_response`` updates the usage anchor, the utilization metric, the cache-break detector, and reports
server-side compaction done by the provider.

Nothing raised in here reaches the app: every entry point falls back to "send the request unchanged".
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from otel_context import semconv, telemetry
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import cascade
from otel_context.compaction.budget import Budget
from otel_context.compaction.memo import MemoEntry, items_hash
from otel_context.compaction.summary import parse_too_long
from otel_context.contract import CallPlan, CallRequest
from otel_context.conversation import (
    ConversationState,
    ConversationStore,
    Resolution,
    Snapshot,
    current_conversation_id,
    derive_key,
)
from otel_context.flow import SummaryRequest, SummaryResult
from otel_context.formats.base import WireFormatAdapter
from otel_context.settings import Settings
from otel_context.usage import TokenUsage

Item = Mapping[str, Any]


def _on_evict(state: ConversationState) -> None:
    """An evicted conversation no longer counts as an open breaker."""
    if state.breaker.open:
        telemetry.get().instruments.breakers_open.add(-1, {semconv.GEN_AI_REQUEST_MODEL: state.breaker_model or ""})


#: Every conversation the engine tracks (LRU + idle expiry, sized from the settings of the calls).
store = ConversationStore(on_evict=_on_evict)


#: Adapters by wire format, looked up once (the import and lookup would otherwise run on every call).
_adapters: dict[str, Any] = {}


def _adapter(wire_format: str) -> Any:
    adapter = _adapters.get(wire_format)
    if adapter is None:
        from otel_context import formats

        adapter = _adapters[wire_format] = formats.for_format(wire_format)
    return adapter


def _new_detector() -> Any:
    try:
        from otel_context import cache
    except ImportError:
        return None
    return cache.CacheBreakDetector()


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, with the exact-type tests first (an ABC check is a Python call)."""
    kind = type(value)
    return kind is dict or (kind is not str and kind is not list and isinstance(value, Mapping))


def _first_user_text(adapter: WireFormatAdapter, items: Sequence[Item]) -> str | None:
    for item in items:
        if not _is_mapping(item):
            continue  # malformed entries are reported by has_unknown_content when compaction is due
        texts = adapter.user_text_items([item])
        if texts:
            return str(texts[0])
    return None


def resolve_conversation(
    adapter: WireFormatAdapter, provider: str, items: Sequence[Item], settings: Settings
) -> Resolution:
    """The state of the conversation these items belong to (created when new) and the snapshot read for them.

    An explicit id names the conversation. Without one, the derived key names a family of conversations
    that open the same way, and the items decide which one of them this call continues (see
    :class:`~otel_context.conversation.ConversationStore`).
    """
    explicit = current_conversation_id()
    key = explicit if explicit is not None else derive_key(provider, _first_user_text(adapter, items))
    store.configure(settings.max_conversations, settings.conversation_idle_seconds, settings.max_state_bytes)
    return store.resolve(key, items, explicit=explicit is not None)


def conversation_for(
    adapter: WireFormatAdapter, provider: str, items: Sequence[Item], settings: Settings
) -> ConversationState:
    """The state of the conversation these items belong to (created when new)."""
    return resolve_conversation(adapter, provider, items, settings).state


#: Windows the providers stated in too-long errors, by (provider, model), when smaller than the ones we
#: assumed. A window belongs to the model, not to a conversation: every conversation of it uses what one
#: of them learned. Bounded by the number of models an app calls.
_learned_windows: dict[tuple[str, str], int] = {}
_LEARNED_WINDOWS_MAX = 256


def _learn_window(provider: str, model: str, window: int) -> None:
    if len(_learned_windows) >= _LEARNED_WINDOWS_MAX and (provider, model) not in _learned_windows:
        _learned_windows.clear()
    _learned_windows[provider, model] = window


def _rewrites(settings: Settings) -> bool:
    """Whether compaction may change requests at all (mode auto and no global kill switch)."""
    return settings.compaction == "auto" and not settings.disable_compact


class EnginePlan(CallPlan):
    """The plan of one call, holding what ``on_too_long`` and ``on_response`` need."""

    def __init__(
        self,
        request: CallRequest,
        adapter: WireFormatAdapter,
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
        #: The memo entry whose head the sent items start with (None: the app's items as they are).
        self.entry: MemoEntry | None = None
        self.estimated_tokens = 0
        #: Estimated tokens of the app's items (what this call's snapshot keeps alive).
        self.history_tokens = 0
        self.fingerprint: Any = None
        self.started = time.monotonic()
        self._reactive_done = False

    # -- helpers ---------------------------------------------------------------------------------------
    def _job(self, span: Span | None, trigger: str, estimated: int) -> cascade.CompactionJob:
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
        )

    def _adopt(self, out: cascade.CompactionOutcome) -> bool:
        """Send a successful compaction's result and remember it; True when adopted."""
        if not out.changed or out.items is None:
            return False
        if out.strategy == semconv.STRATEGY_MICROCOMPACT:
            # Same length: the replacement is everything up to the last changed item.
            last_changed = max(
                i for i, (a, b) in enumerate(zip(out.items, self.sent_items, strict=False)) if a is not b and a != b
            )
            cut, head = last_changed + 1, tuple(out.items[: last_changed + 1])
        else:
            cut, head = out.cut, out.head
        min_index = len(self.entry.replacement) if self.entry is not None else 0
        if cut >= min_index and list(out.items) == [*head, *self.sent_items[cut:]]:
            original_cut = self.entry.to_original_index(cut) if self.entry is not None else cut
            entry = MemoEntry(original_cut, items_hash(self.items[:original_cut]), tuple(head), out.summary)
            self.state.memo.remember(entry)
            self.entry = entry
        self.sent_items = out.items
        self.body = self.adapter.with_items(self.request.body, out.items)
        return True

    # -- the contract hooks ---------------------------------------------------------------------------------
    def on_too_long(
        self, span: Span, error: BaseException
    ) -> Generator[SummaryRequest, SummaryResult, Mapping[str, Any] | None]:
        try:
            return (yield from self._on_too_long(span, error))
        except Exception:
            telemetry.log_once(
                "engine.on_too_long", "otel_context: reactive compaction failed unexpectedly", exc_info=True
            )
            return None

    def _on_too_long(
        self, span: Span, error: BaseException
    ) -> Generator[SummaryRequest, SummaryResult, Mapping[str, Any] | None]:
        settings = self.request.settings
        if self._reactive_done or not _rewrites(settings) or self.budget is None:
            return None
        if not is_too_long(self.adapter, error):
            return None
        self._reactive_done = True
        provider, state = self.request.provider, self.state
        if state.breaker.open:
            span.set_attribute(semconv.COMPACTION_BREAKER_OPEN, True)
            cascade.count_skipped(semconv.TRIGGER_REACTIVE, provider, self.model)
            return None
        reason = cascade.understood(self.adapter, self.body, self.sent_items, self.budget)
        if reason:
            _skip(span, reason)
            return None
        estimated = self.estimated_tokens
        numbers = parse_too_long(_error_message(error))
        if numbers is not None:
            actual, limit = numbers
            ours = budget_mod.estimate_fixed(self.adapter, self.body) + budget_mod.estimate_items(
                self.adapter, self.sent_items
            )
            if actual > ours > 0:
                # Our estimate undercounts this conversation's tokenizer: remember by how much.
                state.raise_estimate_factor(actual / ours)
            estimated = max(actual, estimated)
            if 0 < limit < self.budget.window:
                # The provider's window is smaller than the one we assumed: use it from now on.
                _learn_window(provider, self.model, limit)
                self.budget = _budget(self.request, self.adapter, self.model) or self.budget
        out = yield from cascade.run_summary(self._job(span, semconv.TRIGGER_REACTIVE, estimated))
        if not self._adopt(out):
            # The summary could not help (e.g. one tool result fills the window by itself): cap results.
            out = cascade.run_microcompact(
                self._job(span, semconv.TRIGGER_REACTIVE, estimated), clear=self.request.settings.microcompact
            )
            if not self._adopt(out):
                return None
        # One moment for the span: the estimate and the window (which the provider's error may have lowered)
        # are, like the utilization, those of the request sent after compacting.
        self.estimated_tokens = out.output_tokens
        self.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = out.output_tokens
        self.attributes[semconv.CONTEXT_WINDOW] = self.budget.window
        self.attributes[semconv.CONTEXT_EFFECTIVE_WINDOW] = self.budget.effective
        span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)
        self.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] = True
        self._refingerprint()
        return self.body

    def on_response(self, span: Span, usage: TokenUsage | None, response: Mapping[str, Any] | None) -> None:
        try:
            self._on_response(span, usage, response)
        except Exception:
            telemetry.log_once(
                "engine.on_response", "otel_context: the context engine failed after a response", exc_info=True
            )

    def _on_response(self, span: Span, usage: TokenUsage | None, response: Mapping[str, Any] | None) -> None:
        ended = time.monotonic()
        provider = self.request.provider
        anchor = usage if usage is not None and usage.input_tokens > 0 else None
        snapshot = Snapshot(self.items, anchor, self.entry, self.history_tokens)
        # The state that holds this call's history from now on (a new branch when another history of the
        # same derived key moved the one this call read): the cache check below stays on the state whose
        # detector fingerprinted the request.
        store.commit(self.resolution, snapshot, ended)
        state = self.state
        if usage is not None and self.budget is not None and usage.input_tokens > 0:
            utilization = usage.input_tokens / self.budget.effective
            # With the plan's other attributes: Call.end writes them to the span in one call after this.
            self.attributes[semconv.CONTEXT_UTILIZATION] = utilization
            telemetry.get().instruments.context_utilization.record(
                utilization, {semconv.GEN_AI_PROVIDER_NAME: provider, semconv.GEN_AI_REQUEST_MODEL: self.model}
            )
        if usage is not None and state.detector is not None and self.fingerprint is not None:
            try:
                brk = state.detector.check(self.fingerprint, usage, self.started, ended)
                if brk is not None:
                    from otel_context import cache  # only when a break is reported

                    cache.record_unexpected_break(span, brk, provider, self.model)
            except Exception:
                telemetry.log_once("engine.cache_check", "otel_context: the cache-break check failed", exc_info=True)
        observe_provider_compaction(span, provider, self.model, usage, response, state)

    def _refingerprint(self) -> None:
        if self.state.detector is not None:
            try:
                self.fingerprint = self.state.detector.fingerprint(
                    _adapter(self.request.wire_format), self.body, headers=self.request.headers, items=self.sent_items
                )
            except Exception:
                telemetry.log_once("engine.fingerprint", "otel_context: cache fingerprint failed", exc_info=True)
                self.fingerprint = None


def _skip(span: Span | None, reason: str) -> None:
    """A history we leave alone: the reason on the span, logged once per kind of reason."""
    if span is not None:
        span.set_attribute(semconv.CONTEXT_COMPACTION_SKIPPED_REASON, reason)
    telemetry.log_once("engine.skip:" + reason.split(":", 1)[0], "otel_context: history sent unchanged: %s", reason)


def _error_message(error: BaseException) -> str:
    """The provider's message of an SDK error (its body's message when present), else ``str(error)``."""
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error")
        source = inner if isinstance(inner, Mapping) else body
        message = source.get("message")
        if isinstance(message, str) and message:
            return message
    return str(getattr(error, "message", "") or error)


#: Budgets already worked out: a budget depends only on its key and the (frozen) settings it was made with.
_budgets: dict[tuple[Any, ...], tuple[Settings, Budget | None]] = {}


def _budget(request: CallRequest, adapter: WireFormatAdapter, model: str) -> Budget | None:
    """The call's budget, with the window capped by what the provider told about this model (memoized)."""
    max_output = adapter.max_output_tokens(request.body)
    settings = request.settings
    window_cap = _learned_windows.get((request.provider, model))
    key = (model, id(settings), max_output, request.headers.get("anthropic-beta"), window_cap)
    known = _budgets.get(key)
    if known is not None and known[0] is settings:
        return known[1]
    budget = _work_out_budget(request, model, max_output, window_cap)
    if len(_budgets) >= 256:  # bounded whatever the models and settings: start afresh
        _budgets.clear()
    _budgets[key] = (settings, budget)
    return budget


def _work_out_budget(request: CallRequest, model: str, max_output: int | None, window_cap: int | None) -> Budget | None:
    budget = budget_mod.budget_for(model, request.settings, max_output_tokens=max_output, headers=request.headers)
    if budget is not None and window_cap is not None and window_cap < budget.window:
        budget = budget_mod.budget_for(
            model, request.settings, max_output_tokens=max_output, headers=request.headers, window=window_cap
        )
    return budget


def is_too_long(adapter: WireFormatAdapter, error: BaseException) -> bool:
    """Whether ``error`` says the request exceeded the context window (per the adapter's rules)."""
    status = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    message = str(getattr(error, "message", "") or error)
    if status is None and "model_context_window_exceeded" in message:
        return True
    return bool(adapter.is_too_long_error(status, body if isinstance(body, Mapping) else None, message))


def plan(span: Span, request: CallRequest) -> Generator[SummaryRequest, SummaryResult, CallPlan]:
    """Plan a chat call (see :mod:`otel_context.contract`); never raises, falls back to the no-op plan."""
    try:
        return (yield from _plan(span, request))
    except Exception:
        telemetry.log_once(
            "engine.plan", "otel_context: the context engine failed; request sent unchanged", exc_info=True
        )
        return CallPlan(request.body)


def _plan(span: Span, request: CallRequest) -> Generator[SummaryRequest, SummaryResult, CallPlan]:
    settings = request.settings
    adapter = _adapter(request.wire_format)
    body = request.body
    items = adapter.items(body)
    model = str(request.model or body.get("model") or "")
    resolution = resolve_conversation(adapter, request.provider, items, settings)
    state, snapshot, unchanged = resolution.state, resolution.snapshot, resolution.unchanged
    budget = _budget(request, adapter, model)
    p = EnginePlan(request, adapter, resolution, items, model, budget)
    p.attributes[semconv.GEN_AI_CONVERSATION_ID] = state.key
    p.attributes[semconv.CONVERSATION_ID_SOURCE] = (
        semconv.ID_SOURCE_EXPLICIT if state.explicit else semconv.ID_SOURCE_DERIVED
    )
    cascade.precreate_counters(request.provider, model)
    rewrites = _rewrites(settings) and budget is not None

    # Transparent mode: reuse an earlier compaction of this very prefix (proven by this call's snapshot, or
    # by hashing this call's own items).
    if rewrites and (len(state.memo) or (snapshot is not None and snapshot.entry is not None)):
        entry = state.memo.find(items, snapshot.entry if snapshot is not None else None, unchanged)
        if entry is not None:
            p.entry = entry
            p.sent_items = entry.apply(items)
            p.body = adapter.with_items(body, p.sent_items)

    # Estimate: anchored on the last reported usage when the history only grew since.
    if snapshot is not None and snapshot.usage is not None and unchanged > 0:
        last = snapshot.items
        known = len(last)
        appended = budget_mod.estimate_items(adapter, items[known:])
        if unchanged < known:
            # The previous call's last item came back changed (a moved cache_control marker): the reported
            # usage already counts its old version, so only the difference is new. Counting it whole again
            # overstated the context by a whole tool result (+77 % in the demo) and compacted too early.
            appended += max(
                0,
                budget_mod.estimate_item(adapter, items[unchanged])
                - budget_mod.estimate_item(adapter, last[unchanged]),
            )
        estimated = snapshot.usage.input_tokens + snapshot.usage.output_tokens + int(appended * state.estimate_factor)
        # The app's history this call keeps alive grows by what was appended (for the store's byte bound).
        p.history_tokens = snapshot.tokens + appended
    else:
        items_tokens = budget_mod.estimate_items(adapter, p.sent_items)
        estimated = int((budget_mod.estimate_fixed(adapter, p.body) + items_tokens) * state.estimate_factor)
        p.history_tokens = items_tokens if p.entry is None else budget_mod.estimate_items(adapter, items)
    p.estimated_tokens = estimated
    p.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = estimated
    if state.breaker.open:
        p.attributes[semconv.COMPACTION_BREAKER_OPEN] = True

    auto = rewrites and not settings.disable_auto_compact
    if budget is not None:
        p.attributes[semconv.CONTEXT_WINDOW] = budget.window
        p.attributes[semconv.CONTEXT_EFFECTIVE_WINDOW] = budget.effective
    if auto and budget is not None:
        yield from _auto(span, p, budget)
    if budget is not None:
        available = auto and not state.breaker.open
        p.attributes[semconv.CONTEXT_STATE] = budget.state(p.estimated_tokens, compaction_available=available)
    if state.detector is None:
        state.detector = _new_detector()
    p._refingerprint()
    p.started = time.monotonic()
    return p


#: The default prompt-cache TTL: past it the cache is cold and clearing tool results costs nothing.
_CACHE_TTL_SECONDS = 300.0


def _micro_due(p: EnginePlan, budget: Budget) -> bool:
    """Microcompact when enabled and either past half the effective window, or the cache has gone cold."""
    settings = p.request.settings
    if not settings.microcompact:
        return False
    if p.estimated_tokens >= budget.effective // 2:
        return True
    ended = p.state.last_call_ended
    return ended is not None and time.monotonic() - ended > _CACHE_TTL_SECONDS


def _auto(span: Span, p: EnginePlan, budget: Budget) -> Generator[SummaryRequest, SummaryResult, None]:
    """The automatic cascade for one call (threshold-triggered)."""
    micro_due = _micro_due(p, budget)
    if p.estimated_tokens < budget.auto_threshold and not micro_due:
        return
    state = p.state
    reason = cascade.understood(p.adapter, p.body, p.sent_items, budget)
    if reason:
        _skip(span, reason)
        return
    if state.breaker.open:
        if p.estimated_tokens >= budget.auto_threshold:
            cascade.count_skipped(semconv.TRIGGER_AUTO, p.request.provider, p.model)
        return
    if micro_due or p.request.settings.max_tool_result_tokens:
        # Disabled microcompact still caps a single oversized tool result once the threshold is reached.
        job = p._job(span, semconv.TRIGGER_AUTO, p.estimated_tokens)
        _adopt_auto(p, cascade.run_microcompact(job, clear=micro_due))
    if p.estimated_tokens < budget.auto_threshold:
        return
    out = yield from cascade.run_summary(p._job(span, semconv.TRIGGER_AUTO, p.estimated_tokens))
    _adopt_auto(p, out)
    if state.breaker.open:
        p.attributes[semconv.COMPACTION_BREAKER_OPEN] = True


def _adopt_auto(p: EnginePlan, out: cascade.CompactionOutcome) -> None:
    """Send an automatic compaction's result; the estimate (which the summary step is gated on) is now its size."""
    if p._adopt(out):
        p.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] = True
        p.estimated_tokens = out.output_tokens
        p.attributes[semconv.CONTEXT_ESTIMATED_TOKENS] = p.estimated_tokens


# --- server-side compaction --------------------------------------------------------------------------------


def _provider_compaction(usage: TokenUsage | None, response: Mapping[str, Any] | None) -> tuple[int, int, int] | None:
    """(items compacted, tokens in, tokens out) when the response shows the provider compacted; else None."""
    found = False
    items = 0
    tokens_in = usage.compaction_input_tokens if usage is not None else 0
    tokens_out = usage.compaction_output_tokens if usage is not None else 0
    if usage is not None and (usage.compaction_iterations or tokens_in or tokens_out):
        found = True
    if response is not None:
        for key in ("content", "output"):
            blocks = response.get(key)
            if isinstance(blocks, list):
                n = sum(1 for b in blocks if _is_mapping(b) and b.get("type") == "compaction")
                if n:
                    found = True
                    items += n
        management = response.get("context_management")
        if management is not None and isinstance(management, Mapping):
            for edit in management.get("applied_edits") or ():
                if not isinstance(edit, Mapping):
                    continue
                found = True
                items += int(edit.get("cleared_tool_uses") or 0) + int(edit.get("cleared_thinking_turns") or 0)
                tokens_in += int(edit.get("cleared_input_tokens") or 0)
    return (items, tokens_in, tokens_out) if found else None


def observe_provider_compaction(
    span: Span,
    provider: str,
    model: str,
    usage: TokenUsage | None,
    response: Mapping[str, Any] | None,
    state: ConversationState | None = None,
    *,
    force: bool = False,
) -> bool:
    """Report a compaction the provider did (Anthropic ``compaction`` block / ``usage.iterations`` /
    context-editing ``applied_edits``, OpenAI ``compaction`` items or the ``responses.compact`` endpoint
    with ``force=True``): a ``compact`` span with ``trigger_source=provider`` under ``span``, the chat span
    marked ``gen_ai.conversation.compacted``, the counter, and the cache detector told to expect the change.
    """
    found = _provider_compaction(usage, response)
    if found is None and not force:
        return False
    items, tokens_in, tokens_out = found or (0, 0, 0)
    if force and usage is not None and not tokens_in:
        # ``responses.compact``: the whole call is the compaction; its input is the context before, its
        # output the compacted context.
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    cascade.precreate_counters(provider, model)
    tracer = telemetry.get().tracer
    attributes: dict[str, Any] = {
        semconv.COMPACTION_TRIGGER_SOURCE: semconv.TRIGGER_PROVIDER,
        semconv.COMPACTION_STRATEGY: semconv.STRATEGY_PROVIDER,
        semconv.COMPACTION_OUTCOME: semconv.OUTCOME_SUCCESS,
        semconv.COMPACTION_INPUT_TOKENS: tokens_in,
        semconv.COMPACTION_SUMMARY_TOKENS: tokens_out,
        semconv.COMPACTION_OUTPUT_TOKENS: tokens_out,
        semconv.COMPACTION_MESSAGES_COMPACTED: items,
        semconv.COMPACTION_FILES_REHYDRATED: 0,
        semconv.COMPACTION_DURATION_MS: 0.0,
        semconv.COMPACTION_CONSECUTIVE_FAILURES: state.breaker.consecutive_failures if state else 0,
    }
    if state is not None:
        attributes[semconv.GEN_AI_CONVERSATION_ID] = state.key
    compact = tracer.start_span(
        semconv.COMPACT_SPAN, context=trace.set_span_in_context(span), kind=SpanKind.INTERNAL, attributes=attributes
    )
    if state is not None and state.detector is not None:
        try:
            from otel_context import cache

            cache.record_intentional_break(compact, state.detector.announce_compaction(), provider, model)
        except Exception:
            telemetry.log_once("engine.provider_announce", "otel_context: cache announce failed", exc_info=True)
    compact.end()
    span.set_attribute(semconv.GEN_AI_CONVERSATION_COMPACTED, True)
    instruments = telemetry.get().instruments
    instruments.compactions.add(
        1,
        {
            semconv.COMPACTION_TRIGGER_SOURCE: semconv.TRIGGER_PROVIDER,
            semconv.COMPACTION_STRATEGY: semconv.STRATEGY_PROVIDER,
            semconv.COMPACTION_OUTCOME: semconv.OUTCOME_SUCCESS,
            semconv.GEN_AI_PROVIDER_NAME: provider,
            semconv.GEN_AI_REQUEST_MODEL: model,
        },
    )
    if tokens_in:
        instruments.compaction_tokens_saved.record(
            max(0, tokens_in - tokens_out),
            {
                semconv.COMPACTION_TRIGGER_SOURCE: semconv.TRIGGER_PROVIDER,
                semconv.COMPACTION_STRATEGY: semconv.STRATEGY_PROVIDER,
            },
        )
    return True


def reset() -> None:
    """Forget every conversation and learned window (tests, and apps that want a clean slate)."""
    store.clear()
    _learned_windows.clear()
