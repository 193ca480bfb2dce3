"""The demo agent's tools: a deterministic, in-memory coding workspace.

A real coding agent's context fills up with tool output: whole files, grep hits, test logs. These tools
reproduce that shape without touching the disk or running anything: the repository ("ledgerline", a small
invoicing library with a rounding bug) is generated from a seed, commands return canned but plausible
output, and edits change the in-memory files so that a later ``pytest`` passes. The same seed always gives
the same bytes, so two demo runs send the same requests and show the same numbers.

Some outputs are deliberately large (the application log, verbose test runs, coverage tables) and some
calls fail (a missing file, an unknown command, an edit that does not apply): that is what microcompaction
and the summaries have to cope with in real sessions.
"""

from __future__ import annotations

import fnmatch
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LATE_TOOL_SPECS", "TOOL_SPECS", "ToolResult", "ToolSpec", "Workspace"]


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns to the model: text, and whether it is an error (``is_error`` on Anthropic)."""

    content: str
    is_error: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """A tool as offered to the model, independent of the wire format."""

    name: str
    description: str
    parameters: Mapping[str, Any]  #: JSON schema of the arguments

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic Messages ``tools`` entry."""
        return {"name": self.name, "description": self.description, "input_schema": dict(self.parameters)}

    def openai(self) -> dict[str, Any]:
        """The OpenAI Chat Completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


def _schema(required: list[str], **props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": doc} for name, doc in props.items()},
        "required": required,
    }


TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_file",
        "Read a file of the repository. Returns the content with line numbers (at most 2,000 lines).",
        _schema(["path"], path="Path relative to the repository root"),
    ),
    ToolSpec(
        "list_files",
        "List the files of the repository under a directory, with their sizes in lines.",
        _schema([], path="Directory relative to the repository root (default: the root)"),
    ),
    ToolSpec(
        "grep",
        "Search the repository for a regular expression. Returns path:line: text, at most 200 matches.",
        _schema(["pattern"], pattern="Python regular expression", glob="Only files matching this glob"),
    ),
    ToolSpec(
        "run_command",
        "Run a shell command in the repository (tests, linters, git). Returns its output and exit code.",
        _schema(["command"], command="The command line"),
    ),
    ToolSpec(
        "edit_file",
        "Replace the exact text `old` with `new` in a file. Fails if `old` does not occur exactly once.",
        _schema(["path", "old", "new"], path="File to edit", old="Exact text to replace", new="Replacement"),
    ),
)

#: Tools that only become available late in the session (as when an MCP server connects mid-session): the
#: tool list, the first part of the cached prompt prefix, changes, and the prompt cache breaks.
LATE_TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "write_file",
        "Create or overwrite a file of the repository with the given content.",
        _schema(["path", "content"], path="File to write", content="The complete new content"),
    ),
)

MAX_READ_LINES = 2_000
MAX_GREP_MATCHES = 200

# The bug the session is about: ``round`` on floats instead of quantizing Decimals (banker's rounding).
BUGGY_LINE = "    return round(float(amount) * rate, 2)"
FIXED_LINE = '    return (Decimal(amount) * Decimal(str(rate))).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)'

_WORDS = (
    "invoice", "line", "total", "tax", "rate", "currency", "amount", "discount", "customer", "ledger", "entry", "period", "balance",
    "credit", "debit", "refund", "export", "report", "schedule", "payment", "due", "status", "item", "quantity", "price", "region",
)  # fmt: skip


class Workspace:
    """An in-memory repository plus the tools that act on it.

    Everything derives from ``seed``: file contents, numbers in the logs, which tests exist. Tool calls
    are plain method calls returning :class:`ToolResult`; :meth:`call` dispatches by tool name and turns
    bad arguments into error results, as a real agent harness would, instead of raising.
    """

    def __init__(self, seed: int = 7) -> None:
        self.seed = seed
        self._rng = random.Random(seed)
        self.files: dict[str, str] = {}
        self._build()

    # --- the generated repository -----------------------------------------------------------------------
    def _ident(self) -> str:
        return "_".join(self._rng.sample(_WORDS, 2))

    def _function(self, name: str) -> str:
        """A plausible helper function of 8-14 lines."""
        arg = self._rng.choice(_WORDS)
        body = [f"def {name}({arg}: Decimal, *, strict: bool = False) -> Decimal:"]
        body.append(f'    """Compute the {name.replace("_", " ")} for one {arg} (see docs/{arg}.md)."""')
        for _ in range(self._rng.randint(3, 8)):
            other = self._rng.choice(_WORDS)
            body.append(f"    {other} = {arg} * Decimal({self._rng.randint(2, 97)}) / Decimal(100)")
            body.append(f"    if strict and {other} < 0:")
            body.append(f'        raise ValueError("negative {other} in {name}")')
        body.append(f"    return {arg}")
        return "\n".join(body) + "\n"

    def _module(self, title: str, n_functions: int, extra: str = "") -> str:
        head = f'"""{title}"""\n\nfrom __future__ import annotations\n\nfrom decimal import ROUND_HALF_UP, Decimal\n\n'
        funcs = "\n\n".join(self._function(self._ident()) for _ in range(n_functions))
        return head + extra + "\n\n" + funcs

    def _build(self) -> None:
        money_extra = (
            "def to_minor_units(amount: Decimal) -> int:\n"
            '    """Cents, for the payment provider."""\n'
            "    return int(amount * 100)\n\n\n"
            "def apply_rate(amount: Decimal, rate: float) -> float:\n"
            '    """Amount times an exchange or tax rate, rounded to cents."""\n'
            f"{BUGGY_LINE}\n"
        )
        self.files = {
            "README.md": self._readme(),
            "pyproject.toml": (
                '[project]\nname = "ledgerline"\nversion = "2.3.1"\nrequires-python = ">=3.11"\n'
                'dependencies = []\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
            ),
            "src/ledgerline/__init__.py": '"""ledgerline: invoices, taxes and exports."""\n\n__version__ = "2.3.1"\n',
            "src/ledgerline/money.py": self._module("Money helpers: rates, rounding, minor units.", 6, money_extra),
            "src/ledgerline/invoice.py": self._module("Invoices: lines, totals, discounts.", 28),
            "src/ledgerline/tax.py": self._module("Tax rules per region.", 14),
            "src/ledgerline/export/csv_export.py": self._module("CSV export of invoices.", 9),
            "src/ledgerline/export/pdf_export.py": self._module("PDF export of invoices.", 12),
            "tests/test_money.py": self._tests("money", 18),
            "tests/test_invoice.py": self._tests("invoice", 40),
            "tests/test_tax.py": self._tests("tax", 22),
            "docs/rounding.md": self._prose("Rounding policy", 40),
            "logs/app.log": self._log(1_400),
        }

    def _readme(self) -> str:
        lines = ["# ledgerline", "", "Invoices, taxes and exports for small businesses.", ""]
        lines += [f"- {self._rng.choice(_WORDS)} {self._rng.choice(_WORDS)} support" for _ in range(12)]
        lines += ["", "## Development", "", "    pytest -q", "    ruff check src", ""]
        return "\n".join(lines) + "\n"

    def _tests(self, topic: str, n: int) -> str:
        out = [f'"""Tests of ledgerline.{topic}."""', "", "from decimal import Decimal", ""]
        for i in range(n):
            a, b = self._rng.randint(1, 9999), self._rng.randint(1, 99)
            out += [
                f"def test_{topic}_{self._ident()}_{i}() -> None:",
                f'    assert Decimal("{a}.{b:02d}") * 1 == Decimal("{a}.{b:02d}")',
                "",
            ]
        if topic == "money":
            out += [
                "def test_apply_rate_rounds_half_up() -> None:",
                "    from ledgerline.money import apply_rate",
                '    assert apply_rate(Decimal("2.675"), 1.0) == Decimal("2.68")',
                "",
            ]
        return "\n".join(out)

    def _prose(self, title: str, n: int) -> str:
        sentences = [
            " ".join(self._rng.choice(_WORDS) for _ in range(self._rng.randint(8, 16))).capitalize() + "."
            for _ in range(n)
        ]
        return f"# {title}\n\n" + "\n\n".join(" ".join(sentences[i : i + 4]) for i in range(0, n, 4)) + "\n"

    def _log(self, n: int) -> str:
        levels = ["INFO"] * 12 + ["WARNING"] * 3 + ["ERROR"]
        out = []
        for i in range(n):
            level = self._rng.choice(levels)
            ms = self._rng.randint(3, 900)
            inv = self._rng.randint(10_000, 99_999)
            what = self._rng.choice(_WORDS)
            if level == "ERROR":
                msg = f"total mismatch on invoice {inv}: expected {inv % 97}.35 got {inv % 97}.34 ({what})"
            else:
                msg = f"processed invoice {inv} {what} in {ms}ms"
            out.append(f"2026-11-{1 + i // 120:02d}T{(i // 5) % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z {level} {msg}")
        return "\n".join(out) + "\n"

    # --- tools ----------------------------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Run tool ``name``; unknown tools and bad arguments become error results the model can read."""
        handlers: dict[str, Callable[..., ToolResult]] = {
            "read_file": self.read_file,
            "list_files": self.list_files,
            "grep": self.grep,
            "run_command": self.run_command,
            "edit_file": self.edit_file,
            "write_file": self.write_file,
        }
        handler = handlers.get(name)
        if handler is None:
            return ToolResult(f"Error: unknown tool {name!r}; available: {', '.join(handlers)}", is_error=True)
        try:
            return handler(**{str(k): str(v) for k, v in arguments.items()})
        except TypeError as exc:
            return ToolResult(f"Error: bad arguments for {name}: {exc}", is_error=True)

    def read_file(self, path: str) -> ToolResult:
        """The file with line numbers, like ``cat -n``; capped at :data:`MAX_READ_LINES` lines."""
        text = self.files.get(path.removeprefix("./"))
        if text is None:
            return ToolResult(f"Error: {path}: no such file or directory", is_error=True)
        lines = text.splitlines()
        shown = [f"{i + 1:6d}\t{line}" for i, line in enumerate(lines[:MAX_READ_LINES])]
        if len(lines) > MAX_READ_LINES:
            shown.append(f"... ({len(lines) - MAX_READ_LINES} more lines not shown)")
        return ToolResult("\n".join(shown))

    def list_files(self, path: str = ".") -> ToolResult:
        """Every file under ``path`` with its line count."""
        prefix = "" if path in (".", "", "/") else path.strip("/") + "/"
        rows = [f"{len(t.splitlines()):6d} {p}" for p, t in sorted(self.files.items()) if p.startswith(prefix)]
        if not rows:
            return ToolResult(f"Error: {path}: no such directory", is_error=True)
        return ToolResult("\n".join(rows))

    def grep(self, pattern: str, glob: str = "*") -> ToolResult:
        """``path:line: text`` for every match, at most :data:`MAX_GREP_MATCHES`."""
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return ToolResult(f"Error: invalid regular expression {pattern!r}: {exc}", is_error=True)
        hits: list[str] = []
        total = 0
        for path, text in sorted(self.files.items()):
            if not fnmatch.fnmatch(path, glob) and not fnmatch.fnmatch(path.rsplit("/", 1)[-1], glob):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    total += 1
                    if len(hits) < MAX_GREP_MATCHES:
                        hits.append(f"{path}:{number}: {line.strip()}")
        if not hits:
            return ToolResult("(no matches)")
        if total > len(hits):
            hits.append(f"... {total - len(hits)} more matches not shown")
        return ToolResult("\n".join(hits))

    def edit_file(self, path: str, old: str, new: str) -> ToolResult:
        """Replace ``old`` by ``new``; ``old`` must occur exactly once (the usual agent-tool contract)."""
        key = path.removeprefix("./")
        text = self.files.get(key)
        if text is None:
            return ToolResult(f"Error: {path}: no such file or directory", is_error=True)
        count = text.count(old)
        if count != 1:
            return ToolResult(f"Error: `old` occurs {count} times in {path}; it must occur exactly once", is_error=True)
        self.files[key] = text.replace(old, new)
        return ToolResult(f"Edited {path}: 1 replacement ({len(old)} -> {len(new)} characters)")

    def write_file(self, path: str, content: str) -> ToolResult:
        """Create or overwrite ``path``."""
        key = path.removeprefix("./")
        if not key or key.endswith("/"):
            return ToolResult(f"Error: {path!r} is not a file path", is_error=True)
        existed = key in self.files
        self.files[key] = content
        return ToolResult(f"{'Overwrote' if existed else 'Created'} {key} ({len(content.splitlines())} lines)")

    @property
    def bug_fixed(self) -> bool:
        """Whether the rounding fix has been applied (what ``pytest`` reports on)."""
        return BUGGY_LINE not in self.files["src/ledgerline/money.py"]

    def run_command(self, command: str) -> ToolResult:
        """Canned output for the commands a coding session runs; anything else is ``command not found``."""
        cmd = " ".join(command.split())
        for prefix, handler in self._commands():
            if cmd == prefix or cmd.startswith(prefix + " "):
                output, code = handler(cmd)
                return ToolResult(f"$ {cmd}\n{output}\n[exit code {code}]", is_error=code != 0)
        program = cmd.split(" ", 1)[0] if cmd else "(empty)"
        return ToolResult(f"$ {cmd}\nsh: 1: {program}: not found\n[exit code 127]", is_error=True)

    def _commands(self) -> list[tuple[str, Callable[[str], tuple[str, int]]]]:
        return [
            ("pytest", self._pytest),
            ("ruff check", self._ruff),
            ("git status", lambda _: (self._git_status(), 0)),
            ("git diff", lambda _: (self._git_diff(), 0)),
            ("git log", lambda _: (self._git_log(), 0)),
            ("coverage report", lambda _: (self._coverage(), 0)),
            ("tail", self._tail),
        ]

    def _test_names(self) -> list[str]:
        names = []
        for path, text in sorted(self.files.items()):
            if path.startswith("tests/"):
                names += [f"{path}::{m}" for m in re.findall(r"^def (test_\w+)", text, flags=re.M)]
        return names

    def _pytest(self, cmd: str) -> tuple[str, int]:
        names = self._test_names()
        verbose = "-v" in cmd.split()
        lines = [f"platform linux -- Python 3.11.9, pytest-8.3.2\ncollected {len(names)} items", ""]
        if verbose:
            for name in names:
                failed = name.endswith("test_apply_rate_rounds_half_up") and not self.bug_fixed
                lines.append(f"{name} {'FAILED' if failed else 'PASSED'}")
        if self.bug_fixed:
            lines.append(f"{len(names)} passed in {0.4 + len(names) / 300:.2f}s")
            return "\n".join(lines), 0
        lines += [
            "=================================== FAILURES ===================================",
            "________________________ test_apply_rate_rounds_half_up ________________________",
            "",
            "    def test_apply_rate_rounds_half_up() -> None:",
            "        from ledgerline.money import apply_rate",
            '>       assert apply_rate(Decimal("2.675"), 1.0) == Decimal("2.68")',
            "E       AssertionError: assert 2.67 == Decimal('2.68')",
            "E        +  where 2.67 = apply_rate(Decimal('2.675'), 1.0)",
            "",
            "src/ledgerline/money.py: apply_rate uses float round() (banker's rounding on a binary float)",
            "=========================== short test summary info ============================",
            "FAILED tests/test_money.py::test_apply_rate_rounds_half_up - AssertionError",
            f"1 failed, {len(names) - 1} passed in {0.4 + len(names) / 300:.2f}s",
        ]
        return "\n".join(lines), 1

    def _ruff(self, _: str) -> tuple[str, int]:
        text = self.files["src/ledgerline/money.py"]
        if "ROUND_HALF_UP" in text and "quantize" not in text:
            return "src/ledgerline/money.py:5:23: F401 `decimal.ROUND_HALF_UP` imported but unused\nFound 1 error.", 1
        return "All checks passed!", 0

    def _git_status(self) -> str:
        changed = "src/ledgerline/money.py" if self.bug_fixed else ""
        if not changed:
            return "On branch fix/rounding\nnothing to commit, working tree clean"
        return f"On branch fix/rounding\nChanges not staged for commit:\n\tmodified:   {changed}"

    def _git_diff(self) -> str:
        if not self.bug_fixed:
            return ""
        return (
            "diff --git a/src/ledgerline/money.py b/src/ledgerline/money.py\n"
            "--- a/src/ledgerline/money.py\n+++ b/src/ledgerline/money.py\n"
            f"@@ def apply_rate\n-{BUGGY_LINE}\n+{FIXED_LINE}"
        )

    def _git_log(self) -> str:
        rng = random.Random(self.seed + 1)
        return "\n".join(
            f"{rng.getrandbits(28):07x} {rng.choice(['fix', 'feat', 'chore', 'docs'])}: "
            f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {rng.choice(_WORDS)}"
            for _ in range(20)
        )

    def _coverage(self) -> str:
        rng = random.Random(self.seed + 2)
        rows = ["Name                                      Stmts   Miss  Cover", "-" * 62]
        for path in sorted(p for p in self.files if p.endswith(".py")):
            stmts = len(self.files[path].splitlines())
            miss = rng.randint(0, max(1, stmts // 5))
            rows.append(f"{path:<40} {stmts:7d} {miss:6d} {100 * (stmts - miss) // max(stmts, 1):5d}%")
        return "\n".join(rows)

    def _tail(self, cmd: str) -> tuple[str, int]:
        parts = cmd.split()
        count = 10
        if "-n" in parts:
            try:
                count = int(parts[parts.index("-n") + 1])
            except (IndexError, ValueError):
                return "tail: invalid number of lines", 1
        path = parts[-1]
        text = self.files.get(path)
        if text is None:
            return f"tail: cannot open '{path}' for reading: No such file or directory", 1
        return "\n".join(text.splitlines()[-count:]), 0
