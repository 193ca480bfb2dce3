"""The width of the output and lines that fit it, for the command-line tools (``otel-context demo`` and
``eval``): one policy, so that both fit the same terminal.

The width is ``COLUMNS`` when set, else the terminal's, else a default for an output that is not a terminal
(a file, a pipe, a CI log), which each tool chooses. Text is wrapped on its spaces, never inside a word, a
model name or a figure. No dependency: both tools work in a plain install (no ``rich``).
"""

from __future__ import annotations

import os
import shutil
import textwrap
from typing import IO

__all__ = ["output_width", "use_colour", "wrap"]

#: The narrowest width honoured (a smaller COLUMNS or terminal would stack every word on a line of its own).
MIN_WIDTH = 40


def output_width(file: IO[str], default: int) -> int:
    """The width to lay text out in: ``COLUMNS`` when set, the terminal's width when ``file`` is one, else
    ``default``; never under :data:`MIN_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    try:
        tty = file.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        tty = False
    return max(MIN_WIDTH, shutil.get_terminal_size((default, 24)).columns) if tty else default


def use_colour(file: IO[str]) -> bool:
    """Colour on a terminal only, and not when ``NO_COLOR`` is set (https://no-color.org)."""
    try:
        return file.isatty() and not os.environ.get("NO_COLOR")
    except (AttributeError, ValueError):
        return False


def wrap(text: str, width: int, indent: str = "", subsequent: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` on its spaces (never inside a word, a model name or a figure),
    the first line after ``indent``, the others after ``subsequent`` (default: ``indent``)."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_long_words=False,
        break_on_hyphens=False,
    )
