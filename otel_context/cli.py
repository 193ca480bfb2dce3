"""The ``otel-context`` command.

``otel-context demo`` runs a 50-turn coding agent on the embedded simulated provider and shows what the
instrumentation and the compactor did (see :mod:`otel_context.demo`). Exit status: 0 when the run
completed, 130 when interrupted with Ctrl-C (telemetry is flushed first), 2 for bad options or a refused
``--live`` run, 1 for anything else (a reader that went away, ``otel-context demo | head``, included).
``otel-context eval`` measures what survives compaction (:mod:`otel_context.evaluation`; its exit status is in
:mod:`otel_context.evaluation.cli`). ``otel-context settings`` lists the variables otel-context reads, the
value in force and where it comes from.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["build_parser", "live_cost_ceiling", "main"]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: The reader of the output went away (a pipeline's head that had read enough): rich's own status for it.
EXIT_BROKEN_PIPE = 1

API_KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def _whole(text: str) -> int:
    """A whole number; its range is checked by the command's options (``check``), which name the real minimum
    (``--window -1`` and ``--window 10`` then get the same message: "must be at least 12,000 tokens")."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def build_parser() -> argparse.ArgumentParser:
    from otel_context import __version__
    from otel_context.demo.run import DEFAULT_TURNS, DEFAULT_WINDOW
    from otel_context.demo.run import MIN_WINDOW as DEMO_MIN_WINDOW

    parser = argparse.ArgumentParser(prog="otel-context", description="otel-context command-line tools.")
    parser.add_argument("--version", action="version", version=f"otel-context {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a long coding-agent session and show the telemetry and the compactions",
        description=(
            "Run a coding agent for many turns on the embedded simulated provider (no network, no key), "
            "instrumented by otel-context with a small context window, and print a line per turn, a summary, "
            "an estimated cost and the spans of a turn that compacted. With OTEL_EXPORTER_OTLP_ENDPOINT set, "
            "spans and metrics also go to that collector."
        ),
    )
    demo.add_argument(
        "--provider", choices=("anthropic", "openai"), default="anthropic", help="wire format (default: anthropic)"
    )
    demo.add_argument(
        "--turns", type=_whole, default=DEFAULT_TURNS, help=f"turns to run (default: {DEFAULT_TURNS}; at least 1)"
    )
    demo.add_argument(
        "--window",
        type=_whole,
        default=DEFAULT_WINDOW,
        help=f"context window in tokens (default: {DEFAULT_WINDOW:,}; at least {DEMO_MIN_WINDOW:,})",
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the simulated repository and session (default: 7)")
    demo.add_argument("--json", type=Path, metavar="FILE", help="write every span of the run to FILE as JSON")
    demo.add_argument(
        "--live",
        action="store_true",
        help="use the real API (needs ANTHROPIC_API_KEY or OPENAI_API_KEY; says what it may cost and asks first)",
    )
    demo.add_argument("--yes", "-y", action="store_true", help="with --live: do not ask for confirmation")
    demo.add_argument("--plain", action="store_true", help="plain text output even when rich is installed")
    demo.add_argument(
        "--background",
        action="store_true",
        help="prepare summaries in the background before the threshold and apply them without waiting (the "
        "library's default; the demo compacts inline by default so that its figures are fixed for a seed)",
    )
    demo.add_argument(
        "--latency",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="seconds the simulated model takes per request; summaries take 6 times as long (default: 0)",
    )
    _add_eval_parser(commands)
    commands.add_parser(
        "settings",
        help="list the variables otel-context reads, with the value in force and where it comes from",
        description=(
            "List every OTEL_CONTEXT_* variable otel-context reads (and OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_"
            "CONTENT), the value in force in this environment and where it comes from; a value that cannot be used "
            "is said as by the library (a warning, and the default). A key and a URL's password are never shown. "
            "What each one does: docs/compaction.md and the README's Configuration table."
        ),
    )
    return parser


def _add_eval_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from otel_context.evaluation.runner import MIN_WINDOW, SUMMARIZERS
    from otel_context.evaluation.scenarios import DEFAULT_SCENARIOS, SCENARIOS
    from otel_context.evaluation.script import MIN_TURNS

    ev = commands.add_parser(
        "eval",
        help="measure what survives compaction: planted facts and probe questions over long conversations",
        description=(
            "Drive scripted long coding-agent conversations with planted facts through otel-context's transparent "
            "compaction and report, after each compaction, which facts reached the next request (verbatim, in the "
            "summary, absent), how the model answers probe questions from the compacted request and from the full "
            "history, what of the agent's own work (files, errors, commands, decisions) reached it, and what the "
            "summaries cost against what they spared. Offline on the simulated provider by default. Exit status 1 "
            "when a fact the user stated is lost, a reversed constraint goes out without its reversal, a superseded "
            "value goes out as if current, or, in a scenario gated on the agent's work, a changed file, an open error "
            "or a decision is lost (docs/eval.md)."
        ),
    )
    ev.add_argument(
        "--provider",
        choices=("simulated", "anthropic", "openai"),
        default="simulated",
        help="simulated (default: offline, free) or a real API (key from ANTHROPIC_API_KEY / OPENAI_API_KEY)",
    )
    ev.add_argument(
        "--sdk",
        choices=("anthropic", "openai"),
        default="anthropic",
        help="with the simulated provider: the SDK and wire format that drive it (default: anthropic)",
    )
    ev.add_argument("--model", help="the model (default: claude-sonnet-4-6 / gpt-4.1)")
    ev.add_argument("--summary-model", help="the summarizer's model (default: the model)")
    ev.add_argument(
        "--scenario",
        help=f"{', '.join(SCENARIOS)} (several: comma-separated), or all (default: {','.join(DEFAULT_SCENARIOS)})",
    )
    ev.add_argument(
        "--summarizer",
        default="all",
        help=f"simulated provider only: {', '.join(SUMMARIZERS)} (several: comma-separated), or all (default: all, "
        "one run of each per scenario)",
    )
    ev.add_argument(
        "--window",
        type=_whole,
        help=f"the compaction window in tokens (default: each scenario's own, 12,000; long: 30,000; at least "
        f"{MIN_WINDOW:,})",
    )
    ev.add_argument(
        "--turns",
        type=_whole,
        help=f"cut every scenario to this many turns (default: each one's full length; at least {MIN_TURNS})",
    )
    ev.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the results as JSON to FILE, or to standard output (no tables) when FILE is omitted or -",
    )
    ev.add_argument(
        "--background", action="store_true", help="prepare summaries in the background (default: inline, as the demo)"
    )
    ev.add_argument(
        "--microcompact",
        action="store_true",
        help="clear old tool results as OTEL_CONTEXT_MICROCOMPACT=true does (default: off, the library's default)",
    )
    ev.add_argument("--yes", "-y", action="store_true", help="with a real provider: do not ask for confirmation")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 60:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 60 seconds")
    return value


