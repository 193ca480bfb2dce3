"""The engine's plan on plain data, driven with a fake summarizer answer (no SDK, no network).

Covers transparent mode (memo reuse, byte-identical prefix, the caller's body untouched), reactive
compaction with one retry, the breaker, the kill switches and modes, hooks, histories left alone, the
compact span's attributes and the project metrics.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from otel_context import engine, semconv
from otel_context.compaction.hooks import PreCompactDecision
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.contract import CallPlan, CallRequest
from otel_context.conversation import CONVERSATIONS
from otel_context.flow import drive, perform_with
from otel_context.settings import Settings, resolve
from otel_context.usage import TokenUsage
from tests.compaction.support import FakeSummarizer, Otel, anthropic_agent, openai_chat_agent
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"


def _body(messages: list[dict[str, Any]], model: str = MODEL) -> dict[str, Any]:
    return {"model": model, "max_tokens": 1024, "system": "You are an agent.", "messages": messages}


class Caller:
    """Plays the instrumentation: a chat span per call, plan, then on_response with a usage."""

    def __init__(self, otel: Otel, summarizer: FakeSummarizer, wire_format: str = "anthropic_messages") -> None:
        self.tracer = otel.tracer_provider.get_tracer("test")
        self.summarizer = summarizer
        self.wire_format = wire_format

    def call(
        self,
        body: dict[str, Any],
        settings: Settings,
        usage: TokenUsage | None = None,
        response: dict[str, Any] | None = None,
        provider: str = "anthropic",
    ) -> CallPlan:
        with self.tracer.start_as_current_span("chat " + str(body.get("model"))) as span:
            request = CallRequest(provider, self.wire_format, body, body.get("model"), settings)  # type: ignore[arg-type]
            plan = drive(engine.plan(span, request), perform_with(self.summarizer))
            plan.on_response(span, usage, response)
            span.set_attributes(plan.attributes)  # after on_response, as InstrumentedCall.end does
        return plan


def _sent(plan: CallPlan) -> str:
    return json.dumps(plan.body["messages"])


SMALL = Settings(auto_compact_window=30_000)


def test_below_threshold_nothing_changes(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(2))
    plan = Caller(otel, summarizer).call(body, SMALL)
    assert plan.body is body
    assert summarizer.calls == 0
    assert plan.attributes[semconv.CONTEXT_WINDOW] == 30_000
    assert plan.attributes[semconv.CONTEXT_STATE] == "ok"
    assert attrs_of(plan)[semconv.GEN_AI_CONVERSATION_ID].startswith("anthropic:")


def test_transparent_mode_compacts_once_then_reuses_the_memo(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    history = anthropic_agent(12, 8000)
    original = copy.deepcopy(history)
    first = caller.call(_body(history), SMALL, usage=TokenUsage(input_tokens=12_000, output_tokens=50))
    assert summarizer.calls == 1
    assert first.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert history == original  # the caller's list and messages are untouched
    assert len(first.body["messages"]) < len(history)
    # The app appends and resends everything: the memo replaces the same prefix with the same head.
    history += [{"role": "user", "content": "next"}]
    second = caller.call(_body(list(history)), SMALL, usage=TokenUsage(input_tokens=12_500, output_tokens=50))
    assert summarizer.calls == 1
    assert semconv.GEN_AI_CONVERSATION_COMPACTED not in second.attributes
    sent1, sent2 = first.body["messages"], second.body["messages"]
    assert json.dumps(sent2[: len(sent1)]) == json.dumps(sent1)  # byte-identical prefix
    assert sent2[0] is sent1[0]  # the very same summary object
    assert sent2[-1] == {"role": "user", "content": "next"}
    # One compact span, success, with every attribute of docs/telemetry.md (the compact span).
    (span,) = otel.compact_spans()
    for key in (
        semconv.COMPACTION_TRIGGER_SOURCE,
        semconv.COMPACTION_STRATEGY,
        semconv.COMPACTION_INPUT_TOKENS,
        semconv.COMPACTION_OUTPUT_TOKENS,
        semconv.COMPACTION_SUMMARY_TOKENS,
        semconv.COMPACTION_MESSAGES_COMPACTED,
        semconv.COMPACTION_DURATION_MS,
        semconv.COMPACTION_OUTCOME,
        semconv.COMPACTION_CONSECUTIVE_FAILURES,
        semconv.COMPACTION_FILES_REHYDRATED,
        semconv.COMPACTION_THRESHOLD_TOKENS,
    ):
        assert key in attrs_of(span), key
    assert attrs_of(span)[semconv.COMPACTION_OUTCOME] == "success"
    assert attrs_of(span)[semconv.COMPACTION_SUMMARY_TOKENS] == 120
    assert attrs_of(span)[semconv.COMPACTION_THRESHOLD_TOKENS] == 30_000 - 1_024 - 1_950


def test_memo_is_keyed_by_content_not_by_conversation_key(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    history = anthropic_agent(12, 8000)
    caller.call(_body(history), SMALL)
    assert summarizer.calls == 1
    # Same first user message (same derived key) but a different later history: no reuse of the summary.
    other = copy.deepcopy(history)
    other[3]["content"] = [{"type": "text", "text": "a different answer"}]
    plan = caller.call(_body(other), SMALL)
    assert summarizer.calls == 2
    assert plan.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True


def test_compact_span_is_a_child_of_the_chat_span_and_parents_the_summarizer(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    seen: list[Any] = []

    def summarizer(request: Any) -> Any:
        from opentelemetry import trace

        seen.append(trace.get_current_span())
        return FakeSummarizer()(request)

    with tracer.start_as_current_span("chat x") as chat:
        drive(
            engine.plan(
                chat,
                CallRequest("anthropic", "anthropic_messages", _body(anthropic_agent(12, 8000)), MODEL, SMALL),
            ),
            perform_with(summarizer),
        )
    (compact,) = otel.compact_spans()
    assert compact.parent is not None and compact.parent.span_id == chat.get_span_context().span_id
    assert seen[0].get_span_context().span_id == compact.context.span_id


def test_failed_compaction_sends_the_original_and_counts(otel: Otel) -> None:
    caller = Caller(otel, FakeSummarizer(fail=1))
    body = _body(anthropic_agent(12, 8000))
    plan = caller.call(body, SMALL)
    assert plan.body is body
    (span,) = otel.compact_spans()
    assert attrs_of(span)[semconv.COMPACTION_OUTCOME] == "failure"
    assert attrs_of(span)[semconv.COMPACTION_CONSECUTIVE_FAILURES] == 1
    assert attrs_of(span)[semconv.ERROR_TYPE]
    assert span.status.status_code.name == "ERROR"
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "failure"}) == 1


def test_breaker_opens_after_three_failures_and_skips(otel: Otel) -> None:
    fake = FakeSummarizer(fail=100)
    caller = Caller(otel, fake)
    history = anthropic_agent(12, 8000)
    for i in range(5):
        history = [*history, {"role": "user", "content": f"more {i}"}]
        plan = caller.call(_body(list(history)), SMALL)
    assert fake.calls == 3  # no fourth attempt
    assert plan.attributes[semconv.COMPACTION_BREAKER_OPEN] is True
    assert plan.attributes[semconv.CONTEXT_STATE] in ("error", "blocking")
    assert len(otel.compact_spans()) == 3
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "skipped"}) == 2
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 1


def test_counters_start_at_zero_for_every_trigger_and_outcome(otel: Otel, summarizer: FakeSummarizer) -> None:
    Caller(otel, summarizer).call(_body(anthropic_agent(1)), SMALL)
    points = otel.metric_points(semconv.METRIC_COMPACTIONS)
    combos = {
        (p.attributes[semconv.COMPACTION_TRIGGER_SOURCE], p.attributes[semconv.COMPACTION_OUTCOME]) for p in points
    }
    for trigger in semconv.TRIGGER_SOURCES:
        for outcome in semconv.OUTCOMES:
            assert (trigger, outcome) in combos
    assert all(p.value == 0 for p in points)
    assert {p.attributes[semconv.GEN_AI_REQUEST_MODEL] for p in points} == {MODEL}


@pytest.mark.parametrize(
    "settings",
    [
        Settings(auto_compact_window=30_000, compaction="observe"),
        Settings(auto_compact_window=30_000, compaction="off"),
        Settings(auto_compact_window=30_000, disable_compact=True),
        Settings(auto_compact_window=30_000, disable_auto_compact=True),
        resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_COMPACTION": "observe"}),
        resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_DISABLE_COMPACT": "true"}),
        resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_DISABLE_AUTO_COMPACT": "1"}),
    ],
    ids=["observe", "off", "disable_compact", "disable_auto", "env-observe", "env-disable", "env-disable-auto"],
)
def test_modes_and_kill_switches_never_rewrite(otel: Otel, summarizer: FakeSummarizer, settings: Settings) -> None:
    body = _body(anthropic_agent(12, 8000))
    plan = Caller(otel, summarizer).call(body, settings)
    assert plan.body is body
    assert summarizer.calls == 0
    # Telemetry stays on: the context attributes are still there.
    assert attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] > 27_000
    assert plan.attributes[semconv.CONTEXT_STATE] in ("error", "blocking")


def test_unknown_model_without_override_is_observe_only(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(40, 8000), model="my-local-model")
    plan = Caller(otel, summarizer).call(body, Settings())
    assert plan.body is body and summarizer.calls == 0
    assert semconv.CONTEXT_WINDOW not in plan.attributes
    plan = Caller(otel, summarizer).call(body, Settings(auto_compact_window=30_000))
    # One compaction; its span (about 150,000 tokens) is summarized in parts of what fits a 30,000 window.
    compact = [s for s in otel.exporter.get_finished_spans() if s.name == semconv.COMPACT_SPAN]
    assert len(compact) == 1 and plan.body is not body
    assert summarizer.calls == attrs_of(compact[0])[semconv.COMPACTION_SUMMARY_PARTS] > 1


def test_env_window_and_pct_override_trigger_compaction(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(6))  # about 7K tokens: far below 200K
    caller = Caller(otel, summarizer)
    assert caller.call(body, resolve(env={})).body is body
    engine.reset()
    assert caller.call(body, resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "7000"})).body is not body
    engine.reset()
    assert (
        caller.call(
            body,
            resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE": "20"}),
        ).body
        is not body
    )
    assert summarizer.calls == 2


def test_env_summary_model_and_keep_recent(otel: Otel, summarizer: FakeSummarizer) -> None:
    settings = resolve(
        env={
            "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000",
            "OTEL_CONTEXT_SUMMARY_MODEL": "claude-haiku-4-5",
            "OTEL_CONTEXT_KEEP_RECENT_MESSAGES": "2",
        }
    )
    history = anthropic_agent(12, 8000)
    plan = Caller(otel, summarizer).call(_body(history), settings)
    assert summarizer.requests[0]["model"] == "claude-haiku-4-5"
    messages = plan.body["messages"]
    summary_at = next(i for i, m in enumerate(messages) if SUMMARY_MESSAGE_HEADER in json.dumps(m))
    # The user's messages kept verbatim, the summary, then the last user turn (4 items), not 6.
    assert len(messages) - summary_at - 1 == 4


def test_unknown_content_is_sent_unchanged_with_the_reason(otel: Otel, summarizer: FakeSummarizer) -> None:
    history = anthropic_agent(12, 8000)
    history[3] = {"role": "assistant", "content": [{"type": "future_block", "data": 1}]}
    body = _body(history)
    plan = Caller(otel, summarizer).call(body, SMALL)
    assert plan.body is body and summarizer.calls == 0
    (chat,) = otel.spans("chat " + MODEL)
    assert "future_block" in attrs_of(chat)[semconv.CONTEXT_COMPACTION_SKIPPED_REASON]


def test_broken_pairing_from_the_app_is_left_alone(otel: Otel, summarizer: FakeSummarizer) -> None:
    history = anthropic_agent(12, 8000)
    del history[2]  # a tool_use without its result
    body = _body(history)
    plan = Caller(otel, summarizer).call(body, SMALL)
    assert plan.body is body and summarizer.calls == 0


def test_pre_compact_hook_can_veto_or_add_instructions(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(12, 8000))
    veto = Settings(auto_compact_window=30_000, pre_compact=lambda event: False)
    assert Caller(otel, summarizer).call(body, veto).body is body
    assert summarizer.calls == 0
    engine.reset()
    events: list[Any] = []

    def keep(event: Any) -> PreCompactDecision:
        events.append(event)
        return PreCompactDecision(instructions="Keep ticket ABC-123 verbatim.")

    Caller(otel, summarizer).call(body, Settings(auto_compact_window=30_000, pre_compact=keep))
    assert events[0].trigger == "auto" and events[0].estimated_tokens > 0
    assert "Keep ticket ABC-123 verbatim." in json.dumps(summarizer.requests[0])


def test_post_compact_hook_adds_messages_and_a_failing_hook_is_ignored(otel: Otel, summarizer: FakeSummarizer) -> None:
    settings = Settings(auto_compact_window=30_000, post_compact=lambda event: ["RULES: always use clap"])
    plan = Caller(otel, summarizer).call(_body(anthropic_agent(12, 8000)), settings)
    messages = plan.body["messages"]
    summary_at = next(i for i, m in enumerate(messages) if SUMMARY_MESSAGE_HEADER in json.dumps(m))
    assert "RULES: always use clap" in json.dumps(messages[summary_at + 1 : summary_at + 3])
    engine.reset()

    def broken(event: Any) -> None:
        raise RuntimeError("hook bug")

    plan = Caller(otel, summarizer).call(
        _body(anthropic_agent(12, 8000)), Settings(auto_compact_window=30_000, post_compact=broken)
    )
    assert plan.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True


def test_explicit_conversation_id(otel: Otel, summarizer: FakeSummarizer) -> None:
    import otel_context

    with otel_context.conversation("ticket-42"):
        plan = Caller(otel, summarizer).call(_body(anthropic_agent(1)), SMALL)
    assert plan.attributes[semconv.GEN_AI_CONVERSATION_ID] == "ticket-42"


class TooLong(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def test_reactive_compacts_once_and_retries_once(otel: Otel, summarizer: FakeSummarizer) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    body = _body(anthropic_agent(8))  # below the threshold by our estimate
    with tracer.start_as_current_span("chat x") as span:
        plan = drive(
            engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, SMALL)),
            perform_with(summarizer),
        )
        assert plan.body is body
        error = TooLong("prompt is too long: 31000 tokens > 30000 maximum")
        retry = drive(plan.on_too_long(span, error), perform_with(summarizer))
        assert retry is not None and len(retry["messages"]) < len(body["messages"])
        assert drive(plan.on_too_long(span, error), perform_with(summarizer)) is None  # only one retry
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_TRIGGER_SOURCE] == "reactive"
    assert attrs_of(compact)[semconv.COMPACTION_INPUT_TOKENS] == 31_000


def test_reactive_ignores_other_errors(otel: Otel, summarizer: FakeSummarizer) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    body = _body(anthropic_agent(8))
    with tracer.start_as_current_span("chat x") as span:
        plan = drive(
            engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, SMALL)),
            perform_with(summarizer),
        )
        assert drive(plan.on_too_long(span, TooLong("messages: field required")), perform_with(summarizer)) is None
    assert otel.compact_spans() == []


def test_provider_compaction_is_reported(otel: Otel, summarizer: FakeSummarizer) -> None:
    usage = TokenUsage(
        input_tokens=229,
        output_tokens=5,
        compaction_input_tokens=55_196,
        compaction_output_tokens=131,
        compaction_iterations=1,
    )
    response = {"content": [{"type": "compaction", "content": "..."}, {"type": "text", "text": "Hello!"}]}
    body = {**_body(anthropic_agent(1)), "context_management": {"edits": [{"type": "compact_20260112"}]}}
    Caller(otel, summarizer).call(body, SMALL, usage=usage, response=response)
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_TRIGGER_SOURCE] == "provider"
    assert attrs_of(compact)[semconv.COMPACTION_STRATEGY] == "provider"
    assert attrs_of(compact)[semconv.COMPACTION_INPUT_TOKENS] == 55_196
    (chat,) = otel.spans("chat " + MODEL)
    assert attrs_of(chat)[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_TRIGGER_SOURCE: "provider"}) == 1


def test_openai_compaction_item_and_context_editing_are_reported(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    caller.call(
        {**_body(anthropic_agent(1)), "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
        SMALL,
        usage=TokenUsage(input_tokens=10),
        response={
            "context_management": {
                "applied_edits": [
                    {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 3, "cleared_input_tokens": 4000}
                ]
            }
        },
    )
    caller = Caller(otel, summarizer, wire_format="openai_responses")
    body = {
        "model": "gpt-5",
        "input": [{"role": "user", "content": "hi"}],
        "context_management": [{"type": "compaction", "compact_threshold": 100_000}],
    }
    caller.call(
        body,
        SMALL,
        usage=TokenUsage(input_tokens=10),
        response={"output": [{"type": "compaction", "id": "c1", "encrypted_content": "x"}]},
        provider="openai",
    )
    spans = otel.compact_spans()
    assert len(spans) == 2
    assert attrs_of(spans[0])[semconv.COMPACTION_MESSAGES_COMPACTED] == 3


def test_a_response_is_read_for_provider_compaction_only_when_the_request_asked_for_it(
    otel: Otel, summarizer: FakeSummarizer
) -> None:
    """Without ``context_management`` or a compaction beta the provider cannot have compacted: the response's
    blocks are not read (a per-call saving); usage's compaction figures are still reported."""
    blocks = {"content": [{"type": "compaction", "content": "..."}, {"type": "text", "text": "Hello!"}]}
    caller = Caller(otel, summarizer)
    caller.call(_body(anthropic_agent(1)), SMALL, usage=TokenUsage(input_tokens=10), response=blocks)
    assert otel.compact_spans() == []
    iterations = TokenUsage(input_tokens=10, compaction_input_tokens=500, compaction_iterations=1)
    caller.call(_body(anthropic_agent(2)), SMALL, usage=iterations, response=None)
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_INPUT_TOKENS] == 500
    beta = Caller(otel, summarizer)
    with beta.tracer.start_as_current_span("chat with beta") as span:
        body = _body(anthropic_agent(3))
        request = CallRequest(
            "anthropic", "anthropic_messages", body, MODEL, SMALL, {"anthropic-beta": "compact-2026-01-12"}
        )
        plan = drive(engine.plan(span, request), perform_with(beta.summarizer))
        plan.on_response(span, TokenUsage(input_tokens=10), blocks)
    assert len(otel.compact_spans()) == 2


