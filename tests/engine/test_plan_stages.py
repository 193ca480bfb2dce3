"""Each stage of the plan (:mod:`otel_context.engine.planner`) alone, on real wire formats and real requests.

The stages return values: the resolve stage which conversation a call continues, the decide stage what
compaction may do, the memo what is sent instead, the estimate the context tokens, and the prepare stage's
parts what goes on the chat span. Earlier calls are made with the whole plan (as the instrumentation makes
them), so that each stage sees the state a real conversation leaves behind.
"""

from __future__ import annotations

from typing import Any

from otel_context import engine, semconv
from otel_context.contract import CallRequest
from otel_context.conversation import ChainLink, shared
from otel_context.engine import fleet
from otel_context.engine.call import IN_PROCESS, STORE_UNAVAILABLE, ConversationSync
from otel_context.engine.planner import (
    EnginePlan,
    Found,
    Sent,
    cascade_due,
    decide,
    describe,
    estimate,
    ready,
    resolve,
    reuse_memo,
)
from otel_context.flow import drive, perform_with
from otel_context.formats import for_format
from otel_context.settings import Settings
from otel_context.tokens import estimate_fixed, estimate_items
from otel_context.usage import TokenUsage
from tests.compaction.support import FakeSummarizer, Otel, anthropic_agent

MODEL = "claude-sonnet-4-6"
SMALL = Settings(auto_compact_window=30_000)


def _request(messages: list[dict[str, Any]], settings: Settings = SMALL) -> CallRequest:
    body = {"model": MODEL, "max_tokens": 1024, "system": "You are an agent.", "messages": messages}
    return CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)


def _responses_request(body: dict[str, Any], settings: Settings = SMALL) -> CallRequest:
    return CallRequest("openai", "openai_responses", {"model": "gpt-4o", **body}, "gpt-4o", settings)


def _call(otel: Otel, request: CallRequest, usage: TokenUsage, summarizer: FakeSummarizer, **response: Any) -> Any:
    """A whole call, as the instrumentation makes it: the plan, then its response."""
    with otel.tracer_provider.get_tracer("test").start_as_current_span("chat") as span:
        plan = drive(engine.plan(span, request), perform_with(summarizer))
        plan.on_response(span, usage, None, **response)
    return plan


def _resolve(request: CallRequest, sync: ConversationSync = IN_PROCESS) -> Found:
    """The resolve stage alone, driven as plan() drives it (in-process: it yields no step)."""
    adapter = for_format(request.wire_format)
    return drive(resolve(sync, request, adapter, adapter.items(request.body), MODEL), perform_with(FakeSummarizer()))


def _stages_up_to_the_estimate(request: CallRequest) -> tuple[EnginePlan, Found, Sent]:
    """resolve, decide and the memo, as plan() composes them (no store)."""
    adapter = for_format(request.wire_format)
    items = adapter.items(request.body)
    found = _resolve(request)
    decision = decide(request, adapter, MODEL)
    call = EnginePlan(request, adapter, found.resolution, items, MODEL, decision.budget)
    sent = reuse_memo(call) or Sent(None, items, request.body)
    return call, found, sent


def test_resolve_a_new_conversation_then_the_same_one_continued(otel: Otel, summarizer: FakeSummarizer) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Plan a trip to Lisbon."}]
    request = _request(list(history))
    first = _resolve(request)
    assert first.source == semconv.STATE_SOURCE_MEMORY
    assert (first.link, first.resolution.snapshot) == (None, None)

    _call(otel, request, TokenUsage(input_tokens=900, output_tokens=40), summarizer)
    history += [{"role": "assistant", "content": "Three days."}, {"role": "user", "content": "And a fourth?"}]
    request = _request(history)
    again = _resolve(request)
    assert again.resolution.state is first.resolution.state  # the same conversation, found by its history
    assert again.resolution.snapshot is not None and again.resolution.unchanged == 1


def test_resolve_says_fallback_when_a_configured_store_is_not_used() -> None:
    settings = Settings(auto_compact_window=30_000, state_store="memory")
    request = _request([{"role": "user", "content": "hi"}], settings)
    # The sync plan() picks when the configured store could not be opened: this process's state, said so.
    assert _resolve(request, STORE_UNAVAILABLE).source == semconv.STATE_SOURCE_FALLBACK


