"""Added latency of otel-context versus the uninstrumented SDKs and the peer instrumentations.

Run on demand (never in the test suite):

    bash benchmarks/setup_peers.sh            # once: benchmarks/.venv-peers with the peers from PyPI
    .venv/bin/python benchmarks/overhead.py   # the table; --markdown FILE writes it as Markdown too

Method (the one the peers' own overhead studies used, so the numbers compare):

* The provider is otel-context's own simulated provider (``otel_context.testing.SimulatedProvider``), a real
  HTTP server on loopback. It runs in THIS process; every measured configuration runs in its OWN worker
  process (a fresh interpreter: no instrumentation leaks from one configuration into the next, and the
  server does not share the client's GIL).
* The real SDK clients (``max_retries=0``) make the calls. Each worker alternates blocks of uninstrumented
  calls with blocks of instrumented calls (``instrument()`` / ``uninstrument()`` between blocks), so drift of
  the machine hits both modes alike. An instrumentation whose ``uninstrument()`` does not remove it (found by
  counting spans in the baseline blocks) is measured sequentially instead: all baseline blocks, then
  instrument once; the table says which.
* OpenTelemetry SDK set up as an application would: ``TracerProvider`` + ``SimpleSpanProcessor`` with a
  counting no-op exporter, ``MeterProvider`` + ``InMemoryMetricReader``; passed explicitly to every
  instrumentor (no global provider, so the anthropic SDK's own native span stays off everywhere).
  Content capture is off for everyone (each project's default or switch).
* Per non-streaming call: ``perf_counter_ns`` around the SDK call. Per streamed chunk: the time between two
  consecutive chunks the iterator yields (the first one, which includes the server's time to first byte,
  excluded), over streams of a few hundred chunks. Medians; Δ = instrumented median - baseline median from
  the same process; ratio = instrumented / baseline.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_PYTHON = HERE / ".venv-peers" / "bin" / "python"

ANTHROPIC_MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o-mini"
#: Short answers for the per-call figure (the response size of the research's mock), long ones for streams.
CALL_PROMPT = "Say hello. words:20"
STREAM_PROMPT = "Tell a story. words:300"


@dataclass(frozen=True)
class Config:
    """One measured configuration: an instrumentation of one SDK, or otel-context in a given mode."""

    key: str
    provider: str  # "anthropic" | "openai"
    label: str
    package: str  # the distribution whose version the table shows
    needs_peers: bool


CONFIGS: tuple[Config, ...] = (
    Config("otel-context", "anthropic", "otel-context (defaults)", "otel-context", False),
    Config("otel-context-observe", "anthropic", "otel-context (compaction off)", "otel-context", False),
    Config(
        "otel-genai",
        "anthropic",
        "OpenTelemetry genai-anthropic",
        "opentelemetry-instrumentation-genai-anthropic",
        True,
    ),
    Config(
        "traceloop", "anthropic", "Traceloop (OpenLLMetry) anthropic", "opentelemetry-instrumentation-anthropic", True
    ),
    Config("otel-floor", "anthropic", "floor: span + 2 histograms, nothing else", "opentelemetry-sdk", False),
    Config(
        "otel-contract-floor",
        "anthropic",
        "contract floor: our span's attributes + 2 histograms, no logic",
        "opentelemetry-sdk",
        False,
    ),
    Config("otel-context", "openai", "otel-context (defaults)", "otel-context", False),
    Config("otel-context-observe", "openai", "otel-context (compaction off)", "otel-context", False),
    Config("otel-genai", "openai", "OpenTelemetry genai-openai", "opentelemetry-instrumentation-genai-openai", True),
    Config("traceloop", "openai", "Traceloop (OpenLLMetry) openai", "opentelemetry-instrumentation-openai", True),
    Config("otel-floor", "openai", "floor: span + 2 histograms, nothing else", "opentelemetry-sdk", False),
    Config(
        "otel-contract-floor",
        "openai",
        "contract floor: our span's attributes + 2 histograms, no logic",
        "opentelemetry-sdk",
        False,
    ),
)


# ------------------------------------------------------------------------------------------------------------
# Worker: runs in its own process, one configuration.
# ------------------------------------------------------------------------------------------------------------


class _Switch:
    """instrument()/uninstrument() of one configuration, with the OpenTelemetry providers it reports to."""

    def __init__(
        self, key: str, provider: str, tracer_provider: Any, meter_provider: Any, call: Callable[[], Any]
    ) -> None:
        self.key, self.provider = key, provider
        self.tp, self.mp = tracer_provider, meter_provider
        self._instrumentor: Any = None
        #: The contract floor writes the attributes otel-context writes for this very call.
        self._chat_attributes = chat_span_attributes(call) if key == "otel-contract-floor" else None

    def on(self) -> None:
        if self.key in ("otel-floor", "otel-contract-floor"):
            self._instrumentor = _Floor(self.provider, self.tp, self.mp, self._chat_attributes)
            return
        if self.key.startswith("otel-context"):
            import otel_context

            settings: dict[str, Any] = {}
            if self.key == "otel-context-observe":
                settings["compaction"] = "off"
            otel_context.instrument(tracer_provider=self.tp, meter_provider=self.mp, **settings)  # type: ignore[attr-defined]
            return
        if self._instrumentor is None:
            self._instrumentor = _peer_instrumentor(self.key, self.provider)
        self._instrumentor.instrument(tracer_provider=self.tp, meter_provider=self.mp)

    def off(self) -> None:
        if self.key in ("otel-floor", "otel-contract-floor"):
            self._instrumentor.remove()
            return
        if self.key.startswith("otel-context"):
            import otel_context

            otel_context.uninstrument()  # type: ignore[attr-defined]
            return
        self._instrumentor.uninstrument()


def floor_wrapper(provider: str, tracer_provider: Any, meter_provider: Any) -> Callable[..., Any]:
    """The floor's work around one SDK call, as a wrapt wrapper ``(wrapped, instance, args, kwargs)``: what
    otel-context's telemetry costs with no logic at all. It starts the span with as many attributes as a real
    chat span (21), makes it current for the call, records the two histograms every chat call records (duration
    with 6 attributes, context utilization with 2) and ends the span. The four token counters are left out
    (otel-context sums them in process). No response is read. (``call_path.py`` uses it too.)"""
    from opentelemetry import context, trace

    tracer = tracer_provider.get_tracer("floor")
    meter = meter_provider.get_meter("floor")
    duration = meter.create_histogram("floor.duration", unit="s")
    utilization = meter.create_histogram("floor.utilization", unit="1")
    span_attributes = {f"floor.attribute_{i}": i for i in range(21)}
    metric_attributes = {f"floor.metric_{i}": "value" for i in range(6)}
    small = {"floor.provider": provider, "floor.model": "model"}

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        start = time.perf_counter()
        span = tracer.start_span("chat model", attributes=span_attributes)
        token = context.attach(trace.set_span_in_context(span))
        try:
            return wrapped(*args, **kwargs)
        finally:
            context.detach(token)
            utilization.record(0.5, small)
            duration.record(time.perf_counter() - start, metric_attributes)
            span.end()

    return wrapper


def chat_span_attributes(call: Callable[[], Any]) -> dict[str, Any]:
    """The attributes otel-context puts on the chat span of ``call`` once its conversation is under way (the
    second call: what every later one writes), read from a real instrumented call with private providers."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel_context

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel_context.instrument(tracer_provider=tracer_provider, meter_provider=MeterProvider())  # type: ignore[attr-defined]
    try:
        call()
        call()
    finally:
        otel_context.uninstrument()  # type: ignore[attr-defined]
    return dict(exporter.get_finished_spans()[-1].attributes or {})


