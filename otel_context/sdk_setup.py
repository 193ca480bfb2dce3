"""Configure the OpenTelemetry SDK from the standard ``OTEL_*`` variables, only when the app has not.

``import otel_context.auto`` calls :func:`configure_from_env` so that one import is enough to see traces
in Jaeger. It never replaces a provider the app (or ``opentelemetry-instrument`` with a distro) already
set. What it honours:

- ``OTEL_SDK_DISABLED=true``: configure nothing;
- ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES`` (through ``Resource.create``);
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: comma-separated names, ``none`` for nothing;
  default ``otlp`` (the OpenTelemetry specification's default);
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL``: ``http/protobuf``
  (default, as the specification says) or ``grpc``;
- ``OTEL_EXPORTER_OTLP_ENDPOINT``, headers, timeouts, ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``:
  read by the exporters and processors themselves.
Exporters are found through the ``opentelemetry_{traces,metrics}_exporter`` entry points, as the SDK's
own auto-configuration does, so a third-party exporter name works too.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import metrics, trace

__all__ = ["configure_from_env", "meter_provider_is_set", "tracer_provider_is_set"]

log = logging.getLogger("otel_context")

_PROTOCOLS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}


def tracer_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def meter_provider_is_set() -> bool:
    return type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"


def _exporter_names(signal: str) -> list[str]:
    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names or names == ["none"]:
        return []
    protocol = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    resolved = []
    for name in names:
        if name == "none":
            continue
        if name == "otlp":
            if protocol not in _PROTOCOLS:
                raise ValueError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; use one of {', '.join(_PROTOCOLS)}"
                )
            name = _PROTOCOLS[protocol]
        resolved.append(name)
    return resolved


def _load_exporter(group: str, name: str) -> Any:
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ValueError(f"no OpenTelemetry exporter named {name!r} is installed (entry point group {group})")
    return found[0].load()()


def configure_from_env() -> tuple[bool, bool]:
    """Set the global tracer/meter providers from the environment where none is set; (traces, metrics) done."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, False
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    traces_done = metrics_done = False
    if not tracer_provider_is_set():
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider = TracerProvider(resource=resource)
        for name in _exporter_names("traces"):
            try:
                tracer_provider.add_span_processor(
                    BatchSpanProcessor(_load_exporter("opentelemetry_traces_exporter", name))
                )
            except Exception as exc:  # a missing exporter must not stop the app
                log.warning("otel_context: trace exporter %r not configured: %s", name, exc)
        trace.set_tracer_provider(tracer_provider)
        traces_done = True
    if not meter_provider_is_set():
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

        readers: list[MetricReader] = []
        for name in _exporter_names("metrics"):
            try:
                exporter = _load_exporter("opentelemetry_metrics_exporter", name)
                readers.append(
                    exporter if isinstance(exporter, MetricReader) else PeriodicExportingMetricReader(exporter)
                )
            except Exception as exc:
                log.warning("otel_context: metric exporter %r not configured: %s", name, exc)
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
        metrics_done = True
    return traces_done, metrics_done
