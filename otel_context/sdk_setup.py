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

The OTLP exporters set up here (and by ``otel-context demo``, which shares :func:`guarded`) are guarded
against the three ways a first try goes wrong, each said in one line rather than a stream of the
exporter's own retries:

- **no collector running** on this machine (OTLP to ``localhost:4318`` by default): the exporter would print
  a "Transient error ... Connection refused" line per attempt and hold the app's exit for about ten seconds
  of retries per signal. So an exporter whose endpoint is a loopback address first checks that something
  listens there (a local TCP connect, well under a millisecond); when nothing does, the batch is dropped at
  once and one warning says so and how to get a first look without a collector. Remote endpoints keep the
  exporter's own retries: there, a refused connection is an outage worth retrying through;
- **a collector that accepts and never answers** (a hung proxy, a stopped container's port still
  forwarded): each export waits the exporter's timeout (10 s) and retries. While the app runs that happens on
  the SDK's own threads; at exit, it would hold the exit for each signal in turn. So once the app exits, the
  exports still to make get :data:`EXIT_SECONDS` in all (:class:`ExitBudget`), and what the collector did
  not take by then is dropped, said in one line;
- **the same under ``opentelemetry-instrument``**: there a distro's configurator sets the SDK up; once it has,
  :func:`guard_zero_code_setup` (an ``opentelemetry_post_instrument`` entry point) puts its OTLP exporters
  behind the same guards;
- **an endpoint or protocol that is no such thing** (``OTEL_EXPORTER_OTLP_ENDPOINT=notaurl``,
  ``OTEL_EXPORTER_OTLP_PROTOCOL=bogus``): one warning naming the variable, the value and what would do
  (:func:`otlp_protocol`, :func:`endpoint_problem`), rather than the exporter's error at every export.
"""

from __future__ import annotations

import atexit
import contextvars
import ipaddress
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry import metrics, trace

from otel_context import fork_safe

__all__ = [
    "EXIT_SECONDS",
    "ExitBudget",
    "ExportTally",
    "configure_from_env",
    "endpoint_problem",
    "guard_zero_code_setup",
    "guarded",
    "meter_provider_is_set",
    "otlp_protocol",
    "tracer_provider_is_set",
]

log = logging.getLogger("otel_context")

_PROTOCOLS = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
#: Where each signal's OTLP exporter sends by default (the specification's).
_DEFAULT_ENDPOINTS = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
#: Seconds the exports still to make at exit may take, all together (a collector answers in milliseconds).
EXIT_SECONDS = 2.0

_Result = TypeVar("_Result")


def tracer_provider_is_set() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def meter_provider_is_set() -> bool:
    return type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def otlp_protocol(signal: str, env: Mapping[str, str] | None = None, *, strict: bool = False) -> str:
    """The OTLP protocol of ``signal`` (``traces`` or ``metrics``): ``OTEL_EXPORTER_OTLP_{SIGNAL}_PROTOCOL``,
    else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf``. A value that is not a protocol is said once
    and the default used (a telemetry setting never stops the app); ``strict`` (a command line): ValueError."""
    env = _env(env)
    for var in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        raw = env.get(var, "").strip()
        if not raw:
            continue
        if raw.lower() in _PROTOCOLS:
            return raw.lower()
        problem = f"{var}={raw!r} is not supported; use one of {', '.join(_PROTOCOLS)}"
        if strict:
            raise ValueError(problem)
        from otel_context import telemetry

        telemetry.log_once(
            f"sdk_setup.protocol:{var}={raw}", "otel_context: %s; using the default (http/protobuf) instead", problem
        )
        break
    return "http/protobuf"


def endpoint_of(signal: str, protocol: str, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(variable, URL) of the endpoint ``signal``'s OTLP exporter sends to (the variable ``""`` for the
    default)."""
    env = _env(env)
    for var in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = env.get(var, "").strip()
        if value:
            return var, value
    return "", _DEFAULT_ENDPOINTS[protocol]