def contract_floor_wrapper(tracer_provider: Any, meter_provider: Any, attributes: dict[str, Any]) -> Callable[..., Any]:
    """The OpenTelemetry SDK work the telemetry contract itself asks of one chat call, with no logic at all:
    the chat span with ``attributes`` (the very keys, values and types otel-context writes for this call, see
    :func:`chat_span_attributes`), those that describe the request given when the span starts and the others
    written in one call at its end (as otel-context does), and the two histograms of every chat call (duration
    and context utilization, with the contract's metric attributes) recorded in the span's context, so their
    exemplars are sampled as otel-context's are. The token counters are left out (otel-context sums them in
    process). What otel-context costs above this is its own code: the conversation, the engine, the reading
    of the request and the response."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    from otel_context import semconv

    tracer = tracer_provider.get_tracer("contract-floor")
    meter = meter_provider.get_meter("contract-floor")
    duration = meter.create_histogram(semconv.METRIC_INFERENCE_DURATION, unit="s")
    utilization = meter.create_histogram(semconv.METRIC_CONTEXT_UTILIZATION, unit="1")
    request_keys = {
        semconv.GEN_AI_OPERATION_NAME,
        semconv.GEN_AI_PROVIDER_NAME,
        semconv.SERVER_ADDRESS,
        semconv.SERVER_PORT,
        semconv.GEN_AI_REQUEST_MODEL,
        semconv.GEN_AI_REQUEST_STREAM,
        semconv.GEN_AI_REQUEST_MAX_TOKENS,
        semconv.GEN_AI_REQUEST_TEMPERATURE,
        semconv.GEN_AI_REQUEST_TOP_P,
    }
    at_start = {k: v for k, v in attributes.items() if k in request_keys}
    at_end = {k: v for k, v in attributes.items() if k not in request_keys}
    metric_keys = (
        semconv.GEN_AI_OPERATION_NAME,
        semconv.GEN_AI_PROVIDER_NAME,
        semconv.GEN_AI_REQUEST_MODEL,
        semconv.SERVER_ADDRESS,
        semconv.GEN_AI_RESPONSE_MODEL,
    )
    metric_attributes = {k: attributes[k] for k in metric_keys if k in attributes}
    utilization_keys = (semconv.GEN_AI_PROVIDER_NAME, semconv.GEN_AI_REQUEST_MODEL)
    utilization_attributes = {k: attributes[k] for k in utilization_keys if k in attributes}
    name = f"{attributes.get(semconv.GEN_AI_OPERATION_NAME)} {attributes.get(semconv.GEN_AI_REQUEST_MODEL)}"
    ratio = attributes.get(semconv.CONTEXT_UTILIZATION, 0.5)

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        start = time.perf_counter()
        span = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=dict(at_start))
        span_context = trace.set_span_in_context(span)
        token = context.attach(span_context)
        try:
            return wrapped(*args, **kwargs)
        finally:
            context.detach(token)
            span.set_attributes(dict(at_end))
            utilization.record(ratio, utilization_attributes, context=span_context)
            duration.record(time.perf_counter() - start, metric_attributes, context=span_context)
            span.end()

    return wrapper


class _Floor:
    """A floor wrapper on the same choke point as otel-context's (the SDK's ``SyncAPIClient.request``):
    :func:`floor_wrapper`, or :func:`contract_floor_wrapper` when given the chat span's attributes."""

    def __init__(
        self, provider: str, tracer_provider: Any, meter_provider: Any, attributes: dict[str, Any] | None = None
    ) -> None:
        import wrapt

        module = importlib.import_module(f"{provider}._base_client")
        self.cls = module.SyncAPIClient
        self.original = self.cls.__dict__["request"]
        if attributes is None:
            wrapper = floor_wrapper(provider, tracer_provider, meter_provider)
        else:
            wrapper = contract_floor_wrapper(tracer_provider, meter_provider, attributes)
        wrapt.wrap_function_wrapper(self.cls, "request", wrapper)

    def remove(self) -> None:
        self.cls.request = self.original