def test_utilization_metric_and_attribute(otel: Otel, summarizer: FakeSummarizer) -> None:
    Caller(otel, summarizer).call(
        _body(anthropic_agent(1)), SMALL, usage=TokenUsage(input_tokens=14_500, output_tokens=10)
    )
    (chat,) = otel.spans("chat " + MODEL)
    assert attrs_of(chat)[semconv.CONTEXT_UTILIZATION] == pytest.approx(14_500 / 28_976)
    (point,) = otel.metric_points(semconv.METRIC_CONTEXT_UTILIZATION)
    assert point.count == 1


def test_estimate_is_anchored_on_reported_usage(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    history = anthropic_agent(2)
    caller.call(_body(history), SMALL, usage=TokenUsage(input_tokens=20_000, output_tokens=100))
    plan = caller.call(_body([*history, {"role": "user", "content": "hi"}]), SMALL)
    assert 20_100 < attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] < 20_200


def test_a_resent_last_message_with_a_moved_marker_is_not_counted_twice(otel: Otel, summarizer: FakeSummarizer) -> None:
    """Apps move their cache_control breakpoint onto the newest message, so the previous call's last message
    (here a ~2,500-token tool result) comes back changed. The reported usage already counts it: only the
    marker and the new message are added to the anchor."""
    caller = Caller(otel, summarizer)
    history = anthropic_agent(2, result_chars=10_000)[:-1]  # ends with the big tool result
    result = history[-1]
    marked = {**result, "content": [{**result["content"][0], "cache_control": {"type": "ephemeral"}}]}
    caller.call(_body(history), SMALL, usage=TokenUsage(input_tokens=20_000, output_tokens=100))
    plan = caller.call(_body([*history[:-1], marked, {"role": "user", "content": "hi"}]), SMALL)
    assert 20_100 < attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] < 20_250


