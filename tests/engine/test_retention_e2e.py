"""Every compaction reports what it kept (docs/telemetry.md, the compact span; docs/compaction.md).

Through the real SDKs on the simulated provider: a tool-using agent resends its growing history until the
engine compacts it. The simulated provider's scripted summarizer keeps every ``FACT:`` line and every user
message verbatim, and nothing of the tool results: so a run whose salient items are all in user messages is
kept whole (retention 1.0), and error lines and paths planted only in tool results are lost, which the
``compact`` span says (and, with content capture on, names in its ``otel_context.compaction.lost`` event).
The summarizer's own calls carry ``otel_context.call.purpose = compaction`` on their token series; the
app's calls do not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from otel_context import semconv
from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE
from otel_context.instrumentation import _background
from otel_context.testing.fleet import ANTHROPIC_TOOLS, OPENAI_TOOLS, SYSTEM
from tests.compaction.support import Otel
from tests.values import attrs_of

WINDOW = 30_000
TURNS = 12
#: Planted in the results of the first turns' test runs only (the scripted summary never copies tool results).
PLANTED_ERROR = "ValueError: planted checksum mismatch in block 7"
PLANTED_PATH = "src/planted/ledger_sync.py"


#: A tool whose results are never rehydrated (not a file-read tool): what the summary drops stays dropped.
TEST_TOOL = {
    "name": "run_tests",
    "description": "Run the tests",
    "input_schema": {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]},
}


def _user(turn: int, planted: bool) -> str:
    call = (
        'tool:run_tests{"target": "all"}'
        if planted and turn < 2
        else "tool:read_file" + json.dumps({"path": f"f{turn}.py"})
    )
    return f"Turn {turn}. FACT: fact-{turn}. Now use the tool. {call}"


def _result(name: str, arguments: dict[str, Any], turn: int) -> str:
    lines = [f"line {i} of the output" for i in range(900)]
    if name == TEST_TOOL["name"]:
        lines[10] = f"{PLANTED_ERROR} (turn {turn})"
        lines[20] = f"see {PLANTED_PATH} for turn {turn}"
    return "\n".join(lines)


def _anthropic_agent(client: Any, model: str, planted: bool) -> None:
    history: list[dict[str, Any]] = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": _user(turn, planted)})
        for _ in range(3):
            response = client.messages.create(
                model=model, max_tokens=512, system=SYSTEM, tools=[*ANTHROPIC_TOOLS, TEST_TOOL], messages=history
            )
            history.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
            )
            if response.stop_reason != "tool_use":
                break
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": _result(b.name, b.input, turn)}
                for b in response.content
                if b.type == "tool_use"
            ]
            history.append({"role": "user", "content": results})


def _openai_function(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]}


def _openai_agent(client: Any, model: str, planted: bool) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    tools = [*OPENAI_TOOLS, {"type": "function", "function": _openai_function(TEST_TOOL)}]
    for turn in range(TURNS):
        history.append({"role": "user", "content": _user(turn, planted)})
        for _ in range(3):
            response = client.chat.completions.create(model=model, max_tokens=512, tools=tools, messages=history)
            message = response.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)
                content = _result(call.function.name, arguments, turn)
                history.append({"role": "tool", "tool_call_id": call.id, "content": content})


def _responses_agent(client: Any, model: str, planted: bool) -> None:
    tools = [{"type": "function", **_openai_function(t)} for t in (*ANTHROPIC_TOOLS, TEST_TOOL)]
    history: list[Any] = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": _user(turn, planted)})
        for _ in range(3):
            response = client.responses.create(
                model=model, max_output_tokens=512, instructions=SYSTEM, tools=tools, input=history
            )
            history += [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            for call in calls:
                content = _result(call.name, json.loads(call.arguments), turn)
                history.append({"type": "function_call_output", "call_id": call.call_id, "output": content})


def _run(simulated_provider: Any, wire: str, planted: bool) -> None:
    if wire == "anthropic":
        model = "claude-sonnet-4-6"
        simulated_provider.set_window(model, WINDOW)
        _anthropic_agent(simulated_provider.anthropic(), model, planted)
    else:
        model = "gpt-4o"
        simulated_provider.set_window(model, WINDOW)
        agent = _responses_agent if wire == "openai_responses" else _openai_agent
        agent(simulated_provider.openai(), model, planted)
    # A background summary still running when the agent stops ends (its span, then its histograms) while
    # the test reads them: wait for it, so that spans and histograms are read at one moment.
    assert _background.wait_idle(10)
    assert [e.status for e in simulated_provider.exchanges if e.status != 200] == []


def _summaries(otel: Otel) -> list[Any]:
    spans = [
        s
        for s in otel.compact_spans()
        if attrs_of(s)[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_SUMMARY
        and attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    ]
    assert spans, "the run must compact"
    return spans


def _histogram_matches_the_spans(otel: Otel, spans: list[Any]) -> None:
    """The retention histogram holds exactly the figures of the compact spans (summary strategy)."""
    (point,) = [
        p
        for p in otel.metric_points(semconv.METRIC_COMPACTION_RETENTION)
        if p.attributes[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_SUMMARY
    ]
    assert point.attributes[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_AUTO
    assert point.count == len(spans)
    assert point.sum == pytest.approx(sum(s.attributes[semconv.COMPACTION_RETENTION] for s in spans))


def _summarizer_series_are_marked(otel: Otel) -> None:
    """The summarizer's calls (children of compact spans) carry the purpose on their span and their token
    series, and those series count exactly their tokens; the app's calls carry nothing."""
    compact_ids = {c.context.span_id for c in otel.compact_spans()}
    chats = [s for s in otel.spans() if s.name.startswith(semconv.OP_CHAT)]
    # The app's calls are roots here (the agent opens no span); the summarizer's are children of a compact
    # span.
    summarizer = [s for s in chats if s.parent is not None]
    app = [s for s in chats if s.parent is None]
    assert summarizer and app
    assert len([s for s in summarizer if s.parent is not None and s.parent.span_id in compact_ids]) >= len(
        otel.compact_spans()
    )
    assert all(attrs_of(s)[semconv.CALL_PURPOSE] == semconv.PURPOSE_COMPACTION for s in summarizer)
    assert all(semconv.CALL_PURPOSE not in attrs_of(s) for s in app)
    for metric, usage in (
        (semconv.METRIC_USAGE_INPUT_TOKENS, semconv.GEN_AI_USAGE_INPUT_TOKENS),
        (semconv.METRIC_USAGE_OUTPUT_TOKENS, semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
    ):
        points = otel.metric_points(metric)
        marked = [p for p in points if p.attributes.get(semconv.CALL_PURPOSE) == semconv.PURPOSE_COMPACTION]
        unmarked = [p for p in points if semconv.CALL_PURPOSE not in p.attributes]
        assert len(marked) + len(unmarked) == len(points)  # no other value
        assert sum(p.value for p in marked) == sum(attrs_of(s)[usage] for s in summarizer)
        assert sum(p.value for p in unmarked) == sum(attrs_of(s)[usage] for s in app)


@pytest.mark.parametrize(("wire", "background"), [("anthropic", True), ("openai_chat", False)])
def test_a_summary_that_keeps_everything_reports_retention_1(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], wire: str, background: bool
) -> None:
    instrumented(auto_compact_window=WINDOW, capture_content="SPAN_ONLY", background_compaction=background)
    _run(simulated_provider, wire, planted=False)
    spans = _summaries(otel)
    first = spans[0]
    attrs = first.attributes
    mode = semconv.MODE_BACKGROUND if background else semconv.MODE_INLINE
    assert attrs[semconv.COMPACTION_MODE] == mode
    assert attrs[semconv.COMPACTION_ITEMS_CHECKED] > 0
    assert attrs[semconv.COMPACTION_RETENTION] == 1.0
    # The cut: every message before it was replaced by the summary (the first compaction has no older head).
    assert attrs[semconv.COMPACTION_CUT_INDEX] == attrs[semconv.COMPACTION_MESSAGES_COMPACTED] > 0
    assert not [e for e in first.events if e.name == semconv.COMPACTION_LOST_EVENT]
    _histogram_matches_the_spans(otel, spans)
    _summarizer_series_are_marked(otel)


