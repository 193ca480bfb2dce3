"""``otel-context demo`` as a user runs it: the console script in a subprocess, and the --live guard rails."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from otel_context.cli import EXIT_INTERRUPTED, EXIT_USAGE, _confirm_live, build_parser, live_cost_ceiling, main

SCRIPT = Path(sys.executable).parent / "otel-context"
TURN_LINE = re.compile(r"^turn +\d+/(\d+) \| in +[\d,]+ \| cache hit +[\d.]+% \| context +\d+% \| compactions +\d+")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_"))}
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


def _demo(
    *args: str, env: dict[str, str] | None = None, stdin: int | None = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "demo", *args], capture_output=True, text=True, env=env or _env(), stdin=stdin, timeout=120
    )


def test_console_script_prints_turn_lines_and_the_summary_without_terminal_codes(tmp_path: Path) -> None:
    out = tmp_path / "spans.json"
    proc = _demo("--turns", "8", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if TURN_LINE.match(line)]
    assert len(lines) == 8 and all(TURN_LINE.match(line).group(1) == "8" for line in lines)  # type: ignore[union-attr]
    for needle in ("Run summary", "Compactions", "Estimated cost", "Telemetry:"):
        assert needle in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a terminal: no colours, no progress bar
    spans = json.loads(out.read_text())["spans"]
    assert any(s["name"] == "chat claude-sonnet-4-6" for s in spans)
    assert str(out) in proc.stdout


def test_plain_output_when_rich_is_missing() -> None:
    code = "import sys; sys.modules['rich'] = None; from otel_context.cli import main; sys.exit(main(['demo', '--turns', '3']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "rich` is not installed" in proc.stderr and "otel-context[demo]" in proc.stderr
    assert sum(1 for line in proc.stdout.splitlines() if TURN_LINE.match(line)) == 3
    assert "Summary" in proc.stdout and "Estimated cost" in proc.stdout


def test_ctrl_c_ends_cleanly_and_flushes_the_spans(tmp_path: Path) -> None:
    out = tmp_path / "spans.json"
    proc = subprocess.Popen(
        [str(SCRIPT), "demo", "--turns", "2000", "--plain", "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=_env(),
        # As in a terminal: a test run started in the background by a shell inherits SIGINT ignored, and
        # Python then never turns the signal into KeyboardInterrupt (the demo ran on to its last turn).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if re.match(r"turn +2/2000 ", line):
                proc.send_signal(signal.SIGINT)
                break
        else:
            pytest.fail("the demo never printed its second turn")
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Interrupted" in rest and "Summary" in rest
    assert "Traceback" not in err
    spans = json.loads(out.read_text())["spans"]
    assert any(s["name"].startswith("chat ") for s in spans)


def test_live_without_a_key_refuses_and_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["demo", "--live"]) == EXIT_USAGE
    assert "ANTHROPIC_API_KEY is not set" in capsys.readouterr().err
    assert main(["demo", "--live", "--provider", "openai"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "OPENAI_API_KEY is not set" in captured.err and captured.out == ""


def test_live_with_a_key_states_the_cost_and_needs_consent_on_a_non_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal: the answer is not read
    assert main(["demo", "--live", "--turns", "10"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "Estimated cost: at most about $" in captured.err and "pass --yes" in captured.err
    assert captured.out == ""  # nothing ran


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "accepted"), [("n\n", False), ("\n", False), ("yes\n", True)])
def test_live_confirmation_prompt(answer: str, accepted: bool) -> None:
    said: list[str] = []
    args = build_parser().parse_args(["demo", "--live", "--turns", "5"])
    assert _confirm_live(args, {"ANTHROPIC_API_KEY": "k"}, _Terminal(answer), said.append) is accepted
    assert "Proceed? [y/N]" in said[-1 if accepted else -2]
    if not accepted:
        assert "Cancelled; nothing was sent." in said[-1]


def test_cost_ceiling_grows_with_turns_and_window() -> None:
    small = live_cost_ceiling("anthropic", 10, 24_000)
    assert 0 < small < live_cost_ceiling("anthropic", 20, 24_000) < live_cost_ceiling("anthropic", 20, 48_000)


def test_bad_arguments_exit_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["demo", "--provider", "gemini"], "invalid choice"),
        (["demo", "--window", "many"], "'many' is not a whole number"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == EXIT_USAGE and message in err
        assert "usage: otel-context demo" in err
    # Out of range, a negative number included: the same message, with the real minimum.
    for window in ("500", "-1", "0"):
        assert main(["demo", "--window", window]) == EXIT_USAGE
        assert f"otel-context demo: --window {window}: must be at least 12,000 tokens" in capsys.readouterr().err
    for turns in ("0", "-3"):
        assert main(["demo", "--turns", turns]) == EXIT_USAGE
        assert f"otel-context demo: --turns {turns}: must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "eval"])
def test_an_unknown_option_prints_its_commands_usage(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--bogus"])
    err = capsys.readouterr().err
    assert exit_info.value.code == EXIT_USAGE
    assert err.startswith(f"usage: otel-context {command} ")
    assert f"otel-context {command}: error: unrecognized arguments: --bogus" in err
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert capsys.readouterr().err.startswith("usage: otel-context [-h]")


def test_json_into_a_missing_directory_is_refused_before_any_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--turns", "1", "--json", "/nonexistent-dir/spans.json"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "directory /nonexistent-dir does not exist" in captured.err and captured.out == ""


_SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _colour_codes(text: str) -> list[str]:
    """SGR parameters that set a colour (30-49, 90-107), as opposed to bold/dim/italic/reset."""
    found = []
    for params in _SGR.findall(text):
        for p in params.split(";"):
            if p.isdigit() and (30 <= int(p) <= 49 or 90 <= int(p) <= 107):
                found.append(params)
    return found


def _in_terminal(*args: str, **env: str) -> str:
    """Run the console script with a pseudo-terminal as stdin/stdout/stderr and return what it drew."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(SCRIPT), "demo", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=_env(TERM="xterm-256color", COLUMNS="140", **env),
        close_fds=True,
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=120) == 0
    finally:
        os.close(master)
        proc.kill()
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_colours_and_no_color_removes_them() -> None:
    coloured = _in_terminal("--turns", "3")
    assert "turn 1/3" in coloured and "Run summary" in coloured
    assert _colour_codes(coloured)
    plain = _in_terminal("--turns", "3", NO_COLOR="1")
    assert "turn 1/3" in plain and "Run summary" in plain
    assert _colour_codes(plain) == []


