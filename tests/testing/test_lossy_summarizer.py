"""The simulated summarizer that loses things as real ones do (SummarizerStyle): an output cap that drops the
oldest entries first, and a summarizer that reads only the end of its input. Through the real SDK clients."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from otel_context.testing import SimulatedProvider, SummarizerStyle, count_tokens
from otel_context.testing.scripted import Turn, summarize

from .helpers import CLAUDE, GPT

SUMMARIZE = "Summarize the conversation above in <summary> tags."


def _history(n: int) -> list[dict[str, Any]]:
    """``n`` user/assistant rounds, each user message planting ``FACT: fact-<i>`` among filler words."""
    messages: list[dict[str, Any]] = []
    for i in range(n):
        messages.append({"role": "user", "content": f"Round {i}: {'filler words here ' * 20}\nFACT: fact-{i}"})
        messages.append({"role": "assistant", "content": f"Done with round {i}."})
    return messages


def _facts(summary: str) -> list[str]:
    return summary.split("Facts:\n")[1].split("\nUser messages:")[0].splitlines()


def test_an_output_cap_drops_the_oldest_entries_first(simulated_provider: SimulatedProvider) -> None:
    simulated_provider.summarizer = SummarizerStyle(max_tokens=400)
    client = simulated_provider.anthropic()
    messages = [*_history(30), {"role": "user", "content": SUMMARIZE}]
    text = client.messages.create(model=CLAUDE, max_tokens=20_000, messages=messages).content[0].text
    facts = _facts(text)
    assert facts, text
    assert "FACT: fact-29" in facts and "FACT: fact-0" not in facts
    # What is kept is a contiguous run ending with the newest: oldest first out.
    first = int(facts[0].rsplit("-", 1)[1])
    assert facts == [f"FACT: fact-{i}" for i in range(first, 30)]
    body = text.split("<summary>\n")[1]
    assert count_tokens(body) <= 400 + 20  # the cap, plus the section headings
    assert "Round 29:" in body and "Round 0:" not in body


def test_a_summarizer_that_reads_only_the_end_of_its_input(simulated_provider: SimulatedProvider) -> None:
    simulated_provider.summarizer = SummarizerStyle(reads_last_tokens=600)
    client = simulated_provider.openai()
    messages = [*_history(30), {"role": "user", "content": SUMMARIZE}]
    text = client.chat.completions.create(model=GPT, messages=messages).choices[0].message.content
    facts = _facts(text)
    assert "FACT: fact-29" in facts and "FACT: fact-0" not in facts
    assert len(facts) < 10
    # Facts planted in the final request itself are read (it is the instruction the summarizer answers).
    final = {"role": "user", "content": SUMMARIZE + "\nFACT: in-the-request"}
    text = client.chat.completions.create(model=GPT, messages=[*_history(30), final]).choices[0].message.content
    assert "FACT: in-the-request" in _facts(text)


def test_the_default_summarizer_is_faithful(simulated_provider: SimulatedProvider) -> None:
    client = simulated_provider.openai()
    messages = [*_history(30), {"role": "user", "content": SUMMARIZE}]
    text = client.chat.completions.create(model=GPT, messages=messages).choices[0].message.content
    assert _facts(text) == [f"FACT: fact-{i}" for i in range(30)]
    assert not simulated_provider.summarizer.lossy


def test_responses_compact_endpoint_follows_the_style(simulated_provider: SimulatedProvider) -> None:
    simulated_provider.summarizer = SummarizerStyle(max_tokens=120)
    client = simulated_provider.openai()
    items = [{"role": m["role"], "content": m["content"]} for m in _history(20)]
    compacted = client.responses.compact(model=GPT, input=items)
    summary = next(
        base64.b64decode(item.encrypted_content.split(":", 1)[1]).decode()
        for item in compacted.output
        if item.type == "compaction"
    )
    assert "FACT: fact-19" in summary and "FACT: fact-0" not in summary


def test_styles_compose_and_are_validated() -> None:
    turns = [Turn("assistant", f"FACT: f{i}\n" + "pad " * 30) for i in range(20)]
    both = summarize([*turns, Turn("user", "<summary>")], SummarizerStyle(max_tokens=30, reads_last_tokens=400))
    facts = [line for line in both.splitlines() if line.startswith("FACT:")]
    # reads_last keeps the last ~12 turns (f8..f19); the cap then keeps the newest of those.
    assert facts and all(int(f.split()[1][1:]) >= 8 for f in facts) and facts[-1] == "FACT: f19"
    read_only = summarize([*turns, Turn("user", "<summary>")], SummarizerStyle(reads_last_tokens=400))
    assert len(facts) < len([line for line in read_only.splitlines() if line.startswith("FACT:")])
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        SummarizerStyle(max_tokens=0)
    with pytest.raises(ValueError, match="reads_last_tokens"):
        SummarizerStyle(reads_last_tokens=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="summarizer must be a SummarizerStyle"):
        SimulatedProvider(summarizer={"max_tokens": 10})  # type: ignore[arg-type]
