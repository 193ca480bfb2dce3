"""Helpers shared by the demo tests."""

from __future__ import annotations

import io

from otel_context.demo import DemoResult
from otel_context.demo.report import PlainReport


def plain_report_text(result: DemoResult) -> str:
    """What the plain report prints for ``result``: header, every turn line, then the summary."""
    out = io.StringIO()
    report = PlainReport(out)
    report.start(result.options)
    for stats, outcome in zip(result.stats.turns, result.outcomes, strict=True):
        report.turn(stats, outcome)
    report.finish(result)
    return out.getvalue()