def test_a_missing_sdk_is_named_with_the_extra_that_installs_it() -> None:
    code = (
        "import sys; sys.modules['openai'] = None; from otel_context.cli import main; "
        "sys.exit(main(['demo', '--provider', 'openai', '--turns', '1']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == EXIT_USAGE
    assert "needs the openai SDK: pip install 'otel-context[demo]'" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(("provider", "old"), [("anthropic", "2.9.0"), ("openai", "3.49.1")])
def test_an_unsupported_sdk_version_stops_with_the_supported_ranges(
    provider: str, old: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the demo ran uninstrumented and reported ``model calls 0``, ``$0.0000``."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: old if name == provider else real(name))
    assert main(["demo", "--provider", provider, "--turns", "2"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{provider} {old} is not supported" in err
    assert "anthropic >= 2.10, < 3" in err and "openai >= 3.50, < 4" in err


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon", "61"])
def test_a_bad_latency_exits_2_with_a_message(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--latency", value])
    assert exc.value.code == EXIT_USAGE
    assert "--latency" in capsys.readouterr().err


def test_background_and_latency_reach_the_run() -> None:
    args = build_parser().parse_args(["demo", "--background", "--latency", "0.5"])
    assert args.background is True and args.latency == 0.5
    defaults = build_parser().parse_args(["demo"])
    assert defaults.background is False and defaults.latency == 0.0


@pytest.mark.parametrize("args", [["demo", "--turns", "5"], ["demo", "--turns", "5", "--plain"], ["settings"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(args: list[str]) -> None:
    """``otel-context demo | head -1``: no traceback (the plain report raised BrokenPipeError)."""
    proc = subprocess.Popen([str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader is gone
    err = proc.stderr.read()
    status = proc.wait(timeout=120)
    assert first.startswith(("otel-context demo:", "OTEL_"))
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert status in (0, 1)  # 0: the whole output fitted the pipe before it closed
