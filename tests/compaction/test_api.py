"""The explicit API: Compactor.compact / acompact with a real SDK client or a function, should_compact."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from otel_context import Compactor, semconv, should_compact
from otel_context.flow import in_summarizer
from otel_context.settings import Settings
from tests.compaction.support import FakeSummarizer, Otel, anthropic_agent
from tests.values import attrs_of


def test_should_compact_follows_the_budget() -> None:
    small = anthropic_agent(2)
    big = anthropic_agent(12, 8000)
    assert not should_compact(small, model="claude-sonnet-4-6", window=30_000)
    assert should_compact(big, model="claude-sonnet-4-6", window=30_000)
    assert not should_compact(big, model="unknown-model")
    assert not should_compact(
        big, model="claude-sonnet-4-6", window=30_000, settings=Settings(disable_auto_compact=True)
    )


def test_compact_with_the_real_sdk_client(anthropic_client: Any, otel: Otel) -> None:
    history = anthropic_agent(10)
    before = copy.deepcopy(history)
    result = Compactor(client=anthropic_client).compact(history, model="claude-sonnet-4-6")
    assert history == before
    assert result.compacted and result.outcome == "success"
    assert "FACT: use clap" in result.summary  # the simulated summarizer keeps FACT lines verbatim
    assert len(result.messages) < len(history)
    (span,) = otel.compact_spans()
    assert attrs_of(span)[semconv.COMPACTION_TRIGGER_SOURCE] == "manual"


async def test_acompact_with_an_async_function() -> None:
    async def summarize(body: dict[str, Any]) -> str:
        return FakeSummarizer.text

    result = await Compactor(client=summarize).acompact(
        anthropic_agent(10), model="claude-sonnet-4-6", wire_format="anthropic_messages"
    )
    assert result.compacted and result.summary.startswith("1. Primary request")


async def test_acompact_with_an_object_whose_call_is_async() -> None:
    class Summarizer:
        async def __call__(self, body: dict[str, Any]) -> str:
            return FakeSummarizer.text

    result = await Compactor(client=Summarizer()).acompact(
        anthropic_agent(10), model="claude-sonnet-4-6", wire_format="anthropic_messages"
    )
    assert result.compacted and result.summary.startswith("1. Primary request")


def test_failed_summarizer_returns_the_original_messages() -> None:
    def down(body: dict[str, Any]) -> str:
        raise RuntimeError("down")

    history = anthropic_agent(10)
    result = Compactor(client=down).compact(history, model="claude-sonnet-4-6", wire_format="anthropic_messages")
    assert not result.compacted and result.messages == history and result.error


async def test_acompact_with_the_real_async_openai_client(async_openai_client: Any, otel: Otel) -> None:
    from tests.compaction.support import openai_chat_agent

    history = openai_chat_agent(8)
    result = await Compactor(client=async_openai_client).acompact(history, model="gpt-4o", system="Be brief.")
    assert result.compacted and "FACT: use clap" in result.summary
    assert result.messages[0]["role"] == "user"  # the system message we added for the adapter is not returned
    (span,) = otel.compact_spans()
    children = [s for s in otel.spans() if s.parent is not None and s.parent.span_id == span.context.span_id]
    assert children == [] or all(c.name.startswith("chat") for c in children)


async def test_sync_compact_with_an_async_client_says_what_to_do(async_anthropic_client: Any) -> None:
    import pytest

    with pytest.raises(TypeError, match="acompact"):
        Compactor(client=async_anthropic_client).compact(anthropic_agent(10), model="claude-sonnet-4-6")


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_sync_compact_raises_an_async_answer_it_did_not_see_coming(async_anthropic_client: Any) -> None:
    """An async client whose class does not say so is only found out by its awaitable answer: the caller's
    mistake reaches the caller as it is (not returned as a failed compaction)."""
    disguised = type("Disguised", (type(async_anthropic_client),), {})
    client = disguised(api_key="test", base_url=async_anthropic_client.base_url)

    def compact() -> None:
        Compactor(client=client).compact(
            anthropic_agent(10), model="claude-sonnet-4-6", wire_format="anthropic_messages"
        )

    with pytest.raises(TypeError, match="acompact"):
        compact()
    # The recursion guard is left as it was: set, it would leave every later call of this context unplanned.
    assert in_summarizer.get() is False


def test_the_readme_call_positional_client(anthropic_client: Any, otel: Otel) -> None:
    """README: ``otel_context.Compactor(client).compact(messages, model=..., trigger="manual")``."""
    import otel_context

    history = anthropic_agent(10)
    result = otel_context.Compactor(anthropic_client).compact(history, model="claude-sonnet-4-6", trigger="manual")
    assert result.compacted and result.outcome == "success"
    assert len(result.messages) < len(history)
    (span,) = otel.compact_spans()
    assert attrs_of(span)[semconv.COMPACTION_TRIGGER_SOURCE] == "manual"


def test_settings_where_the_client_goes_is_a_clear_error() -> None:
    import pytest

    with pytest.raises(TypeError, match="first argument is the client"):
        Compactor(Settings(keep_recent_messages=2))
    with pytest.raises(TypeError, match=r"settings must be otel_context\.Settings"):
        Compactor(lambda body: "x", settings={"keep_recent_messages": 2})  # type: ignore[arg-type]


def test_no_client_says_which_call_works() -> None:
    import pytest

    with pytest.raises(ValueError, match=r"Compactor\(anthropic.Anthropic\(\)\)"):
        Compactor()
