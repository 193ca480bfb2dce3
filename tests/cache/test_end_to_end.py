"""Done-when of issue 5, end to end: the real SDK clients, the instrumentation and the context engine
(which calls the cache-break detector) against the simulated provider, read back from spans and metrics.

Each scenario is a small chat app resending its whole history every turn, the way real apps do: the
request is rebuilt from plain data every turn and, where the app caches, breakpoints are placed with
:func:`otel_context.cache_control.place_cache_breakpoints`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace

import otel_context
from otel_context import cache, semconv
from otel_context.cache_control import place_cache_breakpoints
from otel_context.monitor import TokenMonitor

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a meticulous coding assistant for the otel-context repository. " * 100  # ~2,100 tokens
TOOLS = [
    {
        "name": name,
        "description": f"{name}: works on files of the repository and returns their content. " * 30,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
    for name in ("read_file", "grep", "list_dir")
]
FILE = 'def handler(event, context):\n    return compute(event["x"]) + 1\n' * 20  # ~520 tokens


def question(turn: int) -> str:
    return f"Turn {turn}: review this file and explain it. words:120\n{FILE}"


class ChatApp:
    """A chat app: keeps plain-data history, rebuilds the request each turn, resends everything."""

    def __init__(self, client: Any, *, cache: bool = True, ttl: str | None = None) -> None:
        self.client = client
        self.cache = cache
        self.ttl = ttl
        self.history: list[dict[str, Any]] = []
        self.model = MODEL
        self.system: Any = SYSTEM
        self.tools: list[dict[str, Any]] = TOOLS
        self.stream = False

    def request(self) -> dict[str, Any]:
        body = {
            "model": self.model,
            "max_tokens": 400,
            "system": self.system,
            "tools": self.tools,
            "messages": [dict(m) for m in self.history],
        }
        return place_cache_breakpoints(body, ttl=self.ttl) if self.cache else body  # type: ignore[arg-type]

    def turn(self, number: int) -> Any:
        self.history.append({"role": "user", "content": question(number)})
        if self.stream:
            with self.client.messages.stream(**self.request()) as stream:
                response = stream.get_final_message()
        else:
            response = self.client.messages.create(**self.request())
        self.history.append({"role": "assistant", "content": response.content[0].text})
        return response


@pytest.fixture
def app(instrumented: None, simulated_provider: Any) -> Iterator[ChatApp]:
    client = simulated_provider.anthropic()
    try:
        yield ChatApp(client)
    finally:
        client.close()


def main_chat_spans(spans: Callable[..., list[Any]]) -> list[Any]:
    """The app's chat spans, oldest first (the summarizer's, children of a compact span, excluded)."""
    compact_ids = {s.context.span_id for s in spans(semconv.COMPACT_SPAN)}
    chats = [s for s in spans() if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]
    mains = [s for s in chats if s.parent is None or s.parent.span_id not in compact_ids]
    return sorted(mains, key=lambda s: s.start_time)


def breaks(span: Any) -> list[dict[str, Any]]:
    return [dict(e.attributes) for e in span.events if e.name == semconv.CACHE_BREAK_EVENT]


def unexpected_reasons(spans: Callable[..., list[Any]]) -> list[str | None]:
    """Per main chat span: the reason of its unexpected cache break, or None."""
    out: list[str | None] = []
    for span in main_chat_spans(spans):
        found = [b for b in breaks(span) if b[semconv.CACHE_BREAK_INTENTIONAL] is False]
        assert len(found) <= 1
        out.append(found[0][semconv.CACHE_BREAK_REASON] if found else None)
    return out


def break_counts(metric_reader: Any) -> dict[tuple[bool, str], int]:
    """otel_context.cache_breaks by (intentional, reason)."""
    counts: dict[tuple[bool, str], int] = {}
    data = metric_reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != semconv.METRIC_CACHE_BREAKS:
                    continue
                for point in metric.data.data_points:
                    attrs = point.attributes
                    assert attrs[semconv.GEN_AI_PROVIDER_NAME] == semconv.PROVIDER_ANTHROPIC
                    assert attrs[semconv.GEN_AI_REQUEST_MODEL]
                    key = (attrs[semconv.CACHE_BREAK_INTENTIONAL], attrs[semconv.CACHE_BREAK_REASON])
                    counts[key] = counts.get(key, 0) + point.value
    return counts


# --- done when ----------------------------------------------------------------------------------------------


def test_stable_prefix_hits_the_cache_from_the_fifth_turn_and_never_breaks(
    app: ChatApp, spans: Any, metric_reader: Any
) -> None:
    out = io.StringIO()
    monitor = TokenMonitor(out).attach(trace.get_tracer_provider())
    try:
        for turn in range(1, 11):
            app.turn(turn)
    finally:
        monitor.detach()
    mains = main_chat_spans(spans)
    assert len(mains) == 10
    ratios = [s.attributes[semconv.CACHE_HIT_RATIO] for s in mains]
    assert ratios[0] == 0.0
    assert all(r >= 0.7 for r in ratios[4:]), ratios
    assert unexpected_reasons(spans) == [None] * 10
    assert break_counts(metric_reader) == {}
    # The monitor printed its line for each turn, from the same spans.
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and [line.turn for line in monitor.lines] == list(range(1, 11))
    assert lines[0].startswith("turn  1 | input ") and "| cache hit   0.0% |" in lines[0]
    assert all(line.hit_ratio >= 0.7 and line.cache_breaks == () for line in monitor.lines[4:])
    assert all(line.utilization is not None and 0 < line.utilization < 1 for line in monitor.lines)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_timestamp_in_the_system_prompt_makes_every_call_a_reported_miss(
    app: ChatApp, spans: Any, metric_reader: Any, stream: bool
) -> None:
    """The classic mistake: the app stamps the time into a system prompt it marks for caching."""
    app.cache = False
    app.stream = stream
    for turn in range(1, 7):
        app.system = [
            {
                "type": "text",
                "text": f"{SYSTEM}\nNow: 2026-11-30T08:{turn:02d}:00Z",
                "cache_control": {"type": "ephemeral"},
            }
        ]
        app.turn(turn)
    mains = main_chat_spans(spans)
    assert [s.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] for s in mains] == [0] * 6
    assert unexpected_reasons(spans) == [None] + [semconv.REASON_SYSTEM_CHANGED] * 5
    lost = [b[semconv.CACHE_BREAK_LOST_TOKENS] for s in mains[1:] for b in breaks(s)]
    assert all(n > 2_000 for n in lost)
    assert break_counts(metric_reader) == {(False, semconv.REASON_SYSTEM_CHANGED): 5}


def test_the_placement_helper_keeps_the_tools_cached_despite_the_timestamp(app: ChatApp, spans: Any) -> None:
    """Same mistake, breakpoints placed by the helper: it marks neither the volatile system prompt nor
    anything after it, so at least the tools layer keeps hitting."""
    for turn in range(1, 5):
        app.system = f"{SYSTEM}\nNow: 2026-11-30T08:{turn:02d}:00Z"
        app.turn(turn)
    mains = main_chat_spans(spans)
    assert all(s.attributes[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] > 0 for s in mains[1:])


def test_changed_tool_definition_is_tools_changed(app: ChatApp, spans: Any, metric_reader: Any) -> None:
    for turn in range(1, 4):
        app.turn(turn)
    app.tools = [*TOOLS[:2], {**TOOLS[2], "description": "list_dir: lists a directory."}]
    for turn in range(4, 6):
        app.turn(turn)
    assert unexpected_reasons(spans) == [None, None, None, semconv.REASON_TOOLS_CHANGED, None]
    assert break_counts(metric_reader) == {(False, semconv.REASON_TOOLS_CHANGED): 1}


def test_switched_model_is_model_changed(app: ChatApp, spans: Any) -> None:
    for turn in range(1, 4):
        app.turn(turn)
    app.model = "claude-opus-4-6"
    for turn in range(4, 6):
        app.turn(turn)
    assert unexpected_reasons(spans) == [None, None, None, semconv.REASON_MODEL_CHANGED, None]


def test_edited_earlier_message_is_messages_changed(app: ChatApp, spans: Any) -> None:
    for turn in range(1, 6):
        app.turn(turn)
    # The app redacts the first answer (a rebuilt dict, as apps do); the first question, which names the
    # conversation, is untouched.
    app.history[1] = {"role": "assistant", "content": "[redacted]"}
    app.turn(6)
    app.turn(7)
    assert unexpected_reasons(spans) == [None] * 5 + [semconv.REASON_MESSAGES_CHANGED, None]


def test_clock_past_the_ttl_is_ttl_expired(app: ChatApp, spans: Any, simulated_provider: Any) -> None:
    """Moving the simulated provider's clock is enough: no ``use_clock`` in the test (it read ``unknown``)."""
    clock = simulated_provider.clock
    for turn in range(1, 4):
        app.turn(turn)
        clock.advance(30)
    clock.advance(301)
    app.turn(4)
    app.turn(5)
    assert unexpected_reasons(spans) == [None, None, None, semconv.REASON_TTL_EXPIRED, None]


