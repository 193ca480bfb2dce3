"""Every name a metric may carry once it reaches Prometheus, and selectors that match all of them.

The same OpenTelemetry metric lands in Prometheus under different names depending on the path it took:
``opentelemetry-exporter-prometheus`` and Prometheus 3's OTLP receiver (default
``UnderscoreEscapingWithSuffixes``) store ``gen_ai_client_inference_duration_seconds_bucket``; the
``*WithoutSuffixes`` strategies drop the unit and ``_total`` suffixes; ``NoUTF8Escaping*`` keeps the dots.
A dashboard that hard-codes one form shows "No data" on the others, so every selector here matches all four,
the way the otel-lgtm RED dashboards do. Label names are always the underscore form: Prometheus 2.x (and the
promtool the tests run) cannot parse dotted label names in ``by (...)`` clauses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "histogram", "gauge"]

#: The parts a histogram is stored as.
BUCKET: str = "_bucket"
SUM: str = "_sum"
COUNT: str = "_count"


def label(attribute: str) -> str:
    """The Prometheus label an OpenTelemetry attribute key becomes (``gen_ai.request.model`` → ``gen_ai_request_model``)."""
    return attribute.replace(".", "_")


@dataclass(frozen=True)
class Metric:
    """One OpenTelemetry metric and the names Prometheus may store it under.

    ``prom_name`` is the project's canonical Prometheus name (a ``semconv.PROM_*`` constant); it is checked
    against the name derived from ``otel_name``, so that the two constants cannot drift apart silently.
    """

    otel_name: str
    prom_name: str
    kind: Kind
    #: ``_seconds`` for unit ``s``; empty for ``{token}``-style annotations, which add no suffix.
    unit_suffix: str = ""

    def __post_init__(self) -> None:
        derived = self._form(underscores=True, suffixes=True)
        if derived != self.prom_name:
            raise ValueError(
                f"{self.otel_name!r} is stored as {derived!r} by the Prometheus exporter, "
                f"but its PROM_* constant says {self.prom_name!r}"
            )

    def _form(self, underscores: bool, suffixes: bool, part: str = "") -> str:
        base = self.otel_name.replace(".", "_") if underscores else self.otel_name
        if suffixes:
            base += self.unit_suffix
            if self.kind == "counter":
                base += "_total"
        return base + part

    def names(self, part: str = "") -> tuple[str, ...]:
        """Every stored name, canonical first (``part`` is ``_bucket``/``_sum``/``_count`` for histograms)."""
        if (self.kind == "histogram") != bool(part):
            raise ValueError(f"{self.otel_name} is a {self.kind}: part {part!r} does not apply")
        forms = (
            self._form(True, True, part),
            self._form(True, False, part),
            self._form(False, True, part),
            self._form(False, False, part),
        )
        return tuple(dict.fromkeys(forms))

    def selector(self, part: str = "", matchers: str = "") -> str:
        """A PromQL selector matching every stored name, plus ``matchers`` (e.g. ``error_type!=""``).

        Dots are written ``[.]`` in the regex: PromQL strings, YAML and JSON all leave that spelling alone.
        """
        pattern = "|".join(name.replace(".", "[.]") for name in self.names(part))
        extra = f", {matchers}" if matchers else ""
        return f'{{__name__=~"{pattern}"{extra}}}'
