"""Helpers shared by the demo tests."""

from __future__ import annotations

import io

from otel_context.demo import DemoResult
from otel_context.demo.report import TURN_INDENT, PlainReport


def plain_report_text(result: DemoResult) -> str:
    """What the plain report prints for ``result`` in 80 columns: header, every turn line, then the summary."""
    out = io.StringIO()
    report = PlainReport(out, width=80)  # the README's width, whatever COLUMNS says
    report.start(result.options)
    for stats, outcome in zip(result.stats.turns, result.outcomes, strict=True):
        report.turn(stats, outcome)
    report.finish(result)
    return out.getvalue()


def turn_texts(text: str) -> dict[int, str]:
    """Each turn's line of the plain report, with the indented lines it goes on on (a long tail), by turn."""
    turns: dict[int, str] = {}
    last = 0
    for line in text.splitlines():
        if line.startswith("turn "):
            last = int(line.split()[1].split("/")[0])
            turns[last] = line
        elif line.startswith(TURN_INDENT) and last and not line.startswith(TURN_INDENT + " "):
            turns[last] += " " + line.strip()
        else:
            last = 0
    return turns


def row_text(text: str, label: str) -> str:
    """A table row of the plain report whose label is ``label``, with the lines its note goes on on."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(label + " "))
    row = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("      ") or not line.strip():
            break
        row.append(line.strip())
    return " ".join(row)
