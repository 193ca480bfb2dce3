"""The injectable clock: cache TTLs are measured with it, so TTL tests never sleep."""

from __future__ import annotations

import threading

__all__ = ["ManualClock"]


class ManualClock:
    """A monotonic clock that only moves when told to (``advance``). Calling it returns ``now()``."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        """Current time in seconds."""
        return self._now

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (must not be negative) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance({seconds}))")
        with self._lock:
            self._now += seconds
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"
