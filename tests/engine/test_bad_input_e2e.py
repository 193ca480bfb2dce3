"""Bad input end to end: a summarizer's unusable answer fails the compaction; malformed content is sent unchanged.

Real SDK clients, instrumentation and the simulated provider; an over-threshold history so that an automatic
compaction is due on the call.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from otel_context import semconv
from otel_context.flow import SummaryResult
from tests.compaction.support import Otel
from tests.engine.agents import SYSTEM, long_history
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o"
WINDOW = 60_000


_history = long_history


@pytest.mark.parametrize(
    "answer",
    [None, 42, "", "   ", ["a summary"], SummaryResult(text=None)],  # type: ignore[arg-type]  # bad on purpose
    ids=repr,  # type: ignore[arg-type]
)
def test_summarizer_without_a_usable_answer_is_a_failed_compaction(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], answer: Any
) -> None:
    instrumented(auto_compact_window=WINDOW, summarizer=lambda request: answer)
    history = _history()
    client = simulated_provider.anthropic()
    client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=history)
    compacts = otel.compact_spans()
    assert compacts and all(attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE for s in compacts)
    (sent,) = simulated_provider.exchanges
    assert sent.body["messages"] == history  # the original request, not "None" as the new history
    chat = otel.spans("chat " + MODEL)[-1]
    assert not attrs_of(chat).get(semconv.GEN_AI_CONVERSATION_COMPACTED)


MALFORMED_ANTHROPIC = [
    {"type": "text", "text": None},
    {"type": "text"},
    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": "not an object"},
    {"type": "image", "source": None},
]


@pytest.mark.parametrize("block", MALFORMED_ANTHROPIC, ids=repr)
def test_malformed_anthropic_block_is_not_summarized_away(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], block: dict[str, Any]
) -> None:
    instrumented(auto_compact_window=WINDOW)
    history = _history()
    history[2] = {"role": "user", "content": [block, {"type": "text", "text": "and more"}]}
    before = copy.deepcopy(history)
    client = simulated_provider.anthropic()
    try:
        client.messages.create(model=MODEL, max_tokens=256, system=SYSTEM, messages=history)
    except anthropic.BadRequestError:
        assert block.get("text", "") is None or "text" not in block  # the provider rejects empty text blocks
    assert history == before
    assert otel.compact_spans() == []  # nothing was summarized
    (sent,) = simulated_provider.exchanges
    assert sent.body["messages"] == before
    chat = otel.spans("chat " + MODEL)[-1]
    reason = str(attrs_of(chat)[semconv.CONTEXT_COMPACTION_SKIPPED_REASON])
    assert "messages.2.content.0" in reason and "malformed" in reason


def test_malformed_chat_tool_call_is_not_summarized_away(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented(auto_compact_window=WINDOW)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, *_history()]
    history[2] = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "c1"}]}
    client = simulated_provider.openai()
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=OPENAI_MODEL, max_tokens=256, messages=history)
    assert otel.compact_spans() == []
    assert simulated_provider.exchanges[-1].body["messages"] == history
    chat = otel.spans("chat " + OPENAI_MODEL)[-1]
    # Chat indexes count from the first message after the leading system/developer ones.
    assert "tool_calls[0].function is missing" in str(attrs_of(chat)[semconv.CONTEXT_COMPACTION_SKIPPED_REASON])


def test_malformed_responses_item_is_not_summarized_away(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented(auto_compact_window=WINDOW)
    items: list[dict[str, Any]] = _history()
    items[2] = {"role": "user", "content": [{"type": "input_text", "text": None}]}
    client = simulated_provider.openai()
    # The provider's call on a malformed request: what matters is that we sent it as it was.
    with contextlib.suppress(openai.BadRequestError):
        client.responses.create(model=OPENAI_MODEL, max_output_tokens=256, input=items)  # type: ignore[arg-type]
    assert otel.compact_spans() == []
    assert simulated_provider.exchanges[-1].body["input"] == items
    chat = otel.spans("chat " + OPENAI_MODEL)[-1]
    assert "input[2].content[0].text" in str(attrs_of(chat)[semconv.CONTEXT_COMPACTION_SKIPPED_REASON])
