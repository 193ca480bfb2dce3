"""The command lines a user tries first: ``otel-context --version``, the help of
``python -m otel_context.testing`` (every option explained, no reStructuredText quoting), and its fault
flags (``--fail-summaries``, ``--too-long-every``, ``--latency``) seen through the real SDKs."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

import otel_context
from otel_context.cli import main as cli_main
from otel_context.testing.__main__ import build_parser

SUMMARY_ASK = "Please write a summary of the conversation so far."


def test_otel_context_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli_main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"otel-context {otel_context.__version__}\n"


def test_every_option_of_the_simulated_provider_cli_is_explained() -> None:
    parser = build_parser()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert {o.option_strings[0] for o in options} >= {"--fail-summaries", "--too-long-every", "--latency"}
    for option in options:
        assert option.help and option.help != argparse.SUPPRESS, option.option_strings
    assert parser.description and "``" not in parser.format_help()


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    """The simulated provider's CLI with faults: (anthropic base URL, openai base URL)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_context.testing",
            "--fail-summaries",
            "2",
            "--too-long-every",
            "3",
            "--latency",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().split(": ", 1)[1].strip() for _ in range(2)]
        yield urls[0], urls[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ask(client: anthropic.Anthropic, text: str) -> anthropic.types.Message:
    return client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": text}])


def test_fault_flags_reach_the_sdks(served: tuple[str, str]) -> None:
    anthropic_url, openai_url = served
    client = anthropic.Anthropic(base_url=anthropic_url, api_key="x", max_retries=0)
    # --fail-summaries 2: the first two summary requests fail, the third is answered.
    for _ in range(2):
        with pytest.raises(anthropic.InternalServerError, match="--fail-summaries"):
            _ask(client, SUMMARY_ASK)
    assert _ask(client, SUMMARY_ASK).content
    # --too-long-every 3: every third request of an endpoint (summaries aside) is "too long".
    started = time.monotonic()
    _ask(client, "Hello words:3")
    assert time.monotonic() - started >= 0.2  # --latency 0.2
    _ask(client, "Hello words:3")
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        _ask(client, "Hello words:3")
    _ask(client, "Hello words:3")
    chat = openai.OpenAI(base_url=openai_url, api_key="x", max_retries=0)
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "Hi words:2"}]
    for _ in range(2):
        chat.chat.completions.create(model="gpt-4o", messages=messages)
    with pytest.raises(openai.BadRequestError) as rejected:
        chat.chat.completions.create(model="gpt-4o", messages=messages)
    assert rejected.value.code == "context_length_exceeded"


def test_the_fault_flags_are_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulated-provider.md").read_text()
    for flag in ("--fail-summaries N", "--too-long-every N", "--latency S"):
        assert flag in doc, flag
