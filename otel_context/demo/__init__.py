"""``otel-context demo``: a long coding-agent session on the simulated provider, and what it shows.

Modules, one concept each: :mod:`~otel_context.demo.tools` (the simulated workspace and its tools),
:mod:`~otel_context.demo.scenario` (what the user asks, turn by turn), :mod:`~otel_context.demo.agent`
(the agent loop that resends its whole history), :mod:`~otel_context.demo.telemetry` (SDK providers:
in memory, OTLP, JSON), :mod:`~otel_context.demo.run` (one session end to end),
:mod:`~otel_context.demo.stats` (figures read back from the spans), :mod:`~otel_context.demo.pricing`
(estimated cost) and :mod:`~otel_context.demo.report` (the terminal output).
"""

from __future__ import annotations

from otel_context.demo.run import DemoOptions, DemoResult, run

__all__ = ["DemoOptions", "DemoResult", "run"]
