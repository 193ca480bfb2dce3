"""An instrumented agent whose summarizer keeps failing, serving its metrics for Prometheus to scrape.

    pip install 'otel-context[anthropic,prometheus]'    # the Prometheus exporter is the `prometheus` extra
    python examples/failing_summarizer_metrics.py --port 9464            # runs until Ctrl-C
    python examples/failing_summarizer_metrics.py --port 9464 --duration 60

Point a Prometheus at it with the project's alert rules, e.g.::

    global: {scrape_interval: 5s, evaluation_interval: 5s}
    rule_files: [dashboards/prometheus/rules.yml]
    scrape_configs: [{job_name: agent, static_configs: [{targets: ["127.0.0.1:9464"]}]}]

and ``OtelContextCompactionFailing`` fires within seconds (Prometheus' /alerts page); once three
compactions in a row have failed the conversation's circuit breaker opens and, five minutes later,
``OtelContextCircuitBreakerOpen`` fires too. The app's log says the same: one warning per conversation and
cause of failure, and one when a breaker opens.

It runs until Ctrl-C. With its breaker open a conversation is no longer compacted, so its history outgrows
the model's window and the provider rejects it ("prompt is too long"), which is what the alerts are for; the
agents handle that as an app would (a line says so, and the agent starts a new session) and run on.
``--model-window`` makes the simulated model's window smaller, so that this happens within a minute
instead of a few. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the metrics and
spans also go there over OTLP/HTTP (e.g. to the `lgtm` stack of dashboards/docker-compose.yml).

Everything runs on otel-context's simulated provider (a local HTTP server speaking the Anthropic API, on
127.0.0.1): free, offline, deterministic. The summarizer is replaced (``summarizer=`` of
``otel_context.instrument``) by a function that always raises, as an unreachable summarization service
would. Nothing is lost when a compaction fails: the request goes out unchanged, which is why the agents
never notice; only the telemetry does (a ``compact`` span with status error and ``error.type``, and
``otel_context.compactions{outcome="failure"}``).

Three agents run side by side, each resending its whole history every turn (as most agents do), so that
every metric the dashboards read is emitted:

* a writing agent whose notes grow quickly past the (pretend, small) window: its summary compactions fail,
  three in a row, and then its circuit breaker opens;
* a coding agent that reads files with a tool, behind a cached system prompt (prompt-cache reads): its old
  tool results are cleared by microcompaction (no LLM call, so that layer succeeds and reports the tokens
  it saved, and what it kept of what it cleared);
* a chat assistant that streams its answers and puts the current time in its (cached) system prompt, a
  classic prompt-cache breaker: every call after the first reports an unexpected ``system_changed`` break.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import threading
import time
from typing import Any, cast

import anthropic
from anthropic.types import MessageParam, TextBlockParam, ToolParam, ToolResultBlockParam
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import start_http_server

import otel_context
from otel_context.testing import SimulatedProvider

MODEL = "claude-haiku-4-5"
#: A pretend context window, so that compaction is due after a few turns instead of 200K tokens.
WINDOW = 8_000
SERVICE_NAME = "failing-summarizer-agent"

FILES = {
    # The path heads each file, as a file-reading tool shows it: what microcompaction clears is checked for
    # the items it names (the path survives in the tool call, so its retention is reported).
    f"src/module_{i}.py": f"# src/module_{i}.py\n"
    + "\n".join(f"def f{i}_{n}(x):\n    return x * {n}  # step {n}" for n in range(40))
    for i in range(50)
}
TOOLS: list[ToolParam] = [
    {
        "name": "read_file",
        "description": "Read a file of the project.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
#: Long enough to be cached (the provider caches prefixes of 1,024 tokens and more).
HOUSE_RULES = "\n".join(f"Rule {n}: answer politely, cite the relevant file, and keep it short." for n in range(120))
#: The coding agent's stable system prompt, cached: every call after the first reads it from the cache.
CODING_RULES: list[TextBlockParam] = [
    {"type": "text", "text": HOUSE_RULES[: len(HOUSE_RULES) // 2], "cache_control": {"type": "ephemeral"}}
]


def setup_telemetry(host: str, port: int) -> tuple[TracerProvider, MeterProvider]:
    """Prometheus /metrics on host:port; OTLP too when OTEL_EXPORTER_OTLP_ENDPOINT is set."""
    resource = Resource.create({"service.name": SERVICE_NAME})
    readers: list[MetricReader] = [PrometheusMetricReader()]
    tracer_provider = TracerProvider(resource=resource)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=5_000))
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    start_http_server(port=port, addr=host)
    return tracer_provider, MeterProvider(resource=resource, metric_readers=readers)


def _assistant_turn(response: anthropic.types.Message) -> MessageParam:
    """The model's answer as the next history entry (blocks as plain dicts, as an app stores them)."""
    return cast(
        MessageParam, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
    )


class SummarizerUnavailable(RuntimeError):
    """What the broken summarizer raises."""


def broken_summarizer(request_body: dict[str, Any]) -> str:
    """Stands in for the summarizer model: every summary request fails."""
    raise SummarizerUnavailable("the summarization service is unreachable")


