"""Per-model context windows (``OTEL_CONTEXT_MODEL_WINDOWS`` / ``model_windows=``) on real instrumented calls.

An app with two models, or with a self-hosted model the built-in table does not know, declares each
window; a declared window compacts that model's conversation and leaves the other models' windows alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import run_anthropic_agent, run_openai_chat_agent
from tests.values import attrs_of


def _windows(otel: Otel) -> dict[str, int | None]:
    """The context window on each model's chat spans (None when the span has none)."""
    found: dict[str, int | None] = {}
    for span in otel.spans():
        if span.name.startswith("chat ") and span.attributes is not None:
            window = span.attributes.get(semconv.CONTEXT_WINDOW)
            found[str(span.attributes[semconv.GEN_AI_REQUEST_MODEL])] = window if isinstance(window, int) else None
    return found


def _ask(client: Any, model: str) -> None:
    client.chat.completions.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "hello"}])


def test_env_declares_a_window_per_model_by_prefix(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_MODEL_WINDOWS", "my-local-llama=32768, gpt-4o=100000")
    instrumented()
    client = simulated_provider.openai()
    for model in ("my-local-llama-3-8b", "gpt-4o-mini", "gpt-4.1-mini"):
        _ask(client, model)
    # Prefix matching like the table; a model the setting does not name keeps the table's window.
    assert _windows(otel) == {"my-local-llama-3-8b": 32_768, "gpt-4o-mini": 100_000, "gpt-4.1-mini": 1_047_576}


def test_a_declared_window_beats_the_one_window_for_every_model(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_AUTO_COMPACT_WINDOW", "50000")
    instrumented(model_windows={"gpt-4o": 90_000})
    client = simulated_provider.openai()
    _ask(client, "gpt-4o")
    _ask(client, "gpt-4.1")
    assert _windows(otel) == {"gpt-4o": 90_000, "gpt-4.1": 50_000}


def test_a_window_declared_in_code_compacts_a_self_hosted_model(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window("my-local-llama", 32_768)
    instrumented(model_windows={"my-local-llama": 12_000})
    run_openai_chat_agent(simulated_provider.openai(), "my-local-llama", 8)
    compacts = otel.compact_spans()
    assert compacts, "the declared window should have triggered a compaction"
    assert all(attrs_of(s) is not None and attrs_of(s)[semconv.COMPACTION_THRESHOLD_TOKENS] < 12_000 for s in compacts)


def test_an_unknown_model_is_observed_and_the_log_says_how_to_declare_it(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    instrumented()
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        run_anthropic_agent(simulated_provider.anthropic(), "acme-unknown-model-7", 3)
    assert otel.compact_spans() == []
    assert _windows(otel) == {"acme-unknown-model-7": None}
    hints = [r.getMessage() for r in caplog.records if "acme-unknown-model-7" in r.getMessage()]
    assert len(hints) == 1, hints  # once, not once per call
    assert 'OTEL_CONTEXT_MODEL_WINDOWS="acme-unknown-model-7=<tokens>"' in hints[0]


def test_a_malformed_entry_is_a_warning_naming_it_and_the_rest_applies(
    simulated_provider: Any,
    otel: Otel,
    instrumented: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_MODEL_WINDOWS", "my-local-llama=lots,gpt-4o=100000,=5")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        instrumented()
    messages = [r.getMessage() for r in caplog.records]
    assert any("'my-local-llama=lots'" in m and "OTEL_CONTEXT_MODEL_WINDOWS" in m for m in messages), messages
    assert any("'=5'" in m for m in messages), messages
    _ask(simulated_provider.openai(), "gpt-4o")
    assert _windows(otel) == {"gpt-4o": 100_000}


@pytest.mark.parametrize("bad", [{"gpt-4o": 0}, {"gpt-4o": "big"}, {"": 1000}, 12])
def test_a_malformed_mapping_in_code_is_a_clear_settings_error(bad: Any) -> None:
    with pytest.raises(otel_context.SettingsError, match="model_windows"):
        otel_context.Settings().replace(model_windows=bad)
