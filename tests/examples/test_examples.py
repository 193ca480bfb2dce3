"""Every example runs, offline, against the simulated provider, and prints what its docstring promises.

Each runs with only what the extras of its row in examples/README.md install (tests/examples/user_install.py):
an example that needs more fails here as it would for a user.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from . import user_install

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BIN = Path(sys.executable).parent
EXTRAS = user_install.readme_extras(EXAMPLES / "README.md")


def _env() -> dict[str, str]:
    """No API keys (so the simulated provider is used) and no OTEL_* configuration from the developer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_"))}
    env["PYTHONWARNINGS"] = "error::DeprecationWarning:__main__"  # e.g. a model the SDK says is deprecated
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: Arguments of the examples that run until stopped (the long run is tests/dashboards/test_e2e_prometheus.py).
ARGS: dict[str, list[str]] = {
    "failing_summarizer_metrics.py": ["--duration", "3", "--pace", "0.1", "--port", str(_free_port())],
}
COMMANDS: dict[str, list[str]] = {name: [str(EXAMPLES / name), *ARGS.get(name, [])] for name in EXTRAS}
COMMANDS["zero_code under opentelemetry-instrument"] = [
    str(BIN / "opentelemetry-instrument"),
    "--traces_exporter",
    "console",
    "--metrics_exporter",
    "none",
    sys.executable,
    str(EXAMPLES / "zero_code.py"),
]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """Run every example at once (each is mostly SDK import time) and keep (exit status, stdout, stderr).

    A Python example runs under the guard of user_install: what its README extras do not install is missing."""
    where = tmp_path_factory.mktemp("user-install")
    blocked = {
        ",".join(extras): user_install.write_blocked(extras, where / f"{'-'.join(extras)}.json")
        for extras in EXTRAS.values()
    }
    commands = {
        name: user_install.command(Path(command[0]), blocked[",".join(EXTRAS[name])], *command[1:])
        if name in EXTRAS
        else command
        for name, command in COMMANDS.items()
    }
    procs = {
        name: subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=EXAMPLES.parent
        )
        for name, command in commands.items()
    }
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        results[name] = (proc.returncode, out, err)
    return results


@pytest.fixture
def example(outputs: dict[str, tuple[int, str, str]]) -> Callable[[str], str]:
    def get(name: str) -> str:
        code, out, err = outputs[name]
        assert code == 0, err
        assert "Traceback" not in err and "Failed to export" not in err, err
        return out

    return get


def test_anthropic_quickstart(example: Callable[[str], str]) -> None:
    out = example("anthropic_quickstart.py")
    assert "reply: Simulated reply" in out
    span_lines = [line for line in out.splitlines() if line.startswith("span: chat claude-sonnet-4-6 ")]
    assert len(span_lines) == 1
    assert '"gen_ai.usage.input_tokens"' in span_lines[0] and '"gen_ai.provider.name": "anthropic"' in span_lines[0]


def test_openai_quickstart(example: Callable[[str], str]) -> None:
    out = example("openai_quickstart.py")
    assert "chat reply: Simulated reply" in out and "responses reply: Simulated reply" in out
    assert sum(1 for line in out.splitlines() if line.startswith("span: chat gpt-4.1 ")) == 2


def test_async_streaming(example: Callable[[str], str]) -> None:
    out = example("async_streaming.py")
    for model in ("claude-sonnet-4-6", "gpt-4.1"):
        line = next(line for line in out.splitlines() if line.startswith(f"span 'chat {model}'"))
        assert "stream=True" in line and "input_tokens=None" not in line and "output_tokens=None" not in line


def test_agent_loop_compacts_transparently(example: Callable[[str], str]) -> None:
    out = example("agent_loop.py")
    turns = [line for line in out.splitlines() if line.startswith("turn ")]
    assert len(turns) == 12
    assert any("compacted: summary" in line for line in turns)
    sent = [int(line.split("last request ")[1].split(" ")[0]) for line in turns]
    assert max(sent) < 8_000 and sent[-1] < sent[5]  # what was sent stayed inside the pretend window
    assert "your history list still has all 48 messages" in out


def test_explicit_compactor(example: Callable[[str], str]) -> None:
    out = example("explicit_compactor.py")
    assert "compacted: " in out and "(success)" in out
    assert "the FACT line survived the compactions: True" in out
    assert "span compact: trigger=manual strategy=summary outcome=success" in out
    assert "retention " in out and "lost " in out
    assert "own summarizer: compacted=True" in out and "own summary keeps the FACT line: True" in out
    assert "span compact: trigger=manual strategy=microcompact outcome=success" in out