def rejected(agent: str, error: anthropic.APIStatusError) -> None:
    """What an app does with a call the provider refused: say so (one line), and go on."""
    body = error.body if isinstance(error.body, dict) else {}
    detail = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else None
    print(f"{agent}: the provider refused the call ({error.status_code}, {detail or error.message}); new session")


class WritingAgent:
    """Adds a long note every turn; its context soon needs a summary, which always fails."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self.client = client
        self.history: list[MessageParam] = []
        self.notes = itertools.count(1)

    def turn(self) -> None:
        n = next(self.notes)
        note = " ".join(f"FACT: chapter {n} paragraph {p} keeps the plot moving." for p in range(120))
        self.history.append({"role": "user", "content": f"Add note {n} to the draft. {note} words:20"})
        try:
            response = self.client.messages.create(model=MODEL, max_tokens=512, messages=self.history)
        except anthropic.APIStatusError as error:
            # With every summary failing, the breaker is open and the draft outgrows the model's real window:
            # the provider's rejection reaches the app, as it should. This app starts a new draft and runs on.
            rejected("writing agent", error)
            self.history = []
            return
        self.history.append(_assistant_turn(response))


class CodingAgent:
    """Reads one file per turn through a tool and resends its whole history on every call."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self.client = client
        self.history: list[MessageParam] = []
        self.paths = itertools.cycle(FILES)

    def turn(self) -> None:
        path = next(self.paths)
        # `tool:read_file{...}` tells the simulated model which tool to call.
        self.history.append({"role": "user", "content": f'Read {path}. tool:read_file{{"path": "{path}"}}'})
        while True:
            try:
                response = self.client.messages.create(
                    model=MODEL, max_tokens=512, system=CODING_RULES, tools=TOOLS, messages=self.history
                )
            except anthropic.APIStatusError as error:
                # Its breaker open, the session outgrew the window ("prompt is too long"): a new session.
                rejected("coding agent", error)
                self.history = []
                return
            self.history.append(_assistant_turn(response))
            calls = [block for block in response.content if block.type == "tool_use"]
            if not calls:
                return
            results: list[ToolResultBlockParam] = [
                {"type": "tool_result", "tool_use_id": c.id, "content": FILES.get(str(c.input.get("path")), "")}
                for c in calls
            ]
            self.history.append({"role": "user", "content": results})


class ChatAssistant:
    """Streams short answers; its cached system prompt starts with the current time (a cache breaker)."""

    def __init__(self, client: anthropic.Anthropic) -> None:
        self.client = client
        self.turns = 0

    def turn(self) -> None:
        self.turns += 1
        system: list[TextBlockParam] = [
            {
                "type": "text",
                "text": f"Current time: {time.time():.6f}\n{HOUSE_RULES}",
                "cache_control": {"type": "ephemeral"},
            }
        ]
        # A fresh short conversation each time (same first message, so the same derived conversation).
        messages: list[MessageParam] = [{"role": "user", "content": "What are the house rules? words:10"}]
        try:
            with self.client.messages.stream(model=MODEL, max_tokens=128, system=system, messages=messages) as stream:
                stream.get_final_text()
        except anthropic.APIStatusError as error:
            rejected("chat assistant", error)


def run(
    port: int, host: str, duration: float | None, pace: float, stop: threading.Event, model_window: int = 200_000
) -> None:
    tracer_provider, meter_provider = setup_telemetry(host, port)
    otel_context.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        auto_compact_window=WINDOW,
        microcompact=True,
        microcompact_clear_at_least=1_000,  # the small window's scale (default 5,000 tokens)
        summarizer=broken_summarizer,
        # Ask the (simulated) provider why a prompt's cache was missed: the dashboard's panels of the cache-break
        # detector's agreement with the provider have data too.
        cache_diagnostics=True,
    )
    print(f"metrics on http://{host}:{port}/metrics", flush=True)
    deadline = None if duration is None else time.monotonic() + duration
    try:
        with SimulatedProvider() as sim:
            sim.set_window(MODEL, model_window)
            client = sim.anthropic()
            agents = (WritingAgent(client), CodingAgent(client), ChatAssistant(client))
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                for agent in agents:
                    agent.turn()
                stop.wait(pace)
    finally:
        otel_context.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=9464, help="port of the /metrics endpoint (default 9464)")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve /metrics on (default 127.0.0.1)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--pace", type=float, default=0.5, help="seconds between turns (default 0.5)")
    parser.add_argument(
        "--model-window",
        type=int,
        default=200_000,
        help="the simulated model's real context window in tokens (default 200,000, the real one's); smaller: "
        "a conversation whose breaker is open outgrows it sooner",
    )
    args = parser.parse_args(argv)
    stop = threading.Event()

    def finish(signum: int, frame: object) -> None:
        # Ctrl-C or SIGTERM: the agents end their turn, then telemetry is flushed and shut down in run(). A
        # second Ctrl-C interrupts at once.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        stop.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C; telemetry is shut down in run()
        run(args.port, args.host, args.duration, args.pace, stop, args.model_window)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
