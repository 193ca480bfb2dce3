"""The rules by which the detector's reason and the provider's diagnosis agree (docs/telemetry.md, "The provider's
cache diagnosis"), one row per rule."""

from __future__ import annotations

import pytest

from otel_context import cache, semconv
from otel_context.usage import CacheDiagnosis

AGREE, DISAGREE, UNKNOWN = semconv.AGREEMENT_AGREE, semconv.AGREEMENT_DISAGREE, semconv.AGREEMENT_UNKNOWN
NONE = semconv.DETECTOR_NONE


def miss(reason: str, tokens: int | None = 5_000) -> CacheDiagnosis:
    return CacheDiagnosis(semconv.DIAGNOSIS_MISS, reason, tokens)


HIT = CacheDiagnosis(semconv.DIAGNOSIS_HIT)


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [
        # The same reason, in each provider's words.
        (semconv.REASON_SYSTEM_CHANGED, miss("system_changed"), AGREE),
        (semconv.REASON_TOOLS_CHANGED, miss("tools_changed"), AGREE),
        (semconv.REASON_MODEL_CHANGED, miss("model_changed"), AGREE),
        (semconv.REASON_MESSAGES_CHANGED, miss("messages_changed"), AGREE),
        (semconv.REASON_SYSTEM_CHANGED, miss("input_changed"), AGREE),  # OpenAI: instructions are input
        (semconv.REASON_MESSAGES_CHANGED, miss("input_changed"), AGREE),
        # A compaction is the provider's changed messages.
        (semconv.REASON_COMPACTION, miss("messages_changed"), AGREE),
        (semconv.REASON_COMPACTION, miss("context_compacted"), AGREE),
        (semconv.REASON_COMPACTION, miss("input_changed"), AGREE),
        # What the detector does not fingerprint is its unknown.
        (semconv.REASON_UNKNOWN, miss("reasoning_effort_changed"), AGREE),
        (semconv.REASON_UNKNOWN, miss("prompt_cache_key_changed"), AGREE),
        (semconv.REASON_UNKNOWN, miss("other"), AGREE),
        # Different causes.
        (semconv.REASON_TOOLS_CHANGED, miss("system_changed"), DISAGREE),
        (semconv.REASON_MODEL_CHANGED, miss("input_changed"), DISAGREE),
        (semconv.REASON_UNKNOWN, miss("messages_changed"), DISAGREE),
        (semconv.REASON_COMPACTION, miss("tools_changed"), DISAGREE),
        # A miss the detector did not see, above its floor or not.
        (NONE, miss("messages_changed", 3_100), DISAGREE),
        (NONE, miss("messages_changed", None), DISAGREE),
        (NONE, miss("messages_changed", 2_000), AGREE),
        # A hit.
        (NONE, HIT, AGREE),
        (semconv.REASON_TTL_EXPIRED, HIT, AGREE),  # the prompt did not change, the entry expired
        (semconv.REASON_UNKNOWN, HIT, DISAGREE),
        (semconv.REASON_COMPACTION, HIT, DISAGREE),
        # No verdict.
        (NONE, CacheDiagnosis(semconv.DIAGNOSIS_PENDING), UNKNOWN),
        (semconv.REASON_SYSTEM_CHANGED, CacheDiagnosis(semconv.DIAGNOSIS_NOT_FOUND), UNKNOWN),
        (semconv.REASON_UNKNOWN, CacheDiagnosis(semconv.DIAGNOSIS_UNAVAILABLE), UNKNOWN),
    ],
)
def test_agreement(ours: str, theirs: CacheDiagnosis, expected: str) -> None:
    assert cache.agreement(ours, theirs) == expected


def test_the_attributes_name_both_sides_and_leave_out_what_was_not_reported() -> None:
    both = cache.diagnosis_attributes(
        semconv.REASON_COMPACTION, CacheDiagnosis(semconv.DIAGNOSIS_MISS, "x_changed", 7, 9)
    )
    assert both == {
        semconv.CACHE_DIAGNOSIS_STATUS: semconv.DIAGNOSIS_MISS,
        semconv.CACHE_DIAGNOSIS_DETECTOR_REASON: semconv.REASON_COMPACTION,
        semconv.CACHE_DIAGNOSIS_AGREEMENT: DISAGREE,
        semconv.CACHE_DIAGNOSIS_PROVIDER_REASON: "x_changed",
        semconv.CACHE_DIAGNOSIS_MISSED_TOKENS: 7,
        semconv.CACHE_DIAGNOSIS_REUSABLE_TOKENS: 9,
    }
    assert cache.diagnosis_attributes(NONE, HIT) == {
        semconv.CACHE_DIAGNOSIS_STATUS: semconv.DIAGNOSIS_HIT,
        semconv.CACHE_DIAGNOSIS_DETECTOR_REASON: NONE,
        semconv.CACHE_DIAGNOSIS_AGREEMENT: AGREE,
    }
