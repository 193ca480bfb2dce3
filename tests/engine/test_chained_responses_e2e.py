"""Responses calls that continue a stored response (``previous_response_id``), on real instrumented calls.

Such a request carries only the new input: the history is at the provider. The call belongs to the
conversation of the response it continues (one ``gen_ai.conversation.id`` for the chain, not a new one per
call, each named after its own first input), and its estimate is that response's reported usage plus the new
input; before, it was the new input alone (10 tokens for a 7,832-token request), and the context state said
``ok`` however full the window was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_context import semconv
from tests.compaction.support import Otel
from tests.engine.agents import long_history

MODEL = "gpt-4o"


def _chats(otel: Otel) -> list[ReadableSpan]:
    return [s for s in otel.spans() if s.name.startswith("chat ")]


def _attribute(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def _assert_estimated_from_the_chain(span: ReadableSpan) -> None:
    """Within 5 % of what the provider then reported (the new input alone would be far below)."""
    estimated = int(_attribute(span, semconv.CONTEXT_ESTIMATED_TOKENS))
    reported = int(_attribute(span, semconv.GEN_AI_USAGE_INPUT_TOKENS))
    assert reported > 2_000, "the stored history must be long for this test to tell anything"
    assert abs(estimated - reported) <= 0.05 * reported, (estimated, reported)


def test_a_chain_of_stored_responses_is_one_conversation(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented()
    client = simulated_provider.openai()
    response = client.responses.create(model=MODEL, input="Write the report. words:2000")
    response = client.responses.create(model=MODEL, previous_response_id=response.id, input="More. words:1500")
    with client.responses.stream(model=MODEL, previous_response_id=response.id, input="Go on. words:500") as stream:
        for _ in stream:
            pass
        response = stream.get_final_response()
    client.responses.create(model=MODEL, previous_response_id=response.id, input=[{"role": "user", "content": "End."}])
    chats = _chats(otel)
    assert len(chats) == 4
    assert len({_attribute(s, semconv.GEN_AI_CONVERSATION_ID) for s in chats}) == 1
    assert {_attribute(s, semconv.CONVERSATION_ID_SOURCE) for s in chats} == {semconv.ID_SOURCE_DERIVED}
    for span in chats[1:]:
        _assert_estimated_from_the_chain(span)


def test_a_fork_from_an_older_response_is_estimated_from_that_response(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Continuing an earlier response (a user editing a turn) anchors on that response, not on the newest."""
    instrumented()
    client = simulated_provider.openai()
    first = client.responses.create(model=MODEL, input="Write the report. words:2500")
    client.responses.create(model=MODEL, previous_response_id=first.id, input="Longer. words:4000")
    client.responses.create(model=MODEL, previous_response_id=first.id, input="Shorter, then.")
    chats = _chats(otel)
    assert len(chats) == 3
    assert int(_attribute(chats[2], semconv.GEN_AI_USAGE_INPUT_TOKENS)) < 4_000  # the fork left the long turn out
    _assert_estimated_from_the_chain(chats[2])
    assert len({_attribute(s, semconv.GEN_AI_CONVERSATION_ID) for s in chats}) == 1


