"""The summarizer's own retry and time budget, separate from the app client's.

An inline compaction runs on the app's thread before its request goes out: every second the summarizer
waits is a second added to the app's call. With the app client's policy (``max_retries=2``, a 600 s timeout,
sleeping whatever ``retry-after`` says) one overloaded provider answering ``529, retry-after: 5`` added 10 s,
and a slow one its whole delay. So the summarizer's requests are sent with the SDK's retries off, under one
deadline for the whole compaction (``summarizer_timeout_seconds``, all requests together), and retried here
at most ``summarizer_max_retries`` times after a short back-off, never when the provider asks for a wait
longer than :data:`MAX_RETRY_WAIT` or than what is left of the deadline. A compaction that fails this way
costs the caller at most the budget; the original request then goes out at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from otel_context.settings import Settings

__all__ = ["MAX_RETRY_WAIT", "SummarizerAllowance", "SummarizerTimeout"]

#: The longest back-off before a retry, in seconds; a longer ``retry-after`` means: give up now.
MAX_RETRY_WAIT = 1.0
#: First back-off, doubled per retry (up to :data:`MAX_RETRY_WAIT`).
INITIAL_RETRY_WAIT = 0.25
#: Statuses worth another try (as the SDKs decide: timeouts, lock conflicts, rate limits, server errors).
_RETRYABLE = frozenset({408, 409, 429})


class SummarizerTimeout(TimeoutError):
    """The summarizer's time budget ran out before a request could be (re)sent."""


def _retry_after(headers: Any) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` first, as the SDKs read it); None: no header."""
    if not isinstance(headers, Mapping) and not hasattr(headers, "get"):
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return float(raw) * scale
        except (TypeError, ValueError):
            return None  # an HTTP date: a wait we will not make inline
    return None


class SummarizerAllowance:
    """One compaction's allowance for its summarizer requests (retries and time); the deadline starts with the first request."""

    __slots__ = ("_deadline", "max_retries", "timeout")

    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.summarizer_timeout_seconds
        self.max_retries = settings.summarizer_max_retries
        self._deadline: float | None = None

    def remaining(self) -> float:
        """Seconds left (the first call starts the clock)."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self.timeout
        return self._deadline - now

    def options(self, options: Any) -> Any:
        """``options`` with the SDK's retries off and the remaining budget as the request timeout."""
        remaining = self.remaining()
        if remaining <= 0:
            raise SummarizerTimeout(f"the summarizer's budget of {self.timeout:g} s is used up")
        return options.model_copy(update={"max_retries": 0, "timeout": remaining})

    def retry_wait(self, exc: BaseException, attempt: int, status_error: type, connection_error: type) -> float | None:
        """Seconds to wait before retry number ``attempt + 1`` after ``exc``; None: do not retry."""
        if attempt >= self.max_retries or isinstance(exc, SummarizerTimeout):
            return None
        wait = min(INITIAL_RETRY_WAIT * 2**attempt, MAX_RETRY_WAIT)
        if isinstance(exc, status_error):
            status = getattr(exc, "status_code", None)
            if not isinstance(status, int) or (status < 500 and status not in _RETRYABLE):
                return None
            asked = _retry_after(getattr(getattr(exc, "response", None), "headers", None))
            if asked is not None and asked > 0:
                if asked > MAX_RETRY_WAIT:
                    return None  # an overloaded provider asking for seconds: the compaction fails now
                wait = asked
        elif not isinstance(exc, connection_error):
            return None
        # Waiting and then having no time left to send would only add the wait.
        return wait if wait < self.remaining() - 0.05 else None
