"""The engine hook (plan, summarizer through the same client, reactive retry) and content capture."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any

import pytest

import otel_context
from otel_context import engine, semconv
from otel_context.contract import CallPlan, CallRequest
from otel_context.flow import SummaryRequest, SummaryResult
from otel_context.usage import TokenUsage
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, attrs, only_span
from tests.values import attrs_of

pytestmark = [pytest.mark.usefixtures("instrumented"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


class RecordingPlan(CallPlan):
    def __init__(self, body: Mapping[str, Any], retry_body: Mapping[str, Any] | None = None) -> None:
        super().__init__(body)
        self.responses: list[tuple[TokenUsage | None, dict[str, Any] | None]] = []
        self.response_ids: list[str | None] = []
        self.too_long: list[BaseException] = []
        self.retry_body = retry_body

    def on_response(
        self,
        span: Any,
        usage: TokenUsage | None,
        response: Mapping[str, Any] | None,
        response_id: str | None = None,
        diagnosis: Any = None,
    ) -> None:
        self.responses.append((usage, dict(response) if response is not None else None))
        self.response_ids.append(response_id)

    def on_too_long(self, span: Any, error: BaseException) -> Generator[SummaryRequest, SummaryResult, Any]:
        self.too_long.append(error)
        return self.retry_body
        yield


class FakeEngine:
    """Stands in for the context engine through its public seam, ``engine.plan``."""

    def __init__(self, summarize: bool = False, retry_body: Any = None) -> None:
        self.requests: list[CallRequest] = []
        self.plans: list[RecordingPlan] = []
        self.summaries: list[SummaryResult] = []
        self.summarize = summarize
        self.retry_body = retry_body

    def plan(self, span: Any, request: CallRequest) -> Generator[SummaryRequest, SummaryResult, CallPlan]:
        self.requests.append(request)
        body: Mapping[str, Any] = request.body
        if self.summarize:
            summary_body = dict(request.body)
            summary_body["messages"] = [{"role": "user", "content": "summarize the conversation"}]
            result = yield SummaryRequest(summary_body)
            self.summaries.append(result)
            body = {**request.body, "messages": [{"role": "user", "content": f"SUMMARY {result.text[:30]}"}]}
        plan = RecordingPlan(body, self.retry_body)
        plan.attributes = {semconv.GEN_AI_CONVERSATION_ID: "conv-1"}
        self.plans.append(plan)
        return plan


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(**kw: Any) -> FakeEngine:
        fe = FakeEngine(**kw)
        monkeypatch.setattr(engine, "plan", fe.plan)
        return fe

    return install


def test_plan_rewrites_body_via_summarizer_sync(simulated_provider: Any, spans: Any, fake: Any) -> None:
    fe = fake(summarize=True)
    messages = [{"role": "user", "content": "hello there"}]
    snapshot = json.dumps(messages)
    message = simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=messages)
    assert message.content
    assert json.dumps(messages) == snapshot  # the caller's objects are never mutated
    summary_exchange, call_exchange = simulated_provider.exchanges
    assert summary_exchange.body["messages"] == [{"role": "user", "content": "summarize the conversation"}]
    assert call_exchange.body["messages"][0]["content"] == "SUMMARY " + fe.summaries[0].text[:30]
    assert fe.summaries[0].text.startswith("<analysis>")
    assert len(fe.requests) == 1  # the summarizer's own call is never planned
    assert fe.requests[0].wire_format == "anthropic_messages"
    assert fe.summaries[0].usage is not None and fe.summaries[0].usage.output_tokens > 0
    chat, summary = spans(f"chat {MODEL_A}")[1], spans(f"chat {MODEL_A}")[0]
    assert summary.parent is not None and summary.parent.span_id == chat.context.span_id
    assert attrs(chat)[semconv.GEN_AI_CONVERSATION_ID] == "conv-1"
    [(usage, response)] = fe.plans[0].responses
    assert fe.plans[0].response_ids == [message.id]  # what a later call may continue (Responses chains)
    assert usage is not None and usage.input_tokens == call_exchange.usage["input_tokens"]
    assert response is not None and response["id"] == message.id


async def test_plan_rewrites_body_via_summarizer_async(simulated_provider: Any, spans: Any, fake: Any) -> None:
    fe = fake(summarize=True)
    client = simulated_provider.async_openai()
    completion = await client.chat.completions.create(model=MODEL_O, messages=USER)
    assert completion.choices
    assert simulated_provider.exchanges[1].body["messages"][0]["content"].startswith("SUMMARY ")
    assert len(spans()) == 2
    [(usage, response)] = fe.plans[0].responses
    assert usage is not None and response is not None and response["id"] == completion.id


def test_stream_break_still_tells_the_plan(simulated_provider: Any, spans: Any, fake: Any) -> None:
    fe = fake()
    with simulated_provider.anthropic().messages.stream(model=MODEL_A, max_tokens=100, messages=USER) as stream:
        for _ in stream.text_stream:
            break
    [(usage, response)] = fe.plans[0].responses
    assert usage is not None and usage.input_tokens > 0
    assert response is not None and response["id"].startswith("msg_")


def _too_long_messages() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "lorem ipsum dolor sit amet " * 200}]


@pytest.mark.parametrize("flavor", ["anthropic", "openai"])
def test_reactive_retry_sends_once_more(simulated_provider: Any, spans: Any, fake: Any, flavor: str) -> None:
    model = MODEL_A if flavor == "anthropic" else MODEL_O
    simulated_provider.set_window(model, 500)
    short = [{"role": "user", "content": "short now"}]
    if flavor == "anthropic":
        fe = fake(retry_body={"model": model, "max_tokens": 100, "messages": short})
        result = simulated_provider.anthropic().messages.create(
            model=model, max_tokens=100, messages=_too_long_messages()
        )
        assert result.content
    else:
        fe = fake(retry_body={"model": model, "messages": short})
        result = simulated_provider.openai().chat.completions.create(model=model, messages=_too_long_messages())
        assert result.choices
    assert [e.status for e in simulated_provider.exchanges] == [400, 200]
    assert simulated_provider.exchanges[1].body["messages"] == short
    assert len(fe.plans[0].too_long) == 1
    span = only_span(spans())
    assert semconv.ERROR_TYPE not in attrs(span)


def test_failed_retry_raises_the_original_error(simulated_provider: Any, spans: Any, fake: Any) -> None:
    import anthropic

    simulated_provider.set_window(MODEL_A, 500)
    still_long = [{"role": "user", "content": "lorem ipsum " * 300}]
    fake(retry_body={"model": MODEL_A, "max_tokens": 100, "messages": still_long})
    with pytest.raises(anthropic.BadRequestError) as caught:
        simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=_too_long_messages())
    first, second = simulated_provider.exchanges
    assert first.status == second.status == 400
    original = first.response["error"]["message"]
    assert original != second.response["error"]["message"]
    assert original in str(caught.value)
    span = only_span(spans())
    assert attrs(span)[semconv.ERROR_TYPE] == "invalid_request_error"


def test_no_retry_when_the_engine_declines(simulated_provider: Any, spans: Any, fake: Any) -> None:
    import anthropic

    simulated_provider.set_window(MODEL_A, 500)
    fake(retry_body=None)
    with pytest.raises(anthropic.BadRequestError):
        simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=_too_long_messages())
    assert len(simulated_provider.exchanges) == 1


# --- content capture ---------------------------------------------------------------------------------------


def test_no_content_by_default(simulated_provider: Any, spans: Any) -> None:
    simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=USER, system="be brief")
    a = attrs(only_span(spans()))
    assert not {
        semconv.GEN_AI_INPUT_MESSAGES,
        semconv.GEN_AI_OUTPUT_MESSAGES,
        semconv.GEN_AI_SYSTEM_INSTRUCTIONS,
    } & set(a)
    assert only_span(spans()).events == ()


def test_span_only_capture_anthropic(simulated_provider: Any, spans: Any) -> None:
    otel_context.instrument(capture_content="SPAN_ONLY")
    message = simulated_provider.anthropic().messages.create(
        model=MODEL_A, max_tokens=100, messages=USER, system="be brief"
    )
    span = only_span(spans())
    a = attrs(span)
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hello there"}]}
    ]
    assert json.loads(a[semconv.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "be brief"}]
    assert json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": message.content[0].text}], "finish_reason": "stop"}
    ]
    assert span.events == ()
    everything = json.dumps(a)
    assert "sim-key" not in everything and "x-api-key" not in everything.lower()


def test_event_only_capture_openai_stream(simulated_provider: Any, spans: Any) -> None:
    otel_context.instrument(capture_content="EVENT_ONLY")
    chunks = list(simulated_provider.openai().chat.completions.create(model=MODEL_O, messages=USER, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    span = only_span(spans())
    assert semconv.GEN_AI_INPUT_MESSAGES not in attrs(span)
    [event] = span.events
    assert event.name == semconv.EVENT_GEN_AI_CLIENT_INFERENCE_DETAILS
    output = json.loads(attrs_of(event)[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["parts"][0]["content"] == text and text


def test_responses_capture_and_tool_calls(simulated_provider: Any, spans: Any) -> None:
    otel_context.instrument(capture_content="SPAN_AND_EVENT")
    tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]
    simulated_provider.openai().responses.create(
        model=MODEL_O, input='tool:read_file{"path": "a.py"}', instructions="be useful", tools=tools
    )
    span = only_span(spans())
    output = json.loads(attrs(span)[semconv.GEN_AI_OUTPUT_MESSAGES])
    [call] = [p for m in output for p in m["parts"] if p["type"] == "tool_call"]
    assert call["name"] == "read_file" and call["arguments"] == {"path": "a.py"}
    # One output message with the finish reason the schema requires (viewers drop the output without it).
    assert [(m["role"], m["finish_reason"]) for m in output] == [("assistant", "tool_call")]
    assert attrs(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_call",)
    assert len(span.events) == 1


def test_capture_is_size_capped(simulated_provider: Any, spans: Any) -> None:
    otel_context.instrument(capture_content="SPAN_ONLY", capture_max_chars=300)
    long_history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 500} for i in range(9)
    ]
    simulated_provider.anthropic().messages.create(model=MODEL_A, max_tokens=100, messages=long_history)
    captured = attrs(only_span(spans()))[semconv.GEN_AI_INPUT_MESSAGES]
    assert len(captured) <= 300
    assert isinstance(json.loads(captured), list)


# --- Anthropic stop_reason=model_context_window_exceeded (the simulated provider never sends it) --------------


@pytest.fixture
def window_exceeded_server() -> Any:
    """A two-line HTTP server: the first answer stops with model_context_window_exceeded, the next end_turn."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            reason = "model_context_window_exceeded" if len(bodies) == 1 else "end_turn"
            payload = json.dumps(
                {
                    "id": f"msg_{len(bodies)}",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL_A,
                    "content": [{"type": "text", "text": "partial" if len(bodies) == 1 else "done"}],
                    "stop_reason": reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 3},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.bodies = bodies  # type: ignore[attr-defined]
    yield server
    server.shutdown()
    server.server_close()


def test_window_exceeded_stop_reason_retries_once(window_exceeded_server: Any, spans: Any, fake: Any) -> None:
    import anthropic

    short = [{"role": "user", "content": "short"}]
    fe = fake(retry_body={"model": MODEL_A, "max_tokens": 100, "messages": short})
    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{window_exceeded_server.server_address[1]}", api_key="k", max_retries=0
    )
    message = client.messages.create(model=MODEL_A, max_tokens=100, messages=USER)
    (block,) = message.content
    assert isinstance(block, anthropic.types.TextBlock) and block.text == "done"
    assert [b["messages"] for b in window_exceeded_server.bodies] == [USER, short]
    [error] = fe.plans[0].too_long
    assert "model_context_window_exceeded" in str(error) and getattr(error, "status_code", None) is None
    span = only_span(spans())
    assert attrs(span)[semconv.GEN_AI_RESPONSE_ID] == "msg_2"
    assert attrs(span)[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_window_exceeded_without_retry_returns_the_answer(window_exceeded_server: Any, spans: Any, fake: Any) -> None:
    import anthropic

    fake(retry_body=None)
    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{window_exceeded_server.server_address[1]}", api_key="k", max_retries=0
    )
    message = client.messages.create(model=MODEL_A, max_tokens=100, messages=USER)
    assert message.stop_reason == "model_context_window_exceeded"
    assert len(window_exceeded_server.bodies) == 1
    assert attrs(only_span(spans()))[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("model_context_window_exceeded",)


def test_engine_sees_plain_json_even_for_generators_and_sdk_objects(
    simulated_provider: Any, spans: Any, fake: Any
) -> None:
    fe = fake()
    client = simulated_provider.anthropic()
    first = client.messages.create(model=MODEL_A, max_tokens=100, messages=USER)
    history = [USER[0], {"role": "assistant", "content": first.content}, {"role": "user", "content": "more"}]
    client.messages.create(model=MODEL_A, max_tokens=100, messages=(m for m in history))  # a one-shot generator
    body = fe.requests[-1].body
    assert json.loads(json.dumps(body)) == body  # JSON-native all the way down
    assert body["messages"][1]["content"] == [{"type": "text", "text": first.content[0].text}]
    assert simulated_provider.last_exchange.body["messages"] == body["messages"]  # what was sent, read once
    plain = {"model": MODEL_A, "max_tokens": 100, "messages": USER}
    client.messages.create(**plain)
    assert fe.requests[-1].body == plain
