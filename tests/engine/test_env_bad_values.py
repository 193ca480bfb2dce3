"""A telemetry setting never stops an app: a value from the environment that otel-context cannot use is one
warning (the variable, the value, what is allowed) and the default; from code it stays a SettingsError.

And ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``/``false``, which the upstream GenAI
instrumentations document, means what it means there.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.testing import SimulatedProvider
from tests.compaction.support import Otel

APP = """
import otel_context.auto
from otel_context.testing import SimulatedProvider

print("settings", otel_context.auto.settings.capture_content, otel_context.auto.settings.compaction,
      otel_context.auto.settings.capture_max_chars, otel_context.auto.settings.summary_model)
with SimulatedProvider() as sim:
    reply = sim.anthropic().messages.create(
        model="claude-sonnet-4-6", max_tokens=50, messages=[{"role": "user", "content": "Hi words:3"}]
    )
print("answered", reply.stop_reason)
"""

BAD = {
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "sometimes",
    "OTEL_CONTEXT_COMPACTION": "aggressive",
    "OTEL_CONTEXT_CAPTURE_MAX_CHARS": "lots",
    "OTEL_CONTEXT_SUMMARY_MODEL": "anthropic:claude-haiku-4-5,anthropic:claude-sonnet-4-6",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon",
}


def test_bad_environment_values_warn_and_the_app_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(BAD, OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="none")
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: one line, no retries
    proc = subprocess.run(
        [sys.executable, "-c", APP], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "settings NO_CONTENT auto 16384 None" in proc.stdout
    assert "answered end_turn" in proc.stdout
    lines = proc.stderr.splitlines()
    assert not any("Traceback" in line for line in lines), proc.stderr
    for variable, value in BAD.items():
        found = [line for line in lines if f"{variable}={value!r}" in line]
        assert len(found) == 1, (variable, proc.stderr)
        assert "using the default" in found[0]
    said = "\n".join(lines)
    assert "allowed: NO_CONTENT, SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT, or true (= EVENT_ONLY)" in said
    assert "allowed: auto, observe, off; using the default (auto) instead" in said
    assert "names more than one model for a provider" in said
    assert "use one of http/protobuf, grpc" in said


def test_from_code_a_bad_value_is_still_an_error() -> None:
    with pytest.raises(otel_context.SettingsError, match="compaction='aggressive' is not a compaction mode"):
        otel_context.Settings().replace(compaction="aggressive")
    with pytest.raises(otel_context.SettingsError, match="summary_model"):
        otel_context.Settings().replace(summary_model="openai:gpt-4o,openai:gpt-5")


@pytest.mark.parametrize(("value", "events"), [("true", 1), ("True", 1), ("false", 0)])
def test_capture_content_true_and_false_as_upstream_means_them(
    simulated_provider: SimulatedProvider,
    otel: Otel,
    instrumented: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str,
    events: int,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        settings = instrumented()
    assert settings.capture_content == ("EVENT_ONLY" if events else "NO_CONTENT")
    assert caplog.records == []
    simulated_provider.openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Say hello words:3"}]
    )
    (span,) = [s for s in otel.spans() if s.name == "chat gpt-4o"]
    assert semconv.GEN_AI_INPUT_MESSAGES not in (span.attributes or {})  # true: events, as upstream
    assert len(span.events) == events
    if events:
        (event,) = span.events
        assert event.name == semconv.EVENT_GEN_AI_CLIENT_INFERENCE_DETAILS
        sent = json.loads(str((event.attributes or {})[semconv.GEN_AI_INPUT_MESSAGES]))
        assert sent[0]["parts"][0]["content"] == "Say hello words:3"


IMPOSSIBLE = {
    # No model is named ":::": refused, rather than sent to the provider at every compaction.
    "OTEL_CONTEXT_SUMMARY_MODEL": ":::",
    # A window no compaction can work in (a slip of the keyboard for 100000): refused, the table's applies.
    "OTEL_CONTEXT_MODEL_WINDOWS": "claude-sonnet-4-6=10,my-local-llama=32768",
    "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": "10",
}


def test_impossible_names_and_windows_are_refused_at_start_with_one_line_each() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(IMPOSSIBLE, OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    app = (
        "import otel_context.auto\n"
        "from otel_context.compaction.budget import budget_for\n"
        "s = otel_context.auto.settings\n"
        "print('settings', s.summary_model, s.model_windows, s.auto_compact_window)\n"
        "print('window', budget_for('claude-sonnet-4-6', s).window)\n"
    )
    proc = subprocess.run([sys.executable, "-c", app], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "settings None (('my-local-llama', 32768),) None" in proc.stdout
    assert "window 200000" in proc.stdout  # the table's window, not 10
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    (model,) = [line for line in lines if "OTEL_CONTEXT_SUMMARY_MODEL" in line]
    assert "':::' is not a model name" in model and "using the default (none) instead" in model
    (windows,) = [line for line in lines if "OTEL_CONTEXT_MODEL_WINDOWS" in line]
    assert "ignoring 'claude-sonnet-4-6=10'; 10 tokens is too small a context window" in windows
    assert "needs at least 4,096" in windows
    (window,) = [line for line in lines if "OTEL_CONTEXT_AUTO_COMPACT_WINDOW" in line]
    assert "'10' is too small a context window" in window and "using the default (none)" in window


def test_from_code_an_impossible_name_or_window_is_an_error() -> None:
    with pytest.raises(otel_context.SettingsError, match="':::' is not a model name"):
        otel_context.Settings().replace(summary_model=":::")
    with pytest.raises(otel_context.SettingsError, match="'a b' is not a model name"):
        otel_context.Settings().replace(summary_model="anthropic:a b")
    with pytest.raises(otel_context.SettingsError, match="too small a context window"):
        otel_context.Settings().replace(model_windows={"claude-sonnet-4-6": 10})
    with pytest.raises(otel_context.SettingsError, match="auto_compact_window=10 is too small"):
        otel_context.Settings().replace(auto_compact_window=10)
    # Real names of every shape pass: fine-tunes, gateways, Vertex, local models.
    for name in (
        "ft:gpt-4o-mini:org::abc123",
        "anthropic/claude-3.5-sonnet",
        "claude-3-5-sonnet-v2@20241022",
        "llama3:8b",
    ):
        assert otel_context.Settings().replace(summary_model=name).summary_model == name
