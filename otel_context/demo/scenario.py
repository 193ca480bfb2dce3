"""The demo session's script: what the user asks, turn by turn.

The simulated provider is scripted by directives in the last user message (see
:mod:`otel_context.testing`): ``tool:<name>{json}`` makes the "model" call that tool, ``words:<N>`` sets the
length of its text reply. Each :class:`Turn` renders to a natural request followed by those directives; in
``--live`` mode the directives are dropped and the real model decides for itself.

Near the end the user connects one more tool (``write_file``): the tool list changes mid-session, as when
an MCP server connects, which breaks the prompt cache (an unexpected break, reason ``tools_changed``).

The first turns follow a real bug hunt (a cent lost to float rounding: explore, reproduce, fix, verify);
later turns review the rest of the code base, chosen from the seed, so that any ``--turns`` works. A
"cross-check" turn (a module and its tests read together, the largest requests of the session) comes just
after 60 % of the run, where the demo lowers the provider's window (see :mod:`otel_context.demo.run`). Two user
messages start with ``FACT:``: rules the user gave that must survive every compaction (the simulated
summarizer keeps ``FACT:`` lines verbatim, and the demo checks that the last request still carries them).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_context.demo.tools import BUGGY_LINE, FIXED_LINE

__all__ = ["FACTS", "Turn", "build_script"]

FACTS: tuple[str, ...] = (
    "FACT: the project targets Python 3.11 and must not gain third-party dependencies.",
    "FACT: money is rounded with ROUND_HALF_UP on Decimal, never with float round().",
)


@dataclass(frozen=True)
class Turn:
    """One user request, the tools the simulated model will call for it, and its reply length."""

    text: str
    tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    words: int = 40
    #: Tools the agent gains at the start of this turn (see ``tools.LATE_TOOL_SPECS``).
    new_tools: tuple[str, ...] = ()

    def message(self, live: bool = False) -> str:
        """The user message: the request, then (simulated provider only) its directives."""
        if live:
            return self.text
        directives = [f"tool:{name}{json.dumps(dict(args), separators=(',', ':'))}" for name, args in self.tools]
        directives.append(f"words:{self.words}")
        return f"{self.text}\n\n" + " ".join(directives)


def _t(text: str, *tools: tuple[str, Mapping[str, Any]], words: int = 40) -> Turn:
    return Turn(text, tuple(tools), words)


def _read(path: str) -> tuple[str, Mapping[str, Any]]:
    return ("read_file", {"path": path})


def _run(command: str) -> tuple[str, Mapping[str, Any]]:
    return ("run_command", {"command": command})


def _grep(pattern: str, glob: str = "*") -> tuple[str, Mapping[str, Any]]:
    return ("grep", {"pattern": pattern, "glob": glob})


_OPENING: tuple[Turn, ...] = (
    _t(
        "A customer reports that some invoice totals are off by one cent. Let's find out why. "
        "Start with an overview of the repository.",
        ("list_files", {"path": "."}),
        _read("README.md"),
        words=60,
    ),
    _t(FACTS[0] + " Keep that in mind for every change you propose.", words=25),
    _t("Read the money helpers first.", _read("src/ledgerline/money.py"), words=80),
    _t("Where is apply_rate used?", _grep(r"apply_rate"), words=50),
    _t("Run the test suite to see what fails.", _run("pytest -q"), words=60),
    _t("Totals are computed in the invoice module; read it.", _read("src/ledgerline/invoice.py"), words=120),
    _t("Check what the rounding policy document says.", _read("docs/rounding.md"), words=90),
    _t("Any errors in the application log? Look at the end of it.", _run("tail -n 150 logs/app.log"), words=80),
    _t("The frontend team mentioned a JS test runner; try it.", _run("npm test"), words=30),
    _t("Is there a dedicated rounding module?", _read("src/ledgerline/rounding.py"), words=30),
    _t("Find every call to round( in the sources.", _grep(r"round\(", "src/*"), words=60),
    _t(FACTS[1] + " The accountant insists on it.", words=30),
    _t(
        "Fix apply_rate accordingly.",
        ("edit_file", {"path": "src/ledgerline/money.py", "old": BUGGY_LINE, "new": FIXED_LINE}),
        words=50,
    ),
    _t("Run the tests again, verbosely.", _run("pytest -v"), words=60),
    _t("And the linter.", _run("ruff check src"), words=30),
    _t("Show me the diff.", _run("git diff"), words=60),
    _t("Write the pull-request description for this fix: cause, fix, tests, risks.", words=320),
    _t(
        "Now review the exports for the same float pattern. Start with the CSV export.",
        _read("src/ledgerline/export/csv_export.py"),
        words=120,
    ),
    _t("And the PDF export.", _read("src/ledgerline/export/pdf_export.py"), words=120),
    _t("Search for float( conversions anywhere.", _grep(r"float\("), words=60),
    _t("Read the invoice tests, are totals covered?", _read("tests/test_invoice.py"), words=150),
    _t("What does coverage say?", _run("coverage report"), words=100),
    _t("Explain the biggest coverage gaps and what tests you would add.", words=300),
    _t("Read the tax module, regional rates also get multiplied.", _read("src/ledgerline/tax.py"), words=150),
    _t("Look further back in the log for the mismatches.", _run("tail -n 400 logs/app.log"), words=120),
    _t("List all ERROR lines in the logs.", _grep(r" ERROR ", "*.log"), words=100),
    _t("Draft a plan for the remaining rounding risks, ordered by impact.", words=380),
    _t("What changed recently?", _run("git log --oneline -20"), words=80),
    _t("Status of the working tree?", _run("git status"), words=40),
)

_WRITE_NOTES = Turn(
    "The file-writing tool is connected now. Save your review notes to docs/review-notes.md.",
    (
        (
            "write_file",
            {"path": "docs/review-notes.md", "content": "# Review notes\n\n- apply_rate: fixed (ROUND_HALF_UP)\n"},
        ),
    ),
    words=40,
    new_tools=("write_file",),
)

_FILES = (
    "src/ledgerline/money.py",
    "src/ledgerline/invoice.py",
    "src/ledgerline/tax.py",
    "src/ledgerline/export/csv_export.py",
    "src/ledgerline/export/pdf_export.py",
    "tests/test_money.py",
    "tests/test_tax.py",
    "docs/rounding.md",
)
_TERMS = ("discount", "refund", "currency", "Decimal\\(", "ValueError", "strict", "tax", "balance")


_CROSS_CHECKS = (
    ("src/ledgerline/invoice.py", "tests/test_invoice.py"),
    ("src/ledgerline/tax.py", "tests/test_tax.py"),
    ("src/ledgerline/money.py", "tests/test_money.py"),
)


def _cross_check(rng: random.Random) -> Turn:
    """Two files at once (a module and its tests): the largest requests of the session."""
    module, tests = rng.choice(_CROSS_CHECKS)
    return _t(
        f"Cross-check {module} against {tests}: is every rounding path tested?", _read(module), _read(tests), words=150
    )


def _review_turn(rng: random.Random, n: int) -> Turn:
    """One turn of the open-ended review phase, drawn from the seed."""
    kind = rng.choice(("read", "read", "grep", "tests", "log", "explain", "explain", "bad_edit", "cross"))
    if kind == "cross":
        return _cross_check(rng)
    if kind == "read":
        path = rng.choice(_FILES)
        return _t(f"Review {path} for money handling issues (pass {n}).", _read(path), words=rng.randint(80, 200))
    if kind == "grep":
        term = rng.choice(_TERMS)
        return _t(
            f"Where else do we use {term.rstrip('(').rstrip(chr(92))}?",
            _grep(term, "src/*"),
            words=rng.randint(60, 120),
        )
    if kind == "tests":
        return _t("Run the tests to be sure nothing regressed.", _run("pytest -q"), words=40)
    if kind == "log":
        lines = rng.choice((200, 300))
        return _t(
            f"Check the last {lines} log lines for new mismatches.", _run(f"tail -n {lines} logs/app.log"), words=100
        )
    if kind == "bad_edit":
        return _t(
            "Rename the strict flag in tax.py to validate.",
            ("edit_file", {"path": "src/ledgerline/tax.py", "old": "strict", "new": "validate"}),
            words=50,
        )
    return _t(
        f"Recap what we learned so far about {rng.choice(_TERMS).rstrip('(').rstrip(chr(92))} handling.",
        words=rng.randint(250, 400),
    )


def build_script(turns: int, seed: int) -> list[Turn]:
    """``turns`` turns: the scripted bug hunt, then review turns drawn from ``seed``."""
    if turns < 1:
        raise ValueError(f"turns must be at least 1, got {turns}")
    rng = random.Random(seed)
    script = list(_OPENING[:turns])
    n = 1
    while len(script) < turns:
        script.append(_review_turn(rng, n))
        n += 1
    if turns >= 10:  # one cross-check just after 60 % of the run, where the demo lowers the provider's window
        script[round(turns * 0.62)] = _cross_check(rng)
        script[round(turns * 0.9)] = _WRITE_NOTES
    return script
