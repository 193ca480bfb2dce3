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

A collector on this machine that is not running (the first try on a laptop: OTLP to ``localhost:4318`` by
default) would otherwise print a "Transient error ... Connection refused" line per export attempt and hold
the app's exit for about ten seconds of retries per signal. So an OTLP exporter whose endpoint is a
loopback address first checks that something listens there (a local TCP connect, well under a
millisecond); when nothing does, the batch is dropped at once and one warning line says so and how to get
a first look without a collector (``OTEL_TRACES_EXPORTER=console``). Remote endpoints keep the
exporter's own retries: there, a refused connection is an outage worth retrying through.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlsplit

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
                # A telemetry setting never stops the app: warn, and use the specification's default.
                log.warning(
                    "otel_context: OTEL_EXPORTER_OTLP_PROTOCOL=%r is not supported (use one of %s); using the "
                    "default (http/protobuf) instead",
                    protocol,
                    ", ".join(_PROTOCOLS),
                )
                protocol = "http/protobuf"
            name = _PROTOCOLS[protocol]
        resolved.append(name)
    return resolved


def _load_exporter(group: str, name: str) -> Any:
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ValueError(f"no OpenTelemetry exporter named {name!r} is installed (entry point group {group})")
    exporter = found[0].load()()
    if name in _PROTOCOLS.values():
        signal = "traces" if group == "opentelemetry_traces_exporter" else "metrics"
        endpoint = _local_endpoint(signal, grpc=name == _PROTOCOLS["grpc"])
        if endpoint is not None:
            return _gate(exporter, endpoint, signal)
    return exporter


#: Seconds to wait for a loopback connect (a listening port answers in microseconds).
_CONNECT_TIMEOUT = 0.25
_NO_COLLECTOR = (
    "otel_context: no OpenTelemetry collector listens at %s (%s), so spans and metrics are dropped until one "
    "does; start one, or for a first look without one set OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none"
)


def _local_endpoint(signal: str, *, grpc: bool) -> tuple[str, int, str] | None:
    """(host, port, url) of the OTLP endpoint when it is a loopback address (the only ones gated), else None."""
    url = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or ("http://localhost:4317" if grpc else "http://localhost:4318")
    ).strip()
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None  # the exporter reports a malformed endpoint itself
    if host is None:
        return None
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None  # a host name other than localhost: not gated
    return host, port, url


def _listening(host: str, port: int, url: str) -> bool:
    """Whether something accepts connections at host:port; the first refusal is logged once."""
    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT):
            return True
    except OSError as exc:
        from otel_context import telemetry

        telemetry.log_once("sdk_setup.no_collector", _NO_COLLECTOR, url, exc.strerror or type(exc).__name__)
        return False


def _gate(exporter: Any, endpoint: tuple[str, int, str], signal: str) -> Any:
    """``exporter`` behind the loopback check (see the module doc)."""
    if signal == "traces":
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        class GatedSpanExporter(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                if not _listening(*endpoint):
                    return SpanExportResult.FAILURE
                result: SpanExportResult = exporter.export(spans)
                return result

            def shutdown(self) -> None:
                exporter.shutdown()

            def force_flush(self, timeout_millis: int = 30_000) -> bool:
                return bool(exporter.force_flush(timeout_millis))

        return GatedSpanExporter()

    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

    class GatedMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=exporter._preferred_temporality,
                preferred_aggregation=exporter._preferred_aggregation,
            )

        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if not _listening(*endpoint):
                return MetricExportResult.FAILURE
            result: MetricExportResult = exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(exporter.force_flush(timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            exporter.shutdown(timeout_millis=timeout_millis, **kwargs)

    return GatedMetricExporter()


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