def test_two_chains_that_open_alike_keep_their_own_figures(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Two users open with the same words (one family of derived keys), then their chains differ: each
    continued call is estimated from its own chain's response, never from the other user's."""
    instrumented()
    client = simulated_provider.openai()
    alice = client.responses.create(model=MODEL, input="Hi")
    bob = client.responses.create(model=MODEL, input="Hi")
    alice = client.responses.create(model=MODEL, previous_response_id=alice.id, input="A long one. words:4000")
    bob = client.responses.create(model=MODEL, previous_response_id=bob.id, input="A short one. words:2500")
    client.responses.create(model=MODEL, previous_response_id=bob.id, input="Thanks, Bob here.")
    client.responses.create(model=MODEL, previous_response_id=alice.id, input="Thanks, Alice here.")
    chats = _chats(otel)
    bob_last, alice_last = chats[4:]
    # Their first calls were alike, so one state served both until the chains parted: after that each chain
    # has its own (a call compared with the other chain's last request would report a cache break).
    assert not [e for s in chats for e in s.events if e.name == semconv.CACHE_BREAK_EVENT]
    _assert_estimated_from_the_chain(bob_last)
    _assert_estimated_from_the_chain(alice_last)
    assert int(_attribute(alice_last, semconv.GEN_AI_USAGE_INPUT_TOKENS)) > int(
        _attribute(bob_last, semconv.GEN_AI_USAGE_INPUT_TOKENS)
    )


def test_an_explicit_conversation_is_kept_and_estimated_from_the_chain(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    import otel_context

    instrumented()
    client = simulated_provider.openai()
    with otel_context.conversation("ticket-42"):
        response = client.responses.create(model=MODEL, input="Write the report. words:2500")
        client.responses.create(model=MODEL, previous_response_id=response.id, input="Thanks.")
    chats = _chats(otel)
    assert [_attribute(s, semconv.GEN_AI_CONVERSATION_ID) for s in chats] == ["ticket-42", "ticket-42"]
    _assert_estimated_from_the_chain(chats[1])


def test_a_response_not_stored_starts_no_chain(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """``store: false``: the provider keeps nothing to continue, so nothing is remembered for it; the calls'
    own histories decide their conversations as for any stateless request."""
    instrumented()
    client = simulated_provider.openai()
    response = client.responses.create(model=MODEL, input="Write the report. words:2500", store=False)
    followed = [{"role": "user", "content": "Write the report. words:2500"}, *response.output]
    client.responses.create(
        model=MODEL, input=[*(i if isinstance(i, dict) else i.model_dump(exclude_none=True) for i in followed)]
    )
    first, second = _chats(otel)
    assert _attribute(first, semconv.GEN_AI_CONVERSATION_ID) == _attribute(second, semconv.GEN_AI_CONVERSATION_ID)
    estimated = int(_attribute(second, semconv.CONTEXT_ESTIMATED_TOKENS))
    reported = int(_attribute(second, semconv.GEN_AI_USAGE_INPUT_TOKENS))
    assert abs(estimated - reported) <= 0.05 * reported


def test_a_chain_past_the_threshold_in_observe_mode_is_left_alone_and_its_state_says_so(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Observe mode: nothing compacts a history the provider holds (the provider is not asked either, see
    test_provider_compaction_e2e.py for mode auto): past the threshold the call goes out unchanged and no summary
    is asked for; past the warning line its context state is ``error`` (no safety net), not ``warning``; past
    the blocking limit, ``blocking``."""
    window = 12_000
    simulated_provider.set_window(MODEL, window)
    instrumented(auto_compact_window=window, compaction="observe")
    client = simulated_provider.openai()
    response = client.responses.create(model=MODEL, input="Write the report. words:800", max_output_tokens=2_000)
    for turn in range(6):  # about 2,000 tokens a turn: one estimate falls between the error line and blocking
        response = client.responses.create(
            model=MODEL, previous_response_id=response.id, input=f"More {turn}. words:1500", max_output_tokens=2_000
        )
    chats = _chats(otel)
    states = [_attribute(s, semconv.CONTEXT_STATE) for s in chats]
    assert semconv.CONTEXT_STATE_WARNING not in states
    assert semconv.CONTEXT_STATE_ERROR in states and states[-1] == semconv.CONTEXT_STATE_BLOCKING
    assert not [s for s in otel.spans() if s.name == semconv.COMPACT_SPAN]
    assert len(simulated_provider.exchanges) == 7  # no summary request
    assert not [e for e in simulated_provider.exchanges if "context_management" in e.body]


def test_a_continued_request_that_resends_a_compacted_history_is_sent_unchanged(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """An app that sends its whole history again with ``previous_response_id`` (a mistake, but the provider
    accepts it): the conversation's summary of that history must not be put in, since the provider holds
    the rest of it. The call's items go out as the app wrote it (the provider is asked to compact the doubled
    history: it does, and says so)."""
    simulated_provider.set_window(MODEL, 400_000)  # the provider takes both copies; we compact at 60K
    instrumented(auto_compact_window=60_000)
    client = simulated_provider.openai()
    history = [{"role": m["role"], "content": m["content"]} for m in long_history()]
    first = client.responses.create(model=MODEL, input=history, max_output_tokens=1_000)
    assert _attribute(_chats(otel)[-1], semconv.GEN_AI_CONVERSATION_COMPACTED) is True  # the memo holds a summary
    again = [*history, {"role": "user", "content": "And one more thing."}]
    client.responses.create(model=MODEL, input=again, previous_response_id=first.id, max_output_tokens=1_000)
    sent = simulated_provider.exchanges[-1].body
    assert sent["input"] == again
    compacts = [s for s in otel.spans() if s.name == semconv.COMPACT_SPAN and s.parent is not None]
    last = _chats(otel)[-1]
    on_last = [s for s in compacts if s.parent is not None and s.parent.span_id == last.context.span_id]
    assert [_attribute(s, semconv.COMPACTION_STRATEGY) for s in on_last] == [semconv.STRATEGY_PROVIDER]
