"""The providers' cache diagnoses on unusual answers (issue 51 item 7): an endpoint that does not diagnose,
a diagnosis of a shape no documentation gives, token counts that are no counts, and an Anthropic stream whose
later event says pending after its first gave the verdict. Each reads as no verdict (``unknown``) or keeps the
verdict given, and never counts for or against the detector.

The real SDK clients (sync, raw streams and the stream helpers), the instrumentation and the engine against the
simulated provider answering as :attr:`SimulatedProvider.diagnoses` says; read back from the spans and the
``otel_context.cache_diagnoses`` counter.
"""

from __future__ import annotations

from typing import Any

import pytest

import otel_context
from otel_context import semconv
from tests.cache.test_provider_diagnostics import (
    ALL_MODES,
    SYSTEM,
    Chat,
    _client,
    _close,
    diagnoses,
    main_chat_spans,
)

UNKNOWN = semconv.DIAGNOSIS_UNKNOWN
#: The SDKs' stream helpers rebuild the final message with pydantic, which warns about the unreadable shape
#: (the SDK's own warning, not ours: the raw streams and sync calls make none).
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


async def _run(sim: Any, provider: str, mode: str, answer: str, *, change_system: bool = False) -> Chat:
    """Three turns of a chat asking for the diagnosis (the third after a system-prompt change, when asked)."""
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    sim.diagnoses = answer
    chat = Chat(provider, mode, _client(sim, provider, mode))
    try:
        await chat.turn(1)
        await chat.turn(2)
        if change_system:
            chat.system = "Today is 2026-12-03. " + SYSTEM
        await chat.turn(3)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    return chat


@pytest.mark.parametrize("answer", ["ignored", "unreadable"])
@pytest.mark.parametrize(("provider", "mode"), ALL_MODES)
async def test_no_readable_diagnosis_is_unknown_never_a_hit_nor_pending(
    answer: str, provider: str, mode: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    # Before: an Anthropic response without the field, or with an unreadable reason, read as a hit; an OpenAI
    # endpoint that ignores prompt_cache_options made every call pending.
    await _run(simulated_provider, provider, mode, answer, change_system=True)
    later = [s.attributes for s in main_chat_spans(spans)[1:]]
    assert [a[semconv.CACHE_DIAGNOSIS_STATUS] for a in later] == [UNKNOWN, UNKNOWN]
    assert [a[semconv.CACHE_DIAGNOSIS_AGREEMENT] for a in later] == [semconv.AGREEMENT_UNKNOWN] * 2
    assert not any(semconv.CACHE_DIAGNOSIS_PROVIDER_REASON in a for a in later)
    # Counted as no verdict: the detector's own reasons (none, then the system change it saw) against unknown.
    assert diagnoses(metric_reader) == {
        (semconv.DETECTOR_NONE, UNKNOWN, semconv.AGREEMENT_UNKNOWN): 1,
        (semconv.REASON_SYSTEM_CHANGED, UNKNOWN, semconv.AGREEMENT_UNKNOWN): 1,
    }


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_token_counts_that_are_no_counts_are_left_out_and_the_verdict_stands(
    provider: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    # Anthropic 2**70 missed tokens; OpenAI -5 missed and 2**70 reusable (2**70 made the OTLP exporter log an
    # error and drop the attribute).
    await _run(simulated_provider, provider, "sync", "bad_counts", change_system=True)
    changed = main_chat_spans(spans)[2].attributes
    assert changed[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_MISS
    assert semconv.CACHE_DIAGNOSIS_MISSED_TOKENS not in changed
    assert semconv.CACHE_DIAGNOSIS_REUSABLE_TOKENS not in changed
    assert changed[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE
    numbers = [v for s in spans() for v in s.attributes.values() if isinstance(v, int) and not isinstance(v, bool)]
    assert all(-(2**63) <= v < 2**63 for v in numbers)  # what OTLP's int64 can carry


@pytest.mark.parametrize("mode", ["stream", "helper"])
async def test_a_later_null_in_an_anthropic_stream_does_not_take_back_the_miss(
    mode: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    # message_start gives the miss; message_delta then says cache_miss_reason: null (pending).
    await _run(simulated_provider, "anthropic", mode, "retracted", change_system=True)
    changed = main_chat_spans(spans)[2].attributes
    assert changed[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_MISS
    assert changed[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] == semconv.REASON_SYSTEM_CHANGED
    assert changed[semconv.CACHE_DIAGNOSIS_MISSED_TOKENS] > 2_000
    assert changed[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE
    assert main_chat_spans(spans)[1].attributes[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_HIT
