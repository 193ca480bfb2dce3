"""A simulated Anthropic + OpenAI API server for offline tests and demos.

>>> from otel_context.testing import SimulatedProvider
>>> with SimulatedProvider() as sim:                      # doctest: +SKIP
...     client = sim.anthropic()
...     client.messages.create(model="claude-sonnet-4-6", max_tokens=100, messages=[...])

See docs/simulated-provider.md. Importing this package does not import the SDKs.
"""

from __future__ import annotations

from .clock import ManualClock
from .faults import Fault
from .record import Exchange
from .scripted import SummarizerStyle, summarize
from .server import SimulatedProvider
from .tokens import count_request_tokens, count_tokens

__all__ = [
    "Exchange",
    "Fault",
    "ManualClock",
    "SimulatedProvider",
    "SummarizerStyle",
    "count_request_tokens",
    "count_tokens",
    "summarize",
]
