"""What GenAI-aware trace viewers read on a ``compact`` span: a kind, and an input and an output in words.

Such viewers (Arize Phoenix, and other tools built on the OpenInference conventions) give a span a kind from
``openinference.span.kind`` (or from the GenAI attributes they convert, which name no compaction: the GenAI
conventions have no operation for it) and show ``input.value`` / ``output.value`` as its input and output,
in their span lists and detail panes. Without them a ``compact`` span is an "unknown" span with empty input
and output there, a microcompaction and a summary alike. These are foreign names, on the ``compact`` span
only (docs/telemetry.md says why); the span keeps its name and its own ``otel_context.compaction.*`` figures.

The kinds: a summary (or the provider's compaction) is a ``CHAIN``, a step between the app's call and the
model that calls a model itself (its summarizer's ``chat`` span, an ``LLM`` span, is its child); a
microcompaction (or a truncation) is a ``PROMPT``, the request rewritten by rule, with no model call. So the
two read differently in a trace tree at a glance, and the input and output say the rest in one line each:
``summary (reactive, inline): 15,094 tokens`` and ``12,494 tokens (2,600 fewer), 38 messages summarized,
summary of 264 tokens, 100% of the salient items kept``. No message text unless content capture is on: then
the output also carries the summary itself, capped as captured content is.
"""

from __future__ import annotations

from opentelemetry.trace import Span

from otel_context import semconv, telemetry

__all__ = ["describe_input", "describe_output", "kind_of"]

_LABELS = {
    semconv.STRATEGY_MICROCOMPACT: "microcompact",
    semconv.STRATEGY_SUMMARY: "summary",
    semconv.STRATEGY_TRUNCATE: "truncate",
    semconv.STRATEGY_PROVIDER: "provider compaction",
}


def kind_of(strategy: str) -> str:
    """The OpenInference span kind of a compaction by ``strategy`` (see the module docstring)."""
    if strategy in (semconv.STRATEGY_MICROCOMPACT, semconv.STRATEGY_TRUNCATE):
        return semconv.OPENINFERENCE_KIND_PROMPT
    return semconv.OPENINFERENCE_KIND_CHAIN


def describe_input(span: Span, strategy: str, trigger: str, mode: str, input_tokens: int) -> None:
    """The kind, and the input in words: what compacted, why, and the context it was given."""
    text = f"{_LABELS.get(strategy, strategy)} ({trigger}, {mode}): {input_tokens:,} tokens"
    span.set_attributes(
        {
            semconv.OPENINFERENCE_SPAN_KIND: kind_of(strategy),
            semconv.INPUT_VALUE: text,
            semconv.INPUT_MIME_TYPE: semconv.MIME_TEXT_PLAIN,
        }
    )


#: What ``messages_compacted`` counts, by strategy (``{}``: the plural's ``s``).
_WHAT = {
    semconv.STRATEGY_MICROCOMPACT: "tool result{} cleared",
    semconv.STRATEGY_TRUNCATE: "message{} dropped",
    semconv.STRATEGY_SUMMARY: "message{} summarized",
}


def describe_output(
    span: Span,
    outcome: str,
    *,
    strategy: str = semconv.STRATEGY_SUMMARY,
    input_tokens: int = 0,
    output_tokens: int = 0,
    messages_compacted: int = 0,
    summary_tokens: int = 0,
    retention: float | None = None,
    error_type: str | None = None,
    summary: str | None = None,
    max_bytes: int = 0,
) -> None:
    """The output in words: what the compaction left, or why it left nothing (``error_type``: the failure's
    type, or why it was skipped); ``summary`` (None unless content capture is on) is appended, cut to
    ``max_bytes``."""
    if outcome == semconv.OUTCOME_FAILURE:
        text = f"failed: {error_type or 'compaction_failed'}"
    elif outcome == semconv.OUTCOME_DISCARDED:
        text = "discarded: prepared in the background, never sent"
    elif outcome == semconv.OUTCOME_SKIPPED:
        text = f"skipped: {error_type}"
    else:
        what = _WHAT.get(strategy, "message{} compacted").format("" if messages_compacted == 1 else "s")
        text = f"{output_tokens:,} tokens ({input_tokens - output_tokens:,} fewer), {messages_compacted:,} {what}"
        if summary_tokens:
            text += f", summary of {summary_tokens:,} tokens"
        if retention is not None:
            text += f", {retention:.0%} of the salient items kept"
        if summary:
            text += "\n\n" + telemetry.cut_text(summary, max_bytes)[0]
    span.set_attributes({semconv.OUTPUT_VALUE: text, semconv.OUTPUT_MIME_TYPE: semconv.MIME_TEXT_PLAIN})
