"""The simulated workspace: deterministic, plausible, and stateful where an agent session needs it."""

from __future__ import annotations

from otel_context.demo.tools import BUGGY_LINE, FIXED_LINE, TOOL_SPECS, Workspace
from otel_context.testing import count_tokens


def test_same_seed_same_repository_and_different_seed_different_one() -> None:
    assert Workspace(3).files == Workspace(3).files
    assert Workspace(3).files != Workspace(4).files


def test_read_file_numbers_lines_and_reports_a_missing_file_as_an_error() -> None:
    ws = Workspace()
    result = ws.call("read_file", {"path": "README.md"})
    assert not result.is_error
    assert result.content.splitlines()[0] == "     1\t# ledgerline"
    missing = ws.call("read_file", {"path": "src/ledgerline/rounding.py"})
    assert missing.is_error and "no such file" in missing.content


def test_the_fix_turns_the_failing_test_green() -> None:
    ws = Workspace()
    before = ws.call("run_command", {"command": "pytest -q"})
    assert before.is_error and "1 failed" in before.content and "[exit code 1]" in before.content
    edit = ws.call("edit_file", {"path": "src/ledgerline/money.py", "old": BUGGY_LINE, "new": FIXED_LINE})
    assert not edit.is_error
    after = ws.call("run_command", {"command": "pytest -q"})
    assert not after.is_error and "passed" in after.content and "failed" not in after.content
    assert FIXED_LINE.strip() in ws.call("run_command", {"command": "git diff"}).content


def test_edit_must_match_exactly_once() -> None:
    ws = Workspace()
    result = ws.call("edit_file", {"path": "src/ledgerline/tax.py", "old": "strict", "new": "validate"})
    assert result.is_error and "exactly once" in result.content


def test_unknown_command_and_unknown_tool_are_errors_the_model_can_read() -> None:
    ws = Workspace()
    npm = ws.call("run_command", {"command": "npm test"})
    assert npm.is_error and "npm: not found" in npm.content and "[exit code 127]" in npm.content
    unknown = ws.call("deploy", {})
    assert unknown.is_error and "unknown tool" in unknown.content
    bad_args = ws.call("read_file", {"file": "README.md"})
    assert bad_args.is_error and "bad arguments" in bad_args.content


def test_grep_caps_matches_and_says_how_many_were_left_out() -> None:
    ws = Workspace()
    result = ws.call("grep", {"pattern": "INFO", "glob": "*.log"})
    lines = result.content.splitlines()
    assert len(lines) == 201 and lines[-1].endswith("more matches not shown")
    assert ws.call("grep", {"pattern": "("}).is_error


def test_some_outputs_are_large() -> None:
    ws = Workspace()
    tail = ws.call("run_command", {"command": "tail -n 400 logs/app.log"}).content
    assert count_tokens(tail) > 8_000  # what microcompaction exists for


def test_tool_specs_render_in_both_wire_formats() -> None:
    for spec in TOOL_SPECS:
        assert spec.anthropic()["input_schema"]["type"] == "object"
        assert spec.openai()["function"]["name"] == spec.name


def test_write_file_creates_and_overwrites() -> None:
    ws = Workspace()
    assert (
        ws.call("write_file", {"path": "docs/notes.md", "content": "a\nb\n"}).content
        == "Created docs/notes.md (2 lines)"
    )
    assert ws.call("write_file", {"path": "docs/notes.md", "content": "c\n"}).content.startswith("Overwrote")
    assert ws.call("read_file", {"path": "docs/notes.md"}).content == "     1\tc"
    assert ws.call("write_file", {"path": "docs/", "content": "x"}).is_error
