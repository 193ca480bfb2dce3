"""The eval's tables at the widths users read them in: 80 and 120 columns, and redirected to a file (no
terminal, no COLUMNS). Every figure the JSON holds is printed whole, as one word of one line, and no line
is wider than the output. (The run's verdict is the gate's business: here it only has to agree with the exit
status.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_context.cli import main
from otel_context.evaluation.table import FILE_WIDTH, Column, render

SCRIPT = Path(sys.executable).parent / "otel-context"
ARGS = ["eval", "--scenario", "billing", "--summarizer", "end", "--turns", "60", "--window", "6000"]


def _money(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _figures(payload: dict[str, Any]) -> list[str]:
    """Every figure of the Compactions and Retention tables, as the tables print it."""
    figures = []
    for run in payload["runs"]:
        for c in run["compactions"]:
            figures += [
                f"{c['tokens_before']:,}→{c['tokens_after']:,}",
                f"{c['summary_input_tokens']:,}/{c['summary_output_tokens']:,}",
                _money(c["summary_cost_usd"]),
                f"{c['spared_tokens']:,}",
                _money(c["spared_cost_usd"]),
                f"{c['probes']['compacted'][0]}/{c['probes']['compacted'][1]}",
            ]
            if c["retention"] is not None:
                figures.append(f"{c['retention']:.2f}")
            figures += [f"{kept}/{checked}" for kept, checked in c["work"].values() if checked]
    for row in payload["summary"]:
        figures += [
            f"({row['facts_kept']}/{row['facts_checked']})",
            f"({row['user_facts_kept']}/{row['user_facts_checked']})",
            _money(row["summary_cost"]),
            _money(row["spared_cost"]),
        ]
        figures += [f"{kept}/{checked}" for kept, checked in row["work"].values() if checked]
    return figures


def _check(out: str, payload: dict[str, Any], width: int) -> None:
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in out and "\x1b[" not in out  # nothing cut; no colour outside a terminal
    words = {word for line in lines for word in line.split()}
    missing = [figure for figure in _figures(payload) if figure not in words]
    assert missing == [], missing
    for title in (
        "Compactions",
        "Facts after each compaction",
        "Retention",
        "billing: Invoice rounding",
        "The agent's work after each compaction",
        "The agent's work, over every (compaction, item) pair",
    ):
        assert title in out
    # The fact grid: a row per planted fact, each one whole.
    for fact in payload["runs"][0]["facts"]:
        assert any(line.startswith(fact["id"] + " ") for line in lines), fact["id"]


@pytest.mark.parametrize("width", [80, 120])
def test_every_figure_is_whole_at_the_terminal_widths(
    width: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    out = tmp_path / "eval.json"
    code = main([*ARGS, "--json", str(out)])
    printed = capsys.readouterr()
    payload = json.loads(out.read_text())
    assert code == (0 if payload["passed"] else 1) and "Traceback" not in printed.err, printed.err
    _check(printed.out, payload, width)


def test_every_figure_is_whole_when_redirected_to_a_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_"))}
    env.pop("COLUMNS", None)
    out = tmp_path / "eval.json"
    with (tmp_path / "eval.txt").open("w") as stdout:
        proc = subprocess.run(
            [str(SCRIPT), *ARGS, "--json", str(out)], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env
        )
    payload = json.loads(out.read_text())
    assert proc.returncode == (0 if payload["passed"] else 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    _check((tmp_path / "eval.txt").read_text(), payload, FILE_WIDTH)


def test_a_table_wider_than_the_output_is_stacked_with_its_key_columns_repeated() -> None:
    columns = [Column("#", key=True), Column("context tokens"), Column("spared"), Column("spared $")]
    rows = [["1", "11,067→4,221", "123,456", "$0.3704"], ["12", "9,876→3,210", "7", "$12.50"]]
    wide = render(columns, rows, 80, title="Compactions")
    assert [line.split() for line in wide[-2:]] == [rows[0], rows[1]]  # one block when it fits
    narrow = render(columns, rows, 22, title="Compactions", caption="spared: input tokens not sent")
    assert max(len(line) for line in narrow) <= 22
    data = [line.split() for line in narrow if line.split() and line.split()[0] in ("1", "12")]
    # Two blocks, each row's key in both, every figure whole in one of them.
    assert data == [["1", "11,067→4,221"], ["12", "9,876→3,210"], ["1", "123,456", "$0.3704"], ["12", "7", "$12.50"]]
    assert "spared: input tokens not sent" in " ".join(narrow)
    # Headers wrap on their words, never inside one.
    assert {"context", "tokens"} <= {word for line in narrow for word in line.split()}
