"""Server-side compaction requested by the app (OpenAI ``responses.compact``) is reported like any other."""

from __future__ import annotations

from typing import Any

import pytest

from otel_context import semconv
from tests.instrumentation.instr_support import MODEL_O, attrs, counter_total, only_span

pytestmark = [pytest.mark.usefixtures("instrumented"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

HISTORY = [
    {"role": "user", "content": "FACT: the build uses uv. Please read setup.py"},
    {"role": "assistant", "content": "I read it; it pins numpy."},
    {"role": "user", "content": "Now summarize what we know."},
]


def _check(spans: Any, metric_reader: Any) -> None:
    chat = only_span(spans("compact " + MODEL_O))
    (compact,) = spans(semconv.COMPACT_SPAN)
    assert compact.parent is not None and compact.parent.span_id == chat.context.span_id
    a = attrs(compact)
    assert a[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_PROVIDER
    assert a[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_PROVIDER
    assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert a[semconv.COMPACTION_INPUT_TOKENS] == attrs(chat)[semconv.GEN_AI_USAGE_INPUT_TOKENS]
    assert attrs(chat)[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert counter_total(metric_reader, semconv.METRIC_COMPACTIONS) == 1


def test_responses_compact_is_a_provider_compaction(simulated_provider: Any, spans: Any, metric_reader: Any) -> None:
    client = simulated_provider.openai()
    client.responses.compact(model=MODEL_O, input=HISTORY)
    _check(spans, metric_reader)


async def test_async_responses_compact_is_a_provider_compaction(
    simulated_provider: Any, spans: Any, metric_reader: Any
) -> None:
    client = simulated_provider.async_openai()
    await client.responses.compact(model=MODEL_O, input=HISTORY)
    _check(spans, metric_reader)


def test_a_failed_compact_call_is_not_reported_as_a_compaction(
    simulated_provider: Any, spans: Any, metric_reader: Any
) -> None:
    from otel_context.testing import Fault

    client = simulated_provider.openai()
    simulated_provider.inject(Fault(status=500))
    with pytest.raises(Exception, match=r"500|server"):
        client.responses.compact(model=MODEL_O, input=HISTORY)
    assert spans(semconv.COMPACT_SPAN) == []
    assert counter_total(metric_reader, semconv.METRIC_COMPACTIONS) == 0
