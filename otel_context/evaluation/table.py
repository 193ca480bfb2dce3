"""Plain-text tables for ``otel-context eval`` that never cut a figure.

The eval's tables hold figures a reader compares (``11,067→4,221``, ``$0.0209``, ``83,912``): a table that
truncates one to ``83,9…`` misleads. So a column is as wide as its widest cell; headers wrap on their words
instead; and a table wider than the output is stacked: its columns split into blocks printed one under the
other, each block repeating the key columns (the row's ``#`` and turn, or its scenario and summarizer) so
that every block reads on its own. Only a single cell wider than the whole output makes a line longer than
the width (it is still printed whole). No dependency: the eval works in a plain install (no ``rich``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Literal

from otel_context import terminal
from otel_context.terminal import use_colour, wrap

__all__ = ["Column", "output_width", "paint", "render", "use_colour", "wrap"]

GAP = "  "
#: The width of an output that is not a terminal (a file, a pipe, a CI log) when COLUMNS does not say one.
FILE_WIDTH = 120
_ANSI = {"red": "\x1b[31m", "green": "\x1b[32m", "bold": "\x1b[1m", "yellow": "\x1b[33m"}
_RESET = "\x1b[0m"


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right", "center"] = "right"
    #: Repeated at the left of every block when the table is stacked (what names the row).
    key: bool = False


def output_width(file: IO[str]) -> int:
    """The width to lay tables out in: ``COLUMNS`` when set, the terminal's width, else :data:`FILE_WIDTH`."""
    return terminal.output_width(file, FILE_WIDTH)


def paint(text: str, style: str | None, colour: bool) -> str:
    return f"{_ANSI[style]}{text}{_RESET}" if colour and style else text


def _pad(text: str, width: int, justify: str) -> str:
    if justify == "left":
        return text.ljust(width)
    if justify == "center":
        return text.center(width)
    return text.rjust(width)


def _header_width(header: str) -> int:
    """The narrowest a header can be wrapped to: its longest word."""
    return max((len(word) for word in header.split()), default=0)


def _blocks(columns: Sequence[Column], widths: Sequence[int], width: int) -> list[list[int]]:
    """Column indexes per block: all in one when they fit, else the key columns and as many others as fit."""

    def span(indexes: Sequence[int]) -> int:
        return sum(widths[i] for i in indexes) + len(GAP) * max(len(indexes) - 1, 0)

    everything = list(range(len(columns)))
    if span(everything) <= width:
        return [everything]
    keys = [i for i, c in enumerate(columns) if c.key]
    blocks: list[list[int]] = []
    current = list(keys)
    for i in everything:
        if i in keys:
            continue
        if len(current) > len(keys) and span([*current, i]) > width:
            blocks.append(current)
            current = list(keys)
        current.append(i)
    if len(current) > len(keys) or not blocks:
        blocks.append(current)
    return blocks


def render(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    title: str | None = None,
    caption: str | None = None,
    styles: Mapping[tuple[int, int], str] | None = None,
    colour: bool = False,
) -> list[str]:
    """The table's lines, every cell whole. ``styles``: (row, column) -> ``red`` | ``green`` | ``bold``
    | ``yellow``, drawn only with ``colour`` (the layout is the same either way)."""
    styles = styles or {}
    widths = [max([_header_width(c.header), *(len(row[i]) for row in rows), 1]) for i, c in enumerate(columns)]
    lines: list[str] = []
    if title:
        lines.extend(paint(line, "bold", colour) for line in wrap(title, width) or [""])
    for number, block in enumerate(_blocks(columns, widths, width)):
        if number:
            lines.append("")
        wrapped = {i: wrap(columns[i].header, widths[i]) or [""] for i in block}
        height = max(len(w) for w in wrapped.values())
        for line in range(height):
            cells = []
            for i in block:
                parts = [""] * (height - len(wrapped[i])) + wrapped[i]  # headers sit on the rule
                cells.append(_pad(parts[line], widths[i], columns[i].justify))
            lines.append(GAP.join(cells).rstrip())
        lines.append(GAP.join("-" * widths[i] for i in block))
        for r, row in enumerate(rows):
            cells = [paint(_pad(row[i], widths[i], columns[i].justify), styles.get((r, i)), colour) for i in block]
            lines.append(GAP.join(cells).rstrip())
    if caption:
        lines.extend(wrap(caption, width))
    return lines
