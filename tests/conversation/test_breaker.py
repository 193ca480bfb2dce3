"""The circuit breaker: three failures or three thrashing compactions open it; success or reset closes it."""

from __future__ import annotations

from otel_context.conversation.breaker import Breaker


def test_three_consecutive_failures_open() -> None:
    b = Breaker()
    assert not b.record_failure()
    assert not b.record_failure()
    assert b.record_failure()
    assert b.open
    assert not b.record_failure()  # already open: not "opened" again


def test_success_resets_failures() -> None:
    b = Breaker()
    b.record_failure()
    b.record_failure()
    b.record_success(still_above_threshold=False)
    b.record_failure()
    assert not b.open


def test_three_thrashing_compactions_open() -> None:
    b = Breaker()
    assert not b.record_success(still_above_threshold=True)
    assert not b.record_success(still_above_threshold=True)
    assert b.record_success(still_above_threshold=True)
    assert b.open


def test_progress_resets_thrashing() -> None:
    b = Breaker()
    b.record_success(still_above_threshold=True)
    b.record_success(still_above_threshold=True)
    b.record_success(still_above_threshold=False)
    b.record_success(still_above_threshold=True)
    assert not b.open


def test_manual_reset_closes() -> None:
    b = Breaker()
    for _ in range(3):
        b.record_failure()
    assert b.reset()
    assert not b.open
    assert not b.reset()
