"""Provider knowledge in one place per provider (issue 40 item 4): the window rows and the model-name prefixes of
``otel_context/providers.py``, and what the core asks of a format instead of testing its name."""

from __future__ import annotations

import pytest

from otel_context import formats, providers
from otel_context.compaction import budget
from otel_context.settings import SUMMARY_PROVIDERS, model_owner, resolve, summary_model_for


def test_every_chat_format_names_a_provider_a_summary_model_can_be_named_for() -> None:
    named = {p.name: p for p in providers.PROVIDERS}
    for name in formats.WIRE_FORMATS:
        provider = named[formats.for_format(name).provider]
        assert provider.summary_provider
    assert SUMMARY_PROVIDERS == ("anthropic", "openai")


def test_the_window_table_is_every_providers_rows_and_no_row_is_two_providers() -> None:
    rows = [name for p in providers.PROVIDERS for name in p.models]
    assert len(rows) == len(set(rows))
    assert list(budget.MODEL_TABLE) == rows
    assert budget.lookup_model("claude-sonnet-4-6-20260101") == providers.ANTHROPIC.models["claude-sonnet-4-6"]
    assert budget.lookup_model("deepseek-chat") == providers.DEEPSEEK.models["deepseek-chat"]
    assert budget.ModelSpec is providers.ModelSpec


@pytest.mark.parametrize(
    ("model", "owner"),
    [
        ("claude-haiku-4-5", "anthropic"),
        ("gpt-5-mini", "openai"),
        ("ft:gpt-4o-mini:org::id", "openai"),
        ("o1", "openai"),
        ("o3-mini", "openai"),
        ("o100", None),
        ("openai/gpt-4o", "openai"),
        ("deepseek-chat", None),  # spoken through OpenAI chat: any provider's
        ("my-local-llama", None),
    ],
)
def test_model_owner(model: str, owner: str | None) -> None:
    assert model_owner(model) == owner


def test_the_summary_model_follows_the_formats_provider() -> None:
    settings = resolve({"summary_model": "anthropic:claude-haiku-4-5,gpt-5-mini"}, env={})
    picked = {
        name: summary_model_for(settings, formats.for_format(name).provider, "m") for name in formats.WIRE_FORMATS
    }
    assert picked == {
        "anthropic_messages": "claude-haiku-4-5",
        "openai_chat": "gpt-5-mini",
        "openai_responses": "gpt-5-mini",
    }
    bare = resolve({"summary_model": "claude-haiku-4-5"}, env={})
    assert summary_model_for(bare, formats.OPENAI_CHAT.provider, "gpt-4o") == "gpt-4o"


def test_the_quirks_the_core_asks_of_a_format() -> None:
    assert [n for n in formats.WIRE_FORMATS if formats.for_format(n).empty_prefill] == ["anthropic_messages"]
    assert [n for n in formats.WIRE_FORMATS if formats.for_format(n).cache_control_markers] == ["anthropic_messages"]


@pytest.mark.parametrize(
    ("message", "fits"),
    [
        ({"role": "user", "content": "hi"}, set(formats.WIRE_FORMATS)),
        ({"role": "tool", "tool_call_id": "c", "content": "x"}, {"openai_chat"}),
        ({"role": "system", "content": "x"}, {"openai_chat", "openai_responses"}),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"openai_responses"}),
        ({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}, {"anthropic_messages"}),
        ({"role": "user", "content": [{"type": "input_text", "text": "x"}]}, {"openai_responses"}),
        ({"role": "tool", "content": [{"type": "tool_result"}]}, set()),
    ],
)
def test_formats_fitting(message: dict[str, object], fits: set[str]) -> None:
    assert formats.formats_fitting(message) == fits


def test_preferred_format() -> None:
    assert formats.preferred_format(frozenset(formats.WIRE_FORMATS)) == formats.DEFAULT_WIRE_FORMAT
    assert formats.preferred_format(frozenset({"openai_chat", "openai_responses"})) == "openai_chat"
