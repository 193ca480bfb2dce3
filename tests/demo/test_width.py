"""The demo's lines fit the output: 80 columns in a file or a pipe, the terminal's width, or COLUMNS, with
``rich`` and without it (issue 51 item 5: turn lines were 84-120 characters whatever the width, and the plain
report, a plain install's, ignored the width entirely: lines up to ~300)."""

from __future__ import annotations

import io

import pytest
from rich.cells import cell_len

from otel_context.demo import DemoOptions, DemoResult, run
from otel_context.demo.report import PlainReport, Report, RichReport


@pytest.fixture(scope="module")
def runs() -> list[DemoResult]:
    """The default run (its turn 46 has the longest turn line: two microcompactions and a cache break) and a
    background one (its turn lines say when a summary was prepared and applied)."""
    return [run(DemoOptions()), run(DemoOptions(provider="openai", background=True, latency=0.05))]


def _printed(report: Report, result: DemoResult) -> list[str]:
    report.start(result.options)
    for stats, outcome in zip(result.stats.turns, result.outcomes, strict=True):
        report.turn(stats, outcome)
    report.finish(result)
    assert isinstance(report, (PlainReport, RichReport))
    out = report.out if isinstance(report, PlainReport) else report.console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("columns", [None, "60", "100"])
@pytest.mark.parametrize("renderer", ["plain", "rich"])
def test_every_line_fits_the_width(
    runs: list[DemoResult], renderer: str, columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)  # a file: 80 columns
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 80)
    for result in runs:
        report: Report = PlainReport(io.StringIO()) if renderer == "plain" else RichReport(io.StringIO())
        lines = _printed(report, result)
        assert max(cell_len(line) for line in lines) <= width, [line for line in lines if cell_len(line) > width]
        text = "\n".join(lines)
        # Nothing is cut to fit: the long tails and notes are all there, on lines of their own.
        for needle in ("Telemetry:", "Estimated at", "compactions"):
            assert needle in text
        if result.options.background:
            assert "summary prepared" in text and "summary applied" in text
        else:
            assert "cache break: tools_changed" in " ".join(text.split())
