"""Prompt caching semantics (Anthropic breakpoints, OpenAI automatic prefixes) and TTLs on the manual clock."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from otel_context.testing import count_request_tokens
from tests.values import body_of

from .helpers import CLAUDE, GPT, long_text

EPHEMERAL = {"type": "ephemeral"}


def _system(tokens: int, tag: str = "", ttl: str | None = None) -> list[dict[str, Any]]:
    cc: dict[str, Any] = dict(EPHEMERAL)
    if ttl:
        cc["ttl"] = ttl
    return [{"type": "text", "text": long_text(tokens, tag), "cache_control": cc}]


def _ask(client: Any, system: Any, question: str = "Hi", **kw: Any) -> Any:
    body = {
        "model": CLAUDE,
        "max_tokens": 50,
        "system": system,
        "messages": [{"role": "user", "content": question}],
        **kw,
    }
    return client.messages.create(**body), count_request_tokens(body, "anthropic_messages")


def test_write_then_read(anthropic_client: Any) -> None:
    system = _system(2000)
    first, total = _ask(anthropic_client, system)
    assert first.usage.cache_creation_input_tokens == 2000
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 2000
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.input_tokens == total - 2000
    second, total2 = _ask(anthropic_client, system, "Another question")
    assert second.usage.cache_read_input_tokens == 2000
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == total2 - 2000


def test_prefix_must_be_byte_identical(anthropic_client: Any) -> None:
    _ask(anthropic_client, _system(2000, "aaaa"))
    changed, _ = _ask(anthropic_client, _system(2000, "bbbb"))
    assert changed.usage.cache_read_input_tokens == 0
    assert changed.usage.cache_creation_input_tokens == 2000


def test_cache_is_per_model(anthropic_client: Any) -> None:
    _ask(anthropic_client, _system(2000))
    other, _ = _ask(anthropic_client, _system(2000), model="claude-haiku-4-5")
    assert other.usage.cache_read_input_tokens == 0


def test_below_minimum_is_not_cached(sim: Any, anthropic_client: Any) -> None:
    first, total = _ask(anthropic_client, _system(500))
    assert first.usage.cache_creation_input_tokens == 0
    assert first.usage.input_tokens == total
    sim.min_cacheable_tokens = 400
    second, _ = _ask(anthropic_client, _system(500))
    assert second.usage.cache_creation_input_tokens == 500


def test_ttl_expiry_and_refresh_on_hit(sim: Any, anthropic_client: Any) -> None:
    system = _system(1500)
    _ask(anthropic_client, system)
    sim.clock.advance(299)
    hit, _ = _ask(anthropic_client, system)
    assert hit.usage.cache_read_input_tokens == 1500
    sim.clock.advance(299)  # 598 s after the write, but 299 s after the refreshing hit
    refreshed, _ = _ask(anthropic_client, system)
    assert refreshed.usage.cache_read_input_tokens == 1500
    sim.clock.advance(301)
    expired, _ = _ask(anthropic_client, system)
    assert expired.usage.cache_read_input_tokens == 0
    assert expired.usage.cache_creation_input_tokens == 1500


def test_one_hour_ttl(sim: Any, anthropic_client: Any) -> None:
    system = _system(1500, ttl="1h")
    first, _ = _ask(anthropic_client, system)
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 1500
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
    sim.clock.advance(3000)
    later, _ = _ask(anthropic_client, system)
    assert later.usage.cache_read_input_tokens == 1500
    sim.clock.advance(3601)
    gone, _ = _ask(anthropic_client, system)
    assert gone.usage.cache_read_input_tokens == 0


def test_growing_conversation_reads_previous_breakpoint_within_lookback(anthropic_client: Any) -> None:
    """The agent pattern: a breakpoint on the last message each turn reads the previous turn's entry."""
    base = long_text(1200, "conv")
    turn1 = [{"role": "user", "content": [{"type": "text", "text": base, "cache_control": EPHEMERAL}]}]
    first = anthropic_client.messages.create(model=CLAUDE, max_tokens=20, messages=turn1)
    written = first.usage.cache_creation_input_tokens
    assert written == count_request_tokens({"messages": turn1}, "anthropic_messages")
    turn2 = [
        {"role": "user", "content": [{"type": "text", "text": base}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "next step", "cache_control": EPHEMERAL}]},
    ]
    second = anthropic_client.messages.create(model=CLAUDE, max_tokens=20, messages=turn2)
    assert second.usage.cache_read_input_tokens == written
    total2 = count_request_tokens({"messages": turn2}, "anthropic_messages")
    assert second.usage.cache_creation_input_tokens == total2 - written
    assert second.usage.input_tokens == 0