def test_engine_failure_never_reaches_the_caller(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": "not a list"}
    plan = Caller(otel, summarizer).call(body, SMALL)  # type: ignore[arg-type]
    assert plan.body is body


def test_openai_chat_plan_compacts_valid_history(otel: Otel, summarizer: FakeSummarizer) -> None:
    from otel_context.formats import for_format

    body: dict[str, Any] = {
        "model": "gpt-4o",
        "max_tokens": 1024,
        "messages": [{"role": "system", "content": "sys"}, *openai_chat_agent(12, 8000)],
    }
    plan = Caller(otel, summarizer, wire_format="openai_chat").call(body, SMALL, provider="openai")
    assert plan.body["messages"][0] == {"role": "system", "content": "sys"}
    adapter = for_format("openai_chat")
    assert adapter.validate(adapter.items(plan.body)) == []
    assert len(plan.body["messages"]) < len(body["messages"])


def test_microcompact_runs_first_when_enabled_and_can_avoid_the_summary(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(12, 8000))
    for settings in (
        Settings(auto_compact_window=30_000, microcompact=True),
        resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_MICROCOMPACT": "on"}),
    ):
        engine.reset()
        plan = Caller(otel, summarizer).call(body, settings)
        assert "[Old tool result content cleared]" in _sent(plan)
        assert len(plan.body["messages"]) == len(body["messages"])  # nothing summarized: clearing was enough
    assert summarizer.calls == 0
    spans = otel.compact_spans()
    assert [attrs_of(s)[semconv.COMPACTION_STRATEGY] for s in spans] == ["microcompact", "microcompact"]
    assert attrs_of(spans[0])[semconv.COMPACTION_MESSAGES_COMPACTED] == 9


def test_microcompact_knobs_keep_recent_from_env(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = _body(anthropic_agent(12, 8000))
    settings = resolve(
        env={
            "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000",
            "OTEL_CONTEXT_MICROCOMPACT": "true",
            "OTEL_CONTEXT_MICROCOMPACT_KEEP_RECENT": "6",
            "OTEL_CONTEXT_MICROCOMPACT_CLEAR_AT_LEAST": "100",
        }
    )
    Caller(otel, summarizer).call(body, settings)
    (span,) = otel.compact_spans()[:1]
    assert attrs_of(span)[semconv.COMPACTION_MESSAGES_COMPACTED] == 6


def test_oversized_tool_result_is_capped(otel: Otel, summarizer: FakeSummarizer) -> None:
    history = anthropic_agent(2, 3000)
    history[2] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_000", "content": "y" * 90_000}],
    }
    settings = resolve(
        env={
            "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000",
            "OTEL_CONTEXT_MICROCOMPACT": "on",
            "OTEL_CONTEXT_MAX_TOOL_RESULT_TOKENS": "2000",
        }
    )
    plan = Caller(otel, summarizer).call(_body(history), settings)
    sent = _sent(plan)
    assert "omitted" in sent and len(sent) < 20_000


def test_malformed_entries_keep_telemetry_and_are_left_alone(otel: Otel, summarizer: FakeSummarizer) -> None:
    history: list[Any] = [*anthropic_agent(12, 8000), "not a message"]
    body = _body(history)
    plan = Caller(otel, summarizer).call(body, SMALL)
    assert plan.body is body and summarizer.calls == 0
    assert attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] > 27_000
    (chat,) = otel.spans("chat " + MODEL)
    assert semconv.CONTEXT_COMPACTION_SKIPPED_REASON in attrs_of(chat)


