"""The four token-usage counters of TELEMETRY.md §5, summed in process and reported when metrics are collected.

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
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, ObservableCounter, Observation

from otel_context import semconv

__all__ = ["TokenCounters", "for_meter"]

#: Column of each figure in a series' totals, and the counter that reports it.
_INPUT, _OUTPUT, _CACHE_READ, _CACHE_WRITE = range(4)
_COUNTERS = (
    (semconv.METRIC_USAGE_INPUT_TOKENS, "Input tokens, cache included"),
    (semconv.METRIC_USAGE_OUTPUT_TOKENS, "Output tokens"),
    (semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS, "Input tokens read from the cache"),
    (semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS, "Input tokens written to the cache"),
)


class TokenCounters:
    """Running token totals per metric attribute set, exported by four observable counters."""

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        #: attribute set (order-free) -> (the attributes, [input, output, cache read, cache write])
        self._series: dict[frozenset[tuple[str, Any]], tuple[dict[str, Any], list[int]]] = {}
        self.instruments: tuple[ObservableCounter, ...] = tuple(
            meter.create_observable_counter(name, callbacks=[self._observer(column)], unit="{token}", description=text)
            for column, (name, text) in enumerate(_COUNTERS)
        )

    def add(self, attributes: Mapping[str, Any], input: int, output: int, cache_read: int, cache_write: int) -> None:
        """Add one call's figures (negative figures are ignored: a counter only goes up)."""
        if input <= 0 and output <= 0 and cache_read <= 0 and cache_write <= 0:
            return
        key = frozenset(attributes.items())
        with self._lock:
            entry = self._series.get(key)
            if entry is None:
                entry = self._series[key] = (dict(attributes), [0, 0, 0, 0])
            totals = entry[1]
            if input > 0:
                totals[_INPUT] += input
            if output > 0:
                totals[_OUTPUT] += output
            if cache_read > 0:
                totals[_CACHE_READ] += cache_read
            if cache_write > 0:
                totals[_CACHE_WRITE] += cache_write

    def _observer(self, column: int) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                points = [(attrs, totals[column]) for attrs, totals in self._series.values() if totals[column]]
            return [Observation(value, attrs) for attrs, value in points]

        return observe


#: One set of totals per meter. An SDK meter hands back the instrument it already has when a name is
#: registered twice, and keeps the first one's callbacks: a second ``TokenCounters`` on the same meter would
#: count into totals nobody reports (``configure()`` runs again on every ``instrument()``).
_by_meter: weakref.WeakKeyDictionary[Meter, TokenCounters] = weakref.WeakKeyDictionary()
_by_meter_lock = threading.Lock()


def for_meter(meter: Meter) -> TokenCounters:
    """The token counters of ``meter``, created on first use."""
    with _by_meter_lock:
        try:
            counters = _by_meter.get(meter)
        except TypeError:  # a meter that cannot be weakly referenced: counters of its own
            return TokenCounters(meter)
        if counters is None:
            counters = _by_meter[meter] = TokenCounters(meter)
        return counters
