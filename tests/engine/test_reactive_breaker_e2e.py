"""Reactive compaction and the breaker end to end: real SDKs, instrumentation, simulated provider."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import ANTHROPIC_TOOLS, SYSTEM, file_content
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"


def _history(turns: int, lines: int = 400) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages += [
            {"role": "user", "content": f"Turn {t}. FACT: f{t}"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{t}", "name": "read_file", "input": {"path": f"f{t}.py"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": file_content(f"f{t}.py", lines)}
                ],
            },
            {"role": "assistant", "content": f"Read f{t}.py."},
        ]
    return [*messages, {"role": "user", "content": "What did you learn?"}]


def test_reactive_one_compact_span_one_retry_success(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Tokenizer drift: we believe the window is 60K, the provider says 15K: one reactive compaction, one retry."""
    simulated_provider.set_window(MODEL, 15_000)
    instrumented(auto_compact_window=60_000)
    client = simulated_provider.anthropic()
    history = _history(8)
    response = client.messages.create(
        model=MODEL, max_tokens=1024, system=SYSTEM, tools=ANTHROPIC_TOOLS, messages=history
    )
    assert response.content
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_REACTIVE
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    messages_calls = [e for e in simulated_provider.exchanges if e.path.endswith("/messages")]
    # The rejected call, the summarizer (possibly retried smaller), and exactly one retry of the call.
    assert messages_calls[0].status == 400
    assert messages_calls[-1].status == 200
    main_retries = [e for e in messages_calls[1:] if e.body.get("tools")]
    assert len(main_retries) == 1
    chat = next(s for s in otel.spans() if s.name == "chat " + MODEL and s.parent is None)
    assert attrs_of(chat)[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    # One moment for the span: the estimate, the window and the utilization all describe the request sent
    # after the compaction (the estimate was the rejected request's, ~4x; the window the assumed 60K).
    assert attrs_of(chat)[semconv.CONTEXT_WINDOW] == 15_000
    estimated = attrs_of(chat)[semconv.CONTEXT_ESTIMATED_TOKENS]
    assert estimated == attrs_of(compact)[semconv.COMPACTION_OUTPUT_TOKENS]
    sent = attrs_of(chat)[semconv.CONTEXT_UTILIZATION] * attrs_of(chat)[semconv.CONTEXT_EFFECTIVE_WINDOW]
    assert sent / 2 < estimated < sent * 2, (estimated, sent)
    # The span ends as a success, but it still shows the rejection, before the compaction that followed it:
    # the provider's message and the size and limit it stated.
    (rejected,) = [e for e in chat.events if e.name == semconv.REQUEST_REJECTED_EVENT]
    rejection = messages_calls[0].response["error"]["message"]
    assert rejection.startswith("prompt is too long")
    assert attrs_of(rejected)[semconv.REQUEST_REJECTED_MESSAGE] == rejection
    assert attrs_of(rejected)[semconv.REQUEST_REJECTED_LIMIT_TOKENS] == 15_000
    assert f"{attrs_of(rejected)[semconv.REQUEST_REJECTED_INPUT_TOKENS]} tokens > 15000" in rejection
    assert attrs_of(rejected)[semconv.HTTP_RESPONSE_STATUS_CODE] == 400
    assert compact.start_time is not None and rejected.timestamp < compact.start_time


def test_reactive_second_rejection_raises_the_original_error(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window(MODEL, 3_000)  # even the kept part does not fit
    instrumented(auto_compact_window=60_000)
    client = simulated_provider.anthropic()
    try:
        client.messages.create(
            model=MODEL, max_tokens=1024, system=SYSTEM, tools=ANTHROPIC_TOOLS, messages=_history(8, 600)
        )
    except anthropic.BadRequestError as exc:
        assert "too long" in str(exc)
    else:
        raise AssertionError("the provider should have rejected the request")
    main_calls = [e for e in simulated_provider.exchanges if e.path.endswith("/messages") and e.body.get("tools")]
    assert len(main_calls) <= 2  # the original and at most one retry


def test_breaker_three_failures_no_fourth_attempt_calls_continue(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    calls: list[Any] = []

    def failing_summarizer(request: Any) -> Any:
        calls.append(request)
        raise RuntimeError("summarizer down")

    simulated_provider.set_window("gpt-4o", 200_000)
    instrumented(auto_compact_window=12_000, summarizer=failing_summarizer)
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(8):
        history.append({"role": "user", "content": f"Turn {turn}. " + file_content(f"f{turn}.py", 500)})
        response = client.chat.completions.create(model="gpt-4o", max_tokens=256, messages=history)
        history.append(response.choices[0].message.model_dump(exclude_none=True))
    compacts = otel.compact_spans()
    failures = [s for s in compacts if attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE]
    assert len(failures) == 3 == len(compacts)
    assert [attrs_of(s)[semconv.COMPACTION_CONSECUTIVE_FAILURES] for s in failures] == [1, 2, 3]
    mains = sorted(
        (s for s in otel.spans() if s.name == "chat gpt-4o" and s.parent is None), key=lambda s: s.start_time or 0
    )
    assert len(mains) == 8
    assert attrs_of(mains[-1])[semconv.COMPACTION_BREAKER_OPEN] is True
    assert otel.counter_value(semconv.METRIC_COMPACTIONS, **{semconv.COMPACTION_OUTCOME: "skipped"}) >= 1
    assert otel.counter_value(semconv.METRIC_BREAKERS_OPEN) == 1
    assert len(calls) == 3  # no fourth attempt
