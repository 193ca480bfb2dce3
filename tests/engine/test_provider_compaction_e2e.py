"""A history the provider holds (Responses ``previous_response_id``, a stored ``conversation``) is compacted by
the provider, engaged by the library, on real instrumented SDK calls against the simulated provider.

Before, such a chain was sent unchanged ("history sent unchanged: the request continues a stored response"),
its context state said ``error``, and every chained user failed at the window with ``400 … Your input exceeds
the context window``. Now, from the warning line on, the request carries ``context_management`` with the
conversation's auto threshold; the provider compacts when its own count passes it, and the compaction is
reported like the library's own (docs/compaction.md, "A history the provider holds").
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from otel_context import semconv
from otel_context.compaction.budget import Budget, budget_for
from otel_context.settings import Settings
from otel_context.testing import count_tokens
from tests.compaction.support import Otel
from tests.values import attrs_of

MODEL = "gpt-4o"
WINDOW = 12_000
MAX_OUTPUT = 2_000
_BUDGET = budget_for(MODEL, Settings(auto_compact_window=WINDOW), max_output_tokens=MAX_OUTPUT)
assert _BUDGET is not None
BUDGET: Budget = _BUDGET
FIRST = "Write the plan. FACT: the port is 8080. words:800"
#: Turns of about 1,560 tokens each (a 1,000-word reply and the ask): 24 of them say three windows' worth.
TURNS = 24
MODES = ("create", "stream", "raw_stream", "async_create", "async_stream")


def _ask(turn: int) -> str:
    return FIRST if turn == 0 else f"Turn {turn}. words:1000"


def _args(turn: int, previous: str | None, model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a chain's call ``turn``, continuing ``previous``."""
    args: dict[str, Any] = {"model": model, "input": _ask(turn), "max_output_tokens": MAX_OUTPUT, **kwargs}
    if previous is not None:
        args["previous_response_id"] = previous
    return args


def _chain(sim: Any, mode: str, turns: int = TURNS, model: str = MODEL, **kwargs: Any) -> None:
    """One user's chain of ``turns`` calls, each continuing the previous response (raises what the app sees)."""
    if mode.startswith("async"):
        asyncio.run(_achain(sim, mode, turns, model, **kwargs))
        return
    client = sim.openai()
    previous: str | None = None
    try:
        for turn in range(turns):
            args = _args(turn, previous, model, kwargs)
            if mode == "create":
                previous = client.responses.create(**args).id
            elif mode == "stream":
                with client.responses.stream(**args) as stream:
                    for _ in stream:
                        pass
                    previous = stream.get_final_response().id
            else:
                for event in client.responses.create(stream=True, **args):
                    if event.type == "response.completed":
                        previous = event.response.id
    finally:
        client.close()


async def _achain(sim: Any, mode: str, turns: int, model: str, **kwargs: Any) -> None:
    client = sim.async_openai()
    previous: str | None = None
    try:
        for turn in range(turns):
            args = _args(turn, previous, model, kwargs)
            if mode == "async_create":
                previous = (await client.responses.create(**args)).id
            else:
                async with client.responses.stream(**args) as stream:
                    async for _ in stream:
                        pass
                    previous = (await stream.get_final_response()).id
    finally:
        await client.close()


def _final(exchange: Any) -> dict[str, Any]:
    """The response object of an exchange, streamed or not."""
    if exchange.stream:
        return next(data["response"] for _, data in exchange.response if data.get("type") == "response.completed")
    return dict(exchange.response)


def _compacting(sim: Any) -> list[int]:
    """Indexes (in the provider's record) of the responses that carry a compaction item."""
    return [
        i
        for i, e in enumerate(sim.exchanges)
        if e.status == 200 and e.path == "/v1/responses" and _final(e)["output"][0]["type"] == "compaction"
    ]


def _chats(otel: Otel) -> list[ReadableSpan]:
    return [s for s in otel.spans() if s.name.startswith("chat ")]


