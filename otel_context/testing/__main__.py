"""Run the simulated provider as a standalone server: ``python -m otel_context.testing [--port 8000]``.

For agents in other processes or languages. TTLs run on the real monotonic clock here (a manual clock
would never expire anything). Prints the two base URLs, then serves until interrupted.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .server import SimulatedProvider


def _window(text: str) -> tuple[str, int]:
    model, sep, tokens = text.partition("=")
    if not sep or not model or not tokens.isdigit() or int(tokens) < 1:
        raise argparse.ArgumentTypeError(f"expected MODEL=TOKENS (e.g. claude-opus-4-6=50000), got {text!r}")
    return model, int(tokens)


def _number(kind: type[int] | type[float], minimum: float, maximum: float | None = None) -> Any:
    """An argparse type: a ``kind`` number within [minimum, maximum], else a one-line usage error."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {bounds}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, start the server, block until Ctrl-C / SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m otel_context.testing", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_number(int, 0, 65535), default=0, help="0 picks a free port (default)")
    parser.add_argument("--window", type=_window, action="append", default=[], metavar="MODEL=TOKENS")
    parser.add_argument("--default-window", type=_number(int, 1), default=200_000)
    parser.add_argument("--min-cacheable-tokens", type=_number(int, 0), default=1024)
    parser.add_argument(
        "--latency", type=_number(float, 0), default=0.0, help="seconds added to every response (0 or more)"
    )
    parser.add_argument("--strict-models", action="store_true", help="reject models not in the window table")
    args = parser.parse_args(argv)
    sim = SimulatedProvider(
        windows=dict(args.window),
        default_window=args.default_window,
        clock=time.monotonic,
        min_cacheable_tokens=args.min_cacheable_tokens,
        latency=args.latency,
        strict_models=args.strict_models,
        host=args.host,
        port=args.port,
    )
    try:
        sim.start()
    except OSError as exc:  # port in use, host not on this machine, privileged port
        parser.exit(2, f"{parser.prog}: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}\n")
    print(f"anthropic base_url: {sim.base_url}", flush=True)
    print(f"openai base_url:    {sim.openai_base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
