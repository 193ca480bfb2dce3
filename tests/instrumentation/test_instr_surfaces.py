"""Every SDK surface, sync and async, streamed and not: exactly one span with the contract's attributes.

Each case drives a REAL SDK client against the simulated provider through a public method, consumes the
result the way an app would, then checks the single span against what the server actually reported.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from otel_context import semconv
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, assert_usage_matches, attrs, only_span

pytestmark = [pytest.mark.usefixtures("instrumented"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

A = {"model": MODEL_A, "max_tokens": 200, "messages": USER}
O_CHAT = {"model": MODEL_O, "messages": USER}
O_RESP = {"model": MODEL_O, "input": "hello there"}


# --- sync surfaces: (id, provider, operation, streamed, call) ------------------------------------------------


def _drain(it: Any) -> None:
    for _ in it:
        pass


def _a_create(c: Any) -> None:
    c.messages.create(**A)


def _a_create_stream(c: Any) -> None:
    _drain(c.messages.create(**A, stream=True))


def _a_stream_text(c: Any) -> None:
    with c.messages.stream(**A) as s:
        assert "".join(s.text_stream).startswith("Simulated reply")


def _a_stream_final(c: Any) -> None:
    with c.messages.stream(**A) as s:
        assert s.get_final_message().usage.output_tokens > 0
        assert s.response.headers is not None


def _a_parse(c: Any) -> None:
    c.messages.parse(**A)


def _a_count(c: Any) -> None:
    assert c.messages.count_tokens(model=MODEL_A, messages=USER).input_tokens > 0


def _a_beta_create(c: Any) -> None:
    c.beta.messages.create(**A)


def _a_beta_stream(c: Any) -> None:
    with c.beta.messages.stream(**A) as s:
        s.get_final_message()


def _a_beta_parse(c: Any) -> None:
    c.beta.messages.parse(**A)


def _a_beta_count(c: Any) -> None:
    c.beta.messages.count_tokens(model=MODEL_A, messages=USER)


def _a_raw(c: Any) -> None:
    raw = c.messages.with_raw_response.create(**A)
    assert raw.headers.get("content-type", "").startswith("application/json")
    assert raw.parse().content


def _a_raw_stream(c: Any) -> None:
    raw = c.messages.with_raw_response.create(**A, stream=True)
    _drain(raw.parse())


def _a_streaming_response(c: Any) -> None:
    with c.messages.with_streaming_response.create(**A) as resp:
        assert resp.parse().content


def _a_streaming_response_stream(c: Any) -> None:
    with c.messages.with_streaming_response.create(**A, stream=True) as resp:
        _drain(resp.parse())


def _o_chat(c: Any) -> None:
    c.chat.completions.create(**O_CHAT)


def _o_chat_stream(c: Any) -> None:
    _drain(c.chat.completions.create(**O_CHAT, stream=True, stream_options={"include_usage": True}))


def _o_chat_parse(c: Any) -> None:
    c.chat.completions.parse(**O_CHAT)


def _o_chat_helper(c: Any) -> None:
    with c.chat.completions.stream(**O_CHAT, stream_options={"include_usage": True}) as s:
        assert s.get_final_completion().choices


def _o_resp(c: Any) -> None:
    c.responses.create(**O_RESP)


def _o_resp_stream(c: Any) -> None:
    _drain(c.responses.create(**O_RESP, stream=True))


def _o_resp_helper(c: Any) -> None:
    with c.responses.stream(**O_RESP) as s:
        assert s.get_final_response().output


def _o_resp_parse(c: Any) -> None:
    c.responses.parse(**O_RESP)


def _o_compact(c: Any) -> None:
    c.responses.compact(**O_RESP)


def _o_embed(c: Any) -> None:
    c.embeddings.create(model="text-embedding-3-small", input="hello there")


def _o_raw(c: Any) -> None:
    assert c.chat.completions.with_raw_response.create(**O_CHAT).parse().choices


def _o_raw_stream(c: Any) -> None:
    _drain(
        c.chat.completions.with_raw_response.create(
            **O_CHAT, stream=True, stream_options={"include_usage": True}
        ).parse()
    )


def _o_streaming_response(c: Any) -> None:
    with c.responses.with_streaming_response.create(**O_RESP) as resp:
        assert resp.parse().output


def _o_streaming_response_stream(c: Any) -> None:
    with c.chat.completions.with_streaming_response.create(
        **O_CHAT, stream=True, stream_options={"include_usage": True}
    ) as resp:
        _drain(resp.parse())


SYNC: list[tuple[str, str, str, bool, Callable[[Any], None]]] = [
    ("a.create", "anthropic", "chat", False, _a_create),
    ("a.create_stream", "anthropic", "chat", True, _a_create_stream),
    ("a.stream_text", "anthropic", "chat", True, _a_stream_text),
    ("a.stream_final", "anthropic", "chat", True, _a_stream_final),
    ("a.parse", "anthropic", "chat", False, _a_parse),
    ("a.count_tokens", "anthropic", "count_tokens", False, _a_count),
    ("a.beta.create", "anthropic", "chat", False, _a_beta_create),
    ("a.beta.stream", "anthropic", "chat", True, _a_beta_stream),
    ("a.beta.parse", "anthropic", "chat", False, _a_beta_parse),
    ("a.beta.count_tokens", "anthropic", "count_tokens", False, _a_beta_count),
    ("a.raw", "anthropic", "chat", False, _a_raw),
    ("a.raw_stream", "anthropic", "chat", True, _a_raw_stream),
    ("a.streaming_response", "anthropic", "chat", False, _a_streaming_response),
    ("a.streaming_response_stream", "anthropic", "chat", True, _a_streaming_response_stream),
    ("o.chat", "openai", "chat", False, _o_chat),
    ("o.chat_stream", "openai", "chat", True, _o_chat_stream),
    ("o.chat_parse", "openai", "chat", False, _o_chat_parse),
    ("o.chat_helper", "openai", "chat", True, _o_chat_helper),
    ("o.responses", "openai", "chat", False, _o_resp),
    ("o.responses_stream", "openai", "chat", True, _o_resp_stream),
    ("o.responses_helper", "openai", "chat", True, _o_resp_helper),
    ("o.responses_parse", "openai", "chat", False, _o_resp_parse),
    ("o.responses_compact", "openai", "compact", False, _o_compact),
    ("o.embeddings", "openai", "embeddings", False, _o_embed),
    ("o.raw", "openai", "chat", False, _o_raw),
    ("o.raw_stream", "openai", "chat", True, _o_raw_stream),
    ("o.streaming_response", "openai", "chat", False, _o_streaming_response),
    ("o.streaming_response_stream", "openai", "chat", True, _o_streaming_response_stream),
]


# --- async twins ---------------------------------------------------------------------------------------------


async def _adrain(it: Any) -> None:
    async for _ in it:
        pass


async def _aa_create(c: Any) -> None:
    await c.messages.create(**A)


async def _aa_create_stream(c: Any) -> None:
    await _adrain(await c.messages.create(**A, stream=True))


async def _aa_stream_text(c: Any) -> None:
    async with c.messages.stream(**A) as s:
        assert "".join([t async for t in s.text_stream])


async def _aa_stream_final(c: Any) -> None:
    async with c.messages.stream(**A) as s:
        assert (await s.get_final_message()).usage.output_tokens > 0


async def _aa_parse(c: Any) -> None:
    await c.messages.parse(**A)


async def _aa_count(c: Any) -> None:
    await c.messages.count_tokens(model=MODEL_A, messages=USER)


async def _aa_beta_create(c: Any) -> None:
    await c.beta.messages.create(**A)


async def _aa_beta_stream(c: Any) -> None:
    async with c.beta.messages.stream(**A) as s:
        await s.get_final_message()


async def _aa_beta_parse(c: Any) -> None:
    await c.beta.messages.parse(**A)


async def _aa_beta_count(c: Any) -> None:
    await c.beta.messages.count_tokens(model=MODEL_A, messages=USER)


async def _aa_raw(c: Any) -> None:
    raw = await c.messages.with_raw_response.create(**A)
    assert (await raw.parse()).content


async def _aa_raw_stream(c: Any) -> None:
    raw = await c.messages.with_raw_response.create(**A, stream=True)
    await _adrain(await raw.parse())


async def _aa_streaming_response(c: Any) -> None:
    async with c.messages.with_streaming_response.create(**A) as resp:
        assert (await resp.parse()).content


async def _aa_streaming_response_stream(c: Any) -> None:
    async with c.messages.with_streaming_response.create(**A, stream=True) as resp:
        await _adrain(await resp.parse())


async def _ao_chat(c: Any) -> None:
    await c.chat.completions.create(**O_CHAT)


async def _ao_chat_stream(c: Any) -> None:
    await _adrain(await c.chat.completions.create(**O_CHAT, stream=True, stream_options={"include_usage": True}))


async def _ao_chat_parse(c: Any) -> None:
    await c.chat.completions.parse(**O_CHAT)


async def _ao_chat_helper(c: Any) -> None:
    async with c.chat.completions.stream(**O_CHAT, stream_options={"include_usage": True}) as s:
        assert (await s.get_final_completion()).choices


async def _ao_resp(c: Any) -> None:
    await c.responses.create(**O_RESP)


async def _ao_resp_stream(c: Any) -> None:
    await _adrain(await c.responses.create(**O_RESP, stream=True))


async def _ao_resp_helper(c: Any) -> None:
    async with c.responses.stream(**O_RESP) as s:
        assert (await s.get_final_response()).output


async def _ao_resp_parse(c: Any) -> None:
    await c.responses.parse(**O_RESP)


async def _ao_compact(c: Any) -> None:
    await c.responses.compact(**O_RESP)


async def _ao_embed(c: Any) -> None:
    await c.embeddings.create(model="text-embedding-3-small", input="hello there")


async def _ao_raw(c: Any) -> None:
    raw = await c.chat.completions.with_raw_response.create(**O_CHAT)
    assert raw.parse().choices  # openai's raw response parses synchronously


async def _ao_raw_stream(c: Any) -> None:
    raw = await c.chat.completions.with_raw_response.create(
        **O_CHAT, stream=True, stream_options={"include_usage": True}
    )
    await _adrain(raw.parse())


async def _ao_streaming_response(c: Any) -> None:
    async with c.responses.with_streaming_response.create(**O_RESP) as resp:
        assert (await resp.parse()).output


async def _ao_streaming_response_stream(c: Any) -> None:
    async with c.chat.completions.with_streaming_response.create(
        **O_CHAT, stream=True, stream_options={"include_usage": True}
    ) as resp:
        await _adrain(await resp.parse())


ASYNC: list[tuple[str, str, str, bool, Callable[[Any], Any]]] = [
    ("a.create", "anthropic", "chat", False, _aa_create),
    ("a.create_stream", "anthropic", "chat", True, _aa_create_stream),
    ("a.stream_text", "anthropic", "chat", True, _aa_stream_text),
    ("a.stream_final", "anthropic", "chat", True, _aa_stream_final),
    ("a.parse", "anthropic", "chat", False, _aa_parse),
    ("a.count_tokens", "anthropic", "count_tokens", False, _aa_count),
    ("a.beta.create", "anthropic", "chat", False, _aa_beta_create),
    ("a.beta.stream", "anthropic", "chat", True, _aa_beta_stream),
    ("a.beta.parse", "anthropic", "chat", False, _aa_beta_parse),
    ("a.beta.count_tokens", "anthropic", "count_tokens", False, _aa_beta_count),
    ("a.raw", "anthropic", "chat", False, _aa_raw),
    ("a.raw_stream", "anthropic", "chat", True, _aa_raw_stream),
    ("a.streaming_response", "anthropic", "chat", False, _aa_streaming_response),
    ("a.streaming_response_stream", "anthropic", "chat", True, _aa_streaming_response_stream),
    ("o.chat", "openai", "chat", False, _ao_chat),
    ("o.chat_stream", "openai", "chat", True, _ao_chat_stream),
    ("o.chat_parse", "openai", "chat", False, _ao_chat_parse),
    ("o.chat_helper", "openai", "chat", True, _ao_chat_helper),
    ("o.responses", "openai", "chat", False, _ao_resp),
    ("o.responses_stream", "openai", "chat", True, _ao_resp_stream),
    ("o.responses_helper", "openai", "chat", True, _ao_resp_helper),
    ("o.responses_parse", "openai", "chat", False, _ao_resp_parse),
    ("o.responses_compact", "openai", "compact", False, _ao_compact),
    ("o.embeddings", "openai", "embeddings", False, _ao_embed),
    ("o.raw", "openai", "chat", False, _ao_raw),
    ("o.raw_stream", "openai", "chat", True, _ao_raw_stream),
    ("o.streaming_response", "openai", "chat", False, _ao_streaming_response),
    ("o.streaming_response_stream", "openai", "chat", True, _ao_streaming_response_stream),
]


def _check(spans: Any, sim: Any, provider: str, operation: str, streamed: bool) -> None:
    # One CLIENT span per call; ``responses.compact`` also reports the server-side compaction as an
    # INTERNAL ``compact`` child span (tested in test_instr_server_compaction.py).
    every = spans()
    span = only_span([s for s in every if s.name != semconv.COMPACT_SPAN])
    if operation == "compact":
        (compact,) = [s for s in every if s.name == semconv.COMPACT_SPAN]
        assert compact.kind is SpanKind.INTERNAL and compact.parent is not None
        assert compact.parent.span_id == span.context.span_id
    else:
        assert len(every) == 1
    a = attrs(span)
    model = MODEL_A if provider == "anthropic" else ("text-embedding-3-small" if operation == "embeddings" else MODEL_O)
    assert span.name == f"{operation} {model}"
    assert span.kind is SpanKind.CLIENT
    assert span.instrumentation_scope is not None and span.instrumentation_scope.name == semconv.SCOPE_NAME
    assert span.status.status_code is StatusCode.UNSET
    assert a[semconv.GEN_AI_OPERATION_NAME] == operation
    assert a[semconv.GEN_AI_PROVIDER_NAME] == provider
    assert a[semconv.GEN_AI_REQUEST_MODEL] == model
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1"
    assert a[semconv.SERVER_PORT] == int(sim.base_url.rsplit(":", 1)[1])
    exchange = sim.last_exchange
    if operation == "chat":
        assert a[semconv.GEN_AI_REQUEST_STREAM] is streamed
        assert a[semconv.GEN_AI_RESPONSE_MODEL] == model
        assert a[semconv.GEN_AI_RESPONSE_ID]
        assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        assert_usage_matches(span, exchange.usage)
        assert a[semconv.CACHE_HIT_RATIO] == 0.0
        if streamed:
            assert a[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
        else:
            assert semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK not in a
    elif operation in ("embeddings", "compact"):
        assert_usage_matches(span, exchange.usage)
    else:  # count_tokens is not an inference: no usage, no chat attributes
        assert semconv.GEN_AI_USAGE_INPUT_TOKENS not in a
        assert semconv.GEN_AI_REQUEST_STREAM not in a


@pytest.mark.parametrize(("provider", "operation", "streamed", "call"), [c[1:] for c in SYNC], ids=[c[0] for c in SYNC])
def test_sync_surface_makes_one_span(
    simulated_provider: Any, spans: Any, provider: str, operation: str, streamed: bool, call: Callable[[Any], None]
) -> None:
    client = simulated_provider.anthropic() if provider == "anthropic" else simulated_provider.openai()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call(client)
    _check(spans, simulated_provider, provider, operation, streamed)


@pytest.mark.parametrize(
    ("provider", "operation", "streamed", "call"), [c[1:] for c in ASYNC], ids=[c[0] for c in ASYNC]
)
async def test_async_surface_makes_one_span(
    simulated_provider: Any, spans: Any, provider: str, operation: str, streamed: bool, call: Callable[[Any], Any]
) -> None:
    client = simulated_provider.async_anthropic() if provider == "anthropic" else simulated_provider.async_openai()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await call(client)
    _check(spans, simulated_provider, provider, operation, streamed)


def test_server_attributes_follow_the_client_and_collected_clients_are_forgotten(
    simulated_provider: Any, spans: Any
) -> None:
    """What is worked out once per client (provider, server address and port) follows a changed ``base_url``,
    and the clients an app makes and drops are not kept, nor their entries."""
    from otel_context.instrumentation.anthropic import AnthropicInstrumentor

    interceptor = AnthropicInstrumentor().interceptor
    assert interceptor is not None
    port = int(simulated_provider.base_url.rsplit(":", 1)[1])
    client = simulated_provider.anthropic()
    client.messages.create(**A)
    client.base_url = f"http://localhost:{port}"
    client.messages.create(**A)
    first, second = spans()
    assert attrs(first)[semconv.SERVER_ADDRESS] == "127.0.0.1"
    assert attrs(second)[semconv.SERVER_ADDRESS] == "localhost"
    for _ in range(20):
        simulated_provider.anthropic().messages.create(**A)
    del client
    gc.collect()
    assert len(interceptor._clients) == 0