def test_resolve_a_continued_stored_response_finds_its_link(otel: Otel, summarizer: FakeSummarizer) -> None:
    first = _responses_request({"input": [{"role": "user", "content": "Name a prime."}]})
    made = _call(otel, first, TokenUsage(input_tokens=700, output_tokens=30), summarizer, response_id="resp_1")
    follow = _responses_request({"previous_response_id": "resp_1", "input": [{"role": "user", "content": "Another"}]})
    found = _resolve(follow)
    assert found.link is not None
    assert (found.link.response, found.link.input_tokens, found.link.output_tokens) == ("resp_1", 700, 30)
    assert found.resolution.state is made.state  # the response's conversation


def test_resolve_with_a_store_reads_the_conversation_another_worker_moved_on(
    otel: Otel, summarizer: FakeSummarizer
) -> None:
    settings = Settings(auto_compact_window=30_000, state_store="memory")
    history: list[dict[str, Any]] = [{"role": "user", "content": "Plan a trip to Porto."}]
    _call(otel, _request(list(history), settings), TokenUsage(input_tokens=800, output_tokens=20), summarizer)
    store = shared.store_for(settings)
    assert store is not None and store.flush()  # the commit is written in the background
    engine.reset()  # this process forgets the conversation: a worker that never saw it (an in-process store
    # is the process's own: it keeps what was written)
    history += [{"role": "assistant", "content": "Two days."}, {"role": "user", "content": "Where to eat?"}]
    request = _request(history, settings)
    sync = fleet.sync_for(settings)
    assert isinstance(sync, fleet.StoreSync)
    found = _resolve(request, sync)
    assert found.source == semconv.STATE_SOURCE_MEMORY  # what the in-process store says it read from
    assert sync.address  # the stored state it read, which a summary of this call would update
    snapshot = found.resolution.snapshot
    assert snapshot is not None and snapshot.usage is not None and snapshot.usage.input_tokens == 800


def test_decide_follows_the_settings_the_model_and_who_holds_the_history() -> None:
    adapter = for_format("anthropic_messages")
    messages = [{"role": "user", "content": "hi"}]
    plain = decide(_request(messages), adapter, MODEL)
    assert plain.budget is not None and plain.budget.window == 30_000
    assert (plain.rewrite, plain.automatic, plain.provider_holds) == (True, True, False)
    manual = decide(_request(messages, Settings(auto_compact_window=30_000, disable_auto_compact=True)), adapter, MODEL)
    assert (manual.rewrite, manual.automatic) == (True, False)
    killed = decide(_request(messages, Settings(auto_compact_window=30_000, disable_compact=True)), adapter, MODEL)
    assert (killed.rewrite, killed.automatic) == (False, False)
    unknown = decide(_request(messages, Settings()), adapter, "a-model-nobody-knows")
    assert unknown.budget is None and not unknown.rewrite and not unknown.automatic
    held = _responses_request({"previous_response_id": "resp_9", "input": "more"})
    assert decide(held, for_format("openai_responses"), "gpt-4o").provider_holds


def test_estimate_counts_a_new_conversation_from_scratch() -> None:
    request = _request(anthropic_agent(2))
    call, found, sent = _stages_up_to_the_estimate(request)
    adapter = call.adapter
    items_tokens = estimate_items(adapter, sent.items)
    factor = found.resolution.state.estimate_factor
    expected = int((estimate_fixed(adapter, request.body) + items_tokens) * factor)
    assert estimate(adapter, call.items, sent, found) == (expected, items_tokens)


