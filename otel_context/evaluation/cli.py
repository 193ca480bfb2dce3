"""``otel-context eval``: options in, tables or JSON out, and the exit status CI checks.

Exit status: 0 when every fact the user stated reached every request after each compaction, no reversed
constraint went without its reversal, no superseded value went as if current, no repair added more than its
budget, and, in a scenario gated on the agent's work, every changed file, open error and decision reached every
request after it appeared; 1 when one did not, when no compaction happened (the evaluation then measured
nothing), or when the provider failed a request; 2 for bad options, a missing key or a refused live run; 130
when interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from otel_context.evaluation.prices import price_of
from otel_context.evaluation.runner import SUMMARIZERS, EvalOptions, RunResult, estimate_live, run
from otel_context.evaluation.scenarios import DEFAULT_SCENARIOS, SCENARIOS, get_scenario

__all__ = ["EXIT_LOST", "run_command"]

EXIT_OK = 0
EXIT_LOST = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

API_KEY_VARS = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _choices(text: str, every: tuple[str, ...]) -> tuple[str, ...]:
    """``all``, one name, or names separated by commas (checked by ``EvalOptions.check``)."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    return every if names in ((), ("all",)) else names


def options_from(args: argparse.Namespace) -> EvalOptions:
    """The options of the command line; ValueError with a message fit for it."""
    live = args.provider != "simulated"
    if live and args.summarizer != "all":
        raise ValueError(
            "--summarizer chooses a simulated summarizer; a live run summarizes with --summary-model (or --model)"
        )
    if not live and args.yes:
        raise ValueError("--yes confirms a live run: it does not apply to the simulated provider")
    scenarios = DEFAULT_SCENARIOS if args.scenario is None else _choices(args.scenario, tuple(SCENARIOS))
    summarizers = _choices(args.summarizer, tuple(SUMMARIZERS))
    options = EvalOptions(
        provider=args.provider,
        sdk=args.provider if live else args.sdk,
        model=args.model,
        summary_model=args.summary_model,
        scenarios=scenarios,
        summarizers=summarizers,
        window=args.window,
        turns=args.turns,
        background=args.background,
        microcompact=args.microcompact,
    )
    options.check()
    options.resolved_summary_model  # noqa: B018 -- a malformed --summary-model is a usage error, said now
    return options


def _windows(options: EvalOptions) -> str:
    """The window(s) the runs use: ``--window``, else each scenario's own."""
    windows = sorted({options.window_for(get_scenario(name)) for name in options.scenarios})
    return " / ".join(f"{w:,}" for w in windows)


def _confirm_live(options: EvalOptions, args: argparse.Namespace, env: Mapping[str, str], stdin: IO[str]) -> bool:
    """The key is set and the user agreed to what the run may spend; False (with a message) to stop."""
    var = API_KEY_VARS[options.provider]
    if not env.get(var, "").strip():
        _err(
            f"otel-context eval --provider {options.provider}: {var} is not set, so there is no real API to call. "
            "Set it, or drop --provider to run on the simulated provider (free, offline)."
        )
        return False
    tokens_in, tokens_out = estimate_live(options)
    price = price_of(options.api, options.resolved_model)
    cost = (
        f"about ${price.cost(tokens_in, tokens_out):.2f} at {price.model} list prices"
        if price
        else "no list price known"
    )
    _err(
        f"otel-context eval runs {len(options.scenarios)} scenario(s) against the real {options.provider} API "
        f"(model {options.resolved_model}, summarizer {options.resolved_summary_model}, window {_windows(options)}). "
        f"It may send up to about {tokens_in:,} input and {tokens_out:,} output tokens ({cost}); usually less."
    )
    if args.yes:
        return True
    if not stdin.isatty():
        _err("Not asking on a non-interactive input: pass --yes to confirm.")
        return False
    _err("Proceed? [y/N] ")
    if stdin.readline().strip().lower() not in ("y", "yes"):
        _err("Cancelled; nothing was sent.")
        return False
    return True


def run_command(args: argparse.Namespace, env: Mapping[str, str], stdin: IO[str]) -> int:
    """Run ``otel-context eval`` as parsed in ``args`` (see the module docstring for the exit status)."""
    from otel_context.evaluation.report import RunPrinter, to_json
    from otel_context.settings import SettingsError

    try:
        options = options_from(args)
    except ValueError as exc:
        _err(f"otel-context eval: {exc}")
        return EXIT_USAGE
    if importlib.util.find_spec(options.api) is None:
        _err(f"otel-context eval needs the {options.api} SDK: pip install 'otel-context[{options.api}]'")
        return EXIT_USAGE
    json_path = None if args.json in (None, "-") else Path(args.json)
    if json_path is not None and not json_path.parent.exists():
        _err(f"otel-context eval: --json {json_path}: directory {json_path.parent} does not exist")
        return EXIT_USAGE
    if options.live and not _confirm_live(options, args, env, stdin):
        return EXIT_USAGE

    printer = None if args.json == "-" else RunPrinter(sys.stdout)
    results: list[RunResult] = []

    def on_run(result: RunResult) -> None:
        results.append(result)
        if printer is not None:
            printer.run(result)

    try:
        run(options, on_run=on_run)
    except SettingsError as exc:
        _err(f"otel-context eval: {exc}")
        return EXIT_USAGE
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in ("anthropic", "openai"):
            raise
        # The provider failed a request (after the SDK's retries): say so in one line, not a traceback.
        _err(f"otel-context eval: the {options.provider} API failed a request, the run stops: {exc}")
        return EXIT_LOST
    payload = to_json(options, results)
    if printer is not None and results:
        printer.summary(options, results)
    if args.json == "-":
        print(json.dumps(payload, indent=1))
    elif json_path is not None:
        json_path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    if any(r.interrupted for r in results):
        _err("Interrupted.")
        return EXIT_INTERRUPTED
    for line in payload["failures"]:
        _err(line)
    silent = [r.label for r in results if not r.compactions]
    if silent:
        _err(f"otel-context eval: no compaction in {', '.join(silent)}: lower --window (it is {_windows(options)}).")
    return EXIT_OK if payload["passed"] else EXIT_LOST
