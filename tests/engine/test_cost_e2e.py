"""Issue 50's "done when", end to end: both SDKs drive an agent on the simulated provider (plain and streamed
calls, a warm prompt cache, compactions, an unexpected cache break), and every dollar figure is checked against
its definition (docs/telemetry.md, "Cost"):

* each chat span's cost against genai-prices' own extraction and calculation of the usage the provider sent;
* each compaction's cost against its summarizer's chat spans, its saving per call against the tokens it removed;
* each cache break's cost against the tokens it made the provider write again;
* the spend, saving and cache-break counters against the spans and events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

import otel_context
from otel_context import pricing, semconv
from otel_context.testing import Exchange, SimulatedProvider
from tests.compaction.support import Otel
from tests.engine.agents import ANTHROPIC_TOOLS, OPENAI_TOOLS, SYSTEM, file_content, user_turn, with_breakpoint
from tests.instrumentation.instr_support import library_cost
from tests.values import attrs_of

WINDOW = 30_000
TURNS = 12
FILE_LINES = 1_200
#: From this turn on the app's system prompt changes: the prefix the cache held is lost (an unexpected break).
BREAK_AT = 2


def _system(turn: int) -> str:
    return SYSTEM if turn < BREAK_AT else SYSTEM + " Be brief."


def run_anthropic(client: Any, model: str) -> None:
    history: list[dict[str, Any]] = []
    calls = 0
    for turn in range(TURNS):
        history.append({"role": "user", "content": [{"type": "text", "text": user_turn(turn)}]})
        for _ in range(3):
            kw: dict[str, Any] = {"model": model, "max_tokens": 1024, "system": _system(turn), "tools": ANTHROPIC_TOOLS}
            calls += 1
            if calls % 3 == 0:
                with client.messages.stream(messages=with_breakpoint(history), **kw) as stream:
                    response = stream.get_final_message()
            else:
                response = client.messages.create(messages=with_breakpoint(history), **kw)
            history.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
            )
            if response.stop_reason != "tool_use":
                break
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": file_content(b.input["path"], FILE_LINES)}
                for b in response.content
                if b.type == "tool_use"
            ]
            history.append({"role": "user", "content": results})


def run_openai(client: Any, model: str) -> None:
    history: list[dict[str, Any]] = []
    calls = 0
    for turn in range(TURNS):
        history.append({"role": "user", "content": user_turn(turn)})
        for _ in range(3):
            messages = [{"role": "system", "content": _system(turn)}, *history]
            calls += 1
            if calls % 3 == 0:
                with client.chat.completions.stream(
                    model=model,
                    max_tokens=1024,
                    tools=OPENAI_TOOLS,
                    messages=messages,
                    stream_options={"include_usage": True},  # else the stream reports no usage to price
                ) as stream:
                    completion = stream.get_final_completion()
            else:
                completion = client.chat.completions.create(
                    model=model, max_tokens=1024, tools=OPENAI_TOOLS, messages=messages
                )
            message = completion.choices[0].message
            history.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                path = json.loads(call.function.arguments)["path"]
                history.append({"role": "tool", "tool_call_id": call.id, "content": file_content(path, FILE_LINES)})


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_every_dollar_figure_against_its_definition(
    simulated_provider: SimulatedProvider, otel: Otel, instrumented: Callable[..., Any], sdk: str
) -> None:
    instrumented(auto_compact_window=WINDOW, background_compaction=False, capture_content="NO_CONTENT")
    model = "claude-sonnet-4-6" if sdk == "anthropic" else "gpt-4.1"
    simulated_provider.set_window(model, WINDOW)
    if sdk == "anthropic":
        run_anthropic(simulated_provider.anthropic(), model)
    else:
        run_openai(simulated_provider.openai(), model)
    rates = pricing.rates(sdk, model)
    assert rates is not None and rates.cache_read is not None

    spans = sorted(otel.spans(), key=lambda s: s.start_time or 0)
    chats = [s for s in spans if attrs_of(s).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]
    compacts = [s for s in spans if s.name == semconv.COMPACT_SPAN]
    summaries = [s for s in compacts if attrs_of(s)[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_SUMMARY]
    exchanges = [e for e in simulated_provider.exchanges if e.usage is not None]

    # Each chat span (the agent's and the summarizer's, plain and streamed) costs what genai-prices says for the
    # usage the provider sent.
    assert len(chats) == len(exchanges)
    by_response = {_response_id(e): e for e in exchanges}
    streamed = 0
    for chat in chats:
        a = attrs_of(chat)
        exchange = by_response[a[semconv.GEN_AI_RESPONSE_ID]]
        assert close(a[semconv.COST_AMOUNT], library_cost(exchange)), (a, exchange.usage)
        streamed += bool(a.get(semconv.GEN_AI_REQUEST_STREAM))
    assert streamed >= 3
    assert sum(1 for c in chats if attrs_of(c).get(semconv.COST_CACHE_READ)) >= 5  # a warm cache, priced

    # Each summary compaction: its cost is its summarizer's chat spans'; its saving per following call is the
    # tokens it removed at the cache-read price.
    assert len(summaries) >= 2
    for compact in summaries:
        a = attrs_of(compact)
        assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
        children = [c for c in chats if c.parent is not None and c.parent.span_id == compact.context.span_id]
        assert children and all(attrs_of(c)[semconv.CALL_PURPOSE] == semconv.PURPOSE_COMPACTION for c in children)
        assert close(a[semconv.COMPACTION_COST], sum(attrs_of(c)[semconv.COST_AMOUNT] for c in children))
        removed = a[semconv.COMPACTION_INPUT_TOKENS] - a[semconv.COMPACTION_OUTPUT_TOKENS]
        assert close(a[semconv.COMPACTION_SAVING_PER_CALL], removed * rates.read)

    # Every call that sends a compaction's result saved the tokens the compactions of its chain removed, at the
    # read price: a compaction made on a compacted history adds to the one before; one made on the whole
    # history (a changed system prompt: the earlier summary is of another scope and not sent) starts anew.
    removed_so_far = 0
    scope: Any = None
    saved_calls = 0
    carried = {c.parent.span_id: c for c in summaries if c.parent is not None}
    for chat in chats:
        a = attrs_of(chat)
        if semconv.CALL_PURPOSE in a:
            continue
        compaction = carried.get(chat.context.span_id)
        if compaction is not None:  # this call sends the compaction's result (its compact span is a child)
            system = _system_of(by_response[a[semconv.GEN_AI_RESPONSE_ID]])
            c = attrs_of(compaction)
            removed = c[semconv.COMPACTION_INPUT_TOKENS] - c[semconv.COMPACTION_OUTPUT_TOKENS]
            removed_so_far = removed + (removed_so_far if system == scope else 0)
            scope = system
        if removed_so_far:
            assert close(a[semconv.COST_COMPACTION_SAVING], removed_so_far * rates.read), a
            saved_calls += 1
    assert saved_calls >= 3

    # Cache breaks: the compaction's (intentional) costs the compacted context written again instead of read,
    # at most what was lost; the app's (unexpected) costs the lost prefix written again instead of read.
    extra = rates.rewrite - rates.read  # OpenAI bills no writes: the input price there
    intentional = [(c, e) for c in summaries for e in _events(c, semconv.CACHE_BREAK_EVENT)]
    assert intentional
    for compact, event in intentional:
        rewritten = min(
            event[semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS], attrs_of(compact)[semconv.COMPACTION_OUTPUT_TOKENS]
        )
        assert close(event[semconv.CACHE_BREAK_COST], rewritten * extra)
    unexpected = [e for c in chats for e in _events(c, semconv.CACHE_BREAK_EVENT)]
    assert [e[semconv.CACHE_BREAK_REASON] for e in unexpected] == [semconv.REASON_SYSTEM_CHANGED]
    for event in unexpected:
        assert close(event[semconv.CACHE_BREAK_COST], event[semconv.CACHE_BREAK_LOST_TOKENS] * extra)

    # The counters against the spans and events.
    spans_spend = sum(attrs_of(c)[semconv.COST_AMOUNT] for c in chats)
    assert close(otel.counter_value(semconv.METRIC_SPEND), spans_spend)
    summarizer_spend = sum(attrs_of(c)[semconv.COMPACTION_COST] for c in summaries)
    assert close(
        otel.counter_value(semconv.METRIC_SPEND, **{semconv.CALL_PURPOSE: semconv.PURPOSE_COMPACTION}), summarizer_spend
    )
    assert close(
        otel.counter_value(semconv.METRIC_COMPACTION_SAVING),
        sum(attrs_of(c).get(semconv.COST_COMPACTION_SAVING, 0.0) for c in chats),
    )
    for flag, events in ((True, [e for _, e in intentional]), (False, unexpected)):
        assert close(
            otel.counter_value(semconv.METRIC_CACHE_BREAK_COST, **{semconv.CACHE_BREAK_INTENTIONAL: flag}),
            sum(e[semconv.CACHE_BREAK_COST] for e in events),
        )
    # The conversation's spend on its last span is every call's (one conversation).
    last = max((c for c in chats if semconv.CONVERSATION_COST in attrs_of(c)), key=lambda c: c.end_time or 0)
    planned = [c for c in chats if semconv.CONVERSATION_COST in attrs_of(c)]
    assert close(attrs_of(last)[semconv.CONVERSATION_COST], sum(attrs_of(c)[semconv.COST_AMOUNT] for c in planned))


def _system_of(exchange: Exchange) -> Any:
    body = exchange.body
    return body.get("system") if "system" in body else body["messages"][0]["content"]


def _response_id(exchange: Exchange) -> str | None:
    response = exchange.response
    if isinstance(response, dict):
        return response.get("id")  # type: ignore[no-any-return]
    for _, data in response or ():
        if isinstance(data, dict):
            inner = data.get("message")
            message: dict[str, Any] = inner if isinstance(inner, dict) else data
            found = message.get("id")
            if isinstance(found, str):
                return found
    return None


def test_a_discarded_summary_says_what_it_cost(
    simulated_provider: SimulatedProvider, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """A background summary made and then never applied (the app edited its history below the cut): the
    discarded record carries what the summary cost (its summarizer's chat spans), and so does the counter."""
    from tests.engine.test_background_e2e import Chat, _question, _setup, _turns_until_pending, _wait_idle

    _setup(simulated_provider, instrumented)
    chat = Chat(simulated_provider.anthropic())
    with otel_context.conversation("discarded-cost"):
        turn = _turns_until_pending(chat)
        _wait_idle()
        chat.history[2] = {"role": "user", "content": "EDITED " + _question(999)}  # below any cut
        for _ in range(8):
            turn += 1
            chat.turn(turn)
        _wait_idle()
    compacts = otel.compact_spans()
    (discarded,) = [c for c in compacts if attrs_of(c)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED]
    # The summary it reports: the compact span it links to, whose children are the summarizer's calls.
    (made,) = [c for c in compacts if any(link.context.span_id == c.context.span_id for link in discarded.links)]
    calls = [s for s in otel.spans() if s.parent is not None and s.parent.span_id == made.context.span_id]
    spent = sum(attrs_of(s)[semconv.COST_AMOUNT] for s in calls)
    assert calls and spent > 0
    assert close(attrs_of(made)[semconv.COMPACTION_COST], spent)
    assert close(attrs_of(discarded)[semconv.COMPACTION_COST], spent)
    assert close(otel.counter_value(semconv.METRIC_COMPACTION_DISCARDED_SPEND), spent)
    # By why it was discarded: the app edited the history below its cut (stale), and only that.
    reason = attrs_of(discarded)[semconv.COMPACTION_DISCARD_REASON]
    assert reason == semconv.DISCARD_STALE
    by_reason = {
        r: otel.counter_value(semconv.METRIC_COMPACTION_DISCARDED_SPEND, **{semconv.COMPACTION_DISCARD_REASON: r})
        for r in semconv.DISCARD_REASONS
    }
    assert close(by_reason.pop(reason), spent) and not any(by_reason.values()), by_reason
