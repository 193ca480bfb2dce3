"""The ``otel-context`` command."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point (the demo lands with its own issue)."""
    args = sys.argv[1:] if argv is None else argv
    print(f"otel-context: nothing to run yet for {args!r}")
    return 0
