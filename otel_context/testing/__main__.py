"""Run the simulated provider as a standalone server: ``python -m otel_context.testing [--port 8000]``.

For agents in other processes or languages. TTLs run on the real monotonic clock here (a manual clock
would never expire anything). Prints the two base URLs, then serves until interrupted. Faults can be
injected from the command line (failing summaries, "prompt is too long", latency): see
docs/simulated-provider.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .faults import Fault
from .server import SimulatedProvider

DESCRIPTION = (
    "Serve the simulated Anthropic and OpenAI APIs on this machine, for agents in other processes or "
    "languages: deterministic replies, token usage, prompt caching, context windows, and injected faults. "
    "Prints the two base URLs, then serves until Ctrl-C."
)


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


def _count_or_all(text: str) -> int | None:
    """``all`` (None: every one) or a whole number of at least 1."""
    if text.strip().lower() == "all":
        return None
    value = _number(int, 1)(text)
    return int(value)


#: The provider's "too long" error, as each API shapes it (no token counts: a client must not learn a window).
TOO_LONG: tuple[tuple[str, dict[str, Any]], ...] = (
    ("/messages", {"error_type": "invalid_request_error", "message": "prompt is too long"}),
    (
        "/chat/completions",
        {
            "error_type": "invalid_request_error",
            "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        },
    ),
    (
        "/responses",
        {
            "error_type": "invalid_request_error",
            "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
        },
    ),
)


def faults(fail_summaries: int | bool | None, too_long_every: int | None) -> list[Fault]:
    """The faults the command-line flags ask for (``fail_summaries`` False: none; None: every summary)."""
    injected = []
    if fail_summaries is not False:
        injected.append(
            Fault(
                status=500,
                error_type="api_error",
                message="the simulated provider failed this summary request (--fail-summaries)",
                summaries=True,
                times=fail_summaries if isinstance(fail_summaries, int) else None,
            )
        )
    if too_long_every is not None:
        for path, shape in TOO_LONG:
            injected.append(Fault(status=400, path=path, summaries=False, every=too_long_every, times=None, **shape))
    return injected


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m otel_context.testing", description=DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_number(int, 0, 65535), default=0, help="0 picks a free port (default)")
    parser.add_argument(
        "--window",
        type=_window,
        action="append",
        default=[],
        metavar="MODEL=TOKENS",
        help="the context window of a model (or model prefix), over the built-in table; repeatable",
    )
    parser.add_argument(
        "--default-window",
        type=_number(int, 1),
        default=200_000,
        metavar="TOKENS",
        help="the window of models the table does not know (default 200000)",
    )
    parser.add_argument(
        "--min-cacheable-tokens",
        type=_number(int, 0),
        default=1024,
        metavar="TOKENS",
        help="the smallest prefix Anthropic prompt caching stores (default 1024)",
    )
    parser.add_argument(
        "--latency",
        type=_number(float, 0),
        default=0.0,
        metavar="S",
        help="seconds added to every response (0 or more)",
    )
    parser.add_argument("--strict-models", action="store_true", help="reject models not in the window table (404)")
    parser.add_argument(
        "--fail-summaries",
        type=_count_or_all,
        default=False,
        metavar="N",
        help="answer the first N summary requests (a compactor's) with a 500 error; 'all': every one. For "
        "trying the compaction-failure and circuit-breaker alerts",
    )
    parser.add_argument(
        "--too-long-every",
        type=_number(int, 1),
        default=None,
        metavar="N",
        help="answer every Nth request of each endpoint (summaries aside) with the provider's 'prompt is too "
        "long' error, as if the context overflowed (reactive compaction)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, start the server, block until Ctrl-C / SIGTERM."""
    parser = build_parser()
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
    for fault in faults(args.fail_summaries, args.too_long_every):
        sim.inject(fault)
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
