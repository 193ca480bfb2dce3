"""The explicit API: Compactor.compact / acompact with a real SDK client or a function, should_compact."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from opentelemetry import trace

from otel_context import Compactor, semconv, should_compact
from otel_context.flow import in_summarizer
from otel_context.settings import Settings
from tests.compaction.support import FakeSummarizer, Otel, anthropic_agent, openai_chat_agent
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
def test_sync_compact_raises_an_async_answer_it_did_not_see_coming(async_anthropic_client: Any, otel: Otel) -> None:
    """An async client whose class does not say so is only found out by its awaitable answer: the caller's
    mistake reaches the caller as it is (not returned as a failed compaction), and the summary it began is
    closed there: its ``compact`` span ended, nothing of it left current (every later span of the thread was
    its child until the garbage collector closed it: CI saw 44 tests find no root ``chat`` span)."""
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
    assert not trace.get_current_span().get_span_context().is_valid
    (span,) = otel.compact_spans()  # ended (an open span is never exported)
    assert attrs_of(span)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE


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


# --- issue 39, item 5: an API others can build on --------------------------------------------------------


class Recorder:
    """A summarize function (the app's own summarizer): answers ``text`` and keeps every request body."""

    def __init__(self, text: str = FakeSummarizer.text, fail: bool = False) -> None:
        self.text = text
        self.fail = fail
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Any:
        self.bodies.append(copy.deepcopy(body))
        if self.fail:
            raise RuntimeError("summarizer down")
        return self.text


def _responses_agent(turns: int) -> list[dict[str, Any]]:
    """The tool loop as a Responses ``input`` list."""
    items: list[dict[str, Any]] = []
    for t in range(turns):
        items.append({"role": "user", "content": "Build a CLI in Rust. FACT: use clap" if t == 0 else f"Turn {t}"})
        items.append({"type": "function_call", "call_id": f"c{t}", "name": "read_file", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{t}", "output": "x = 1\n" * 500})
        items.append({"role": "assistant", "content": f"f{t}.py sets x."})
    return items


def test_a_function_summarizer_needs_no_model_and_no_wire_format() -> None:
    """The shape of the messages says the wire format: the summary request the function gets is in it."""
    for history, field_name in (
        (anthropic_agent(10), "messages"),
        (openai_chat_agent(8), "messages"),
        (_responses_agent(8), "input"),
    ):
        summarize = Recorder()
        result = Compactor(summarize).compact(history)
        assert result.compacted and result.outcome == "success", result.error
        assert len(result.messages) < len(history)
        assert field_name in summarize.bodies[0]


def test_the_wire_format_is_inferred_and_a_mismatch_is_a_clear_error(anthropic_client: Any) -> None:
    from otel_context.compaction.api import infer_wire_format

    assert infer_wire_format(anthropic_agent(2)) == "anthropic_messages"
    assert infer_wire_format(openai_chat_agent(2)) == "openai_chat"
    assert infer_wire_format(_responses_agent(2)) == "openai_responses"
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert infer_wire_format(plain) == "anthropic_messages"  # the documented default for plain strings
    assert infer_wire_format([{"role": "system", "content": "Be brief."}, *plain]) == "openai_chat"
    with pytest.raises(ValueError, match=r"messages\[2\] does not fit the wire format of the messages before it"):
        infer_wire_format([*anthropic_agent(1)[:2], *openai_chat_agent(1)[1:]])
    with pytest.raises(ValueError, match=r"messages\[1\] does not fit the wire formats an anthropic client speaks"):
        Compactor(anthropic_client).compact(openai_chat_agent(4), model="claude-sonnet-4-6")
    with pytest.raises(ValueError, match=r"wire_format='gemini' is not supported"):
        Compactor(Recorder()).compact(anthropic_agent(4), wire_format="gemini")


def test_an_sdk_client_still_needs_the_model_it_summarizes_with(anthropic_client: Any) -> None:
    with pytest.raises(ValueError, match="model is required with an SDK client"):
        Compactor(anthropic_client).compact(anthropic_agent(10))


def test_window_sizes_a_function_summary_without_a_model() -> None:
    """``window=`` gives the budget a model would: the summary's room is the window's reserve, and
    should_compact answers without a model too."""
    history = anthropic_agent(12, 8000)
    assert should_compact(history, window=30_000)
    assert not should_compact(history)  # no model, no window: the window is unknown
    sized, unsized = Recorder(), Recorder()
    assert Compactor(sized).compact(history, window=30_000).compacted
    assert Compactor(unsized).compact(history).compacted
    assert sized.bodies[0]["max_tokens"] < unsized.bodies[0]["max_tokens"]


def test_target_tokens_cuts_deeper_and_asks_the_summary_for_less() -> None:
    history = anthropic_agent(12, 3000)
    default, small = Recorder(), Recorder()
    wide = Compactor(default).compact(history, window=200_000)
    narrow = Compactor(small).compact(history, window=200_000, target_tokens=3_000)
    assert wide.compacted and narrow.compacted
    assert narrow.output_tokens <= 3_000 < wide.output_tokens
    assert narrow.messages_compacted > wide.messages_compacted
    assert small.bodies[0]["max_tokens"] == 750  # a quarter of the target
    assert "Keep the summary under about 750 tokens" in str(small.bodies[0]["messages"][-1])
    assert "Keep the summary under" not in str(default.bodies[0]["messages"][-1])


def test_target_tokens_with_the_real_sdk_client(anthropic_client: Any, simulated_provider: Any, otel: Otel) -> None:
    """With an SDK client the reported sizes are the provider's count (the summarizer's reply measured them),
    which for code is above otel-context's estimate, the unit of the target: the result is smaller than
    without a target, and the summary was asked for a quarter of it."""
    history = anthropic_agent(12, 3000)
    default = Compactor(anthropic_client).compact(history, model="claude-sonnet-4-6")
    result = Compactor(anthropic_client).compact(history, model="claude-sonnet-4-6", target_tokens=4_000)
    assert result.compacted and result.output_tokens < default.output_tokens
    summary_request = simulated_provider.exchanges[-1].body
    assert summary_request["max_tokens"] == 1_000
    assert result.summary_tokens <= 1_000
    # The compacted history is one the provider takes.
    anthropic_client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=result.messages)


def test_a_summary_cut_at_the_target_cap_is_asked_again_with_twice_the_room() -> None:
    from otel_context.flow import SummaryResult

    caps: list[int] = []

    def summarize(body: dict[str, Any]) -> SummaryResult:
        caps.append(body["max_tokens"])
        reasons = ("max_tokens",) if len(caps) == 1 else ("end_turn",)
        return SummaryResult(text=FakeSummarizer.text, finish_reasons=reasons)

    # The model's output limit leaves room to ask again (an unknown model's is the 20,000-token reserve).
    result = Compactor(summarize).compact(anthropic_agent(12), model="claude-sonnet-4-6", target_tokens=4_000)
    assert result.compacted, result.error
    assert caps == [1_000, 2_000]


@pytest.mark.parametrize(
    ("value", "message"),
    [(0, "positive"), (True, "positive"), ("4000", "positive"), (10, "system prompt and tools alone")],
)
def test_a_bad_target_is_a_clear_error(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Compactor(Recorder()).compact(
            anthropic_agent(4), system="You are a careful engineer. " * 20, target_tokens=value
        )


def test_the_result_carries_retention_and_what_was_lost(otel: Otel) -> None:
    """The figure of the span, and the lost items by kind: a summary that names no file loses the paths (with
    the repair and the work trail off: they would put them back, below)."""
    alone = Settings(repair_budget=0, trail_budget=0)
    result = Compactor(Recorder(), settings=alone).compact(anthropic_agent(10))
    assert result.compacted
    (span,) = otel.compact_spans()
    assert result.retention == attrs_of(span)[semconv.COMPACTION_RETENTION]
    assert result.retention is not None and result.retention < 1.0
    assert "f0.py" in result.lost["path"]
    assert all(text not in str(result.messages) for texts in result.lost.values() for text in texts)
    # A summary that names them keeps them.
    names = " ".join(f"f{t}.py" for t in range(10))
    kept = Compactor(Recorder(f"<summary>Read {names}. FACT: use clap</summary>"), settings=alone).compact(
        anthropic_agent(10)
    )
    assert "path" not in kept.lost
    assert kept.retention is not None and kept.retention > result.retention
    # With the repair on (the default), the summary that names no file is repaired: the paths are back.
    repaired = Compactor(Recorder(), settings=Settings(trail_budget=0)).compact(anthropic_agent(10))
    assert repaired.retention_before_repair == result.retention
    assert repaired.retention is not None and repaired.retention > result.retention
    assert repaired.repaired.get("path", 0) >= 1 and "f0.py" in str(repaired.messages)
    # With the work trail on too (the default), the files read are the trail's: the repair has none to restore.
    trailed = Compactor(Recorder()).compact(anthropic_agent(10))
    assert trailed.retention_before_repair == result.retention and trailed.retention == 1.0
    assert "path" not in trailed.repaired and "f0.py" in str(trailed.messages)


def test_pinned_texts_stay_verbatim_and_are_carried_by_the_next_compaction() -> None:
    rule = "Never push to the main branch directly."
    first = Compactor(Recorder()).compact(anthropic_agent(10), pinned=[rule])
    assert first.compacted and f"[Pinned] {rule}" in [m.get("content") for m in first.messages]
    later = [*first.messages, *anthropic_agent(10)[1:]]
    second = Compactor(Recorder()).compact(later)
    assert second.compacted and [m.get("content") for m in second.messages].count(f"[Pinned] {rule}") == 1
    with pytest.raises(TypeError, match="pinned must be a list"):
        Compactor(Recorder()).compact(anthropic_agent(10), pinned=rule)  # type: ignore[typeddict-item]


def test_nothing_changed_carries_no_retention() -> None:
    result = Compactor(Recorder(fail=True)).compact(anthropic_agent(10))
    assert not result.compacted and result.retention is None and result.lost == {}


def test_unrelated_calls_share_nothing_unless_given_a_conversation(otel: Otel) -> None:
    """Two histories that open with the same message: failures of one (even counted as automatic) never
    open a breaker the other one meets; one conversation named on purpose shares its breaker."""
    down, up = Compactor(Recorder(fail=True)), Compactor(Recorder())
    for _ in range(4):
        assert down.compact(anthropic_agent(10), trigger="auto").error
    other = up.compact(anthropic_agent(11), trigger="auto")
    assert other.compacted and other.conversation is None
    spans = otel.compact_spans()
    assert all(semconv.GEN_AI_CONVERSATION_ID not in attrs_of(s) for s in spans)

    for _ in range(3):
        assert down.compact(anthropic_agent(10), trigger="auto", conversation="ticket-7").error
    skipped = up.compact(anthropic_agent(11), trigger="auto", conversation="ticket-7")
    assert not skipped.compacted and "circuit breaker is open" in (skipped.skipped_reason or "")
    assert up.compact(anthropic_agent(11), trigger="auto", conversation="ticket-8").compacted  # another one
    closed = up.compact(anthropic_agent(11), conversation="ticket-7")  # manual: runs, and closes it
    assert closed.compacted and closed.conversation == "ticket-7"
    assert up.compact(anthropic_agent(11), trigger="auto", conversation="ticket-7").compacted
    assert attrs_of(otel.compact_spans()[-1])[semconv.GEN_AI_CONVERSATION_ID] == "ticket-7"


def test_a_conversation_block_names_the_conversation_of_compact() -> None:
    import otel_context

    down, up = Compactor(Recorder(fail=True)), Compactor(Recorder())
    with otel_context.conversation("support-1"):
        for _ in range(3):
            down.compact(anthropic_agent(10), trigger="auto")
        result = up.compact(anthropic_agent(10), trigger="auto")
    assert not result.compacted and result.conversation == "support-1" and result.skipped_reason


def test_a_bad_conversation_id_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="conversation id must be a non-empty string"):
        Compactor(Recorder()).compact(anthropic_agent(10), conversation="  ")


def test_failed_manual_compactions_do_not_count_on_the_breaker(otel: Otel, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from otel_context.compaction import alerts

    alerts.reset()
    down = Compactor(Recorder(fail=True))
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        for _ in range(5):
            assert down.compact(anthropic_agent(10), conversation="ticket-9").error
        assert Compactor(Recorder()).compact(anthropic_agent(10), trigger="auto", conversation="ticket-9").compacted
        for _ in range(3):
            down.compact(anthropic_agent(10), trigger="auto", conversation="ticket-9")
    failed = [s for s in otel.compact_spans() if attrs_of(s)[semconv.COMPACTION_OUTCOME] == "failure"]
    assert [attrs_of(s)[semconv.COMPACTION_CONSECUTIVE_FAILURES] for s in failed] == [0, 0, 0, 0, 0, 1, 2, 3]
    warnings = [r.getMessage() for r in caplog.records]
    manual = [w for w in warnings if "a compaction failed" in w and "trigger manual" in w]
    assert manual and "does not count on the conversation's circuit breaker" in manual[0]
    (opened,) = [w for w in warnings if "circuit breaker opened" in w]
    assert "compaction by hand" not in opened
    assert "Compactor(client).compact(messages, model=..., conversation='ticket-9')" in opened


def test_one_empty_assistant_message_is_left_out_not_a_refusal(anthropic_client: Any) -> None:
    history = anthropic_agent(10)
    history[3] = {"role": "assistant", "content": ""}  # compacted part
    history[-5] = {"role": "assistant", "content": [{"type": "text", "text": "  "}]}  # kept part
    before = copy.deepcopy(history)
    summarize = Recorder()
    result = Compactor(summarize).compact(history)
    assert result.compacted, result.skipped_reason
    assert history == before  # the caller's list as it was
    assert result.empty_messages_dropped == 2
    assert {"role": "assistant", "content": ""} not in summarize.bodies[0]["messages"]
    assert before[-5] not in result.messages
    # What comes back is a history the provider takes (the simulated one refuses empty messages, as the API).
    anthropic_client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=result.messages)


def test_an_empty_message_with_the_real_sdk_client(anthropic_client: Any) -> None:
    history = anthropic_agent(10)
    history[7] = {"role": "assistant", "content": []}
    result = Compactor(anthropic_client).compact(history, model="claude-sonnet-4-6")
    assert result.compacted and result.empty_messages_dropped == 1


def test_a_final_empty_assistant_message_is_a_prefill_and_stays() -> None:
    history = [*anthropic_agent(10), {"role": "user", "content": "Go on."}, {"role": "assistant", "content": ""}]
    result = Compactor(Recorder()).compact(history)
    assert result.compacted and result.empty_messages_dropped == 0
    assert result.messages[-1] == {"role": "assistant", "content": ""}


def test_microcompact_through_the_api(anthropic_client: Any, otel: Otel) -> None:
    history = anthropic_agent(20, 9000)
    before = copy.deepcopy(history)
    summarize = Recorder()
    result = Compactor(summarize).microcompact(history, window=30_000)
    assert history == before
    assert result.compacted and result.strategy == "microcompact" and result.outcome == "success"
    assert result.output_tokens < result.input_tokens and len(result.messages) == len(history)
    assert result.retention is not None
    assert summarize.bodies == []  # no LLM call
    (span,) = otel.compact_spans()
    assert attrs_of(span)[semconv.COMPACTION_STRATEGY] == "microcompact"
    # With an SDK client no model is needed either (the rule-based layer asks nothing of it).
    assert Compactor(anthropic_client).microcompact(history, window=30_000).compacted
    nothing = Compactor(summarize).microcompact(anthropic_agent(3, 100))
    assert not nothing.compacted and "nothing to clear" in (nothing.skipped_reason or "")
    with pytest.raises(TypeError, match="unknown option"):
        Compactor(summarize).microcompact(history, target_tokens=1000)  # type: ignore[call-arg]


def test_the_compactors_client_answers_not_settings_summarizer() -> None:
    mine, theirs = Recorder(), Recorder()
    result = Compactor(mine, settings=Settings(summarizer=theirs)).compact(anthropic_agent(10))
    assert result.compacted and len(mine.bodies) == 1 and theirs.bodies == []


async def test_acompact_gets_the_same(async_openai_client: Any, simulated_provider: Any) -> None:
    async def summarize(body: dict[str, Any]) -> str:
        return FakeSummarizer.text

    history = openai_chat_agent(8)
    history[3] = {"role": "assistant", "content": ""}
    result = await Compactor(summarize).acompact(history, target_tokens=3_000, conversation="a-1")
    assert result.compacted and result.empty_messages_dropped == 1 and result.conversation == "a-1"
    assert result.retention is not None
    assert result.output_tokens <= 3_000
    sdk = await Compactor(async_openai_client).acompact(openai_chat_agent(8), model="gpt-4o", target_tokens=4_000)
    assert sdk.compacted
    body = simulated_provider.exchanges[-1].body
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 1_000


def test_an_openai_client_with_responses_items_uses_the_responses_api(
    openai_client: Any, simulated_provider: Any
) -> None:
    result = Compactor(openai_client).compact(_responses_agent(8), model="gpt-4o")
    assert result.compacted, result.error
    assert simulated_provider.exchanges[-1].path.endswith("/responses")


def test_microcompact_is_not_stopped_by_an_open_breaker() -> None:
    """The breaker stands for a failing summarizer; the rule-based layer asks nothing of it."""
    down = Compactor(Recorder(fail=True))
    for _ in range(3):
        down.compact(anthropic_agent(10), trigger="auto", conversation="ticket-3")
    assert down.compact(anthropic_agent(10), trigger="auto", conversation="ticket-3").skipped_reason
    micro = down.microcompact(anthropic_agent(20, 9000), window=30_000, trigger="auto", conversation="ticket-3")
    assert micro.compacted


def test_an_empty_user_message_of_a_chat_history_is_left_out(openai_client: Any) -> None:
    history = openai_chat_agent(8)
    history[4] = {"role": "user", "content": [{"type": "text", "text": ""}]}
    result = Compactor(Recorder()).compact(history)
    assert result.compacted and result.empty_messages_dropped == 1
    openai_client.chat.completions.create(model="gpt-4o", messages=result.messages)


def test_target_tokens_bounds_the_users_messages_kept_verbatim() -> None:
    """A chat of long questions: the user's messages kept verbatim beside the summary would fill ten times
    the target; under it they take their share, and what the summary did not keep is named."""
    history: list[dict[str, Any]] = []
    for t in range(30):
        history.append({"role": "user", "content": f"Question {t}: " + "consider this requirement carefully. " * 40})
        history.append({"role": "assistant", "content": f"Answer {t}: noted."})
    wide = Compactor(Recorder()).compact(history, window=200_000)
    narrow = Compactor(Recorder()).compact(history, window=200_000, target_tokens=4_000)
    assert wide.output_tokens > 4_000 >= narrow.output_tokens
    # What the summary lost of the user's sentences is restored within the repair's share, or named.
    assert narrow.lost.get("instruction") or narrow.repaired.get("instruction")