@pytest.mark.parametrize(
    ("wire", "background"), [("anthropic", False), ("openai_chat", True), ("openai_responses", False)]
)
def test_items_the_summary_drops_are_reported_lost(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], wire: str, background: bool
) -> None:
    # repair_budget=0: the check only measures (the repair's own test follows).
    instrumented(
        auto_compact_window=WINDOW, capture_content="SPAN_ONLY", background_compaction=background, repair_budget=0
    )
    _run(simulated_provider, wire, planted=True)
    spans = _summaries(otel)
    first = spans[0]
    attrs = first.attributes
    assert 0.0 < attrs[semconv.COMPACTION_RETENTION] < 1.0
    checked = attrs[semconv.COMPACTION_ITEMS_CHECKED]
    (event,) = [e for e in first.events if e.name == semconv.COMPACTION_LOST_EVENT]
    lost = list(event.attributes[semconv.COMPACTION_LOST_ITEMS])
    kinds = list(event.attributes[semconv.COMPACTION_LOST_KINDS])
    assert lost == [f"{PLANTED_ERROR} (turn 0)", f"{PLANTED_ERROR} (turn 1)", PLANTED_PATH]
    assert kinds == [semconv.RETENTION_KIND_ERROR, semconv.RETENTION_KIND_ERROR, semconv.RETENTION_KIND_PATH]
    # The fraction is what the event counts (nothing else was lost: the user messages are kept verbatim).
    assert event.attributes[semconv.COMPACTION_LOST_COUNT] == 3
    assert attrs[semconv.COMPACTION_RETENTION] == pytest.approx((checked - 3) / checked)
    _histogram_matches_the_spans(otel, spans)


