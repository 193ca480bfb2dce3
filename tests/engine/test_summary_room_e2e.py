"""Issue 31, item 1: the summary gets the output room the budget reserves, and a cut summary is never a success.

Real SDK clients (anthropic, openai chat) against the simulated provider, whose window is the budget's. A chat
app grows its history turn by turn until the first compaction; the first summarizer request must ask for at
least the budget's reserve (``min(max_tokens, 20,000)``, at most half the window: docs/compaction.md) while
its input plus that ``max_tokens`` stays within the window. The simulated provider cuts a reply at its
``max_tokens`` (finish reason ``length``) and its summary repeats every ``FACT:`` line, so a conversation full
of them makes a summary longer than its room: never a success, in transparent mode or through the
``Compactor`` API.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from otel_context import Compactor, semconv
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER
from otel_context.instrumentation import _background
from otel_context.testing import count_request_tokens
from otel_context.testing.tokens import WireFormat
from tests.compaction.support import Otel
from tests.values import attrs_of

MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4.1"}
FORMATS: dict[str, WireFormat] = {"anthropic": "anthropic_messages", "openai": "openai_chat"}


def _reserve(window: int, app_max_tokens: int) -> int:
    """The budget's output reserve as docs/compaction.md states it."""
    return min(app_max_tokens, 20_000, window // 2)


def _is_summary(body: Any) -> bool:
    items = body.get("messages") or [] if isinstance(body, dict) else []
    return bool(items) and "<summary>" in json.dumps(items[-1])


def _summaries(sim: Any) -> list[Any]:
    return [e for e in sim.exchanges if _is_summary(e.body)]


def _cap(body: dict[str, Any]) -> int:
    return int(body.get("max_tokens", body.get("max_completion_tokens", 0)))


def _finish(exchange: Any) -> str:
    """The reply's finish reason as the provider sent it, normalized (``length``: cut at ``max_tokens``)."""
    response = exchange.response
    reason = response["stop_reason"] if "stop_reason" in response else response["choices"][0]["finish_reason"]
    return str(semconv.FINISH_REASON_MAP.get(reason, reason))


def _question(turn: int, words: int, facts: int) -> str:
    lines = [f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(words))]
    lines += [f"FACT: turn {turn} item {i} " + " ".join(f"f{turn}y{i}z{k}" for k in range(12)) for i in range(facts)]
    return "\n".join(lines)