def test_system_prompt_larger_than_the_window_is_sent_unchanged(otel: Otel, summarizer: FakeSummarizer) -> None:
    body = {**_body(anthropic_agent(6)), "system": "rules " * 40_000}
    plan = Caller(otel, summarizer).call(body, SMALL)
    assert plan.body is body
    (chat,) = otel.spans("chat " + MODEL)
    assert "system prompt" in attrs_of(chat)[semconv.CONTEXT_COMPACTION_SKIPPED_REASON]


def test_thrashing_compactions_open_the_breaker(otel: Otel) -> None:
    # A summarizer whose "summary" is as large as the window: every compaction leaves the context above
    # the threshold. Three such compactions in a row open the breaker.
    huge = FakeSummarizer(text="<summary>" + "word " * 40_000 + "</summary>")
    caller = Caller(otel, huge)
    history = anthropic_agent(12, 8000)
    for i in range(6):
        history = [*history, {"role": "user", "content": f"more {i}"}]
        plan = caller.call(_body(list(history)), SMALL)
    assert huge.calls == 3
    assert plan.attributes[semconv.COMPACTION_BREAKER_OPEN] is True


def test_manual_compaction_closes_the_breaker(otel: Otel) -> None:
    import otel_context

    caller = Caller(otel, FakeSummarizer(fail=3))
    history = anthropic_agent(12, 8000)
    with otel_context.conversation("c1"):
        for i in range(3):
            caller.call(_body([*history, {"role": "user", "content": f"m{i}"}]), SMALL)
        assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 1
        result = otel_context.Compactor(client=lambda body: FakeSummarizer.text).compact(
            history, model=MODEL, wire_format="anthropic_messages"
        )
        assert result.compacted
        plan = caller.call(_body([*history, {"role": "user", "content": "after"}]), SMALL)
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 0
    assert semconv.COMPACTION_BREAKER_OPEN not in plan.attributes


