"""The documented conventions: token counting and scripted replies (summaries keep facts)."""

from __future__ import annotations

from typing import Any

import pytest

from otel_context.testing import count_request_tokens, count_tokens, summarize
from otel_context.testing.scripted import Turn, plan_reply

from .helpers import CLAUDE, GPT, WEATHER_TOOL, openai_tool


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("   ", 0),
        ("Hello, world!", 6),
        ("abcd", 1),
        ("abcde", 2),
        ("a b c", 3),
        ("naïve café", 3),
        ("x=1;", 4),
    ],
)
def test_count_tokens_rule(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


def test_request_tokens_formula() -> None:
    body = {
        "system": "abcd",
        "messages": [
            {"role": "user", "content": "abcd abcd"},
            {"role": "assistant", "content": [{"type": "text", "text": "ab"}]},
        ],
    }
    assert count_request_tokens(body, "anthropic_messages") == 1 + (3 + 2) + (3 + 1)
    chat = {"messages": [{"role": "system", "content": "abcd"}, {"role": "user", "content": "abcd"}]}
    assert count_request_tokens(chat, "openai_chat") == (3 + 1) * 2
    responses = {"instructions": "abcd", "input": "abcd"}
    assert count_request_tokens(responses, "openai_responses") == (3 + 1) * 2
    with pytest.raises(ValueError, match="wire_format"):
        count_request_tokens(body, "bedrock")  # type: ignore[arg-type]


def test_images_cost_a_fixed_amount() -> None:
    small = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}],
            }
        ]
    }
    big = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD" * 10000}}
                ],
            }
        ]
    }
    assert (
        count_request_tokens(small, "anthropic_messages") == count_request_tokens(big, "anthropic_messages") == 3 + 85
    )


def test_tool_definitions_are_counted(anthropic_client: Any, openai_client: Any) -> None:
    body = {"model": CLAUDE, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    without = anthropic_client.messages.create(**body).usage.input_tokens
    with_tools = anthropic_client.messages.create(**body, tools=[WEATHER_TOOL]).usage.input_tokens
    assert with_tools > without
    chat = {"model": GPT, "messages": [{"role": "user", "content": "hi"}], "tools": [openai_tool(WEATHER_TOOL)]}
    assert openai_client.chat.completions.create(**chat).usage.prompt_tokens == count_request_tokens(
        chat, "openai_chat"
    )


def test_inputs_are_never_mutated(anthropic_client: Any) -> None:
    system = [{"type": "text", "text": "abcd " * 1200, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": "hi"}]
    before = repr((system, messages))
    anthropic_client.messages.create(model=CLAUDE, max_tokens=10, system=system, messages=messages)
    assert repr((system, messages)) == before


def test_summary_keeps_facts_and_user_messages(anthropic_client: Any) -> None:
    long_user = "U" * 600
    messages = [
        {"role": "user", "content": "Please refactor parser.py\nFACT: deadline is Friday"},
        {"role": "assistant", "content": "Working.\nFACT: parser.py has 3 classes\n  FACT: indented facts count too"},
        {"role": "user", "content": long_user},
        {"role": "assistant", "content": "FACT: deadline is Friday"},
        {"role": "user", "content": "Summarize the conversation above in <summary> tags."},
    ]
    reply = anthropic_client.messages.create(model=CLAUDE, max_tokens=4000, messages=messages).content[0].text
    assert reply.startswith("<analysis>\n")
    analysis, summary = reply.split("</analysis>\n")
    assert summary.startswith("<summary>\n") and summary.endswith("\n</summary>")
    facts = summary.split("Facts:\n")[1].split("\nUser messages:")[0].splitlines()
    assert facts == ["FACT: deadline is Friday", "FACT: parser.py has 3 classes", "FACT: indented facts count too"]
    assert "- Please refactor parser.py\nFACT: deadline is Friday" in summary
    assert f"- {'U' * 500}\n" in summary and "U" * 501 not in summary
    assert "Summarize the conversation" not in summary
    assert "Summarizing 4 messages (2 from the user)" in analysis


def test_summary_takes_priority_over_tool_directives(openai_client: Any) -> None:
    messages = [
        {"role": "user", "content": "FACT: x=1"},
        {"role": "user", "content": "tool:get_weather then write a summary"},
    ]
    completion = openai_client.chat.completions.create(model=GPT, messages=messages, tools=[openai_tool(WEATHER_TOOL)])
    assert completion.choices[0].finish_reason == "stop"
    assert "FACT: x=1" in completion.choices[0].message.content


def test_summaries_chain_across_compactions() -> None:
    first = summarize([Turn("user", "FACT: a"), Turn("user", "summarize")])
    second = summarize([Turn("user", first), Turn("user", "more\nFACT: b"), Turn("user", "<summary>")])
    assert "FACT: a" in second and "FACT: b" in second


def test_plan_reply_is_deterministic_and_salted() -> None:
    turns = [Turn("user", "hello words:5")]
    a = plan_reply(turns, {})
    assert a == plan_reply(turns, {})
    assert a.text != plan_reply(turns, {}, salt="1").text
    assert len(a.text.split()) == 3 + 5
    assert plan_reply(turns, {}, max_tokens=2).truncated


def test_tool_results_in_last_message_do_not_trigger_directives() -> None:
    turns = [
        Turn("user", "tool:get_weather"),
        Turn("assistant", ""),
        Turn("user", "tool:get_weather", tool_result=True, results=2),
    ]
    reply = plan_reply(turns, {"get_weather": {}})
    assert reply.kind == "text"
    assert "received 2 tool results." in reply.text
