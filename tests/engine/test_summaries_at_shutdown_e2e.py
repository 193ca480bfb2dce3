"""Issue 49 item 5: nothing left behind at shutdown. A summary prepared in the background that is still in
flight when the app stops is waited for (``otel_context.wait_for_summaries``, bounded; the interpreter's exit
does it on its own), so its ``compact`` span and its summarizer's ``chat`` span are exported whole, and the
SDK never says "already shutdown". An app that shuts its tracer provider down first is told once what it lost.

Real SDK clients against the simulated provider, whose ``summary_latency`` keeps a summary in flight; the
spans go through the SDK's own ``SimpleSpanProcessor`` (which warns about a span ended after its shutdown).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.instrumentation import _background
from tests.compaction.support import Otel
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"
WINDOW = 14_000


def _question(turn: int) -> str:
    return f"Question {turn}: " + " ".join(f"w{turn}x{i}" for i in range(400))


def _until_in_flight(sim: Any, client: Any) -> None:
    """Turns of one conversation until its background summary is in flight (its request at the provider)."""
    history: list[dict[str, Any]] = []
    for turn in range(1, 40):
        history.append({"role": "user", "content": _question(turn)})
        reply = client.messages.create(model=MODEL, max_tokens=512, messages=list(history))
        history.append({"role": "assistant", "content": reply.content[0].text})
        if _background.running():
            break
    else:
        raise AssertionError("no summary started")
    deadline = time.monotonic() + 10
    while sim.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _background.running() == 1


def _sdk_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]


def _whole(otel: Otel) -> list[Any]:
    """The exported compact spans, after checking that every span's parent was exported too."""
    spans = otel.spans()
    ids = {s.context.span_id for s in spans}
    orphans = [s.name for s in spans if s.parent is not None and s.parent.span_id not in ids]
    assert orphans == []
    return otel.compact_spans()


def test_waiting_for_the_summaries_exports_a_summary_in_flight_whole(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    simulated_provider.summary_latency = 1.0
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    _until_in_flight(simulated_provider, simulated_provider.anthropic())
    began = time.monotonic()
    assert otel_context.wait_for_summaries(20) is True
    assert time.monotonic() - began < 10
    assert _background.running() == 0
    otel_context.uninstrument()  # the ready summary, never applied, is dropped: reported as discarded
    otel.tracer_provider.shutdown()
    (ready, dropped) = sorted(_whole(otel), key=lambda s: s.end_time or 0)
    assert attrs_of(ready)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS
    assert attrs_of(dropped)[semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_DISCARDED
    (summarizer,) = [s for s in otel.spans() if s.parent is not None and s.parent.span_id == ready.context.span_id]
    assert semconv.GEN_AI_USAGE_OUTPUT_TOKENS in attrs_of(summarizer)  # it got its answer
    assert _sdk_warnings(caplog) == []


def test_a_provider_shut_down_first_is_told_once_what_it_lost(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    simulated_provider.summary_latency = 1.0
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    _until_in_flight(simulated_provider, simulated_provider.anthropic())
    otel.tracer_provider.shutdown()  # the app did not wait
    lost = [r.getMessage() for r in caplog.records if r.name == "otel_context"]
    assert len(lost) == 1
    assert "shut down while 1 summary(ies) prepared in the background were in flight" in lost[0]
    assert "otel_context.wait_for_summaries()" in lost[0]
    assert otel_context.wait_for_summaries(20) is True
    otel.tracer_provider.shutdown()
    assert len([r for r in caplog.records if r.name == "otel_context"]) == 1  # said once


def test_the_wait_is_bounded_and_its_timeout_checked(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any]
) -> None:
    assert otel_context.wait_for_summaries(0) is True  # none in flight: at once
    simulated_provider.summary_latency = 3.0
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)
    _until_in_flight(simulated_provider, simulated_provider.anthropic())
    began = time.monotonic()
    assert otel_context.wait_for_summaries(0.2) is False
    assert time.monotonic() - began < 2.0
    for bad in (-1, float("nan"), float("inf"), "5", True, None):
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            otel_context.wait_for_summaries(bad)  # type: ignore[arg-type]
    assert otel_context.wait_for_summaries(20) is True


def test_async_code_waits_on_its_loop_and_the_blocking_wait_is_refused_there(
    simulated_provider: Any, otel: Otel, instrumented: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    simulated_provider.summary_latency = 0.5
    simulated_provider.set_window(MODEL, WINDOW)
    instrumented(auto_compact_window=WINDOW)

    async def app() -> bool:
        client = simulated_provider.async_anthropic()
        history: list[dict[str, Any]] = []
        for turn in range(1, 40):
            history.append({"role": "user", "content": _question(turn)})
            reply = await client.messages.create(model=MODEL, max_tokens=512, messages=list(history))
            history.append({"role": "assistant", "content": reply.content[0].text})
            if _background.running():
                break
        assert _background.running() == 1
        with pytest.raises(RuntimeError, match="wait_for_summaries_async"):
            otel_context.wait_for_summaries(5)
        return await otel_context.wait_for_summaries_async(20)

    assert asyncio.run(app()) is True
    otel_context.uninstrument()
    otel.tracer_provider.shutdown()
    compacts = _whole(otel)
    assert semconv.OUTCOME_SUCCESS in [attrs_of(c)[semconv.COMPACTION_OUTCOME] for c in compacts]
    assert _sdk_warnings(caplog) == []


EXITING_APP = """
import json, sys
import otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from otel_context.instrumentation import _background
from otel_context.testing import SimulatedProvider


class Lines(SpanExporter):
    def __init__(self, path):
        self.out = open(path, "w")

    def export(self, spans):
        for s in spans:
            parent = s.parent.span_id if s.parent is not None else None
            self.out.write(json.dumps({{"name": s.name, "id": s.context.span_id, "parent": parent,
                                       "attributes": dict(s.attributes or {{}})}}) + "\\n")
        self.out.flush()
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(Lines(sys.argv[1])))
trace.set_tracer_provider(provider)
sim = SimulatedProvider(summary_latency={latency}).start()
sim.set_window("{model}", {window})
otel_context.instrument(auto_compact_window={window})
client = sim.anthropic()
history = []
for turn in range(40):
    history.append({{"role": "user", "content": "Q%d " % turn + " ".join("w%d" % i for i in range(400))}})
    reply = client.messages.create(model="{model}", max_tokens=512, messages=list(history))
    history.append({{"role": "assistant", "content": reply.content[0].text}})
    if _background.running():
        break
assert _background.running() == 1
"""


def test_the_interpreter_exit_waits_briefly_and_exports_the_landed_summary_whole(tmp_path: Path) -> None:
    script, spans = tmp_path / "app.py", tmp_path / "spans.jsonl"
    script.write_text(textwrap.dedent(EXITING_APP.format(latency=0.5, model=MODEL, window=WINDOW)))
    done = subprocess.run([sys.executable, str(script), str(spans)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no SDK warning, nothing of ours
    exported = [json.loads(line) for line in spans.read_text().splitlines()]
    ids = {s["id"] for s in exported}
    assert [s["name"] for s in exported if s["parent"] is not None and s["parent"] not in ids] == []
    (compact,) = [s for s in exported if s["name"] == semconv.COMPACT_SPAN]
    assert compact["attributes"][semconv.COMPACTION_OUTCOME] == semconv.OUTCOME_SUCCESS  # it landed in the wait
    (summarizer,) = [s for s in exported if s["parent"] == compact["id"]]
    assert semconv.GEN_AI_USAGE_OUTPUT_TOKENS in summarizer["attributes"]
