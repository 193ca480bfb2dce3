"""A ``compact`` span reads well in a GenAI-aware viewer (docs/telemetry.md, the compact span; docs/viewing.md):
a kind (OpenInference's ``openinference.span.kind``, which Arize Phoenix reads), an input and an output in words,
a microcompaction and a summary told apart at a glance; the summary's text only with content capture on.

Through the explicit API with a real SDK client on the simulated provider, spans in memory; the demo's run
(tests/demo/test_run.py) checks the same on every compaction of a full session, reactive ones included.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_context import Compactor, semconv
from otel_context.settings import Settings
from tests.compaction.support import Otel, anthropic_agent
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"


@pytest.mark.parametrize("capture", ["NO_CONTENT", "SPAN_ONLY"])
def test_a_summary_and_a_microcompaction_have_a_kind_an_input_and_an_output(
    anthropic_client: Any, otel: Otel, capture: str
) -> None:
    compactor = Compactor(anthropic_client, settings=Settings(capture_content=capture))  # type: ignore[arg-type]
    micro = compactor.microcompact(anthropic_agent(20, 9000), window=30_000)
    summary = compactor.compact(anthropic_agent(10), model=MODEL)
    assert micro.compacted and summary.compacted
    micro_span, summary_span = otel.compact_spans()
    m, s = attrs_of(micro_span), attrs_of(summary_span)
    # The span's name stays what the documented searches look for; the kind tells the two apart.
    assert micro_span.name == summary_span.name == semconv.COMPACT_SPAN
    assert m[semconv.OPENINFERENCE_SPAN_KIND] == semconv.OPENINFERENCE_KIND_PROMPT
    assert s[semconv.OPENINFERENCE_SPAN_KIND] == semconv.OPENINFERENCE_KIND_CHAIN
    # The input and output in words, with the span's own figures.
    assert m[semconv.INPUT_VALUE] == f"microcompact (manual, inline): {micro.input_tokens:,} tokens"
    assert s[semconv.INPUT_VALUE] == f"summary (manual, inline): {summary.input_tokens:,} tokens"
    saved = summary.input_tokens - summary.output_tokens
    assert s[semconv.OUTPUT_VALUE].startswith(
        f"{summary.output_tokens:,} tokens ({saved:,} fewer), {s[semconv.COMPACTION_MESSAGES_COMPACTED]:,} messages"
        f" summarized, summary of {s[semconv.COMPACTION_SUMMARY_TOKENS]:,} tokens, "
    )
    cleared = m[semconv.COMPACTION_MESSAGES_COMPACTED]
    assert m[semconv.OUTPUT_VALUE].startswith(
        f"{micro.output_tokens:,} tokens ({micro.input_tokens - micro.output_tokens:,} fewer), {cleared:,} tool result"
    )
    assert {a[k] for a in (m, s) for k in (semconv.INPUT_MIME_TYPE, semconv.OUTPUT_MIME_TYPE)} == {"text/plain"}
    # The summary's text (the conversation's words) only with content capture on, after the figures.
    assert summary.summary and len(summary.summary) > 200
    if capture == "NO_CONTENT":
        assert "\n" not in s[semconv.OUTPUT_VALUE] and summary.summary[:100] not in s[semconv.OUTPUT_VALUE]
    else:
        figures, text = s[semconv.OUTPUT_VALUE].split("\n\n", 1)
        assert text == summary.summary and "\n" not in figures
    assert "\n" not in m[semconv.OUTPUT_VALUE]  # a microcompaction writes no text of its own


def test_a_failed_summary_says_why_in_its_output(otel: Otel) -> None:
    def refuse(body: dict[str, Any]) -> str:
        raise RuntimeError("the summarizer is down")

    result = Compactor(refuse).compact(anthropic_agent(10), model=MODEL, wire_format="anthropic_messages")
    assert not result.compacted
    (span,) = otel.compact_spans()
    a = attrs_of(span)
    assert a[semconv.OPENINFERENCE_SPAN_KIND] == semconv.OPENINFERENCE_KIND_CHAIN
    assert a[semconv.OUTPUT_VALUE] == f"failed: {a[semconv.ERROR_TYPE]}"