def test_evicted_conversation_with_an_open_breaker_leaves_the_gauge(otel: Otel) -> None:
    import otel_context

    caller = Caller(otel, FakeSummarizer(fail=3))
    settings = Settings(auto_compact_window=30_000, max_conversations=1)
    with otel_context.conversation("a"):
        for i in range(3):
            caller.call(_body([*anthropic_agent(12, 8000), {"role": "user", "content": f"m{i}"}]), settings)
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 1
    with otel_context.conversation("b"):
        caller.call(_body(anthropic_agent(1)), settings)
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 0
    assert len(CONVERSATIONS) == 1


def test_compaction_metrics_duration_and_tokens_saved(otel: Otel, summarizer: FakeSummarizer) -> None:
    Caller(otel, summarizer).call(_body(anthropic_agent(12, 8000)), SMALL)
    (duration,) = otel.metric_points(semconv.METRIC_COMPACTION_DURATION)
    assert duration.count == 1
    assert duration.attributes[semconv.COMPACTION_OUTCOME] == "success"
    (saved,) = otel.metric_points(semconv.METRIC_COMPACTION_TOKENS_SAVED)
    assert saved.sum > 10_000
    assert (
        otel.counter_value(
            semconv.METRIC_COMPACTIONS,
            **{semconv.COMPACTION_TRIGGER_SOURCE: "auto", semconv.COMPACTION_OUTCOME: "success"},
        )
        == 1
    )


