"""Tracer, meter, instruments and the event helper: the one place that talks to the OpenTelemetry API.

The instruments are created once per :func:`configure` (at instrument time) from the providers given, or
from the global ones (OpenTelemetry's proxies, so an app that sets its providers later is still honoured).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider, ObservableCounter, UpDownCounter
from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from otel_context import process_state, semconv, token_counters

log = logging.getLogger("otel_context")

__all__ = ["Instruments", "Telemetry", "configure", "emit_event", "get", "log_once"]

_VERSION = "0.1.0"


@dataclass(frozen=True)
class Instruments:
    """Every metric instrument of docs/telemetry.md (Metrics)."""

    inference_duration: Histogram
    time_to_first_chunk: Histogram
    tokens: tuple[ObservableCounter, ...]  #: the four ``gen_ai.client.inference.usage.*`` counters, the spend
    compactions: Counter
    compaction_duration: Histogram
    compaction_tokens_saved: Histogram
    breakers_open: UpDownCounter
    cache_breaks: Counter
    #: What cache breaks cost, USD (``otel_context.cache_breaks.cost``).
    cache_break_cost: Counter
    #: What summaries never applied cost, USD (``otel_context.compaction.discarded_spend``).
    compaction_discarded_spend: Counter
    cache_diagnoses: Counter
    summary_model_fallbacks: Counter
    context_utilization: Histogram
    state_store_errors: Counter
    background_summaries: Counter
    compaction_loops: Counter
    compaction_wait: Histogram
    compaction_retention: Histogram
    compaction_retention_before_repair: Histogram
    legacy_operation_duration: Histogram | None
    legacy_token_usage: Histogram | None


def _instruments(meter: Meter, legacy: bool) -> Instruments:
    tokens = "{token}"
    return Instruments(
        inference_duration=meter.create_histogram(
            semconv.METRIC_INFERENCE_DURATION,
            unit="s",
            description="Duration of GenAI inference calls",
            explicit_bucket_boundaries_advisory=list(semconv.DURATION_BUCKETS),
        ),
        time_to_first_chunk=meter.create_histogram(
            semconv.METRIC_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from request to the first chunk of a streamed response",
            explicit_bucket_boundaries_advisory=list(semconv.TIME_TO_FIRST_CHUNK_BUCKETS),
        ),
        tokens=token_counters.register(meter),
        compactions=meter.create_counter(
            semconv.METRIC_COMPACTIONS, unit="{compaction}", description="Compactions by trigger and outcome"
        ),
        compaction_duration=meter.create_histogram(
            semconv.METRIC_COMPACTION_DURATION,
            unit="s",
            description="Wall time of compactions",
            explicit_bucket_boundaries_advisory=list(semconv.DURATION_BUCKETS),
        ),
        compaction_tokens_saved=meter.create_histogram(
            semconv.METRIC_COMPACTION_TOKENS_SAVED,
            unit=tokens,
            description="Context tokens removed by a compaction",
            explicit_bucket_boundaries_advisory=list(semconv.TOKEN_BUCKETS),
        ),
        breakers_open=meter.create_up_down_counter(
            semconv.METRIC_BREAKERS_OPEN,
            unit="{conversation}",
            description="Conversations whose compaction circuit breaker is open",
        ),
        cache_breaks=meter.create_counter(
            semconv.METRIC_CACHE_BREAKS, unit="{break}", description="Prompt-cache breaks, intentional or not"
        ),
        cache_break_cost=meter.create_counter(
            semconv.METRIC_CACHE_BREAK_COST,
            unit=semconv.UNIT_USD,
            description="What prompt-cache breaks cost: the prefix written again instead of read, USD",
        ),
        compaction_discarded_spend=meter.create_counter(
            semconv.METRIC_COMPACTION_DISCARDED_SPEND,
            unit=semconv.UNIT_USD,
            description="What summaries that were never applied cost, USD",
        ),
        cache_diagnoses=meter.create_counter(
            semconv.METRIC_CACHE_DIAGNOSES,
            unit="{diagnosis}",
            description="Calls with the provider's cache diagnosis, by our reason, the provider's and agreement",
        ),
        summary_model_fallbacks=meter.create_counter(
            semconv.METRIC_SUMMARY_MODEL_FALLBACKS,
            unit="{compaction}",
            description="Summaries made with the call's own model: the provider does not know the configured one",
        ),
        context_utilization=meter.create_histogram(
            semconv.METRIC_CONTEXT_UTILIZATION,
            unit="1",
            description="Reported input tokens / effective context window",
            explicit_bucket_boundaries_advisory=list(semconv.UTILIZATION_BUCKETS),
        ),
        state_store_errors=meter.create_counter(
            semconv.METRIC_STATE_STORE_ERRORS,
            unit="{error}",
            description="Failed operations of the shared state store (the call went on with local state)",
        ),
        background_summaries=meter.create_counter(
            semconv.METRIC_BACKGROUND_SUMMARIES,
            unit="{summary}",
            description="Summaries prepared in the background: prepared, applied, discarded (by reason)",
        ),
        compaction_loops=meter.create_counter(
            semconv.METRIC_COMPACTION_LOOPS,
            unit="{conversation}",
            description="Conversations that started compacting on most of their calls",
        ),
        compaction_wait=meter.create_histogram(
            semconv.METRIC_COMPACTION_WAIT,
            unit="s",
            description="Time a caller's request waited for a compaction before it was sent",
            explicit_bucket_boundaries_advisory=[0.0, *semconv.DURATION_BUCKETS],
        ),
        compaction_retention=meter.create_histogram(
            semconv.METRIC_COMPACTION_RETENTION,
            unit="1",
            description="Fraction of the salient items a compaction dropped that reach the new request",
            explicit_bucket_boundaries_advisory=list(semconv.RETENTION_BUCKETS),
        ),
        compaction_retention_before_repair=meter.create_histogram(
            semconv.METRIC_COMPACTION_RETENTION_BEFORE_REPAIR,
            unit="1",
            description="The same fraction for a summary as written, before its repair restored what it lost",
            explicit_bucket_boundaries_advisory=list(semconv.RETENTION_BUCKETS),
        ),
        legacy_operation_duration=meter.create_histogram(
            semconv.METRIC_LEGACY_OPERATION_DURATION,
            unit="s",
            explicit_bucket_boundaries_advisory=list(semconv.DURATION_BUCKETS),
        )
        if legacy
        else None,
        legacy_token_usage=meter.create_histogram(
            semconv.METRIC_LEGACY_TOKEN_USAGE,
            unit=tokens,
            explicit_bucket_boundaries_advisory=list(semconv.TOKEN_BUCKETS),
        )
        if legacy
        else None,
    )


@dataclass(frozen=True)
class Telemetry:
    tracer: Tracer
    meter: Meter
    instruments: Instruments


_current: Telemetry | None = None
#: The tracer provider ``instrument()`` was given (None: the global one, looked up at every span).
_explicit_provider = False
#: That provider itself (None: the global one).
_given_provider: TracerProvider | None = None

NO_TRACER_PROVIDER = (
    "otel_context: no OpenTelemetry tracer provider is set up, so the instrumented LLM calls make no spans "
    "(compaction works all the same). otel_context.instrument() uses the app's providers and reads no OTEL_* "
    "variable: set one first (trace.set_tracer_provider(TracerProvider()) with its exporters, or "
    "instrument(tracer_provider=...)), or use `import otel_context.auto` instead, which sets the SDK up from "
    "the OTEL_* variables (OTEL_TRACES_EXPORTER=console for a first look)."
)
#: The same under ``opentelemetry-instrument`` (zero-code: no code to set a provider in), which sets the SDK up
#: only through a distro.
NO_TRACER_PROVIDER_ZERO_CODE = (
    "otel_context: opentelemetry-instrument set no OpenTelemetry SDK up (it does so only through a distro, and "
    "none is installed), so the instrumented LLM calls make no spans (compaction works all the same). Install "
    "otel-context's instrument extra, which brings one: pip install 'otel-context[instrument]'; then "
    "OTEL_TRACES_EXPORTER=console for a first look, or OTEL_EXPORTER_OTLP_ENDPOINT for a collector."
)
#: Imported by ``opentelemetry-instrument``'s sitecustomize before the app runs.
_ZERO_CODE_MODULE = "opentelemetry.instrumentation.auto_instrumentation"


def configure(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    legacy_metrics: bool = False,
) -> Telemetry:
    """Create the tracer, meter and instruments; called at instrument time."""
    global _current, _explicit_provider, _given_provider
    _explicit_provider = tracer_provider is not None
    _given_provider = tracer_provider
    tracer = trace.get_tracer(semconv.SCOPE_NAME, _VERSION, tracer_provider=tracer_provider)
    meter = metrics.get_meter(semconv.SCOPE_NAME, _VERSION, meter_provider=meter_provider)
    _current = Telemetry(tracer, meter, _instruments(meter, legacy_metrics))
    return _current


def tracer_provider() -> TracerProvider:
    """The tracer provider the instrumented calls' spans go to: the one ``instrument(tracer_provider=...)`` was
    given, else the global one."""
    return _given_provider if _given_provider is not None else trace.get_tracer_provider()


def get() -> Telemetry:
    """The telemetry configured at instrument time (or a default one on the global providers)."""
    return _current if _current is not None else configure()


def not_recording(span: Span) -> None:
    """Called with a call's span that does not record: when that is because no tracer provider was ever set
    up (the global one is still OpenTelemetry's placeholder), say so once, and what to do. A span dropped by
    a sampler, or an app that sets its provider after ``instrument()`` and before its first call, says
    nothing (the placeholder hands the spans on to a provider set later)."""
    if _explicit_provider or "tracing.no_provider" in _logged:
        return
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        zero_code = _ZERO_CODE_MODULE in sys.modules
        log_once("tracing.no_provider", NO_TRACER_PROVIDER_ZERO_CODE if zero_code else NO_TRACER_PROVIDER)


#: Marks a text cut to a size cap (captured content, a summary shown on the ``compact`` span), followed by how
#: many characters were cut: ``...[truncated 1,234 characters]``.
TRUNCATED = "...[truncated"


def cut_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (never inside a character), marked with what was cut,
    and whether it was cut."""
    if len(text) <= max_bytes // 4:  # at most 4 bytes per character: fits whatever the script
        return text, False
    head = text[:max_bytes]  # a character is at least one byte: the cut lies within these
    encoded = head.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes and len(head) == len(text):
        return text, False
    kept = encoded[:max_bytes].decode("utf-8", "ignore")
    return f"{kept}{TRUNCATED} {len(text) - len(kept):,} characters]", True


def name_span(span: Span, trace_key: str, span_key: str, other: SpanContext | None) -> None:
    """Name ``other`` (its trace and span id, in the hex viewers show) on ``span``: the span link's content as
    attributes, for viewers that store no links. Nothing when ``other`` is not sampled (no backend has it)."""
    if other is not None and other.is_valid and other.trace_flags.sampled:
        span.set_attributes(
            {trace_key: trace.format_trace_id(other.trace_id), span_key: trace.format_span_id(other.span_id)}
        )


def emit_event(span: Span, name: str, attributes: Mapping[str, AttributeValue]) -> None:
    """Emit a project event. One helper, so the project can move to log-based events (OTEP 4430)."""
    span.add_event(name, attributes)


_logged: set[str] = set()
# Reset: kept (each kind of failure is logged once per process, reset or not). A fork's child: inherited
# (it is the same program: what its parent said, it does not repeat).
process_state.register(__name__, ("_logged",), on_reset=None, in_forked_child=None)


def log_once(key: str, message: str, *args: Any, exc_info: bool = False) -> None:
    """Log a warning the first time ``key`` is seen: failures in telemetry must not flood the app's logs."""
    if key in _logged:
        return
    _logged.add(key)
    log.warning(message, *args, exc_info=exc_info)
