"""Traces well-formed in any viewer (issue 32, item 4): what a real OTLP exporter sends at a normal exit.

An app in a subprocess (real anthropic SDK, simulated provider, background compaction on) runs a 60-turn
conversation, stops with a summary ready but never applied, then starts another conversation and exits while
that one's summary is still in flight. It sets up its tracer provider with the OTLP/HTTP exporter to a
collector in this process (a real HTTP server on loopback that decodes ``ExportTraceServiceRequest``), and
exits without flushing: what arrives is what the at-exit hooks export. Every exported span's parent must be
exported, no child may end after its parent, and every span the app started must arrive.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_context import semconv
from tests.otlp_collector import Collector, span_attributes

MODEL = "claude-sonnet-4-6"
WINDOW = 14_000


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.close()


APP = """
import json
import sys

# Imported before the tracer provider is made: its exit hook is registered first, so it would run after the
# provider's shutdown (atexit runs the last registered first) unless instrument() registers it again.
from otel_context.instrumentation import _background

import otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_context.conversation import CONVERSATIONS
from otel_context.engine import background
from otel_context.testing import SimulatedProvider

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
trace.set_tracer_provider(provider)
sim = SimulatedProvider(latency=0.02, summary_latency=0.15).start()
sim.set_window("{model}", {window})
otel_context.instrument(auto_compact_window={window})
client = sim.anthropic()


def turn(history, number):
    history.append({{"role": "user", "content": "Q%d " % number + " ".join("w%dx%d" % (number, i) for i in range(400))}})
    reply = client.messages.create(model="{model}", max_tokens=512, messages=list(history))
    history.append({{"role": "assistant", "content": reply.content[0].text}})


def ready(key):
    state = next(s for s in CONVERSATIONS.states() if s.key == key)
    prepared = background.pending(state)
    return prepared is not None and prepared.entry is not None


calls = 0
with otel_context.conversation("long"):
    history = []
    for number in range(1, 61):
        turn(history, number)
        calls += 1
    # Then up to a summary that is ready and never applied (the app stops before the threshold).
    for number in range(61, 100):
        assert _background.wait_idle(10)
        if ready("long"):
            break
        turn(history, number)
        calls += 1
    assert ready("long")
sim.summary_latency = 3.0  # this one is still in flight when the app exits
with otel_context.conversation("cut"):
    history = []
    for number in range(1, 40):
        turn(history, number)
        calls += 1
        if _background.running():
            break
    assert _background.running() == 1  # in flight at exit
print(json.dumps({{"calls": calls}}))
"""


def test_an_exported_background_run_has_no_orphan_and_no_child_outliving_its_parent(
    collector: Collector, tmp_path: Path
) -> None:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(model=MODEL, window=WINDOW)))
    done = subprocess.run(
        [sys.executable, str(script), collector.url], capture_output=True, text=True, timeout=120, env=_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    app_calls = json.loads(done.stdout)["calls"]
    with collector.lock:
        spans = list(collector.spans)
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)  # each exported once

    orphans = [s.name for s in spans if s.parent_span_id and s.parent_span_id not in by_id]
    assert orphans == []
    outliving = [
        (s.name, by_id[s.parent_span_id].name)
        for s in spans
        if s.parent_span_id and s.end_time_unix_nano > by_id[s.parent_span_id].end_time_unix_nano
    ]
    assert outliving == []

    attrs = {s.span_id: span_attributes(s) for s in spans}
    compacts = [s for s in spans if s.name == semconv.COMPACT_SPAN]
    summarizers = [s for s in spans if s.parent_span_id in {c.span_id for c in compacts}]
    app = [s for s in spans if s.name.startswith("chat ") and s not in summarizers]
    assert len(app) == app_calls  # every call the app made arrived
    background_compacts = [c for c in compacts if attrs[c.span_id][semconv.COMPACTION_MODE] == "background"]
    prepared = [c for c in background_compacts if not c.parent_span_id]  # a trace of its own each
    assert len(prepared) >= 4
    assert all(s.parent_span_id in {c.span_id for c in prepared} for s in summarizers)
    # Each prepared summary links to the call that started it, in another trace.
    for compact in prepared:
        (started_by,) = compact.links
        assert by_id[started_by.span_id].trace_id == started_by.trace_id != compact.trace_id

    # Applied ones: the applying call links to the compact span and carries the applied event.
    applying = [s for s in app if any(e.name == semconv.COMPACTION_APPLIED_EVENT for e in s.events)]
    assert len(applying) >= 3
    applied_ids = {link.span_id for s in applying for link in s.links}
    assert applied_ids <= {c.span_id for c in prepared}
    # The one ready at exit (never applied) arrived, with its summarizer: it ended when it was ready.
    outcomes = {c.span_id: attrs[c.span_id][semconv.COMPACTION_OUTCOME] for c in prepared}
    unapplied = [i for i, outcome in outcomes.items() if outcome == "success" and i not in applied_ids]
    assert len(unapplied) >= 1
    # The one in flight at exit arrived too, ended as discarded, with the summarizer's request cut short.
    (cut,) = [c for c in prepared if attrs[c.span_id].get(semconv.GEN_AI_CONVERSATION_ID) == "cut"]
    assert outcomes[cut.span_id] == "discarded"
    (cut_request,) = [s for s in summarizers if s.parent_span_id == cut.span_id]
    assert semconv.GEN_AI_USAGE_INPUT_TOKENS not in attrs[cut_request.span_id]  # no answer came


def _env() -> dict[str, str]:
    """The test's environment without settings that would change what the app exports or compacts."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OTEL_CONTEXT_"))}
