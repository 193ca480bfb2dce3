"""The per-conversation circuit breaker of automatic compaction.

Why: a context that cannot be compacted (summarizer down, summary larger than what it replaced, a fixed
overhead above the threshold) otherwise triggers a summarizer call on EVERY turn. Claude Code measured
1,279 sessions with 50+ consecutive failures (up to 3,272) wasting ~250K calls/day before its 3-strike
breaker; users of several peers report "thrashing" loops that refill the context right after each
compaction. Three consecutive failures, or three consecutive compactions that leave the context still
above the threshold, open the breaker; a successful compaction or a manual one closes it.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CONSECUTIVE_FAILURES = 3
MAX_CONSECUTIVE_THRASHING = 3


@dataclass
class Breaker:
    """Failure and thrashing counters of one conversation; ``open`` stops automatic compaction."""

    consecutive_failures: int = 0
    consecutive_thrashing: int = 0

    @property
    def open(self) -> bool:
        return (
            self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES
            or self.consecutive_thrashing >= MAX_CONSECUTIVE_THRASHING
        )

    def record_failure(self) -> bool:
        """Count a failed compaction; True when this failure opened the breaker."""
        was_open = self.open
        self.consecutive_failures += 1
        return self.open and not was_open

    def record_success(self, *, still_above_threshold: bool) -> bool:
        """Count a compaction that produced a result; True when it opened the breaker (thrashing).

        A result still above the threshold is not progress: it counts towards thrashing but does not
        reset the thrashing count, only a result below the threshold does.
        """
        was_open = self.open
        self.consecutive_failures = 0
        if still_above_threshold:
            self.consecutive_thrashing += 1
        else:
            self.consecutive_thrashing = 0
        return self.open and not was_open

    def reset(self) -> bool:
        """Close the breaker (manual compaction, or the app asked); True when it was open."""
        was_open = self.open
        self.consecutive_failures = 0
        self.consecutive_thrashing = 0
        return was_open