def test_one_hour_breakpoints_outlive_a_ten_minute_pause(app: ChatApp, spans: Any, simulated_provider: Any) -> None:
    clock = simulated_provider.clock
    app.ttl = "1h"
    for turn in range(1, 4):
        app.turn(turn)
    clock.advance(600)
    app.turn(4)
    clock.advance(3_601)
    app.turn(5)
    mains = main_chat_spans(spans)
    before, after = mains[2].attributes, mains[3].attributes
    left = before[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] + before[semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS]
    assert after[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == left  # everything survived the pause
    assert unexpected_reasons(spans) == [None, None, None, None, semconv.REASON_TTL_EXPIRED]


def test_compaction_is_one_intentional_break_and_no_unexpected_one(
    app: ChatApp, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    window = 14_000
    simulated_provider.set_window(MODEL, window)
    # Inline: the compaction happens on the call that crosses the threshold, one per crossing.
    otel_context.instrument(capture_content="NO_CONTENT", auto_compact_window=window, background_compaction=False)
    monitor = TokenMonitor(None).attach(trace.get_tracer_provider())
    turn = 0
    try:
        while not spans(semconv.COMPACT_SPAN):
            turn += 1
            assert turn <= 20, "the history never crossed the compaction threshold"
            app.turn(turn)
        for extra in range(turn + 1, turn + 4):
            app.turn(extra)
    finally:
        monitor.detach()
    compacts = spans(semconv.COMPACT_SPAN)
    assert len(compacts) == 1
    intentional = breaks(compacts[0])
    assert len(intentional) == 1
    event = intentional[0]
    assert event[semconv.CACHE_BREAK_INTENTIONAL] is True
    assert event[semconv.CACHE_BREAK_REASON] == semconv.REASON_COMPACTION
    # What the last call before the compaction left in the cache: its reads + writes.
    last = main_chat_spans(spans)[turn - 2].attributes
    left = last[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] + last[semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS]
    assert left > last[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]  # it wrote too: reads alone understate it
    assert event[semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS] == left
    assert all(not breaks(s) for s in spans() if s.name != semconv.COMPACT_SPAN)
    assert unexpected_reasons(spans) == [None] * (turn + 3)
    assert break_counts(metric_reader) == {(True, semconv.REASON_COMPACTION): 1}
    # ... and the cache is read again right after the compacted call.
    mains = main_chat_spans(spans)
    assert mains[-1].attributes[semconv.CACHE_HIT_RATIO] > 0.5
    # The monitor saw one turn per app call (not the summarizer's) and the compaction on the right one.
    assert [line.turn for line in monitor.lines] == list(range(1, turn + 4))
    assert [line.new_compactions for line in monitor.lines] == [0] * (turn - 1) + [1, 0, 0, 0]
    assert monitor.lines[-1].compactions == 1


# --- OpenAI: automatic caching, same detector ------------------------------------------------------------------


def test_openai_model_switch_and_edit_are_explained(instrumented: None, simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]

    def turn(number: int, model: str = "gpt-4o") -> None:
        history.append({"role": "user", "content": question(number)})
        reply = client.chat.completions.create(model=model, messages=[dict(m) for m in history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})

    try:
        for number in range(1, 4):
            turn(number)
        turn(4, model="gpt-4.1")
        turn(5, model="gpt-4.1")
        history[2] = {"role": "assistant", "content": "[redacted]"}
        turn(6, model="gpt-4.1")
    finally:
        client.close()
    reasons = unexpected_reasons(spans)
    assert reasons == [None, None, None, semconv.REASON_MODEL_CHANGED, None, semconv.REASON_MESSAGES_CHANGED]


async def test_async_client_breaks_are_explained_too(instrumented: None, simulated_provider: Any, spans: Any) -> None:
    client = simulated_provider.async_anthropic()
    history: list[dict[str, Any]] = []
    try:
        for number, model in enumerate([MODEL, MODEL, MODEL, "claude-opus-4-6"], start=1):
            history.append({"role": "user", "content": question(number)})
            body = place_cache_breakpoints(
                {"model": model, "max_tokens": 400, "system": SYSTEM, "tools": TOOLS, "messages": list(history)}
            )
            response = await client.messages.create(**body)
            history.append({"role": "assistant", "content": response.content[0].text})
    finally:
        await client.close()
    assert unexpected_reasons(spans) == [None, None, None, semconv.REASON_MODEL_CHANGED]


def test_a_stopped_simulated_provider_gives_the_clock_back() -> None:
    """The detector reads the simulated clock only while that provider runs."""
    import time

    from otel_context import cache
    from otel_context.testing import SimulatedProvider
    from otel_context.testing.clock import ManualClock

    before = cache.current_clock()
    with SimulatedProvider() as sim:
        clock: ManualClock = sim.clock
        assert cache.current_clock() is clock
        clock.advance(1_000)
        assert cache.monotonic() == clock.now()
    assert cache.current_clock() is before
    with SimulatedProvider(clock=time.monotonic):  # real time (python -m otel_context.testing): nothing swapped
        assert cache.current_clock() is before


def test_a_conversation_that_never_used_the_cache_has_no_cache_break_to_report(
    instrumented: None, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    """No breakpoints at all (the provider reports zero cache figures): a compaction breaks no cache, so it
    emits no intentional break with expected_lost_tokens=0 and counts none."""
    window = 14_000
    simulated_provider.set_window(MODEL, window)
    otel_context.instrument(capture_content="NO_CONTENT", auto_compact_window=window)
    app = ChatApp(simulated_provider.anthropic(), cache=False)
    turn = 0
    while not spans(semconv.COMPACT_SPAN):
        turn += 1
        assert turn <= 20, "the history never crossed the compaction threshold"
        app.turn(turn)
    app.turn(turn + 1)
    assert all(not breaks(s) for s in spans())
    assert break_counts(metric_reader) == {}


def test_openai_timestamp_in_the_system_prompt_is_reported_every_call(
    instrumented: None, simulated_provider: Any, spans: Any
) -> None:
    """OpenAI caches automatically and reports no writes: the previous prompt (over 1,024 tokens) counts as
    left in the cache, so a changing system prompt is a break from the second call on (it was never seen:
    the previous call had read nothing either)."""
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = []
    for number in range(1, 5):
        history.append({"role": "user", "content": question(number)})
        system = {"role": "system", "content": f"Now: 2026-01-0{number}T10:00:0{number}Z. {SYSTEM}"}
        reply = client.chat.completions.create(model="gpt-4o", messages=[system, *history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    reasons = unexpected_reasons(spans)
    assert reasons == [None] + [semconv.REASON_SYSTEM_CHANGED] * 3


def test_openai_stable_prompt_reports_no_break(instrumented: None, simulated_provider: Any, spans: Any) -> None:
    """The counter-case: the same growing conversation with a stable system prompt reads its prefix back."""
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for number in range(1, 5):
        history.append({"role": "user", "content": question(number)})
        reply = client.chat.completions.create(model="gpt-4o", messages=[dict(m) for m in history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert unexpected_reasons(spans) == [None] * 4


# --- calls that cache nothing skip the fingerprint (issue 15) ----------------------------------------------


def _count_fingerprints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many request fingerprints the detectors take (the check's per-call cost this saves)."""
    taken = [0]
    original = cache.CacheBreakDetector.fingerprint

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cache.CacheBreakDetector, "fingerprint", counting)
    return taken


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_uncached_calls_take_no_fingerprint_and_the_first_cached_call_still_explains_the_next_break(
    app: ChatApp, spans: Any, metric_reader: Any, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """While a conversation leaves nothing in the cache, no call can break one: the fingerprint is skipped.
    The first call that caches takes it after its response, so the break right after it is still explained."""
    taken = _count_fingerprints(monkeypatch)
    app.stream = stream
    app.cache = False
    for turn in range(1, 4):
        app.turn(turn)
    assert taken[0] == 0
    app.cache = True
    app.turn(4)  # writes the cache: fingerprinted once its response says so
    assert taken[0] == 1
    app.tools = [*TOOLS[:2], {**TOOLS[2], "description": "list_dir: lists a directory."}]
    app.turn(5)
    assert taken[0] == 2
    mains = main_chat_spans(spans)
    assert [s.attributes[semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] > 0 for s in mains] == [False] * 3 + [True] * 2
    assert unexpected_reasons(spans) == [None, None, None, None, semconv.REASON_TOOLS_CHANGED]
    assert break_counts(metric_reader) == {(False, semconv.REASON_TOOLS_CHANGED): 1}


def test_openai_short_prompts_take_no_fingerprint_until_one_is_long_enough_to_cache(
    instrumented: None, simulated_provider: Any, spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI caches prompts of 1,024 tokens and more by itself: shorter ones leave nothing to break. Once the
    prompt is long enough the fingerprint is taken, and a changed system prompt is reported as before."""
    taken = _count_fingerprints(monkeypatch)
    client = simulated_provider.openai()
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for number in range(1, 4):
        history.append({"role": "user", "content": f"Short question {number}. words:10"})
        reply = client.chat.completions.create(model="gpt-4o", messages=[dict(m) for m in history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    assert taken[0] == 0
    history[0] = {"role": "system", "content": SYSTEM}  # now over 1,024 tokens: cached automatically
    for number in range(4, 6):
        history.append({"role": "user", "content": question(number)})
        reply = client.chat.completions.create(model="gpt-4o", messages=[dict(m) for m in history])
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    history[0] = {"role": "system", "content": f"Now: 2026-12-01T05:00:00Z. {SYSTEM}"}
    history.append({"role": "user", "content": question(6)})
    client.chat.completions.create(model="gpt-4o", messages=[dict(m) for m in history])
    assert taken[0] == 3
    assert unexpected_reasons(spans) == [None] * 5 + [semconv.REASON_SYSTEM_CHANGED]
