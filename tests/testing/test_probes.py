"""The simulated model answers ``probe: <key>`` questions by lookup (what ``otel-context eval`` asks), through
the real SDK clients: line ``n`` of the reply is every line of the context that mentions the ``n``-th key."""

from __future__ import annotations

from typing import Any

from otel_context.testing import SimulatedProvider

from .helpers import CLAUDE, GPT

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Start here.\nFACT: The failing customer account is ACCT-88213."},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "FACT: keep the retry limit at 3.\nAnd summarize nothing yet."},
    {"role": "assistant", "content": "FACT: Change of plan noted: the Retry Limit is now 5."},
]
QUESTIONS = (
    "Answer these questions, one line each.\n"
    "1. What is the failing customer account? (probe: failing customer account)\n"
    "2. What is the retry limit now? (probe: retry limit)\n"
    "3. Where do the exchange rates live? (probe: exchange rates)"
)


def test_probe_lines_are_answered_from_the_lines_that_mention_their_key(simulated_provider: SimulatedProvider) -> None:
    client = simulated_provider.anthropic()
    reply = client.messages.create(
        model=CLAUDE,
        max_tokens=500,
        system="You are a coding agent.",
        messages=[*HISTORY, {"role": "user", "content": QUESTIONS}],
    )
    assert reply.content[0].text.splitlines() == [
        "1. FACT: The failing customer account is ACCT-88213.",
        # any case, oldest first, joined; the word "summarize" in the history does not make it a summary
        "2. FACT: keep the retry limit at 3. | FACT: Change of plan noted: the Retry Limit is now 5.",
        "3. unknown",
    ]


def test_probes_win_over_tool_directives_and_the_summary_word_on_chat(simulated_provider: SimulatedProvider) -> None:
    client = simulated_provider.openai()
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "properties": {}}}}]
    question = "Summarize, then tool:grep, then answer: 1. Which account? (probe: customer account)"
    reply = client.chat.completions.create(
        model=GPT,
        tools=tools,  # type: ignore[list-item]
        messages=[*HISTORY, {"role": "user", "content": question}],  # type: ignore[list-item]
    )
    message = reply.choices[0].message
    assert message.tool_calls is None
    assert message.content == "1. FACT: The failing customer account is ACCT-88213."


def test_a_probe_is_answered_only_from_what_the_request_carries(simulated_provider: SimulatedProvider) -> None:
    client = simulated_provider.anthropic()
    question = {"role": "user", "content": "1. Which account? (probe: customer account)"}
    reply = client.messages.create(model=CLAUDE, max_tokens=100, messages=[*HISTORY[2:], question])
    assert reply.content[0].text == "1. unknown"