def endpoint_problem(signal: str, protocol: str, env: Mapping[str, str] | None = None) -> str | None:
    """What is wrong with the endpoint ``signal``'s OTLP exporter would send to, in one line with what would
    do; None when it is a URL the exporter can use. OTLP/HTTP needs ``http://`` or ``https://`` and a host;
    gRPC takes that or a bare ``host:port``."""
    var, url = endpoint_of(signal, protocol, env)
    try:
        parts = urlsplit(url if "://" in url or protocol != "grpc" else f"http://{url}")
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in url
        _ = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        usable = False
    if usable:
        return None
    example = _DEFAULT_ENDPOINTS[protocol]
    return f"{var}={url!r} is not an OTLP endpoint: with {protocol} it is the collector's URL, such as {example}"


def _exporter_names(signal: str) -> list[str]:
    raw = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "otlp")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names or names == ["none"]:
        return []
    resolved = []
    for name in names:
        if name == "none":
            continue
        if name == "otlp":
            protocol = otlp_protocol(signal)
            problem = endpoint_problem(signal, protocol)
            if problem is not None:
                from otel_context import telemetry

                telemetry.log_once(f"sdk_setup.endpoint:{problem}", "otel_context: %s; nothing is sent there", problem)
                continue
            name = _PROTOCOLS[protocol]
        resolved.append(name)
    return resolved


def _load_exporter(group: str, name: str, budget: ExitBudget) -> Any:
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ValueError(f"no OpenTelemetry exporter named {name!r} is installed (entry point group {group})")
    exporter = found[0].load()()
    if name in _PROTOCOLS.values():
        signal = "traces" if group == "opentelemetry_traces_exporter" else "metrics"
        return guarded(
            exporter, signal, protocol="grpc" if name == _PROTOCOLS["grpc"] else "http/protobuf", budget=budget
        )
    return exporter


#: Seconds to wait for a loopback connect (a listening port answers in microseconds).
_CONNECT_TIMEOUT = 0.25
_NO_COLLECTOR = (
    "otel_context: no OpenTelemetry collector listens at %s (%s), so spans and metrics are dropped until one does; %s"
)
#: What to do about it, for an app (the advice of :func:`guarded`'s callers may differ: the demo's does).
NO_COLLECTOR_ADVICE = (
    "start one, or for a first look without one set OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none"
)
_NO_ANSWER = (
    "otel_context: the OpenTelemetry collector at %s did not answer within %g s of the exit, so the spans and "
    "metrics it had not taken are dropped (OTEL_EXPORTER_OTLP_ENDPOINT names the collector)"
)


