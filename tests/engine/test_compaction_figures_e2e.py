"""The ``compact`` span's ``output_tokens`` is the size of the request that carried the compacted context.

docs/telemetry.md (the compact span): ``otel_context.compaction.output_tokens`` is the context after the compaction (summary +
kept messages + rehydrated files). The chat call that carries that context reports its real size
(``gen_ai.usage.input_tokens``, counted by the simulated provider's tokenizer), so the two must agree.

The agents read large files (about 9,000 tokens per tool result) and the Anthropic agent moves its
``cache_control`` breakpoint onto the newest message every call: the pattern where the engine's pre-call
estimate counts the previous call's last message (a big tool result) twice, which used to be carried into
the reported figure (up to +49 % here, +77 % in the demo).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import run_anthropic_agent, run_openai_chat_agent
from tests.values import attrs_of

WINDOW = 30_000
TURNS = 14
FILE_LINES = 1_500
#: How far the reported figure may be from the provider's count (our estimator pads on purpose).
TOLERANCE = 0.15


def _summary_compactions(otel: Otel) -> list[tuple[Any, Any]]:
    """(compact span, the chat span whose request carried its result) for each summary compaction."""
    by_id = {s.context.span_id: s for s in otel.spans()}
    pairs = []
    for span in otel.compact_spans():
        if attrs_of(span)[semconv.COMPACTION_STRATEGY] != semconv.STRATEGY_SUMMARY:
            continue
        assert span.parent is not None
        # Transparent mode: the compact span is a child of the chat span whose request it rewrote.
        pairs.append((span, by_id[span.parent.span_id]))
    return pairs


@pytest.mark.parametrize("wire", ["anthropic", "openai_chat"])
def test_compact_output_tokens_match_the_compacted_request(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], wire: str
) -> None:
    instrumented(auto_compact_window=WINDOW)
    if wire == "anthropic":
        model = "claude-sonnet-4-6"
        simulated_provider.set_window(model, WINDOW)
        run_anthropic_agent(simulated_provider.anthropic(), model, TURNS, FILE_LINES)
    else:
        model = "gpt-4o"
        simulated_provider.set_window(model, WINDOW)
        run_openai_chat_agent(simulated_provider.openai(), model, TURNS, FILE_LINES)
    assert [e.status for e in simulated_provider.exchanges if e.status != 200] == []
    pairs = _summary_compactions(otel)
    assert len(pairs) >= 2, "the run must cross the threshold more than once"
    for compact, chat in pairs:
        attrs = compact.attributes
        assert attrs[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
        assert chat.attributes[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
        reported = chat.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS]
        output = attrs[semconv.COMPACTION_OUTPUT_TOKENS]
        assert abs(output - reported) <= TOLERANCE * reported, (
            f"compact output_tokens {output} vs {reported} reported for the compacted request"
        )
        # Before and after in the same units: the compaction made the context smaller.
        assert output < attrs[semconv.COMPACTION_INPUT_TOKENS]
