"""The four token-usage counters of docs/telemetry.md, the spend and compaction-saving counters, summed in process
and reported when metrics are collected.

Why not four synchronous ``Counter.add`` calls per LLM call: with the OpenTelemetry Python SDK each one costs
a full measurement pipeline (attribute cleaning, a copy, a sorted hash of the attributes, a lock, an exemplar
decision), about 20 µs on a busy 2-core machine, so the four counters alone cost more than the span. Here a
call adds its figures to a running total per attribute set (a dictionary update under a lock), and four
observable counters report those totals at collection time: the work per collection is proportional to the
number of attribute sets, not to the number of calls.

What a reader sees is what four synchronous counters would give: monotonic cumulative sums with the same
names, units and attributes, no point for a figure that was never above 0, and the SDK's own conversion when
an exporter asks for delta temporality. (Two things differ: these counters carry no exemplars, and a View
that selects instruments by type must name ``ObservableCounter``.)

The totals are kept once per process, and each registration on a meter reports what was added since it was
made. Why not totals per registration: an SDK meter keeps the first observable counter of a name and drops
the callbacks of a second one, which happens whenever the same meter is configured twice, including through
OpenTelemetry's proxy meters (``instrument()`` twice before the app sets its meter provider). Any surviving
registration then still reports every call made since.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, ObservableCounter, Observation

from otel_context import process_state, semconv
from otel_context.fork_safe import new_lock

__all__ = ["add", "register"]

#: Column of each figure in a series' totals, and the counter that reports it (name, unit, description). The
#: spend (``otel_context.spend``, what the calls cost) is one more figure of the same calls, with the same
#: attributes, at the same price per call: one float more in the same update.
_COUNTERS = (
    (semconv.METRIC_USAGE_INPUT_TOKENS, "{token}", "Input tokens, cache included"),
    (semconv.METRIC_USAGE_OUTPUT_TOKENS, "{token}", "Output tokens"),
    (semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS, "{token}", "Input tokens read from the cache"),
    (semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS, "{token}", "Input tokens written to the cache"),
    (semconv.METRIC_SPEND, semconv.UNIT_USD, "What the calls cost, in USD (docs/telemetry.md, Cost)"),
    (semconv.METRIC_SPEND_CACHE_WRITE, semconv.UNIT_USD, "What the calls' cache writes cost, USD"),
    (semconv.METRIC_COMPACTION_SAVING, semconv.UNIT_USD, "What compactions saved on the calls that sent them, USD"),
)

_Key = frozenset[tuple[str, Any]]

_lock = new_lock(sys.modules[__name__], "_lock")
#: attribute set (order-free) -> (the attributes, [input, output, cache read, cache write, spend, spend on cache
#: writes, saving])
_series: dict[_Key, tuple[dict[str, Any], list[float]]] = {}
# Reset and a fork's child: kept (running totals of the process's token counters, which only ever grow).
process_state.register(__name__, ("_series",), on_reset=None, in_forked_child=None)


def add(
    attributes: Mapping[str, Any],
    input: int,
    output: int,
    cache_read: int,
    cache_write: int,
    spend: float = 0.0,
    spend_cache_write: float = 0.0,
    saving: float = 0.0,
) -> None:
    """Add one call's figures (figures of 0 or less are ignored: a counter only goes up)."""
    if input <= 0 and output <= 0 and cache_read <= 0 and cache_write <= 0 and spend <= 0 and saving <= 0:
        return
    key = frozenset(attributes.items())
    with _lock:
        entry = _series.get(key)
        if entry is None:
            entry = _series[key] = (dict(attributes), [0, 0, 0, 0, 0.0, 0.0, 0.0])
        totals = entry[1]
        # Unrolled (this runs on every call): the seven columns of _COUNTERS.
        if spend > 0:
            totals[4] += spend
            if spend_cache_write > 0:
                totals[5] += spend_cache_write
        if saving > 0:
            totals[6] += saving
        if input > 0:
            totals[0] += input
        if output > 0:
            totals[1] += output
        if cache_read > 0:
            totals[2] += cache_read
        if cache_write > 0:
            totals[3] += cache_write


def register(meter: Meter) -> tuple[ObservableCounter, ...]:
    """The seven counters on ``meter``, reporting what is added from now on."""
    with _lock:
        since = {key: list(totals) for key, (_, totals) in _series.items()}
    return tuple(
        meter.create_observable_counter(name, callbacks=[_observer(column, since)], unit=unit, description=text)
        for column, (name, unit, text) in enumerate(_COUNTERS)
    )


def _observer(column: int, since: dict[_Key, list[float]]) -> Any:
    def observe(options: CallbackOptions) -> Iterable[Observation]:
        with _lock:
            points = [
                (attrs, totals[column] - (since[key][column] if key in since else 0))
                for key, (attrs, totals) in _series.items()
            ]
        return [Observation(value, attrs) for attrs, value in points if value > 0]

    return observe