def _local_address(url: str) -> tuple[str, int] | None:
    """(host, port) of ``url`` when it is a loopback address (the only ones checked), else None."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host is None:
        return None
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None  # a host name other than localhost: not checked
    return host, port


def _listening(address: tuple[str, int], url: str, advice: str) -> bool:
    """Whether something accepts connections at ``address``; the first refusal is logged once."""
    try:
        with socket.create_connection(address, timeout=_CONNECT_TIMEOUT):
            return True
    except OSError as exc:
        from otel_context import telemetry

        reason = exc.strerror or type(exc).__name__
        telemetry.log_once("sdk_setup.no_collector", _NO_COLLECTOR, url, reason, advice)
        return False


@dataclass
class ExportTally:
    """What became of a guarded exporter's exports (the demo's closing line reads it)."""

    sent: int = 0
    #: The collector refused or failed them (the exporter logged why).
    failed: int = 0
    #: Dropped at once: nothing listened at the (loopback) endpoint.
    no_collector: int = 0
    #: Dropped at exit: the collector had not answered within :data:`EXIT_SECONDS`.
    unanswered: int = 0


class ExitBudget:
    """The time the exports of one setup may still take once its app exits: :data:`EXIT_SECONDS` in all,
    from :meth:`start` (at exit for ``import otel_context.auto``; the demo's end for the demo).

    Every export of a guarded exporter runs on a thread of its own that the exporting thread waits for: until
    it ends while the app runs (as the exporter alone), until the budget's end once the exit has begun, also
    for an export already under way then. An export still running at the end is left to finish or die with
    the process (a daemon thread), and reported as unanswered.
    """

    def __init__(self, seconds: float = EXIT_SECONDS) -> None:
        self.seconds = seconds
        self._changed = fork_safe.new_condition(self, "_changed")
        self._deadline: float | None = None

    def start(self) -> None:
        """The exit has begun: from now on exports get what is left of :attr:`seconds`."""
        with self._changed:
            if self._deadline is None:
                self._deadline = time.monotonic() + self.seconds
                self._changed.notify_all()

    def run(self, export: Callable[[], _Result]) -> tuple[bool, _Result | None]:
        """(whether it ended in time, its result) of ``export``, run as the class doc says."""
        with self._changed:
            if self._deadline is not None and self._deadline <= time.monotonic():
                return False, None
        outcome: list[Any] = []
        context = contextvars.copy_context()  # the SDK's "suppress instrumentation" key goes with the export

        def work() -> None:
            try:
                value: Any = (True, context.run(export))
            except BaseException as exc:
                value = (False, exc)
            with self._changed:
                outcome.append(value)
                self._changed.notify_all()

        threading.Thread(target=work, name="otel-context-export", daemon=True).start()
        with self._changed:
            while not outcome:
                left = None if self._deadline is None else self._deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False, None
                self._changed.wait(left)
        finished, value = outcome[0]
        if not finished:
            raise value
        return True, value


class _Guard:
    """The checks shared by a guarded span exporter and a guarded metric exporter (see the module doc)."""

    def __init__(self, url: str, budget: ExitBudget, tally: ExportTally, advice: str) -> None:
        self.url = url
        self.advice = advice
        self.local = _local_address(url)
        self.budget = budget
        self.tally = tally
        self.abandoned = False

    def export(self, send: Callable[[], _Result], success: _Result, failure: _Result) -> _Result:
        if self.local is not None and not _listening(self.local, self.url, self.advice):
            self.tally.no_collector += 1
            return failure
        ended, result = self.budget.run(send)
        if not ended:
            from otel_context import telemetry

            self.abandoned = True
            self.tally.unanswered += 1
            telemetry.log_once("sdk_setup.no_answer", _NO_ANSWER, self.url, self.budget.seconds)
            return failure
        if result == success:
            self.tally.sent += 1
        else:
            self.tally.failed += 1
        return result if result is not None else failure


def guarded(
    exporter: Any,
    signal: str,
    *,
    protocol: str,
    budget: ExitBudget,
    tally: ExportTally | None = None,
    env: Mapping[str, str] | None = None,
    advice: str = NO_COLLECTOR_ADVICE,
) -> Any:
    """``exporter``, an OTLP exporter of ``signal`` (``traces`` or ``metrics``) over ``protocol``, behind the
    collector checks of the module doc, its exports counted in ``tally``; ``advice``: what the warning says to
    do when no collector listens."""
    url = endpoint_of(signal, protocol, env)[1]
    guard = _Guard(url, budget, tally if tally is not None else ExportTally(), advice)
    if signal == "traces":
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        class GuardedSpanExporter(SpanExporter):
            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return guard.export(lambda: exporter.export(spans), SpanExportResult.SUCCESS, SpanExportResult.FAILURE)

            def shutdown(self) -> None:
                if not guard.abandoned:  # an export still waiting on the collector would only log its failure
                    exporter.shutdown()

            def force_flush(self, timeout_millis: int = 30_000) -> bool:
                return bool(exporter.force_flush(timeout_millis))

        return GuardedSpanExporter()

    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

    class GuardedMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=exporter._preferred_temporality,
                preferred_aggregation=exporter._preferred_aggregation,
            )

        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            return guard.export(
                lambda: exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
                MetricExportResult.SUCCESS,
                MetricExportResult.FAILURE,
            )

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(exporter.force_flush(timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            if not guard.abandoned:
                exporter.shutdown(timeout_millis=timeout_millis, **kwargs)

    return GuardedMetricExporter()


def configure_from_env() -> tuple[bool, bool]:
    """Set the global tracer/meter providers from the environment where none is set; (traces, metrics) done."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False, False
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    budget = ExitBudget()
    traces_done = metrics_done = False
    if not tracer_provider_is_set():
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider = TracerProvider(resource=resource)
        for name in _exporter_names("traces"):
            try:
                tracer_provider.add_span_processor(
                    BatchSpanProcessor(_load_exporter("opentelemetry_traces_exporter", name, budget))
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
                exporter = _load_exporter("opentelemetry_metrics_exporter", name, budget)
                readers.append(
                    exporter if isinstance(exporter, MetricReader) else PeriodicExportingMetricReader(exporter)
                )
            except Exception as exc:
                log.warning("otel_context: metric exporter %r not configured: %s", name, exc)
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
        metrics_done = True
    # After the providers, whose own exit handlers (flush, then shut down) run after this one (last in, first
    # out): their final exports get what is left of the budget.
    atexit.register(budget.start)
    return traces_done, metrics_done


def guard_zero_code_setup() -> None:
    """The ``opentelemetry_post_instrument`` entry point (pyproject.toml): ``opentelemetry-instrument`` calls it
    once its distro's configurator has set the SDK up from the OTEL_* variables and the instrumentors are
    loaded. The OTLP exporters of that setup get the guards of ours (module doc), so a zero-code app with no
    collector running says so in one line and exits at once (before: 12 s of gRPC retries and their lines).

    The SDK keeps a processor's or reader's exporter in attributes of its own (``BatchSpanProcessor``'s, found
    as ``_batch_processor._exporter``, and ``span_exporter`` before SDK 1.34; ``PeriodicExportingMetricReader``'s
    ``_exporter``, the provider's readers in ``_metric_readers``, ``_sdk_config.metric_readers`` before): they
    are looked for, and a provider shaped otherwise is left as it is.
    """
    budget = ExitBudget()
    slots: list[tuple[Any, str, str]] = []  # (holder, attribute, signal)
    processors = getattr(getattr(trace.get_tracer_provider(), "_active_span_processor", None), "_span_processors", ())
    for processor in processors if isinstance(processors, tuple) else ():
        batch = getattr(processor, "_batch_processor", None)
        if batch is not None and "_exporter" in vars(batch):
            slots.append((batch, "_exporter", "traces"))
        elif "span_exporter" in vars(processor):
            slots.append((processor, "span_exporter", "traces"))
    meter_provider = metrics.get_meter_provider()
    readers = getattr(meter_provider, "_metric_readers", None)
    if readers is None:
        readers = getattr(getattr(meter_provider, "_sdk_config", None), "metric_readers", ())
    for reader in readers if isinstance(readers, (tuple, list)) else ():
        if "_exporter" in vars(reader):
            slots.append((reader, "_exporter", "metrics"))
    for holder, attribute, signal in slots:
        exporter = getattr(holder, attribute)
        module = type(exporter).__module__
        if not module.startswith("opentelemetry.exporter.otlp.proto."):
            continue  # console, Prometheus, an exporter of the app's own: not ours to guard
        protocol = "grpc" if ".grpc." in module else "http/protobuf"
        setattr(holder, attribute, guarded(exporter, signal, protocol=protocol, budget=budget))
    if slots:
        # After the providers' own exit handlers were registered: this one runs first (last in, first out).
        atexit.register(budget.start)