def test_estimate_is_anchored_on_the_last_usage_and_skips_the_reply(otel: Otel, summarizer: FakeSummarizer) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Explain TCP slow start."}]
    _call(otel, _request(list(history)), TokenUsage(input_tokens=5_000, output_tokens=300), summarizer)
    question = {"role": "user", "content": "And congestion avoidance, in detail please?"}
    history += [{"role": "assistant", "content": "It doubles the window each round trip. " * 20}, question]
    call, found, sent = _stages_up_to_the_estimate(_request(history))
    adapter = call.adapter
    snapshot = found.resolution.snapshot
    assert snapshot is not None
    appended = estimate_items(adapter, [question])
    reply = estimate_items(adapter, history[1:2])
    tokens, history_tokens = estimate(adapter, call.items, sent, found)
    # The reply is counted by the usage's output tokens already: only the new question is estimated.
    assert tokens == 5_300 + int(appended * found.resolution.state.estimate_factor)
    assert history_tokens == snapshot.tokens + reply + appended


def test_estimate_of_a_continued_response_adds_only_the_call_s_own_items() -> None:
    request = _responses_request({"previous_response_id": "resp_2", "input": [{"role": "user", "content": "Go on"}]})
    adapter = for_format(request.wire_format)
    items = adapter.items(request.body)
    found = _resolve(request)
    link = ChainLink("resp_2", found.resolution.state.key, 1, 4_000, 250, "chain", 1)
    found = found._replace(link=link)
    appended = estimate_items(adapter, items)
    tokens, history_tokens = estimate(adapter, items, Sent(None, items, request.body), found)
    assert tokens == 4_250 + int(appended * found.resolution.state.estimate_factor)
    assert history_tokens == appended


def test_reuse_memo_sends_the_earlier_summary_of_the_same_prefix(otel: Otel, summarizer: FakeSummarizer) -> None:
    history = anthropic_agent(12, 8000)
    fresh, _, _ = _stages_up_to_the_estimate(_request(list(history)))
    assert reuse_memo(fresh) is None  # nothing compacted yet
    first = _call(otel, _request(list(history)), TokenUsage(input_tokens=12_000, output_tokens=50), summarizer)
    assert summarizer.calls == 1
    history += [{"role": "user", "content": "next"}]
    call, _, _ = _stages_up_to_the_estimate(_request(history))
    sent = reuse_memo(call)
    assert sent is not None and sent.entry is first.entry
    assert sent.items[0] is first.body["messages"][0]  # the very same summary object
    assert sent.body["messages"] == list(sent.items) and sent.items[-1] == {"role": "user", "content": "next"}
    assert summarizer.calls == 1


def test_cascade_is_due_only_past_the_threshold_and_when_automatic() -> None:
    small = _request([{"role": "user", "content": "hi"}])
    call, found, sent = _stages_up_to_the_estimate(small)
    call.estimated_tokens = estimate(call.adapter, call.items, sent, found).tokens
    assert cascade_due(call, decide(small, call.adapter, MODEL)) is None
    big = _request(anthropic_agent(12, 8000))
    call, found, sent = _stages_up_to_the_estimate(big)
    call.estimated_tokens = estimate(call.adapter, call.items, sent, found).tokens
    decision = decide(big, call.adapter, MODEL)
    assert cascade_due(call, decision) is decision.budget
    assert cascade_due(call, decision._replace(automatic=False)) is None


def test_describe_and_ready_put_the_context_on_the_span(otel: Otel) -> None:
    request = _request(anthropic_agent(2))
    call, found, sent = _stages_up_to_the_estimate(request)
    estimated = estimate(call.adapter, call.items, sent, found)
    describe(call, found, estimated)
    ready(call, decide(request, call.adapter, MODEL))
    assert (call.estimated_tokens, call.history_tokens) == estimated
    assert list(call.attributes) == [
        semconv.STATE_SOURCE,
        semconv.GEN_AI_CONVERSATION_ID,
        semconv.CONVERSATION_ID_SOURCE,
        semconv.CONTEXT_ESTIMATED_TOKENS,
        semconv.CONTEXT_WINDOW,
        semconv.CONTEXT_EFFECTIVE_WINDOW,
        semconv.CONTEXT_STATE,
    ]
    assert call.attributes[semconv.CONTEXT_STATE] == "ok"
    assert call.attributes[semconv.CONVERSATION_ID_SOURCE] == semconv.ID_SOURCE_DERIVED
    # A new conversation caches nothing yet: its fingerprint waits for the response.
    assert call.fingerprint_deferred and call.fingerprint is None and call.started > 0