def live_cost_ceiling(provider: str, turns: int, window: int, calls_per_turn: int = 3) -> float:
    """Worst case in USD: every call sends a full window with no cache hit and writes a full answer."""
    from otel_context import pricing
    from otel_context.demo.pricing import rates_of
    from otel_context.demo.run import MAX_TOKENS, MODELS
    from otel_context.usage import TokenUsage

    one_call = TokenUsage(input_tokens=window, output_tokens=MAX_TOKENS)  # priced per call: tiers are per call
    return turns * calls_per_turn * pricing.cost_at(rates_of(provider, MODELS[provider]), one_call).amount


def _confirm_live(args: argparse.Namespace, env: Mapping[str, str], stdin: IO[str], out: Callable[[str], None]) -> bool:
    """Check the key and get the user's consent to spend money; False (with a message) to stop."""
    var = API_KEY_VARS[args.provider]
    if not env.get(var, "").strip():
        out(
            f"otel-context demo --live: {var} is not set, so there is no real API to call. "
            "Set it, or drop --live to run on the simulated provider (free, offline)."
        )
        return False
    ceiling = live_cost_ceiling(args.provider, args.turns, args.window)
    out(
        f"--live runs {args.turns} turns against the real {args.provider} API with a {args.window:,}-token window. "
        f"Estimated cost: at most about ${ceiling:.2f} (every call sending a full window without cache hits); "
        "usually far less. The real model chooses its own tools, so turns and compactions will differ from the "
        "simulated run."
    )
    if args.yes:
        return True
    if not stdin.isatty():
        out("Not asking on a non-interactive input: pass --yes to confirm.")
        return False
    out("Proceed? [y/N] ")
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        out("Cancelled; nothing was sent.")
        return False
    return True