@pytest.mark.parametrize(
    ("wire", "background"), [("anthropic", True), ("openai_chat", False), ("openai_responses", True)]
)
def test_the_repair_restores_what_the_summary_dropped_before_the_request_goes_out(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], wire: str, background: bool
) -> None:
    """The same run with the repair on (the default): the error lines and the path the summary dropped reach
    the model, the span says what the summary kept as written and what the repair restored, by kind."""
    instrumented(auto_compact_window=WINDOW, capture_content="SPAN_ONLY", background_compaction=background)
    _run(simulated_provider, wire, planted=True)
    spans = _summaries(otel)
    attrs = spans[0].attributes
    checked = attrs[semconv.COMPACTION_ITEMS_CHECKED]
    assert attrs[semconv.COMPACTION_RETENTION_BEFORE_REPAIR] == pytest.approx((checked - 3) / checked)
    assert attrs[semconv.COMPACTION_RETENTION] == 1.0
    assert attrs[semconv.COMPACTION_REPAIR_RESTORED_PREFIX + semconv.RETENTION_KIND_ERROR] == 2
    assert attrs[semconv.COMPACTION_REPAIR_RESTORED_PREFIX + semconv.RETENTION_KIND_PATH] == 1
    assert 0 < attrs[semconv.COMPACTION_REPAIR_TOKENS] <= attrs[semconv.COMPACTION_REPAIR_BUDGET]
    assert not [e for e in spans[0].events if e.name == semconv.COMPACTION_LOST_EVENT]  # nothing lost is sent
    # What went out after the compaction carries them.
    sent = json.dumps([e.body for e in simulated_provider.exchanges if NO_TOOLS_PREAMBLE not in json.dumps(e.body)])
    assert PLANTED_PATH in sent and f"{PLANTED_ERROR} (turn 1)" in sent
    _histogram_matches_the_spans(otel, spans)


def test_the_lost_items_are_named_only_with_content_capture_on(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    instrumented(auto_compact_window=WINDOW, repair_budget=0)  # NO_CONTENT, the default
    _run(simulated_provider, "anthropic", planted=True)
    first = _summaries(otel)[0]
    assert first.attributes[semconv.COMPACTION_RETENTION] < 1.0
    assert not [e for e in first.events if e.name == semconv.COMPACTION_LOST_EVENT]


def test_microcompact_reports_what_it_cleared(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    """Clearing old tool results drops their content too: the planted error lines and path are reported lost
    (the cut is 0: nothing was replaced by a summary), and the histogram keeps them apart from summaries."""
    instrumented(
        auto_compact_window=WINDOW, microcompact=True, microcompact_clear_at_least=1_000, capture_content="SPAN_ONLY"
    )
    _run(simulated_provider, "anthropic", planted=True)
    micro = [
        s
        for s in otel.compact_spans()
        if attrs_of(s)[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_MICROCOMPACT
        and attrs_of(s)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    ]
    assert micro, "the run must microcompact"
    first = micro[0]
    assert attrs_of(first)[semconv.COMPACTION_CUT_INDEX] == 0
    (event,) = [e for e in first.events if e.name == semconv.COMPACTION_LOST_EVENT]
    lost = list(attrs_of(event)[semconv.COMPACTION_LOST_ITEMS])
    checked = attrs_of(first)[semconv.COMPACTION_ITEMS_CHECKED]
    # The oldest results were cleared (the newest three are kept): turn 0's test run at least.
    assert lost[0] == f"{PLANTED_ERROR} (turn 0)"
    assert set(lost) <= {f"{PLANTED_ERROR} (turn 0)", f"{PLANTED_ERROR} (turn 1)", PLANTED_PATH}
    # The path is kept as long as a result that names it is still there (turn 1's, when not cleared yet).
    assert (PLANTED_PATH in lost) == (f"{PLANTED_ERROR} (turn 1)" in lost)
    assert attrs_of(first)[semconv.COMPACTION_RETENTION] == pytest.approx((checked - len(lost)) / checked)
    assert attrs_of(event)[semconv.COMPACTION_LOST_COUNT] == len(lost)
    reported = [s for s in micro if semconv.COMPACTION_RETENTION in attrs_of(s)]
    (point,) = [
        p
        for p in otel.metric_points(semconv.METRIC_COMPACTION_RETENTION)
        if p.attributes[semconv.COMPACTION_STRATEGY] == semconv.STRATEGY_MICROCOMPACT
    ]
    assert point.count == len(reported)
    assert point.sum == pytest.approx(sum(attrs_of(s)[semconv.COMPACTION_RETENTION] for s in reported))