def _peer_instrumentor(key: str, provider: str) -> Any:
    if key == "otel-genai" and provider == "anthropic":
        from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor

        return AnthropicInstrumentor()
    if key == "otel-genai" and provider == "openai":
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

        return OpenAIInstrumentor()
    if key == "traceloop" and provider == "anthropic":
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as TLAnthropic

        return TLAnthropic()
    if key == "traceloop" and provider == "openai":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as TLOpenAI

        return TLOpenAI()
    raise SystemExit(f"unknown configuration {key}/{provider}")


def _providers() -> tuple[Any, Any, Callable[[], int]]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class CountingExporter(SpanExporter):
        """Counts spans and drops them: the exporter's own cost stays out of the comparison."""

        def __init__(self) -> None:
            self.count = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.count += len(spans)
            return SpanExportResult.SUCCESS

    exporter = CountingExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return tracer_provider, meter_provider, lambda: exporter.count


def _calls(provider: str, base_url: str) -> tuple[Callable[[], None], Callable[[], list[tuple[int, int]]]]:
    """(one non-streaming call, one stream returning its chunk gaps in ns)."""
    if provider == "anthropic":
        import anthropic
        from anthropic.types import MessageParam

        a_client = anthropic.Anthropic(base_url=base_url, api_key="bench-key", max_retries=0)
        call_messages: list[MessageParam] = [{"role": "user", "content": CALL_PROMPT}]
        stream_messages: list[MessageParam] = [{"role": "user", "content": STREAM_PROMPT}]

        def a_call() -> None:
            a_client.messages.create(model=ANTHROPIC_MODEL, max_tokens=1024, messages=call_messages)

        def a_stream() -> list[tuple[int, int]]:
            stream = a_client.messages.create(
                model=ANTHROPIC_MODEL,
                max_tokens=4096,
                messages=stream_messages,
                stream=True,
            )
            return _gaps(stream)

        return a_call, a_stream

    import openai
    from openai.types.chat import ChatCompletionMessageParam

    o_client = openai.OpenAI(base_url=base_url + "/v1", api_key="bench-key", max_retries=0)
    o_call_messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": CALL_PROMPT}]
    o_stream_messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": STREAM_PROMPT}]

    def o_call() -> None:
        o_client.chat.completions.create(model=OPENAI_MODEL, messages=o_call_messages)

    def o_stream() -> list[tuple[int, int]]:
        stream = o_client.chat.completions.create(
            model=OPENAI_MODEL,
            messages=o_stream_messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        return _gaps(stream)

    return o_call, o_stream


def _gaps(stream: Any) -> list[tuple[int, int]]:
    """(wall ns, thread-CPU ns) between consecutive chunks of ``stream``."""
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    gaps: list[tuple[int, int]] = []
    last_wall, last_cpu = wall(), cpu()
    for _ in stream:
        now_wall, now_cpu = wall(), cpu()
        gaps.append((now_wall - last_wall, now_cpu - last_cpu))
        last_wall, last_cpu = now_wall, now_cpu
    return gaps[1:]  # the first gap is the server's time to first byte, not per-chunk work


CLOCKS = ("wall", "cpu")


def _stats(blocks: dict[str, list[list[int]]]) -> dict[str, Any]:
    base = statistics.median(x for b in blocks["base"] for x in b) / 1000
    inst = statistics.median(x for b in blocks["inst"] for x in b) / 1000
    # Paired per-round deltas: robust to load drifting between rounds (other processes on the machine).
    paired = sorted(
        (statistics.median(i) - statistics.median(b)) / 1000
        for b, i in zip(blocks["base"], blocks["inst"], strict=False)
    )
    q = statistics.quantiles(paired, n=4) if len(paired) >= 2 else [paired[0]] * 3
    return {
        "base_us": base,
        "inst_us": inst,
        "delta_us": statistics.median(paired),
        "delta_pooled_us": inst - base,
        "delta_iqr_us": (q[0], q[2]),
        "ratio": inst / base if base else float("nan"),
    }


class _Samples:
    """Timings of one measure (per call or per chunk) in both modes and on both clocks, kept per block.

    Two clocks because this machine is shared: wall time is the latency a user sees, but it also holds every
    wait for a CPU that other processes took; the client thread's CPU time holds only the work done in it,
    which is where an instrumentation's cost is (its wrappers run synchronously in the calling thread).
    """

    def __init__(self) -> None:
        self.blocks: dict[str, dict[str, list[list[int]]]] = {c: {"base": [], "inst": []} for c in CLOCKS}
        self.calls = {"base": 0, "inst": 0}
        self.spans = {"base": 0, "inst": 0}
        self.chunks_per_stream: list[int] = []

    def summary(self, mode: str) -> dict[str, Any]:
        return {
            **{c: _stats(self.blocks[c]) for c in CLOCKS},
            "n": sum(len(b) for b in self.blocks["wall"]["inst"]),
            "spans_per_call": self.spans["inst"] / max(self.calls["inst"], 1),
            "baseline_spans": self.spans["base"],
            "chunks_per_stream": statistics.median(self.chunks_per_stream) if self.chunks_per_stream else None,
            "mode": mode,
        }


def _block(
    samples: _Samples, mode: str, run: Callable[[], Any], size: int, spans: Callable[[], int], per_chunk: bool
) -> None:
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    gc.collect()
    before = spans()
    walls: list[int] = []
    cpus: list[int] = []
    for _ in range(size):
        if per_chunk:
            gaps = run()
            walls.extend(g[0] for g in gaps)
            cpus.extend(g[1] for g in gaps)
            samples.chunks_per_stream.append(len(gaps) + 1)
        else:
            start_wall, start_cpu = wall(), cpu()
            run()
            cpus.append(cpu() - start_cpu)
            walls.append(wall() - start_wall)
    samples.blocks["wall"][mode].append(walls)
    samples.blocks["cpu"][mode].append(cpus)
    samples.calls[mode] += size
    samples.spans[mode] += spans() - before


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "NO_CONTENT")
    os.environ["TRACELOOP_TRACE_CONTENT"] = "false"
    os.environ["ANTHROPIC_OPEN_TELEMETRY"] = "false"  # the SDK's native span: off in every configuration
    import warnings

    warnings.simplefilter("ignore")  # model deprecation warnings: once is noise, per call would be a cost
    tracer_provider, meter_provider, spans = _providers()
    call, stream = _calls(args.provider, args.base_url)
    switch = _Switch(args.config, args.provider, tracer_provider, meter_provider, call)
    measures = (("call", call, args.block, False), ("stream", stream, args.stream_block, True))
    results = {name: _Samples() for name, *_ in measures}

    def warm() -> None:
        for _ in range(args.warmup):
            call()
        for _ in range(3):
            stream()

    warm()
    if args.sequential:
        # uninstrument() does not work for this one: every baseline block first, then instrument once
        # (instrumenting twice would stack its wrappers and double its cost).
        for name, run, size, per_chunk in measures:
            for _ in range(args.rounds):
                _block(results[name], "base", run, size, spans, per_chunk)
        switch.on()
        warm()
        for name, run, size, per_chunk in measures:
            for _ in range(args.rounds):
                _block(results[name], "inst", run, size, spans, per_chunk)
        mode = "sequential"
    else:
        switch.on()
        warm()
        switch.off()
        before = spans()
        call()
        if spans() != before:  # uninstrument() left the wrapper in place: the orchestrator re-runs us
            print(json.dumps({"needs_sequential": True}))
            return
        for name, run, size, per_chunk in measures:
            for _ in range(args.rounds):
                _block(results[name], "base", run, size, spans, per_chunk)
                switch.on()
                try:
                    _block(results[name], "inst", run, size, spans, per_chunk)
                finally:
                    switch.off()
        mode = "interleaved"
    print(
        json.dumps(
            {
                "config": args.config,
                "provider": args.provider,
                "version": _version(args.package),
                "call": results["call"].summary(mode),
                "stream": results["stream"].summary(mode),
                "uninstrument_works": not args.sequential,
            }
        )
    )


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