def test_hooks_keep_the_rule_and_reinject_the_file(example: Callable[[str], str]) -> None:
    out = example("hooks.py")
    assert "pre_compact: auto compaction" in out and "post_compact: summary" in out
    assert "summarizer requests carrying the pre_compact instructions: 0" not in out
    assert "the rule is in the last request: True" in out
    assert "the style guide was re-injected into the last request: True" in out
    # The hooks run in the background summary's thread; only the app's thread prints: whole lines, in order.
    prefixes = ("pre_compact: ", "post_compact: ", "summarizer requests", "the rule is", "the style guide")
    assert all(line.startswith(prefixes) for line in out.splitlines()), out
    assert out.rstrip().splitlines()[-1].startswith("the style guide was re-injected")


def test_zero_code_under_opentelemetry_instrument(example: Callable[[str], str]) -> None:
    out = example("zero_code under opentelemetry-instrument")
    assert "reply: Simulated reply" in out
    assert '"name": "chat claude-sonnet-4-6"' in out and '"gen_ai.usage.input_tokens"' in out


def test_zero_code_without_the_wrapper_traces_nothing(example: Callable[[str], str]) -> None:
    out = example("zero_code.py")
    assert "reply: Simulated reply" in out and '"name"' not in out


def test_every_example_has_a_row_naming_its_extras() -> None:
    assert sorted(EXTRAS) == sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_the_extras_named_for_opentelemetry_instrument_bring_a_distro() -> None:
    # Without a distro, opentelemetry-instrument sets no SDK up (test_zero_code_without_a_distro_says_so_once).
    assert "opentelemetry-distro" in user_install.distributions_for(EXTRAS["zero_code.py"])
    assert "opentelemetry-distro" not in user_install.distributions_for(["anthropic"])


def test_the_guard_hides_what_the_extras_do_not_install(tmp_path: Path) -> None:
    script = tmp_path / "needs_prometheus.py"
    script.write_text("import opentelemetry.exporter.prometheus\nprint('imported')\n")
    without = user_install.write_blocked(["anthropic"], tmp_path / "a.json")
    with_it = user_install.write_blocked(["anthropic", "prometheus"], tmp_path / "b.json")
    missing = subprocess.run(user_install.command(script, without), capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "ModuleNotFoundError" in missing.stderr
    assert "opentelemetry.exporter.prometheus" in missing.stderr
    found = subprocess.run(user_install.command(script, with_it), capture_output=True, text=True, check=False)
    assert found.returncode == 0 and found.stdout == "imported\n", found.stderr


def test_failing_summarizer_metrics_serves_metrics(example: Callable[[str], str]) -> None:
    out = example("failing_summarizer_metrics.py")
    assert out.startswith("metrics on http://127.0.0.1:")


def _zero_code(**variables: str) -> tuple[int, list[str], list[str], float]:
    """(exit status, stdout lines, stderr lines, seconds from the reply to the exit) of examples/zero_code.py
    under opentelemetry-instrument, with the standard defaults (no exporter flags: OTLP)."""
    env = {**_env(), **variables}
    proc = subprocess.Popen(
        [str(BIN / "opentelemetry-instrument"), sys.executable, str(EXAMPLES / "zero_code.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=EXAMPLES.parent,
    )
    assert proc.stdout is not None and proc.stderr is not None
    replied = time.monotonic()
    out = []
    for line in proc.stdout:
        out.append(line.rstrip("\n"))
        replied = time.monotonic()
    err = [line for line in proc.stderr.read().splitlines() if line.strip()]
    status = proc.wait(timeout=120)
    return status, out, err, time.monotonic() - replied


def test_zero_code_without_a_distro_says_so_once_and_names_the_extra() -> None:
    # No distro: OTEL_PYTHON_DISTRO and OTEL_PYTHON_CONFIGURATOR name none of those installed, so the loader
    # sets nothing up, as without opentelemetry-distro (it says that it skipped the one it found).
    status, out, err, _ = _zero_code(OTEL_PYTHON_DISTRO="absent", OTEL_PYTHON_CONFIGURATOR="absent")
    assert status == 0, err
    assert out[0].startswith("reply: Simulated reply")
    ours = [line for line in err if line.startswith("otel_context:")]
    assert len(ours) == 1, err
    assert "opentelemetry-instrument set no OpenTelemetry SDK up" in ours[0]
    assert "pip install 'otel-context[instrument]'" in ours[0]
    assert "trace.set_tracer_provider" not in ours[0] and "otel_context.auto" not in ours[0]  # no code to change
    assert [line for line in err if line not in ours] == [
        "Configuration of configurator not loaded because absent is set by OTEL_PYTHON_CONFIGURATOR"
    ]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])  # the distro's default, and the other
def test_zero_code_with_the_distro_and_no_collector_one_line_and_a_prompt_exit(protocol: str) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"
    status, out, err, end = _zero_code(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    assert status == 0, err
    assert out[0].startswith("reply: Simulated reply")
    assert len(err) == 1, err  # before: "Transient error ... retrying" and "Failed to export" lines, 12 s
    assert err[0].startswith(f"otel_context: no OpenTelemetry collector listens at {endpoint}")
    assert end < 4.0, f"the exit took {end:.1f} s after the reply"