def _unsupported_sdk(sdk: str) -> str | None:
    """Why the installed ``sdk`` cannot be instrumented (a version outside the supported range), else None."""
    import importlib

    from otel_context.instrumentation._instrumentor import supported_version

    requirements = {
        name: importlib.import_module(f"otel_context.instrumentation.{name}").REQUIREMENT
        for name in ("anthropic", "openai")
    }
    ok, installed = supported_version(requirements[sdk])
    if ok or installed is None:
        return None
    ranges = "; ".join(requirements.values())
    return (
        f"{sdk} {installed} is not supported, so nothing would be instrumented. Supported: {ranges}. "
        f"Install a supported version: pip install 'otel-context[demo]' (or pip install '{requirements[sdk]}')"
    )


def _demo(args: argparse.Namespace) -> int:
    from otel_context.demo.report import make_report
    from otel_context.demo.run import DemoOptions, DemoResult, run
    from otel_context.demo.telemetry import TelemetrySetupError, preflight
    from otel_context.settings import SettingsError

    def err(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    options = DemoOptions(
        provider=args.provider,
        turns=args.turns,
        window=args.window,
        seed=args.seed,
        json_path=args.json,
        live=args.live,
        latency=args.latency,
        background=args.background,
    )
    try:
        options.check()
        preflight(options.json_path)
    except ValueError as exc:  # TelemetrySetupError is one
        err(f"otel-context demo: {exc}")
        return EXIT_USAGE
    sdk = options.provider  # "anthropic" or "openai": the SDK has the provider's name
    if importlib.util.find_spec(sdk) is None:
        err(f"otel-context demo --provider {sdk} needs the {sdk} SDK: pip install 'otel-context[demo]'")
        return EXIT_USAGE
    unsupported = _unsupported_sdk(sdk)
    if unsupported:
        # An SDK outside the range is left uninstrumented: the demo would run and report 0 model calls.
        err(f"otel-context demo: {unsupported}")
        return EXIT_USAGE
    if options.live and not _confirm_live(args, os.environ, sys.stdin, err):
        return EXIT_USAGE

    report, why_plain = make_report(prefer_rich=not args.plain)
    if why_plain:
        err(why_plain)
    report.start(options)
    try:
        result: DemoResult = run(options, on_turn=report.turn)
    except KeyboardInterrupt:  # before the first turn started: nothing to summarize
        err("Interrupted.")
        return EXIT_INTERRUPTED
    except (SettingsError, TelemetrySetupError) as exc:
        err(f"otel-context demo: {exc}")
        return EXIT_USAGE
    report.finish(result)
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


def _eval(args: argparse.Namespace) -> int:
    from otel_context.evaluation.cli import run_command

    return run_command(args, os.environ, sys.stdin)


def _settings() -> int:
    from otel_context import settings
    from otel_context.terminal import output_width, wrap

    rows = settings.in_force(os.environ)
    width = output_width(sys.stdout, 100)
    name_width = max(len(var) for var, _, _ in rows)
    for var, value, source in rows:
        cells = f"{var:<{name_width}}  "
        for line in wrap(f"{value}  ({source})", width, cells, " " * len(cells)):
            print(line)
    unread = sorted(v for v in os.environ if v.startswith("OTEL_CONTEXT_") and v not in settings.KNOWN_ENV_VARS)
    for var in unread:
        print(f"{var}: not a variable otel-context reads (see the warning above)")
    return EXIT_OK


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser | None:
    """The parser of ``command`` (``demo``, ``eval``), None without one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-context`` console script."""
    parser = build_parser()
    # An unknown option after a command is that command's usage error (argparse would print the top-level
    # usage for it): `otel-context eval --bogus` shows eval's usage.
    args, unknown = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if unknown:
        (_command_parser(parser, args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    commands: dict[str | None, Callable[[], int]] = {
        "demo": lambda: _demo(args),
        "eval": lambda: _eval(args),
        "settings": _settings,
    }
    command = commands.get(args.command)
    if command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return command()
    except BrokenPipeError:
        # The reader went away (`otel-context demo | head`): stop quietly, as a pipeline's writer does, rather
        # than with a traceback; the output that was still buffered goes nowhere (Python's documented recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
