"""The demo as a user sends it to a trace viewer (docs/viewing.md): the console script exporting over OTLP/HTTP
to a collector on loopback, in background mode with a slow model, then read as a viewer would.

What a viewer must not see: a span whose parent never arrived (a summary still running at shutdown once left
its summarizer's ``chat`` span so, at the top of the trace list), an SDK warning, or the runs of a day merged
into one session (every run used one conversation id).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace

from otel_context import semconv
from otel_context.demo import DemoOptions, run
from tests.demo.test_cli import _env
from tests.otlp_collector import Collector, span_attributes

SCRIPT = Path(sys.executable).parent / "otel-context"


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.close()


def test_a_background_demo_exported_over_otlp_arrives_whole_with_its_own_session(collector: Collector) -> None:
    env = _env(
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url.removesuffix("/v1/traces"),
        OTEL_METRICS_EXPORTER="none",
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="SPAN_ONLY",
    )
    done = subprocess.run(
        [str(SCRIPT), "demo", "--background", "--latency", "0.05"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no SDK warning (a span ended after its processor shut down), no exporter error
    with collector.lock:
        spans = list(collector.spans)
    ids = {s.span_id for s in spans}
    assert len(ids) == len(spans) > 200
    assert [s.name for s in spans if s.parent_span_id and s.parent_span_id not in ids] == []
    # The ids a background summary and its calls name each other by are spans that arrived.
    hex_ids = {trace.format_span_id(int.from_bytes(s.span_id, "big")) for s in spans}
    named = [
        a[key]
        for a in map(span_attributes, spans)
        for key in (semconv.COMPACTION_STARTED_SPAN_ID, semconv.COMPACTION_STARTED_BY_SPAN_ID)
        if key in a
    ]
    assert named and set(named) <= hex_ids
    # One conversation id for the run, printed for the user, on every call of the agent.
    (printed,) = re.findall(r"conversation (otel-context-demo-[\w-]+)", " ".join(done.stdout.split()))
    calls = [span_attributes(s) for s in spans if s.name.startswith("chat ")]
    agent = [a for a in calls if a.get(semconv.CALL_PURPOSE) != semconv.PURPOSE_COMPACTION]
    conversations = {a.get(semconv.GEN_AI_CONVERSATION_ID) for a in agent}
    assert conversations == {printed}


def test_every_run_has_a_conversation_id_of_its_own() -> None:
    first, second = run(DemoOptions(turns=2)), run(DemoOptions(turns=2))
    ids = []
    for result in (first, second):
        chats = [s for s in result.spans if s.name.startswith("chat ")]
        (conversation,) = {(s.attributes or {})[semconv.GEN_AI_CONVERSATION_ID] for s in chats}
        assert conversation == result.conversation_id and conversation.startswith("otel-context-demo-")
        ids.append(conversation)
    assert ids[0] != ids[1]


def test_a_summary_running_when_the_last_turn_ends_lands_before_the_provider_stops(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Summaries 150 times slower than the model's answers (3 s): the one prepared near the end is still running
    when the last turn ends. It must land on the simulated provider, still up, not fail on a refused connection
    once the provider stopped (which printed a warning and counted a failed compaction)."""
    monkeypatch.setattr(sys.modules["otel_context.demo.run"], "SUMMARY_LATENCY_FACTOR", 150)
    result = run(DemoOptions(background=True, latency=0.02, turns=33))  # a summary starts late in this run
    agent_calls = [
        s
        for s in result.spans
        if s.name.startswith(f"{semconv.OP_CHAT} ")
        and (s.attributes or {}).get(semconv.CALL_PURPOSE) != semconv.PURPOSE_COMPACTION
    ]
    last_turn_ended = max(s.end_time or 0 for s in agent_calls)
    summaries = [s for s in result.spans if s.name == semconv.COMPACT_SPAN and s.parent is None]
    running_at_the_end = [s for s in summaries if (s.start_time or 0) < last_turn_ended < (s.end_time or 0)]
    assert running_at_the_end  # what this test is about
    outcomes = {(s.attributes or {})[semconv.COMPACTION_OUTCOME] for s in running_at_the_end}
    assert outcomes <= {semconv.OUTCOME_SUCCESS, semconv.OUTCOME_DISCARDED}, outcomes
    assert not [r.getMessage() for r in caplog.records if "compaction failed" in r.getMessage()]
