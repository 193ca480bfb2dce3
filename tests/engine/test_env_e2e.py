"""The env knobs reach a real instrumented call (not only Settings parsing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import run_anthropic_agent
from tests.values import attrs_of


@pytest.mark.parametrize("extra", [{}, {"OTEL_CONTEXT_SUMMARY_MODEL": "claude-haiku-4-5"}])
def test_env_window_compacts_a_real_call(
    simulated_provider: Any,
    otel: Otel,
    instrumented: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    extra: dict[str, str],
) -> None:
    model = "claude-sonnet-4-6"
    monkeypatch.setenv("OTEL_CONTEXT_AUTO_COMPACT_WINDOW", "12000")
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    instrumented()
    run_anthropic_agent(simulated_provider.anthropic(), model, 8)
    compacts = otel.compact_spans()
    assert compacts and attrs_of(compacts[0])[semconv.COMPACTION_THRESHOLD_TOKENS] < 12_000
    summary_models = {
        e.body["model"] for e in simulated_provider.exchanges if "<summary>" in str(e.body.get("messages", [])[-1])
    }
    assert summary_models == {extra.get("OTEL_CONTEXT_SUMMARY_MODEL", model)}


def test_env_compaction_off_keeps_telemetry(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_AUTO_COMPACT_WINDOW", "12000")
    monkeypatch.setenv("OTEL_CONTEXT_COMPACTION", "off")
    simulated_provider.set_window("claude-sonnet-4-6", 200_000)
    instrumented()
    run_anthropic_agent(simulated_provider.anthropic(), "claude-sonnet-4-6", 8)
    assert otel.compact_spans() == []
    chats = [s for s in otel.spans() if s.name.startswith("chat ")]
    assert chats and all(attrs_of(s)[semconv.CONTEXT_WINDOW] == 12_000 for s in chats)
    assert attrs_of(chats[-1])[semconv.CONTEXT_STATE] in ("error", "blocking")
