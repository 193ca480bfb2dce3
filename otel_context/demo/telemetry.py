"""OpenTelemetry SDK wiring for the demo: always in memory (for the terminal summary), OTLP when asked.

The demo is an application, so it sets up its own providers, as an app would, before instrumenting:

* always: an in-memory span exporter behind a synchronous processor (the terminal summary reads finished
  spans right after each turn) and an in-memory metric reader;
* with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces/metrics-specific variables) set: spans and metrics go
  there too, batched, over HTTP (the default) or gRPC as ``OTEL_EXPORTER_OTLP_PROTOCOL`` says, so a run
  appears in Jaeger/Tempo/Grafana;
* ``--json FILE``: the finished spans, as OpenTelemetry's own JSON rendering, written at shutdown.

Providers are created here and passed to ``otel_context.instrument``; the global providers are left alone,
so running the demo in-process (tests) does not leak a provider into the host process.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_context import sdk_setup

__all__ = ["DemoTelemetry", "TelemetrySetupError", "otlp_target", "preflight", "setup", "span_to_dict"]

DEFAULT_SERVICE_NAME = "otel-context-demo"
_ENDPOINT_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


class TelemetrySetupError(ValueError):
    """The environment or ``--json`` asks for something the demo cannot do; the message says what."""


def otlp_target(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(endpoint, protocol) when the environment asks for OTLP export, else None; raises
    :class:`TelemetrySetupError` for a protocol or an endpoint the exporters cannot use (one line saying what
    would do), as ``import otel_context.auto`` reads them (:mod:`otel_context.sdk_setup`).
    """
    endpoint = next((env[v].strip() for v in _ENDPOINT_VARS if env.get(v, "").strip()), None)
    if endpoint is None:
        return None
    protocols = [_protocol(signal, env) for signal in _SIGNALS]
    for signal, protocol in zip(_SIGNALS, protocols, strict=True):
        problem = sdk_setup.endpoint_problem(signal, protocol, env)
        if problem is not None:
            raise TelemetrySetupError(problem)
    return endpoint, protocols[0]


_SIGNALS = ("traces", "metrics")
#: What to do when no collector listens at the endpoint (the warning's last words).
_ADVICE = "start it first, or leave OTEL_EXPORTER_OTLP_ENDPOINT unset: the demo prints its own summary"


def _protocol(signal: str, env: Mapping[str, str]) -> str:
    try:
        return sdk_setup.otlp_protocol(signal, env, strict=True)
    except ValueError as exc:
        raise TelemetrySetupError(str(exc)) from None


@dataclass
class DemoTelemetry:
    """The providers the demo instruments with, and where its spans can be read back."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    otlp: tuple[str, str] | None = None
    json_path: Path | None = None
    _closed: bool = field(default=False, repr=False)
    #: OTLP exports by signal ("spans", "metrics"), so that the last line does not say "exported" when the
    #: collector refused every batch (a traces-only endpoint answers metrics with 405) or was not there.
    exports: dict[str, sdk_setup.ExportTally] = field(default_factory=dict)
    #: The time the exports may still take once the run is over (a collector that never answers).
    budget: sdk_setup.ExitBudget = field(default_factory=sdk_setup.ExitBudget)

    def metric_totals(self) -> dict[str, float]:
        """Sum of every counter's data points by metric name, read from the in-memory reader now."""
        from opentelemetry.sdk.metrics.export import Sum

        totals: dict[str, float] = {}
        data = self.metrics.get_metrics_data()
        for resource_metrics in data.resource_metrics if data is not None else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if isinstance(metric.data, Sum):
                        totals[metric.name] = totals.get(metric.name, 0) + sum(p.value for p in metric.data.data_points)
        return totals

    def histogram_by(self, name: str, attribute: str) -> dict[str, tuple[int, float]]:
        """(count, sum) of histogram ``name`` by the value of ``attribute``, read from the in-memory reader now."""
        from opentelemetry.sdk.metrics.export import Histogram

        found: dict[str, tuple[int, float]] = {}
        data = self.metrics.get_metrics_data()
        for resource_metrics in data.resource_metrics if data is not None else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name != name or not isinstance(metric.data, Histogram):
                        continue
                    for point in metric.data.data_points:
                        key = str((point.attributes or {}).get(attribute, ""))
                        count, total = found.get(key, (0, 0.0))
                        found[key] = (count + point.count, total + point.sum)
        return found

    def finished_spans(self) -> Sequence[ReadableSpan]:
        """Every span that has ended so far, oldest first."""
        return self.spans.get_finished_spans()

    def shutdown(self) -> None:
        """Flush everything (OTLP included), write ``--json``, then shut the providers down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.budget.start()
        try:
            self.tracer_provider.force_flush()
            self.meter_provider.force_flush()
            if self.json_path is not None:
                write_json(self.json_path, self.finished_spans())
        finally:
            self.tracer_provider.shutdown()
            self.meter_provider.shutdown()


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """One span as a JSON-ready dict (OpenTelemetry's own rendering, so tools that know it can read it)."""
    data: dict[str, Any] = json.loads(span.to_json(indent=None))
    return data


def write_json(path: Path, spans: Sequence[ReadableSpan]) -> None:
    """Write ``{"spans": [...]}``; the parent directory must exist (a clear error if not)."""
    payload = {"spans": [span_to_dict(s) for s in spans]}
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


def _otlp_exporter(signal: str, protocol: str) -> Any:
    if protocol == "grpc":
        if signal == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

            return GrpcSpans()
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics()
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        return HttpSpans()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics()


def preflight(json_path: Path | None = None, env: Mapping[str, str] | None = None) -> None:
    """Raise :class:`TelemetrySetupError` now for what :func:`setup` would refuse (before any output)."""
    if json_path is not None and not json_path.parent.exists():
        raise TelemetrySetupError(f"--json {json_path}: directory {json_path.parent} does not exist")
    otlp_target(os.environ if env is None else env)


def setup(json_path: Path | None = None, env: Mapping[str, str] | None = None) -> DemoTelemetry:
    """Create the demo's providers (see the module docstring). ``env`` defaults to ``os.environ``."""
    env = os.environ if env is None else env
    preflight(json_path, env)
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": DEFAULT_SERVICE_NAME}
    resource = Resource.create(attributes)  # merges OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))

    metrics = InMemoryMetricReader()
    readers: list[MetricReader] = [metrics]
    target = otlp_target(env)
    exports: dict[str, sdk_setup.ExportTally] = {}
    budget = sdk_setup.ExitBudget()
    for signal in _SIGNALS if target is not None else ():
        # OTEL_{TRACES,METRICS}_EXPORTER=none: that signal stays here (a viewer that takes traces only).
        if env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower() == "none":
            continue
        protocol = _protocol(signal, env)
        tally = exports.setdefault("spans" if signal == "traces" else "metrics", sdk_setup.ExportTally())
        exporter = sdk_setup.guarded(
            _otlp_exporter(signal, protocol),
            signal,
            protocol=protocol,
            budget=budget,
            tally=tally,
            env=env,
            advice=_ADVICE,
        )
        if signal == "traces":
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        else:
            readers.append(PeriodicExportingMetricReader(exporter, export_interval_millis=5_000))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    return DemoTelemetry(
        tracer_provider, meter_provider, spans, metrics, target, json_path, exports=exports, budget=budget
    )