def _wait_idle(timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while _background.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _background.running() == 0


def _chat_until_compaction(
    sim: Any, otel: Otel, sdk: str, app_max: int, words: int, facts: int = 0
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Turns of a chat app until a compaction ended; (the history the app sent last, the app's last request)."""
    model = MODELS[sdk]
    # A timeout of its own: with the default one, the anthropic SDK refuses a non-streamed max_tokens of 32,000.
    client = sim.anthropic(timeout=120.0) if sdk == "anthropic" else sim.openai()
    history: list[dict[str, Any]] = []
    for turn in range(120):
        history.append({"role": "user", "content": _question(turn, words, facts)})
        if sdk == "anthropic":
            text = client.messages.create(model=model, max_tokens=app_max, messages=list(history)).content[0].text
        else:
            answer = client.chat.completions.create(model=model, max_tokens=app_max, messages=list(history))
            text = answer.choices[0].message.content or ""
        sent = list(history)
        history.append({"role": "assistant", "content": text})
        _wait_idle()
        if otel.compact_spans():
            app = [e for e in sim.exchanges if isinstance(e.body, dict) and not _is_summary(e.body)]
            return sent, app[-1].body
    raise AssertionError("never compacted")


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
@pytest.mark.parametrize("app_max", [1_024, 8_192, 32_000])
@pytest.mark.parametrize("window", [200_000, 30_000])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_the_summary_gets_the_budgets_reserve_within_the_window(
    simulated_provider: Any,
    otel: Otel,
    instrumented: Callable[..., Any],
    sdk: str,
    window: int,
    app_max: int,
    background: bool,
) -> None:
    simulated_provider.set_window(MODELS[sdk], window)
    instrumented(auto_compact_window=window, background_compaction=background)
    _chat_until_compaction(simulated_provider, otel, sdk, app_max, words=window // 60)
    first = _summaries(simulated_provider)[0]
    asked = _cap(first.body)
    assert asked >= max(_reserve(window, app_max), 1_024), (asked, _reserve(window, app_max))
    assert asked <= 20_000
    # The provider's own count of the summarizer's input, plus its output room, fits the window.
    assert count_request_tokens(first.body, FORMATS[sdk]) + asked <= window
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_MODE] == (
        semconv.MODE_BACKGROUND if background else semconv.MODE_INLINE
    )
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert attrs_of(compact)[semconv.COMPACTION_FINISH_REASON] == "stop"


def test_a_first_call_over_the_threshold_drops_old_rounds_rather_than_the_reserve(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """No count from the provider yet (the estimate is padded): the transcript shrinks, the reserve stays."""
    window, app_max = 30_000, 8_192
    simulated_provider.set_window(MODELS["anthropic"], window)
    instrumented(auto_compact_window=window, background_compaction=False)
    history: list[dict[str, Any]] = []
    for turn in range(24):
        history += [
            {"role": "user", "content": _question(turn, 700, 0)},
            {"role": "assistant", "content": f"Noted {turn}."},
        ]
    history.append({"role": "user", "content": "What did I ask?"})
    client = simulated_provider.anthropic()
    client.messages.create(model=MODELS["anthropic"], max_tokens=app_max, messages=history)
    summaries = _summaries(simulated_provider)
    assert summaries
    for exchange in summaries:
        asked = _cap(exchange.body)
        assert asked >= app_max
        assert count_request_tokens(exchange.body, "anthropic_messages") + asked <= window
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    # The oldest questions made way for the reserve: the summary request does not hold the first one.
    assert "Question 0:" not in json.dumps(summaries[-1].body)


def test_a_span_larger_than_the_summarizers_request_is_read_whole_in_parts(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """When the span does not fit one summarizer request beside the summary's room, it is summarized in parts,
    oldest first, each anchored on the summary of the one before: every question reaches the summarizer (the
    oldest rounds used to make way, unread), and the span says how many requests it took."""
    window, model = 30_000, MODELS["anthropic"]
    simulated_provider.set_window(model, window)
    instrumented(auto_compact_window=window, background_compaction=False)
    turns = 90
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history += [
            {"role": "user", "content": _question(turn, 150, 0)},
            {"role": "assistant", "content": f"Noted {turn}."},
        ]
    history.append({"role": "user", "content": "What did I ask?"})
    client = simulated_provider.anthropic()
    client.messages.create(model=model, max_tokens=8_192, messages=history)
    summarizers = _summaries(simulated_provider)
    assert len(summarizers) >= 2
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert attrs_of(compact)[semconv.COMPACTION_SUMMARY_PARTS] == len(summarizers)
    read = {t for t in range(turns) for s in summarizers if f"Question {t}:" in json.dumps(s.body)}
    cut = attrs_of(compact)[semconv.COMPACTION_CUT_INDEX]
    assert read >= set(range(cut // 2))  # every question of the replaced span was read
    assert "<previous_summary>" not in json.dumps(summarizers[0].body)
    assert all("<previous_summary>" in json.dumps(s.body) for s in summarizers[1:])
    app = simulated_provider.exchanges[-1].body["messages"]
    assert any(SUMMARY_MESSAGE_HEADER in json.dumps(m) for m in app)
    assert "did not fit in what the summarizer read" not in json.dumps(app)


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_a_summary_cut_at_its_limit_is_asked_again_with_the_room_left(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], sdk: str
) -> None:
    """A summary longer than 20,000 tokens: cut (``length``), then asked again with the room the window leaves."""
    window = 200_000
    simulated_provider.set_window(MODELS[sdk], window)
    instrumented(auto_compact_window=window, background_compaction=False)
    _chat_until_compaction(simulated_provider, otel, sdk, 32_000, words=2_200, facts=30)
    first, second = _summaries(simulated_provider)
    assert _cap(first.body) == 20_000
    assert _finish(first) == "length"
    assert _cap(second.body) > 20_000
    assert count_request_tokens(second.body, FORMATS[sdk]) + _cap(second.body) <= window
    assert _finish(second) == "stop"
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert attrs_of(compact)[semconv.COMPACTION_FINISH_REASON] == "stop"


@pytest.mark.parametrize("background", [False, True], ids=["inline", "background"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_a_summary_that_does_not_fit_its_room_fails_and_the_request_goes_out_unchanged(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], sdk: str, background: bool
) -> None:
    """Nearly all FACT lines: the summary is longer than the model may write or the window leaves, even asked
    again with more room; never ``success``."""
    window = 200_000
    simulated_provider.set_window(MODELS[sdk], window)
    instrumented(auto_compact_window=window, background_compaction=background)
    sent, app_body = _chat_until_compaction(simulated_provider, otel, sdk, 32_000, words=20, facts=90)
    summaries = _summaries(simulated_provider)
    assert [_finish(e) for e in summaries] == ["length", "length"]
    assert 20_000 == _cap(summaries[0].body) < _cap(summaries[1].body)
    for exchange in summaries:
        assert count_request_tokens(exchange.body, FORMATS[sdk]) + _cap(exchange.body) <= window
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.COMPACTION_MODE] == (
        semconv.MODE_BACKGROUND if background else semconv.MODE_INLINE
    )
    assert attrs_of(compact)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_FAILURE
    assert attrs_of(compact)[semconv.ERROR_TYPE] == "summary_truncated"
    assert attrs_of(compact)[semconv.COMPACTION_FINISH_REASON] == "length"
    assert compact.status.status_code == StatusCode.ERROR
    # The app's request went out as the app wrote it.
    assert app_body["messages"] == sent


def test_the_compactor_api_reports_a_summary_cut_at_its_limit_as_failed(simulated_provider: Any, otel: Otel) -> None:
    """The explicit API reads the finish reason from the SDK's response too: a summary longer than any room
    the window leaves is a failure and the messages come back unchanged."""
    history: list[dict[str, Any]] = []
    for turn in range(40):
        facts = [f"FACT: turn {turn} item {i} " + " ".join(f"f{turn}y{i}z{k}" for k in range(60)) for i in range(40)]
        history += [
            {"role": "user", "content": "\n".join([f"Question {turn}.", *facts])},
            {"role": "assistant", "content": f"Noted {turn}."},
        ]
    history.append({"role": "user", "content": "Go on."})
    client = simulated_provider.anthropic(timeout=120.0)
    result = Compactor(client).compact(history, model=MODELS["anthropic"], window=200_000)
    assert not result.compacted and result.outcome == semconv.OUTCOME_FAILURE
    assert result.messages == history
    summaries = _summaries(simulated_provider)
    assert [_finish(e) for e in summaries] == ["length", "length"]
    assert _cap(summaries[1].body) > _cap(summaries[0].body)
    (compact,) = otel.compact_spans()
    assert attrs_of(compact)[semconv.ERROR_TYPE] == "summary_truncated"
    assert attrs_of(compact)[semconv.COMPACTION_FINISH_REASON] == "length"