def test_compact_span_carries_the_intentional_cache_break(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    history = anthropic_agent(12, 8000)
    first = caller.call(
        _body(history[:32]), SMALL, usage=TokenUsage(input_tokens=20_000, cache_read_tokens=19_000, reported_cache=True)
    )
    assert semconv.GEN_AI_CONVERSATION_COMPACTED not in first.attributes
    caller.call(_body(history), SMALL)
    (compact,) = otel.compact_spans()
    events = [e for e in compact.events if e.name == semconv.CACHE_BREAK_EVENT]
    assert len(events) == 1
    assert attrs_of(events[0])[semconv.CACHE_BREAK_INTENTIONAL] is True
    assert attrs_of(events[0])[semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS] == 19_000


@pytest.mark.parametrize(
    "settings",
    [
        Settings(auto_compact_window=30_000, blocking_limit_override=5_000),
        resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE": "5000"}),
    ],
    ids=["code", "env"],
)
def test_blocking_limit_override_sets_the_state(otel: Otel, summarizer: FakeSummarizer, settings: Settings) -> None:
    plan = Caller(otel, summarizer).call(_body(anthropic_agent(6)), settings)
    assert 5_000 < attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] < 20_000
    assert plan.attributes[semconv.CONTEXT_STATE] == "blocking"


