"""Two conversations never share state (issue 11): real SDK clients, the instrumentation, the simulated provider.

Every conversation opens with the same greeting and no explicit id, so they all derive the same key. Each
user message is tagged with its conversation (``c03``), and the simulated summarizer copies the user
messages and FACT lines into its summary, so any request that carried another conversation's words or
summaries shows a second tag. Each conversation is first run alone (a fresh engine each time), then all
of them together, in threads and in asyncio tasks: the requests must carry one conversation's content
only, and each conversation must compact exactly as often as it did alone, with no more too-long
rejections than alone.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from otel_context import engine

WINDOW = 8_000
TURNS = 30
CONVERSATIONS = 6
GREETING = "Hi! Can you help me with my project?"
_TAG = re.compile(r"\bc(\d\d)-")
_SUMMARY = re.compile(r"summar", re.IGNORECASE)
MODELS = {"anthropic": "claude-sonnet-4-6", "openai_chat": "gpt-4o", "openai_responses": "gpt-4o"}
#: The calls' max_tokens, which is the budget's reserve: the room the summary gets at the threshold. The
#: simulated summary keeps every user message (500 characters each); 512 left it too little in this window
#: (a summary cut at its length limit is a failed compaction).
MAX_TOKENS = 2_048


def _user_text(conv: int, turn: int) -> str:
    filler = " ".join(f"c{conv:02d}-w{i}" for i in range(80))
    return f"Turn {turn} of c{conv:02d}-talk. FACT: c{conv:02d}-fact-{turn}. Notes: {filler}. words:60"


def _text_of(response: Any, fmt: str) -> str:
    if fmt == "anthropic":
        return "".join(b.text for b in response.content if b.type == "text")
    if fmt == "openai_chat":
        return str(response.choices[0].message.content)
    return str(response.output_text)


def _call(client: Any, fmt: str, history: list[dict[str, Any]]) -> Any:
    model = MODELS[fmt]
    if fmt == "anthropic":
        return client.messages.create(model=model, max_tokens=MAX_TOKENS, messages=history)
    if fmt == "openai_chat":
        return client.chat.completions.create(model=model, max_tokens=MAX_TOKENS, messages=history)
    return client.responses.create(model=model, max_output_tokens=MAX_TOKENS, input=history)


async def _acall(client: Any, fmt: str, history: list[dict[str, Any]]) -> Any:
    model = MODELS[fmt]
    if fmt == "anthropic":
        return await client.messages.create(model=model, max_tokens=MAX_TOKENS, messages=history)
    if fmt == "openai_chat":
        return await client.chat.completions.create(model=model, max_tokens=MAX_TOKENS, messages=history)
    return await client.responses.create(model=model, max_output_tokens=MAX_TOKENS, input=history)


def _conversation(
    client: Any, fmt: str, conv: int, start: threading.Barrier | None, errors: list[BaseException]
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": GREETING}]
    try:
        if start is not None:
            start.wait()
        for turn in range(TURNS):
            response = _call(client, fmt, history)
            history.append({"role": "assistant", "content": _text_of(response, fmt)})
            history.append({"role": "user", "content": _user_text(conv, turn)})
    except BaseException as error:  # the test reports every error that reached an app
        errors.append(error)


async def _aconversation(client: Any, fmt: str, conv: int) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": GREETING}]
    for turn in range(TURNS):
        response = await _acall(client, fmt, history)
        history.append({"role": "assistant", "content": _text_of(response, fmt)})
        history.append({"role": "user", "content": _user_text(conv, turn)})
        await asyncio.sleep(0)


def _is_summarizer_request(body: Any) -> bool:
    """The engine's summarizer call: its last message asks for a summary (no app message here says so)."""
    if not isinstance(body, dict):
        return False
    items = body.get("messages") or body.get("input") or []
    return bool(items) and _SUMMARY.search(str(items[-1])) is not None


def _tags(body: Any) -> set[str]:
    return set(_TAG.findall(str(body)))


def _profile(sim: Any) -> tuple[Counter[str], Counter[str]]:
    """Per conversation: summarizer calls, and requests the provider rejected."""
    summaries: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    for exchange in sim.exchanges:
        tags = _tags(exchange.body)
        assert len(tags) <= 1, f"a request carried the content of conversations {sorted(tags)}"
        if not tags:
            continue
        (tag,) = tags
        if _is_summarizer_request(exchange.body):
            summaries[tag] += 1
        if exchange.status != 200:
            rejected[tag] += 1
    return summaries, rejected


def _client(sim: Any, fmt: str, *, is_async: bool = False) -> Any:
    if fmt == "anthropic":
        return sim.async_anthropic() if is_async else sim.anthropic()
    return sim.async_openai() if is_async else sim.openai()


def _alone(sim: Any, instrumented: Callable[..., Any], fmt: str) -> tuple[Counter[str], Counter[str]]:
    """Instrument, then run each conversation alone (a fresh engine each): what each does by itself."""
    sim.set_window(MODELS[fmt], WINDOW)
    # Inline: the per-conversation summary counts must not depend on when a background summary lands.
    instrumented(auto_compact_window=WINDOW, background_compaction=False)
    client = _client(sim, fmt)
    for conv in range(CONVERSATIONS):
        engine.reset()
        errors: list[BaseException] = []
        _conversation(client, fmt, conv, None, errors)
        assert errors == []
    profile = _profile(sim)
    sim.clear()
    engine.reset()
    return profile


@pytest.mark.parametrize("fmt", ["anthropic", "openai_chat", "openai_responses"])
def test_concurrent_conversations_with_one_greeting_never_mix_in_threads(
    simulated_provider: Any, instrumented: Callable[..., Any], fmt: str
) -> None:
    alone_summaries, alone_rejected = _alone(simulated_provider, instrumented, fmt)
    assert sum(alone_summaries.values()) >= CONVERSATIONS, "each conversation must compact at least once"

    client = _client(simulated_provider, fmt)
    start = threading.Barrier(CONVERSATIONS)
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_conversation, args=(client, fmt, conv, start, errors)) for conv in range(CONVERSATIONS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    summaries, rejected = _profile(simulated_provider)
    assert summaries == alone_summaries
    assert rejected == alone_rejected


@pytest.mark.parametrize("fmt", ["anthropic", "openai_chat", "openai_responses"])
def test_concurrent_conversations_with_one_greeting_never_mix_in_asyncio_tasks(
    simulated_provider: Any, instrumented: Callable[..., Any], fmt: str
) -> None:
    alone_summaries, alone_rejected = _alone(simulated_provider, instrumented, fmt)

    async def main() -> None:
        client = _client(simulated_provider, fmt, is_async=True)
        await asyncio.gather(*(_aconversation(client, fmt, conv) for conv in range(CONVERSATIONS)))

    asyncio.run(main())
    summaries, rejected = _profile(simulated_provider)
    assert summaries == alone_summaries
    assert rejected == alone_rejected
