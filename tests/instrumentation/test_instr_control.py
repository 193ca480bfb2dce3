"""Turning instrumentation on and off: native spans, uninstrument, stacking, suppression, versions, settings."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation

import otel_context
from otel_context import SettingsError, semconv, telemetry
from tests.instrumentation.instr_support import MODEL_A, MODEL_O, USER, attrs, only_span

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

A: dict[str, Any] = {"model": MODEL_A, "max_tokens": 100, "messages": USER}


@pytest.fixture
def otel(spans: Any, metric_reader: Any) -> Any:
    yield spans
    otel_context.uninstrument()


def _originals() -> dict[str, Any]:
    from anthropic import _base_client as ab
    from openai import _base_client as ob

    return {
        "a.sync": ab.SyncAPIClient.__dict__["request"],
        "a.async": ab.AsyncAPIClient.__dict__["request"],
        "a.tracer": ab.BaseClient.__dict__["_tracer"],
        "o.sync": ob.SyncAPIClient.__dict__["request"],
        "o.async": ob.AsyncAPIClient.__dict__["request"],
    }


def test_sdk_native_span_is_replaced_by_ours(simulated_provider: Any, otel: Any) -> None:
    client = simulated_provider.anthropic()
    client.messages.create(**A)
    native = otel()
    assert [s.name for s in native] == ["anthropic.messages.create"]  # the SDK traces itself when not instrumented
    otel.clear()
    otel_context.instrument()
    client.messages.create(**A)
    assert only_span(otel()).name == f"chat {MODEL_A}"
    # Kept off for our calls only: outside them (the SDK's tool-runner spans ask too) the SDK traces as before.
    assert client._tracer is not None


async def test_native_span_kept_off_for_streams_and_async_calls_only(simulated_provider: Any, otel: Any) -> None:
    otel_context.instrument()
    client, aclient = simulated_provider.anthropic(), simulated_provider.async_anthropic()
    for _ in client.messages.create(**A, stream=True):
        assert client._tracer is not None  # the app's own code between chunks runs outside our call
    await aclient.messages.create(**A)
    assert [s.name for s in otel()] == [f"chat {MODEL_A}"] * 2
    assert client._tracer is not None and aclient._tracer is not None


def test_native_span_opt_out_keeps_it_as_child(simulated_provider: Any, otel: Any) -> None:
    otel_context.instrument(anthropic_native_spans=True)
    simulated_provider.anthropic().messages.create(**A)
    by_name = {s.name: s for s in otel()}
    assert set(by_name) == {f"chat {MODEL_A}", "anthropic.messages.create"}
    ours, native = by_name[f"chat {MODEL_A}"], by_name["anthropic.messages.create"]
    assert native.parent is not None and native.parent.span_id == ours.context.span_id


def test_env_opt_out(simulated_provider: Any, otel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_ANTHROPIC_NATIVE_SPANS", "true")
    otel_context.instrument()
    simulated_provider.anthropic().messages.create(**A)
    assert len(otel()) == 2


def test_uninstrument_restores_the_sdk_exactly(simulated_provider: Any, otel: Any) -> None:
    before = _originals()
    client = simulated_provider.openai()  # created before instrumenting: instrumented too
    otel_context.instrument()
    assert _originals() != before
    client.chat.completions.create(model=MODEL_O, messages=USER)
    assert len(otel()) == 1
    otel_context.uninstrument()
    assert _originals() == before
    otel.clear()
    client.chat.completions.create(model=MODEL_O, messages=USER)
    assert otel() == []
    otel_context.instrument()
    client.chat.completions.create(model=MODEL_O, messages=USER)
    assert len(otel()) == 1


def test_instrumenting_twice_does_not_stack(simulated_provider: Any, otel: Any) -> None:
    from openai import _base_client as ob

    original = ob.SyncAPIClient.__dict__["request"]
    otel_context.instrument()
    otel_context.instrument(capture_content="SPAN_ONLY")
    wrapper = ob.SyncAPIClient.__dict__["request"]
    assert wrapper.__wrapped__ is original
    simulated_provider.openai().chat.completions.create(model=MODEL_O, messages=USER)
    span = only_span(otel())
    assert semconv.GEN_AI_INPUT_MESSAGES in attrs(span)  # the second call's settings are in force


def test_instrumentor_classes(simulated_provider: Any, otel: Any) -> None:
    from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

    from otel_context.instrumentation.anthropic import AnthropicInstrumentor
    from otel_context.instrumentation.openai import OpenAIInstrumentor

    assert issubclass(AnthropicInstrumentor, BaseInstrumentor) and issubclass(OpenAIInstrumentor, BaseInstrumentor)
    assert list(AnthropicInstrumentor().instrumentation_dependencies()) == ["anthropic >= 2.10, < 3"]
    AnthropicInstrumentor().instrument()
    simulated_provider.anthropic().messages.create(**A)
    simulated_provider.openai().chat.completions.create(model=MODEL_O, messages=USER)
    assert [s.instrumentation_scope.name for s in otel() if s.instrumentation_scope] == ["otel_context"]
    AnthropicInstrumentor().uninstrument()


def test_suppress_instrumentation_makes_no_span_at_all(simulated_provider: Any, otel: Any) -> None:
    otel_context.instrument()
    with suppress_instrumentation():
        simulated_provider.anthropic().messages.create(**A)
        simulated_provider.openai().chat.completions.create(model=MODEL_O, messages=USER)
    assert otel() == []  # not ours, and not the anthropic SDK's own either


def test_unsupported_version_warns_once_and_is_left_alone(
    otel: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.metadata as md

    real = md.version
    monkeypatch.setattr(md, "version", lambda name: "9.0.0" if name == "openai" else real(name))
    telemetry._logged.discard("unsupported:openai >= 3.50, < 4")
    before = _originals()
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        otel_context.instrument()
        otel_context.instrument()
    messages = [r.getMessage() for r in caplog.records if "not supported" in r.getMessage()]
    assert messages == ["otel_context: openai 9.0.0 is not supported (openai >= 3.50, < 4); it is left uninstrumented"]
    after = _originals()
    assert after["o.sync"] is before["o.sync"]
    assert after["a.sync"] is not before["a.sync"]
    otel_context.uninstrument()
    from otel_context.instrumentation.openai import OpenAIInstrumentor

    caplog.clear()
    telemetry._logged.discard("unsupported:openai >= 3.50, < 4")
    with caplog.at_level(logging.WARNING):
        OpenAIInstrumentor().instrument()  # the OpenTelemetry path: the same single warning, no error
        OpenAIInstrumentor().uninstrument()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert _originals()["o.sync"] is before["o.sync"]


def test_bad_settings_fail_at_instrument_time(otel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="SPAN_ONLY"):
        otel_context.instrument(capture_content="sometimes")
    with pytest.raises(SettingsError, match="unknown setting"):
        otel_context.instrument(capture_contents="SPAN_ONLY")
    monkeypatch.setenv("OTEL_CONTEXT_CAPTURE_MAX_CHARS", "lots")
    with pytest.raises(SettingsError, match="capture_max_chars"):
        otel_context.instrument(capture_max_chars="lots")
    # From the environment, the default applies (tests/engine/test_env_bad_values.py has the warning).
    assert otel_context.instrument().capture_max_chars == 16_384


def test_azure_client_is_azure_provider(simulated_provider: Any, otel: Any) -> None:
    import openai

    otel_context.instrument()
    client = openai.AzureOpenAI(
        api_key="k", api_version="2025-01-01", azure_endpoint=simulated_provider.base_url, max_retries=0
    )
    with pytest.raises(openai.APIStatusError):  # the simulated provider does not serve Azure's deployment paths
        client.chat.completions.create(model=MODEL_O, messages=USER)
    span = only_span(otel())
    assert attrs(span)[semconv.GEN_AI_PROVIDER_NAME] == semconv.PROVIDER_AZURE_OPENAI
    assert span.name == f"chat {MODEL_O}"


def test_deepseek_by_base_url() -> None:
    import openai

    from otel_context.instrumentation.openai import OpenAISpec

    spec = OpenAISpec()
    deepseek = openai.OpenAI(base_url="https://api.deepseek.com/v1", api_key="k")
    plain = openai.OpenAI(base_url="https://api.openai.com/v1", api_key="k")
    assert spec.provider(deepseek, "api.deepseek.com") == semconv.PROVIDER_DEEPSEEK
    assert spec.provider(plain, "api.openai.com") == semconv.PROVIDER_OPENAI


def test_unlisted_endpoints_pass_through(simulated_provider: Any, otel: Any) -> None:
    otel_context.instrument()
    client = simulated_provider.openai()
    with pytest.raises(Exception):  # noqa: B017 - whatever the simulated provider answers to an unknown path
        client.models.list()
    assert [s for s in otel() if s.instrumentation_scope and s.instrumentation_scope.name == "otel_context"] == []


def test_wrapped_objects_keep_their_type_and_api(simulated_provider: Any, otel: Any) -> None:
    import anthropic
    import openai

    otel_context.instrument()
    stream = simulated_provider.anthropic().messages.create(**A, stream=True)
    assert isinstance(stream, anthropic.Stream)
    assert stream.response.headers["content-type"].startswith("text/event-stream")
    with stream:
        events = [e.type for e in stream]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    raw = simulated_provider.openai().chat.completions.with_raw_response.create(model=MODEL_O, messages=USER)
    assert isinstance(raw, openai._legacy_response.LegacyAPIResponse)
    assert raw.http_response.status_code == 200
    assert len(otel()) == 2


def test_vertex_client_shares_the_path(simulated_provider: Any, otel: Any) -> None:
    import anthropic

    otel_context.instrument()
    client = anthropic.AnthropicVertex(
        region="us-east5", project_id="p", access_token="t", base_url=simulated_provider.base_url, max_retries=0
    )
    with pytest.raises(anthropic.APIStatusError):  # the simulated provider does not serve Vertex paths
        client.messages.create(**A)
    span = only_span(otel())
    assert attrs(span)[semconv.GEN_AI_PROVIDER_NAME] == semconv.PROVIDER_GCP_VERTEX
    assert span.name == f"chat {MODEL_A}"