@pytest.mark.parametrize(
    ("settings", "reactive"),
    [
        (Settings(auto_compact_window=30_000, disable_auto_compact=True), True),
        (resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_DISABLE_AUTO_COMPACT": "yes"}), True),
        (Settings(auto_compact_window=30_000, disable_compact=True), False),
        (resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_DISABLE_COMPACT": "on"}), False),
        (resolve(env={"OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "30000", "OTEL_CONTEXT_COMPACTION": "observe"}), False),
    ],
    ids=["no-auto-code", "no-auto-env", "no-compact-code", "no-compact-env", "observe-env"],
)
def test_kill_switches_and_reactive(otel: Otel, summarizer: FakeSummarizer, settings: Settings, reactive: bool) -> None:
    """DISABLE_AUTO_COMPACT stops threshold compaction only; DISABLE_COMPACT and observe stop reactive too."""
    tracer = otel.tracer_provider.get_tracer("test")
    body = _body(anthropic_agent(12, 8000))
    with tracer.start_as_current_span("chat x") as span:
        plan = drive(
            engine.plan(span, CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)),
            perform_with(summarizer),
        )
        assert plan.body is body
        too_long = TooLong("prompt is too long: 40000 tokens > 30000 maximum")
        retry = drive(plan.on_too_long(span, too_long), perform_with(summarizer))
    assert (retry is not None) is reactive
    # The reactive summary reads the whole span (about 96,000 tokens), in parts of what fits a 30,000 window.
    spans = otel.compact_spans()
    parts = [attrs_of(s).get(semconv.COMPACTION_SUMMARY_PARTS, 1) for s in spans]
    assert summarizer.calls == (parts[0] if reactive else 0) and len(spans) == int(reactive)


def test_microcompact_when_the_cache_has_gone_cold(otel: Otel, summarizer: FakeSummarizer) -> None:
    import time

    settings = Settings(auto_compact_window=200_000, microcompact=True, microcompact_clear_at_least=100)
    caller = Caller(otel, summarizer)
    history = anthropic_agent(8)
    caller.call(_body(history), settings, usage=TokenUsage(input_tokens=9_000, output_tokens=10))
    assert otel.compact_spans() == []  # far below half the window, cache warm: nothing to do
    (state,) = CONVERSATIONS.states()
    state.last_call_ended = time.monotonic() - 400  # past the 5-minute TTL: clearing is free now
    plan = caller.call(_body([*history, {"role": "user", "content": "back"}]), settings)
    assert "[Old tool result content cleared]" in _sent(plan)
    assert [attrs_of(s)[semconv.COMPACTION_STRATEGY] for s in otel.compact_spans()] == ["microcompact"]


def test_images_count_two_thousand_tokens(otel: Otel, summarizer: FakeSummarizer) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100}}
    text_only = Caller(otel, summarizer).call(
        _body([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]), SMALL
    )
    engine.reset()
    with_image = Caller(otel, summarizer).call(
        _body([{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]), SMALL
    )
    extra = (
        attrs_of(with_image)[semconv.CONTEXT_ESTIMATED_TOKENS] - attrs_of(text_only)[semconv.CONTEXT_ESTIMATED_TOKENS]
    )
    assert extra == 2_000


def test_oversized_tool_result_is_capped_even_with_microcompact_off(otel: Otel, summarizer: FakeSummarizer) -> None:
    history = anthropic_agent(3, 3000)
    # The newest round holds one result larger than the whole window: a summary cannot help, the cap does.
    history[-2] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_002", "content": "z" * 120_000}],
    }
    plan = Caller(otel, summarizer).call(_body(history), SMALL)
    sent = _sent(plan)
    assert "omitted" in sent and len(sent) < 60_000  # the result keeps at most half the usable window
    strategies = [attrs_of(s)[semconv.COMPACTION_STRATEGY] for s in otel.compact_spans()]
    assert strategies[0] == "microcompact"
    assert attrs_of(plan)[semconv.CONTEXT_ESTIMATED_TOKENS] < 27_000
