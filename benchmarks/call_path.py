"""Where otel-context's per-call cost goes, without the SDK's own work: the instrumented request path alone.

A profiling aid for ``benchmarks/overhead.py`` (run on demand, never in the test suite):

    .venv/bin/python benchmarks/call_path.py

Each configuration runs in its own process and calls the anthropic choke point (the interceptor's sync
driver, as the wrapper on ``SyncAPIClient.request`` does) with the arguments the SDK passes for
``messages.create`` (17 body keys, 14 of them not given), while the SDK's own request is replaced by
returning a recorded ``Message``: no HTTP, no parsing, so the differences are ours and the OpenTelemetry
SDK's only. Rows:

* ``floor``: the overhead benchmark's floor (a span with 21 attributes, current for the call, two
  histograms recorded outside it, the span ended);
* ``otel-context``: defaults;
* ``no engine``: the engine's plan replaced by the contract's no-op plan (what the engine costs, with its
  utilization histogram and span attributes);
* ``no exemplars``: defaults with ``OTEL_METRICS_EXEMPLAR_FILTER=always_off``.

It reaches into ``otel_context.instrumentation`` internals on purpose (the interceptor and its spec).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROWS = {
    "floor": {},
    "otel-context": {},
    "no engine": {},
    "no exemplars": {"OTEL_METRICS_EXEMPLAR_FILTER": "always_off"},
}
NOT_GIVEN_KEYS = [
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "metadata",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "thinking",
    "tool_choice",
    "tools",
]
RESPONSE = {
    "model": "claude-sonnet-4-6",
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "Simulated reply: a short answer of about twenty words."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 11,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 36,
        "service_tier": "standard",
    },
}


def _calls(row: str) -> Callable[[Any], Any]:
    from anthropic import Anthropic
    from anthropic.types import Message
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    message = Message.model_validate(RESPONSE)
    client = Anthropic(api_key="bench-key", base_url="http://127.0.0.1:9")

    def send(cast_to: Any, options: Any, **rest: Any) -> Any:
        return message

    if row == "floor":
        from overhead import floor_wrapper  # this folder: the same floor as the overhead benchmark's

        wrapper = floor_wrapper("anthropic", tracer_provider, meter_provider)
        return lambda options: wrapper(send, client, (Message, options), {"stream": False, "stream_cls": None})

    import otel_context
    from otel_context.instrumentation import anthropic as instrumented
    from otel_context.instrumentation._core import Interceptor
    from otel_context.settings import Settings

    otel_context.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    if row == "no engine":
        from otel_context import engine
        from otel_context.contract import CallPlan

        def no_op_plan(span: Any, request: Any) -> Any:
            return CallPlan(request.body)
            yield  # a generator, like the engine's plan

        engine.plan = no_op_plan  # type: ignore[assignment]
    interceptor = Interceptor(instrumented._spec(), Settings())

    def ours(options: Any) -> Any:
        return interceptor.sync_request(send, client, (Message, options), {"stream": False, "stream_cls": None})

    return ours


def _options() -> Any:
    from anthropic._models import FinalRequestOptions
    from anthropic._types import omit

    body: dict[str, Any] = {
        "max_tokens": 1024,
        "messages": _MESSAGES,
        "model": "claude-sonnet-4-6",
        **dict.fromkeys(NOT_GIVEN_KEYS, omit),
    }
    return FinalRequestOptions.construct(
        method="post", url="/v1/messages", json_data=body, headers={"anthropic-user-profile-id": omit}
    )


_MESSAGES = [{"role": "user", "content": "Say hello. words:20"}]


def worker(row: str, blocks: int, block: int, cpu: bool = False) -> None:
    call = _calls(row)
    clock = time.process_time_ns if cpu else time.perf_counter_ns
    for options in [_options() for _ in range(block)]:  # warm-up
        call(options)
    medians = []
    for _ in range(blocks):
        batch = [_options() for _ in range(block)]  # made outside the timed loop
        gc.collect()
        start = clock()
        for options in batch:
            call(options)
        medians.append((clock() - start) / block / 1000)
    print(json.dumps({"row": row, "median_us": statistics.median(medians), "min_us": min(medians)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--block", type=int, default=2000, help="calls per block")
    parser.add_argument(
        "--cpu", action="store_true", help="the process's CPU time instead of wall time (on a loaded machine)"
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.blocks, args.block, args.cpu)
        return
    print("| configuration | µs per call (median of block means) | min |")
    print("|---|---:|---:|")
    for row, env in ROWS.items():
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                row,
                "--blocks",
                str(args.blocks),
                "--block",
                str(args.block),
                *(["--cpu"] if args.cpu else []),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "ANTHROPIC_OPEN_TELEMETRY": "false", **env},
            check=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {row} | {result['median_us']:.1f} | {result['min_us']:.1f} |")


if __name__ == "__main__":
    main()
