"""Property: over random valid tool-using histories, every compaction result is accepted by the provider.

Histories are generated for the Anthropic and OpenAI chat formats (parallel calls included), compacted
with the explicit API (fake summarizer answer), and the result is SENT with the real SDK to the simulated
provider, which enforces the pairing rules like the real APIs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context import Compactor
from otel_context.settings import Settings
from tests.compaction.support import FakeSummarizer

TURN = st.tuples(st.integers(0, 3), st.integers(0, 2), st.booleans())  # parallel calls, extra loops, final text


def anthropic_history(turns: list[tuple[int, int, bool]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    n = 0
    for t, (calls, loops, final) in enumerate(turns):
        messages.append({"role": "user", "content": f"ask {t} FACT: {t} " + "detail " * 60})
        for _ in range(loops + (1 if calls else 0)):
            if not calls:
                break
            ids = [f"toolu_{n + i}" for i in range(calls)]
            n += calls
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": i, "name": "read_file", "input": {"path": f"{i}.py"}} for i in ids
                    ],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": i, "content": "data " * 50} for i in ids],
                }
            )
        if final or not calls:
            messages.append({"role": "assistant", "content": f"answer {t} " + "because " * 60})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "continue"})
    return messages


def openai_history(turns: list[tuple[int, int, bool]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    n = 0
    for t, (calls, loops, final) in enumerate(turns):
        messages.append({"role": "user", "content": f"ask {t} FACT: {t} " + "detail " * 60})
        for _ in range(loops + (1 if calls else 0)):
            if not calls:
                break
            ids = [f"call_{n + i}" for i in range(calls)]
            n += calls
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                        for i in ids
                    ],
                }
            )
            messages += [{"role": "tool", "tool_call_id": i, "content": "data " * 50} for i in ids]
        if final or not calls:
            messages.append({"role": "assistant", "content": f"answer {t} " + "because " * 60})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "continue"})
    return messages


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURN, min_size=2, max_size=10), keep=st.integers(1, 8))
def test_anthropic_results_pass_provider_validation(anthropic_client: Any, turns: list[Any], keep: int) -> None:
    history = anthropic_history(turns)
    result = Compactor(lambda body: FakeSummarizer.text, settings=Settings(keep_recent_messages=keep)).compact(
        history, model="claude-sonnet-4-6", wire_format="anthropic_messages"
    )
    assert result.compacted, result.error or result.skipped_reason
    assert result.output_tokens < result.input_tokens
    response = anthropic_client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=result.messages)
    assert response.content


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURN, min_size=2, max_size=10), keep=st.integers(1, 8))
def test_openai_chat_results_pass_provider_validation(openai_client: Any, turns: list[Any], keep: int) -> None:
    history = openai_history(turns)
    result = Compactor(lambda body: FakeSummarizer.text, settings=Settings(keep_recent_messages=keep)).compact(
        history, model="gpt-4o", wire_format="openai_chat"
    )
    assert result.compacted, result.error or result.skipped_reason
    assert result.output_tokens < result.input_tokens
    response = openai_client.chat.completions.create(model="gpt-4o", messages=result.messages)
    assert response.choices


def responses_history(turns: list[tuple[int, int, bool]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    n = 0
    for t, (calls, loops, final) in enumerate(turns):
        items.append({"role": "user", "content": f"ask {t} FACT: {t} " + "detail " * 60})
        for _ in range(loops + (1 if calls else 0)):
            if not calls:
                break
            ids = [f"call_{n + i}" for i in range(calls)]
            n += calls
            items += [
                {"type": "function_call", "call_id": i, "name": "read_file", "arguments": '{"path": "a.py"}'}
                for i in ids
            ]
            items += [{"type": "function_call_output", "call_id": i, "output": "data " * 50} for i in ids]
        if final or not calls:
            items.append({"role": "assistant", "content": f"answer {t} " + "because " * 60})
    if items[-1].get("role") == "assistant":
        items.append({"role": "user", "content": "continue"})
    return items


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURN, min_size=2, max_size=10), keep=st.integers(1, 8))
def test_openai_responses_results_pass_provider_validation(openai_client: Any, turns: list[Any], keep: int) -> None:
    history = responses_history(turns)
    result = Compactor(lambda body: FakeSummarizer.text, settings=Settings(keep_recent_messages=keep)).compact(
        history, model="gpt-4.1", wire_format="openai_responses"
    )
    assert result.compacted, result.error or result.skipped_reason
    assert result.output_tokens < result.input_tokens
    response = openai_client.responses.create(model="gpt-4.1", input=result.messages)
    assert response.output