def _provider_compacts(otel: Otel) -> list[ReadableSpan]:
    return [s for s in otel.compact_spans() if attrs_of(s)[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_PROVIDER]


def _held_through(sim: Any) -> int:
    """What the chain said in all: every turn's own input and reply, in the provider's tokens."""
    return sum(
        count_tokens(e.body["input"]) + 3 + e.usage["output_tokens"]
        for e in sim.exchanges
        if e.status == 200 and e.path == "/v1/responses"
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_chain_runs_three_windows_long_with_one_compact_span_per_provider_compaction(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], mode: str
) -> None:
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    _chain(simulated_provider, mode)  # no app-visible error
    sim = simulated_provider
    assert _held_through(sim) >= 3 * WINDOW
    exchanges = sim.exchanges
    assert [e.status for e in exchanges] == [200] * TURNS
    at = _compacting(sim)
    compacts = _provider_compacts(otel)
    assert len(at) >= 3 and len(compacts) == len(at)
    chats = _chats(otel)
    assert len(chats) == TURNS and len({attrs_of(c)[semconv.GEN_AI_CONVERSATION_ID] for c in chats}) == 1
    for index, span in zip(at, compacts, strict=True):
        a = attrs_of(span)
        chat = chats[index]
        assert span.parent is not None and span.parent.span_id == chat.context.span_id
        assert a[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_PROVIDER
        assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
        assert a[semconv.COMPACTION_THRESHOLD_TOKENS] == BUDGET.auto_threshold
        assert a[semconv.COMPACTION_CONSECUTIVE_FAILURES] == 0 and a[semconv.COMPACTION_BREAKER_OPEN] is False
        assert a[semconv.GEN_AI_CONVERSATION_ID] == attrs_of(chat)[semconv.GEN_AI_CONVERSATION_ID]
        # Before: the provider's count of the context the call would have sent (the previous response's input and
        # output, and this call's own input); after: the input the compacted request reported.
        previous = exchanges[index - 1].usage
        assert previous is not None
        before = previous["input_tokens"] + previous["output_tokens"] + count_tokens(_ask(index)) + 3
        assert abs(a[semconv.COMPACTION_INPUT_TOKENS] - before) <= 0.05 * before
        assert a[semconv.COMPACTION_OUTPUT_TOKENS] == exchanges[index].usage["input_tokens"]  # type: ignore[index]
        assert a[semconv.COMPACTION_OUTPUT_TOKENS] < BUDGET.auto_threshold <= before
        # The intentional break of the prompt cache the compaction causes, on the compact span.
        breaks = [e for e in span.events if e.name == semconv.CACHE_BREAK_EVENT]
        assert len(breaks) == 1 and (breaks[0].attributes or {})[semconv.CACHE_BREAK_INTENTIONAL] is True
        assert attrs_of(chat)[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
        assert attrs_of(chat)[semconv.CONTEXT_ESTIMATED_TOKENS] == a[semconv.COMPACTION_OUTPUT_TOKENS]
    # The field goes out from the warning line on only, with the auto threshold; the app's items never change.
    for exchange, chat in zip(exchanges, chats, strict=True):
        estimate = attrs_of(chat)[semconv.CONTEXT_ESTIMATED_TOKENS]
        asked = exchange.body.get("context_management")
        if asked is None:
            assert estimate < BUDGET.warning_threshold
        else:
            assert asked == [{"type": "compaction", "compact_threshold": BUDGET.auto_threshold}]
        assert exchange.body["input"] in (_ask(i) for i in range(TURNS))
    # Nothing says "error" while the provider's compaction is engaged; no unexpected cache break.
    assert semconv.CONTEXT_STATE_ERROR not in [attrs_of(c)[semconv.CONTEXT_STATE] for c in chats]
    assert not [e for c in chats for e in c.events if e.name == semconv.CACHE_BREAK_EVENT]
    # The metrics, as for the library's own compactions.
    counted = otel.counter_value(
        semconv.METRIC_COMPACTIONS,
        **{
            semconv.COMPACTION_TRIGGER_SOURCE: semconv.TRIGGER_PROVIDER,
            semconv.COMPACTION_STRATEGY: semconv.STRATEGY_PROVIDER,
            semconv.COMPACTION_OUTCOME: semconv.OUTCOME_SUCCESS,
        },
    )
    assert counted == len(at)
    (saved,) = otel.metric_points(semconv.METRIC_COMPACTION_TOKENS_SAVED)
    assert saved.count == len(at)
    assert saved.sum == sum(
        attrs_of(s)[semconv.COMPACTION_INPUT_TOKENS] - attrs_of(s)[semconv.COMPACTION_OUTPUT_TOKENS] for s in compacts
    )


def test_a_stored_conversation_runs_three_windows_long(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """A chain by ``conversation`` (the provider's Conversations API) is one conversation and compacts alike."""
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    client = simulated_provider.openai()
    conversation = client.conversations.create()
    for turn in range(TURNS):
        client.responses.create(
            model=MODEL, conversation=conversation.id, input=_ask(turn), max_output_tokens=MAX_OUTPUT
        )
    responses = [e for e in simulated_provider.exchanges if e.path == "/v1/responses"]
    assert [e.status for e in responses] == [200] * TURNS
    compacts = _provider_compacts(otel)
    assert len(compacts) >= 3 and len(compacts) == len(_compacting(simulated_provider))
    chats = _chats(otel)
    assert len({attrs_of(c)[semconv.GEN_AI_CONVERSATION_ID] for c in chats}) == 1
    for chat, exchange in list(zip(chats, responses, strict=True))[1:]:  # estimated from the conversation's usage
        estimated, reported = attrs_of(chat)[semconv.CONTEXT_ESTIMATED_TOKENS], exchange.usage["input_tokens"]
        if not attrs_of(chat).get(semconv.GEN_AI_CONVERSATION_COMPACTED):
            assert abs(estimated - reported) <= 0.05 * reported + 20, (estimated, reported)


def test_the_apps_own_context_management_is_left_alone(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """An app that sets ``context_management`` itself keeps it exactly (its threshold, not ours); its objects are
    never mutated; the provider's compactions are still reported, but not counted on our breaker."""
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    own = [{"type": "compaction", "compact_threshold": 6_000}]
    kept = copy.deepcopy(own)
    _chain(simulated_provider, "create", 12, context_management=own)
    assert own == kept
    assert all(e.body["context_management"] == kept for e in simulated_provider.exchanges)
    compacts = _provider_compacts(otel)
    assert len(compacts) == len(_compacting(simulated_provider)) >= 2
    for span in compacts:
        assert semconv.COMPACTION_THRESHOLD_TOKENS not in attrs_of(span)  # not ours
    states = [attrs_of(c)[semconv.CONTEXT_STATE] for c in _chats(otel)]
    assert semconv.CONTEXT_STATE_ERROR not in states  # the app's own compaction protects the chain


def test_an_app_that_lets_the_provider_truncate_is_left_alone(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    _chain(simulated_provider, "create", 12, truncation="auto")
    assert all("context_management" not in e.body for e in simulated_provider.exchanges)
    assert all(e.status == 200 for e in simulated_provider.exchanges)
    assert _provider_compacts(otel) == []


@pytest.mark.parametrize(
    "settings", [{"compaction": "observe"}, {"compaction": "off"}, {"disable_compact": True}], ids=str
)
def test_observe_off_and_the_kill_switch_leave_the_chain_alone(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], settings: dict[str, Any]
) -> None:
    """As for the library's own compaction: nothing is asked of the provider, the state says ``error`` past the
    warning line, and the chain fails at the window as it would without otel-context."""
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW, **settings)
    with pytest.raises(openai.BadRequestError) as info:
        _chain(simulated_provider, "create")
    assert info.value.code == "context_length_exceeded"
    assert all("context_management" not in e.body for e in simulated_provider.exchanges)
    assert semconv.CONTEXT_STATE_ERROR in [attrs_of(c).get(semconv.CONTEXT_STATE) for c in _chats(otel)]
    assert otel.compact_spans() == []


def test_a_rejection_as_too_long_asks_the_provider_to_compact_and_resends_once(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """With the threshold switched off (``disable_auto_compact``), the provider's "too long" still engages its
    compaction (the reactive path): the request is sent again once, with the field, and the chain goes on."""
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW, disable_auto_compact=True)
    _chain(simulated_provider, "create")
    rejected = [i for i, e in enumerate(simulated_provider.exchanges) if e.status == 400]
    assert rejected
    for i in rejected:
        retry = simulated_provider.exchanges[i + 1]
        assert "context_management" not in simulated_provider.exchanges[i].body
        assert retry.status == 200 and retry.body["context_management"][0]["type"] == "compaction"
        assert _final(retry)["output"][0]["type"] == "compaction"
    assert len(_provider_compacts(otel)) == len(rejected)
    chats = [c for c in _chats(otel) if any(e.name == semconv.REQUEST_REJECTED_EVENT for e in c.events)]
    assert len(chats) == len(rejected)


def test_a_refusing_endpoint_is_said_once_and_never_asked_again(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint that does not know the field: the refused request is sent again as the app wrote it (the app
    sees no error), one warning says so, one failed ``compact`` span records it, and the field is never sent
    there again: the chain then fails at the window as it would without otel-context, its state ``error``."""
    simulated_provider.set_window(MODEL, WINDOW)
    simulated_provider.refuses_compaction = True
    instrumented(auto_compact_window=WINDOW)
    with caplog.at_level(logging.WARNING, logger="otel_context"), pytest.raises(openai.BadRequestError) as info:
        _chain(simulated_provider, "create")
    assert info.value.code == "context_length_exceeded"  # the app's own request's error, never the refusal
    warnings = [r.getMessage() for r in caplog.records if "refused server-side compaction" in r.getMessage()]
    assert len(warnings) == 1 and "Unknown parameter: 'context_management'." in warnings[0]
    asked = [i for i, e in enumerate(simulated_provider.exchanges) if "context_management" in e.body]
    assert len(asked) == 1
    refused, resent = simulated_provider.exchanges[asked[0]], simulated_provider.exchanges[asked[0] + 1]
    assert refused.status == 400 and resent.status == 200
    assert resent.body == {k: v for k, v in refused.body.items() if k != "context_management"}
    (failed,) = otel.compact_spans()
    a = attrs_of(failed)
    assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE and a[semconv.ERROR_TYPE] == "provider_refused"
    assert a[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_PROVIDER
    # From the refused call on (one chat span for the refused request and its resend), nothing protects the
    # chain: its state is never ``warning`` again.
    states = [attrs_of(c).get(semconv.CONTEXT_STATE) for c in _chats(otel)]
    assert states[asked[0]] == semconv.CONTEXT_STATE_ERROR
    assert set(states[asked[0] :]) <= {semconv.CONTEXT_STATE_ERROR, semconv.CONTEXT_STATE_BLOCKING}


def test_a_model_that_refuses_is_remembered_for_that_model_only(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window(MODEL, WINDOW)
    simulated_provider.set_window("gpt-4.1", WINDOW)
    simulated_provider.refuses_compaction = {MODEL}
    instrumented(auto_compact_window=WINDOW)
    with pytest.raises(openai.BadRequestError):
        _chain(simulated_provider, "create")
    assert sum("context_management" in e.body for e in simulated_provider.exchanges) == 1
    simulated_provider.clear()
    _chain(simulated_provider, "create", model="gpt-4.1")  # the same chain on another model of the endpoint
    assert all(e.status == 200 for e in simulated_provider.exchanges)
    assert len(_compacting(simulated_provider)) >= 3


def test_compactions_that_leave_the_context_above_the_threshold_open_the_breaker(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Each turn's own input is above the threshold: every compaction leaves the context there (thrashing). After
    three, the breaker opens: the field is no longer sent, the skipped compactions are counted, and the next turn
    fails at the window as it would without otel-context."""
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    client = simulated_provider.openai()
    big = "Paste: " + "word " * (BUDGET.auto_threshold + 100)
    previous = client.responses.create(model=MODEL, input="Hello", max_output_tokens=MAX_OUTPUT).id
    for _ in range(3):
        previous = client.responses.create(
            model=MODEL, previous_response_id=previous, input=big, max_output_tokens=MAX_OUTPUT
        ).id
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, previous_response_id=previous, input=big, max_output_tokens=MAX_OUTPUT)
    compacts = _provider_compacts(otel)
    assert len(compacts) == 3
    assert [attrs_of(s)[semconv.COMPACTION_BREAKER_OPEN] for s in compacts] == [False, False, True]
    assert all(attrs_of(s)[semconv.COMPACTION_OUTPUT_TOKENS] >= BUDGET.auto_threshold for s in compacts)
    assert ["context_management" in e.body for e in simulated_provider.exchanges] == [False, True, True, True, False]
    skipped = otel.counter_value(
        semconv.METRIC_COMPACTIONS,
        **{semconv.COMPACTION_STRATEGY: semconv.STRATEGY_PROVIDER, semconv.COMPACTION_OUTCOME: semconv.OUTCOME_SKIPPED},
    )
    assert skipped == 1
    last = _chats(otel)[-1]
    assert attrs_of(last)[semconv.COMPACTION_BREAKER_OPEN] is True
    assert attrs_of(last)[semconv.CONTEXT_STATE] == semconv.CONTEXT_STATE_BLOCKING


def test_a_turn_too_long_even_compacted_fails_as_the_provider_says_and_counts_on_the_breaker(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    client = simulated_provider.openai()
    previous = client.responses.create(model=MODEL, input="Hello", max_output_tokens=MAX_OUTPUT).id
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(
            model=MODEL, previous_response_id=previous, input="word " * (WINDOW + 10), max_output_tokens=MAX_OUTPUT
        )
    assert info.value.code == "context_length_exceeded"
    assert len(simulated_provider.exchanges) == 2  # sent once, with the field: nothing more to try
    (failed,) = otel.compact_spans()
    a = attrs_of(failed)
    assert a[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE and a[semconv.ERROR_TYPE] == "still_too_long"
    assert a[semconv.COMPACTION_CONSECUTIVE_FAILURES] == 1