def test_two_breakpoints_split_by_ttl(anthropic_client: Any) -> None:
    tools = [
        {
            "name": "t",
            "description": long_text(1100, "tool"),
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ]
    body = {
        "model": CLAUDE,
        "max_tokens": 20,
        "tools": tools,
        "system": _system(600, "sys"),
        "messages": [{"role": "user", "content": "x"}],
    }
    msg = anthropic_client.messages.create(**body)
    tools_tokens = count_request_tokens({"tools": tools}, "anthropic_messages")
    both = count_request_tokens({"tools": tools, "system": body["system"]}, "anthropic_messages")
    assert msg.usage.cache_creation.ephemeral_1h_input_tokens == tools_tokens
    assert msg.usage.cache_creation.ephemeral_5m_input_tokens == both - tools_tokens
    assert msg.usage.cache_creation_input_tokens == both


def test_more_than_four_breakpoints_is_rejected(anthropic_client: Any) -> None:
    system = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as info:
        _ask(anthropic_client, system)
    assert (
        body_of(info.value)["error"]["message"] == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


def test_streamed_usage_carries_cache_figures(anthropic_client: Any) -> None:
    system = _system(1500)
    _ask(anthropic_client, system)
    with anthropic_client.messages.stream(
        model=CLAUDE, max_tokens=20, system=system, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == 1500


def test_reset_cache(sim: Any, anthropic_client: Any) -> None:
    system = _system(1500)
    _ask(anthropic_client, system)
    sim.reset_cache()
    again, _ = _ask(anthropic_client, system)
    assert again.usage.cache_read_input_tokens == 0


# -- OpenAI ----------------------------------------------------------------------------------------------------


def _chat(client: Any, prefix_tokens: int, question: str) -> Any:
    messages = [{"role": "system", "content": long_text(prefix_tokens, "oai")}, {"role": "user", "content": question}]
    return client.chat.completions.create(model=GPT, messages=messages), count_request_tokens(
        {"messages": messages}, "openai_chat"
    )


def test_openai_short_prompts_are_not_cached(openai_client: Any) -> None:
    _chat(openai_client, 900, "a")
    second, _ = _chat(openai_client, 900, "b")
    assert second.usage.prompt_tokens_details.cached_tokens == 0


def test_openai_prefix_cache_in_128_token_steps(openai_client: Any) -> None:
    first, total = _chat(openai_client, 1300, "first question")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.usage.prompt_tokens == total
    second, total2 = _chat(openai_client, 1300, "a different question")
    shared = 3 + 1300  # the system message (overhead + text) is the common prefix
    expected = 1024 + ((shared - 1024) // 128) * 128
    assert second.usage.prompt_tokens_details.cached_tokens == expected
    assert second.usage.prompt_tokens == total2  # cached tokens are included in prompt_tokens


def test_openai_cache_ttl(sim: Any, openai_client: Any) -> None:
    _chat(openai_client, 1300, "q")
    sim.clock.advance(301)
    later, _ = _chat(openai_client, 1300, "q")
    assert later.usage.prompt_tokens_details.cached_tokens == 0


def test_openai_responses_cached_tokens(openai_client: Any) -> None:
    instructions = long_text(1500, "resp")
    openai_client.responses.create(model=GPT, instructions=instructions, input="one")
    second = openai_client.responses.create(model=GPT, instructions=instructions, input="two")
    assert second.usage.input_tokens_details.cached_tokens == 1408  # 1503-token shared prefix, 128-token steps


# --- automatic caching: the top-level cache_control of messages.create ------------------------------------


def _conversation(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": long_text(800, f"user {turn}")})
        history.append({"role": "assistant", "content": f"answer {turn}"})
    return history


def test_top_level_cache_control_marks_the_last_block_and_moves_forward(anthropic_client: Any) -> None:
    """No block carries a marker: the top-level one caches the whole prompt, and the next, longer turn reads
    all of it back and writes only what was appended."""
    history = _conversation(2)[:-1]  # ends on the user's turn
    first = anthropic_client.messages.create(
        model=CLAUDE, max_tokens=50, system="Be brief.", messages=history, cache_control=EPHEMERAL
    )
    cached = count_request_tokens({"model": CLAUDE, "system": "Be brief.", "messages": history}, "anthropic_messages")
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens == cached  # everything up to the last block
    longer = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": long_text(600, "more")}]
    second = anthropic_client.messages.create(
        model=CLAUDE, max_tokens=50, system="Be brief.", messages=longer, cache_control=EPHEMERAL
    )
    assert second.usage.cache_read_input_tokens == cached
    assert second.usage.cache_creation_input_tokens > 500  # the marker moved to the new last block


def test_without_top_level_cache_control_nothing_is_cached(anthropic_client: Any) -> None:
    history = _conversation(2)[:-1]
    for _ in range(2):
        again = anthropic_client.messages.create(model=CLAUDE, max_tokens=50, messages=history)
    assert again.usage.cache_read_input_tokens == 0 and again.usage.cache_creation_input_tokens == 0


def test_top_level_cache_control_with_a_1h_ttl_and_no_mutation(anthropic_client: Any, sim: Any) -> None:
    history = _conversation(2)[:-1]
    before = [dict(m) for m in history]
    marker = {"type": "ephemeral", "ttl": "1h"}
    first = anthropic_client.messages.create(model=CLAUDE, max_tokens=50, messages=history, cache_control=marker)
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens > 0
    assert history == before and all("cache_control" not in m for m in history)
    sim.clock.advance(600)  # past 5 minutes, within the hour
    second = anthropic_client.messages.create(model=CLAUDE, max_tokens=50, messages=history, cache_control=marker)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


def test_top_level_cache_control_counts_toward_the_four_breakpoints(anthropic_client: Any) -> None:
    system = [{"type": "text", "text": long_text(300, f"part {i}"), "cache_control": EPHEMERAL} for i in range(4)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
        anthropic_client.messages.create(
            model=CLAUDE, max_tokens=50, system=system, messages=_conversation(1)[:-1], cache_control=EPHEMERAL
        )