# ------------------------------------------------------------------------------------------------------------
# Orchestrator: the simulated provider in this process, one worker process per configuration.
# ------------------------------------------------------------------------------------------------------------


def _python_for(config: Config) -> str | None:
    if PEERS_PYTHON.exists():
        return str(PEERS_PYTHON)  # everyone on the same SDK and OpenTelemetry versions
    return None if config.needs_peers else sys.executable


def _run_config(config: Config, base_url: str, args: argparse.Namespace) -> dict[str, Any] | str:
    python = _python_for(config)
    if python is None:
        return "not installed (run benchmarks/setup_peers.sh)"
    cmd = [
        python,
        str(Path(__file__).resolve()),
        "--worker",
        "--config", config.key,
        "--provider", config.provider,
        "--package", config.package,
        "--base-url", base_url,
        "--rounds", str(args.rounds),
        "--block", str(args.block),
        "--stream-block", str(args.stream_block),
        "--warmup", str(args.warmup),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for attempt in (cmd, [*cmd, "--sequential"]):
        proc = subprocess.run(attempt, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return f"failed: {last[:200]}"
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        if not result.get("needs_sequential"):
            return result
    return "failed: no result"


def _delta(m: dict[str, Any], digits: int) -> str:
    lo, hi = m["delta_iqr_us"]
    return f"**{m['delta_us']:+.{digits}f}** ({lo:+.{digits}f}…{hi:+.{digits}f})"


def table(results: list[tuple[Config, dict[str, Any] | str]]) -> str:
    lines = [
        "| SDK | instrumentation | version | baseline µs/call (wall / CPU) | Δ wall µs/call | Δ CPU µs/call "
        "| baseline µs/chunk (wall / CPU) | Δ wall µs/chunk | Δ CPU µs/chunk | spans/call | mode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, result in results:
        if isinstance(result, str):
            lines.append(f"| {config.provider} | {config.label} | | {result} | | | | | | | |")
            continue
        c, s = result["call"], result["stream"]
        mode = c["mode"] + ("" if result["uninstrument_works"] else " (its uninstrument() is a no-op)")
        lines.append(
            f"| {config.provider} | {config.label} | {result['version']} "
            f"| {c['wall']['base_us']:.0f} / {c['cpu']['base_us']:.0f} | {_delta(c['wall'], 0)} | {_delta(c['cpu'], 0)} "
            f"| {s['wall']['base_us']:.1f} / {s['cpu']['base_us']:.1f} | {_delta(s['wall'], 1)} | {_delta(s['cpu'], 1)} "
            f"| {c['spans_per_call']:.2f} | {mode} |"
        )
    return "\n".join(lines)


#: The configurations otel-context is compared with (the floor is a yardstick, not a peer).
PEER_KEYS = ("otel-genai", "traceloop")


#: The standing targets (issue 15): per call at most 0.8x the best peer's added latency (aim: at most 2x the
#: floor), per streamed chunk at most a third of it.
TARGET_RATIO = {"call": 0.8, "stream": 1 / 3}
FLOOR_AIM = 2.0


def verdict(results: list[tuple[Config, dict[str, Any] | str]], clock: str) -> list[str]:
    """otel-context (defaults, and compaction off) against the best peer's added latency and the floor, per
    SDK and measure: the ratios, and whether the standing targets are met."""
    out = []
    for provider in ("anthropic", "openai"):
        peers = [
            (c.label, r) for c, r in results if c.provider == provider and c.key in PEER_KEYS and isinstance(r, dict)
        ]
        floor = next((r for c, r in results if c.provider == provider and c.key == "otel-floor"), None)
        contract = next((r for c, r in results if c.provider == provider and c.key == "otel-contract-floor"), None)
        for key in ("otel-context", "otel-context-observe"):
            ours = next((r for c, r in results if c.provider == provider and c.key == key), None)
            name = "otel-context" if key == "otel-context" else "otel-context (compaction off)"
            if not isinstance(ours, dict) or not peers:
                out.append(f"{provider} {name}: no comparison (a configuration did not run)")
                continue
            for measure, unit in (("call", "µs/call"), ("stream", "µs/chunk")):
                label, best = min(((lbl, p[measure][clock]["delta_us"]) for lbl, p in peers), key=lambda x: x[1])
                mine = ours[measure][clock]["delta_us"]
                ratio = TARGET_RATIO[measure]
                if best <= 0:
                    state = "INCONCLUSIVE (the best peer's Δ is within noise)"
                else:
                    state = f"{mine / best:.2f}x the best peer, target ≤ {ratio:.2f}x: " + (
                        "MET" if mine <= best * ratio else "NOT MET"
                    )
                line = (
                    f"{provider} {measure} ({clock}) {name}: {mine:+.1f} {unit}; best peer {label} {best:+.1f}; {state}"
                )
                if isinstance(floor, dict) and floor[measure][clock]["delta_us"] > 0:
                    bare = floor[measure][clock]["delta_us"]
                    line += f"; {mine / bare:.2f}x the floor ({bare:+.1f})" + (
                        f", aim ≤ {FLOOR_AIM:.0f}x" if measure == "call" else ""
                    )
                if measure == "call" and isinstance(contract, dict) and best > 0:
                    # What the contract's own telemetry costs, and what is left for otel-context's code.
                    owed = contract[measure][clock]["delta_us"]
                    line += (
                        f"; contract floor {owed:+.1f}, our code {mine - owed:+.1f} above it"
                        f" (the target leaves {best * ratio - owed:+.1f})"
                    )
                out.append(line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--provider", help=argparse.SUPPRESS)
    parser.add_argument("--package", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--sequential", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=20, help="alternating block pairs per configuration")
    parser.add_argument("--block", type=int, default=100, help="non-streaming calls per block")
    parser.add_argument("--stream-block", type=int, default=5, help="streams per block")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up calls per mode")
    parser.add_argument("--only", nargs="*", default=None, help="configuration keys to run (default: all)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    from otel_context.testing import SimulatedProvider

    results: list[tuple[Config, dict[str, Any] | str]] = []
    load_start = os.getloadavg()[0]  # other work on the machine is the main source of noise: say how much
    with SimulatedProvider() as sim:
        for config in CONFIGS:
            if args.only and config.key not in args.only:
                continue
            print(f"… {config.provider}: {config.label}", file=sys.stderr, flush=True)
            results.append((config, _run_config(config, sim.base_url, args)))
            sim.clear()
    text = table(results)
    env = (
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, peers venv: "
        f"{'yes' if PEERS_PYTHON.exists() else 'no'}, load average at start/end: {load_start:.1f}/{os.getloadavg()[0]:.1f}"
    )
    print(text)
    print()
    verdicts = verdict(results, "cpu") + verdict(results, "wall")
    for line in verdicts:
        print(line)
    print(env)
    if args.markdown:
        args.markdown.write_text(text + "\n\n" + "\n".join(f"* {v}" for v in verdicts) + f"\n\n{env}\n")


if __name__ == "__main__":
    main()
