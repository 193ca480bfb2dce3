"""Shared helpers of the compactor's unit tests: OpenTelemetry in memory, history builders, fake summarizers.

The fake summarizers fake the LLM's ANSWER (the text a summarizer model would write), never an SDK: the
unit tests drive the engine's generators directly; the end-to-end tests use the real SDKs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_context import semconv, telemetry
from otel_context.flow import SummaryRequest, SummaryResult
from otel_context.usage import TokenUsage


@dataclass
class Otel:
    """In-memory spans and metrics for one test."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def compact_spans(self) -> list[ReadableSpan]:
        return self.spans(semconv.COMPACT_SPAN)

    def metric_points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        if data is None:
            return points
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points

    def counter_value(self, name: str, **attrs: Any) -> float:
        total = 0.0
        for point in self.metric_points(name):
            if all(point.attributes.get(k) == v for k, v in attrs.items()):
                total += point.value
        return total


def make_otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Otel(exporter, reader, tracer_provider, meter_provider)
    finally:
        telemetry._current = None
        tracer_provider.shutdown()
        meter_provider.shutdown()


@dataclass
class FakeSummarizer:
    """Answers summary requests like a model would; records every request; can fail or overflow on demand."""

    fail: int = 0  #: fail this many calls (then answer)
    too_long: int = 0  #: answer "too long" this many calls first
    text: str = "<analysis>reviewed</analysis>\n<summary>1. Primary request: build the thing.\nFACT: kept</summary>"
    output_tokens: int = 120
    requests: list[Mapping[str, Any]] = field(default_factory=list)

    def __call__(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request.body)
        if self.too_long > 0:
            self.too_long -= 1
            return SummaryResult(error=RuntimeError("prompt is too long: 31000 tokens > 30000 maximum"), too_long=True)
        if self.fail > 0:
            self.fail -= 1
            return SummaryResult(error=RuntimeError("summarizer down"))
        return SummaryResult(text=self.text, usage=TokenUsage(input_tokens=1000, output_tokens=self.output_tokens))

    @property
    def calls(self) -> int:
        return len(self.requests)


# --- histories ---------------------------------------------------------------------------------------------


def anthropic_agent(
    turns: int, result_chars: int = 3000, first: str = "Build a CLI in Rust. FACT: use clap"
) -> list[dict[str, Any]]:
    """An Anthropic tool loop: per turn a user ask, a read_file call, its result, and an answer."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": first if t == 0 else f"Turn {t}: read the next file"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading f{t}.py"},
                    {"type": "tool_use", "id": f"toolu_{t:03d}", "name": "read_file", "input": {"path": f"f{t}.py"}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{t:03d}",
                        "content": f"# f{t}.py\n" + "x = 1\n" * (result_chars // 6),
                    }
                ],
            }
        )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"f{t}.py sets x."}]})
    return messages


def openai_chat_agent(
    turns: int, result_chars: int = 3000, first: str = "Build a CLI in Rust. FACT: use clap"
) -> list[dict[str, Any]]:
    """The same loop in the OpenAI chat format."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": first if t == 0 else f"Turn {t}: read the next file"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{t:03d}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path": "f{t}.py"}}'},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{t:03d}",
                "content": f"# f{t}.py\n" + "x = 1\n" * (result_chars // 6),
            }
        )
        messages.append({"role": "assistant", "content": f"f{t}.py sets x."})
    return messages
