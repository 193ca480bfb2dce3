"""The explicit API: Compactor.compact / acompact with a real SDK client or a function, should_compact."""

from __future__ import annotations

import copy
from typing import Any

from compaction.support import FakeSummarizer, Otel, anthropic_agent
from otel_context import Compactor, semconv, should_compact
from otel_context.settings import Settings


def test_should_compact_follows_the_budget() -> None:
    small = anthropic_agent(2)
    big = anthropic_agent(12, 8000)
    assert not should_compact(small, model="claude-sonnet-4-6", window=30_000)
    assert should_compact(big, model="claude-sonnet-4-6", window=30_000)
    assert not should_compact(big, model="unknown-model")
    assert not should_compact(
        big, model="claude-sonnet-4-6", window=30_000, settings=Settings(disable_auto_compact=True)
    )


def test_compact_with_the_real_sdk_client(anthropic_client: Any, otel: Otel) -> None:
    history = anthropic_agent(10)
    before = copy.deepcopy(history)
    result = Compactor(client=anthropic_client).compact(history, model="claude-sonnet-4-6")
    assert history == before
    assert result.compacted and result.outcome == "success"
    assert "FACT: use clap" in result.summary  # the simulated summarizer keeps FACT lines verbatim
    assert len(result.messages) < len(history)
    (span,) = otel.compact_spans()
    assert span.attributes[semconv.COMPACTION_TRIGGER_SOURCE] == "manual"


async def test_acompact_with_an_async_function() -> None:
    async def summarize(body: dict[str, Any]) -> str:
        return FakeSummarizer.text

    result = await Compactor(client=summarize).acompact(
        anthropic_agent(10), model="claude-sonnet-4-6", wire_format="anthropic_messages"
    )
    assert result.compacted and result.summary.startswith("1. Primary request")


def test_failed_summarizer_returns_the_original_messages() -> None:
    def down(body: dict[str, Any]) -> str:
        raise RuntimeError("down")

    history = anthropic_agent(10)
    result = Compactor(client=down).compact(history, model="claude-sonnet-4-6", wire_format="anthropic_messages")
    assert not result.compacted and result.messages == history and result.error
