"""Fault injection: queued failures consumed in order by the requests they match.

``Fault(status=429)`` answers the next matching request with the provider's rate-limit error;
``Fault(status=500)`` / ``Fault(status=529)`` with a server error / overload (OpenAI endpoints get a 503
``server_error`` for 529, which is how OpenAI reports overload); ``Fault(delay=5.0)`` sleeps before answering
(to exercise client timeouts); ``Fault(drop_after_events=3)`` closes the connection after 3 SSE events of a
streamed response (a non-streamed request matched by it gets its connection closed with no response at all);
``Fault(status=400, error_type=..., message=..., code=...)`` sends any provider-shaped error.
``Fault(status=529, drop_after_events=3)`` on a streamed request sends 3 events and then the provider's
in-stream error (Anthropic ``event: error``; Chat a ``data: {"error": ...}`` chunk; Responses an ``error``
event) and ends the stream; on a non-streamed request it is a plain status error.
``retry_after`` (seconds, for 429/503/529) is sent as ``retry-after`` (rounded up) and, when positive, as
the ``retry-after-ms`` header both SDKs prefer, so ``retry_after=0.001`` makes SDK retries immediate
(``0`` lets the SDK use its own back-off; ``None`` sends no header).

A fault matches a request when ``path`` is None or equal to the request path or a suffix of it (so
``"/chat/completions"`` matches ``/v1/chat/completions``), and, when ``summaries`` is True (False), only a
summary request (only another request; a summary request is one whose last message asks for a summary, as a
compactor's does). ``every=N`` affects every Nth matching request only (the others pass through, to the
faults behind it). ``times`` is how many requests it affects before it is used up (None: never used up).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Fault", "FaultQueue"]


@dataclass
class Fault:
    """One injected failure (see the module docstring)."""

    status: int | None = None
    times: int | None = 1
    path: str | None = None
    retry_after: float | None = 0
    delay: float = 0.0
    drop_after_events: int | None = None
    error_type: str | None = None
    message: str | None = None
    code: str | None = None
    summaries: bool | None = None
    every: int = 1

    def __post_init__(self) -> None:
        if self.times is not None and self.times < 1:
            raise ValueError(f"Fault.times must be >= 1 (or None: never used up), got {self.times}")
        if self.every < 1:
            raise ValueError(f"Fault.every must be >= 1, got {self.every}")
        if self.status is None and not self.delay and self.drop_after_events is None:
            raise ValueError("a Fault needs a status, a delay or drop_after_events")
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"Fault.status must be an HTTP error status (400-599), got {self.status}")
        if self.drop_after_events is not None and self.drop_after_events < 0:
            raise ValueError("Fault.drop_after_events must be >= 0")

    def matches(self, path: str, is_summary: Callable[[], bool] | None = None) -> bool:
        """Whether this fault applies to a request for ``path`` (``is_summary`` tells whether it asks for a
        summary; asked only of a fault that cares)."""
        if not (self.path is None or path == self.path or path.endswith(self.path)):
            return False
        return self.summaries is None or (is_summary is not None and is_summary()) == self.summaries


class FaultQueue:
    """Thread-safe FIFO of faults; :meth:`take` consumes one use of the first matching fault."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._remaining: list[int | None] = []
        self._seen: list[int] = []  #: matching requests seen by each fault (for ``every``)
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)
            self._remaining.append(fault.times)
            self._seen.append(0)

    def take(self, path: str, is_summary: Callable[[], bool] | None = None) -> Fault | None:
        if not self._faults:  # fast path, no lock
            return None
        with self._lock:
            for i, fault in enumerate(self._faults):
                if not fault.matches(path, is_summary):
                    continue
                self._seen[i] += 1
                if self._seen[i] % fault.every:
                    continue  # not its turn: the request passes on
                remaining = self._remaining[i]
                if remaining is not None:
                    self._remaining[i] = remaining - 1
                    if remaining <= 1:
                        del self._faults[i]
                        del self._remaining[i]
                        del self._seen[i]
                return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self._remaining.clear()
            self._seen.clear()

    def __len__(self) -> int:
        return len(self._faults)
