"""The "LLM context" Grafana dashboard, built with grafana-foundation-sdk (Grafana 11.6 build).

Datasources are variables (``ds_prometheus``, ``ds_traces`` for Tempo, ``ds_jaeger`` for Jaeger), so the
same JSON works in otel-lgtm, in a user's own Grafana, and with either trace backend. Trace panels list spans
by TraceQL (Tempo) or by a Jaeger search (a collapsed row, for Grafanas that have a Jaeger datasource).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from grafana_foundation_sdk.builders import common, dashboard, stat, table, tempo, timeseries
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as dashboard_model
from grafana_foundation_sdk.models import tempo as tempo_model

from otel_context import semconv

from . import queries as q

UID = "otel-context-llm"
TITLE = "LLM context"
RATE = "$__rate_interval"
RANGE = "$__range"
#: The demo's service.name; Jaeger searches need a service, and the variable lets users pick theirs.
DEFAULT_SERVICE = "otel-context-demo"

PROMETHEUS = dashboard_model.DataSourceRef(type_val="prometheus", uid="${ds_prometheus}")
TEMPO = dashboard_model.DataSourceRef(type_val="tempo", uid="${ds_traces}")
JAEGER = dashboard_model.DataSourceRef(type_val="jaeger", uid="${ds_jaeger}")

# --- trace searches (shared with the README) -----------------------------------------------------------------
TRACEQL_COMPACT = f'{{ name = "{semconv.COMPACT_SPAN}" }}'
TRACEQL_COMPACT_FAILED = f'{{ name = "{semconv.COMPACT_SPAN}" && status = error }}'
TRACEQL_COMPACTED_CHAT = f'{{ span.{semconv.GEN_AI_OPERATION_NAME} = "{semconv.OP_CHAT}" && span.{semconv.GEN_AI_CONVERSATION_COMPACTED} = true }}'
TRACEQL_UNEXPECTED_CACHE_BREAK = (
    f'{{ event:name = "{semconv.CACHE_BREAK_EVENT}" && event.{semconv.CACHE_BREAK_INTENTIONAL} = false }}'
)


class _JaegerSearch(cogvariants.Dataquery):
    """A Grafana Jaeger datasource search query (the SDK ships no Jaeger query type)."""

    def __init__(self, ref_id: str, operation: str, tags: str) -> None:
        self.ref_id = ref_id
        self.operation = operation
        self.tags = tags

    def to_json(self) -> dict[str, object]:
        payload: dict[str, object] = {"refId": self.ref_id, "queryType": "search", "service": "${service}"}
        if self.operation:
            payload["operation"] = self.operation
        if self.tags:
            payload["tags"] = self.tags
        payload["limit"] = 20
        return payload


class JaegerSearch(cogbuilder.Builder[_JaegerSearch]):
    """Builder for :class:`_JaegerSearch`, so it plugs into panels like the SDK's own queries."""

    def __init__(self, ref_id: str, operation: str = "", tags: str = "") -> None:
        self._internal = _JaegerSearch(ref_id, operation, tags)

    def build(self) -> _JaegerSearch:
        return self._internal


def _legend_of(*labels: str) -> str:
    """A legend template showing ``labels`` (``{{gen_ai_request_model}}``)."""
    return " ".join("{{" + name + "}}" for name in labels)


def _ids() -> Iterator[int]:
    n = 0
    while True:
        n += 1
        yield n


def _target(expr: str, legend: str, ref_id: str) -> prom.Dataquery:
    target: prom.Dataquery = prom.Dataquery().expr(expr).legend_format(legend).ref_id(ref_id).range()
    return target


def _legend() -> common.VizLegendOptions:
    legend: common.VizLegendOptions = (
        common.VizLegendOptions()
        .display_mode(common_model.LegendDisplayMode("table"))
        .placement(common_model.LegendPlacement("bottom"))
        .show_legend(True)
        .calcs(["mean", "max"])
    )
    return legend


def _series(ids: Iterator[int], title: str, description: str, unit: str, *targets: prom.Dataquery) -> timeseries.Panel:
    panel: timeseries.Panel = (
        timeseries.Panel()
        .id(next(ids))
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .unit(unit)
        .height(8)
        .span(12)
        .legend(_legend())
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def _stat(ids: Iterator[int], title: str, description: str, expr: str, span: int) -> stat.Panel:
    panel: stat.Panel = (
        stat.Panel()
        .id(next(ids))
        .title(title)
        .description(description)
        .datasource(PROMETHEUS)
        .with_target(prom.Dataquery().expr(expr).ref_id("A").instant())
        .no_value("0")
        .height(4)
        .span(span)
    )
    return panel


def _traceql(ids: Iterator[int], title: str, description: str, query: str) -> table.Panel:
    panel: table.Panel = (
        table.Panel()
        .id(next(ids))
        .title(title)
        .description(description)
        .datasource(TEMPO)
        .with_target(
            tempo.TempoQuery()
            .ref_id("A")
            .query_type("traceql")
            .query(query)
            .table_type(tempo_model.SearchTableType.SPANS)
            .limit(20)
        )
        .height(8)
        .span(12)
    )
    return panel


def _jaeger(ids: Iterator[int], title: str, description: str, search: JaegerSearch) -> table.Panel:
    panel: table.Panel = (
        table.Panel()
        .id(next(ids))
        .title(title)
        .description(description)
        .datasource(JAEGER)
        .with_target(search)
        .height(8)
        .span(12)
    )
    return panel


def build() -> dict[str, Any]:
    """The dashboard as plain JSON-ready data."""
    ids = _ids()
    by_model = [q.PROVIDER, q.MODEL]
    model_legend = _legend_of(q.PROVIDER, q.MODEL)

    calls = dashboard.Row("LLM calls").id(next(ids))
    board = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Calls, latency, tokens, prompt cache, compaction and context window of apps instrumented with "
            "otel-context. Generated by dashboards/build.py: edit that, not this JSON."
        )
        .tags(["otel-context", "llm", "genai"])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .with_variable(dashboard.DatasourceVariable("ds_prometheus").label("Metrics").type("prometheus"))
        .with_variable(dashboard.DatasourceVariable("ds_traces").label("Traces (Tempo)").type("tempo"))
        .with_variable(dashboard.DatasourceVariable("ds_jaeger").label("Traces (Jaeger)").type("jaeger"))
        .with_variable(
            dashboard.TextBoxVariable("service").label("Service (Jaeger searches)").default_value(DEFAULT_SERVICE)
        )
        # --- LLM calls ------------------------------------------------------------------------------------
        .with_row(calls)
        .with_panel(
            _series(
                ids,
                "Calls per second",
                "LLM calls per second by provider and model (any operation: chat, embeddings, ...).",
                "reqps",
                _target(q.calls_per_second(RATE, by_model), model_legend, "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Error ratio",
                "Share of calls that failed (error.type set), by provider and model.",
                "percentunit",
                _target(q.error_ratio(RATE, by_model, zero_fill=True), model_legend, "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Latency",
                "Call duration quantiles over all providers and models.",
                "s",
                _target(q.latency_quantile(0.5, RATE, []), "p50", "A"),
                _target(q.latency_quantile(0.95, RATE, []), "p95", "B"),
                _target(q.latency_quantile(0.99, RATE, []), "p99", "C"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Time to first chunk",
                "Streamed calls: time from the request to the first chunk, by model.",
                "s",
                _target(q.time_to_first_chunk_quantile(0.5, RATE, [q.MODEL]), "p50 " + _legend_of(q.MODEL), "A"),
                _target(q.time_to_first_chunk_quantile(0.95, RATE, [q.MODEL]), "p95 " + _legend_of(q.MODEL), "B"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Tokens per second",
                "Input tokens (cached ones included, per semconv) and output tokens, by model.",
                "short",
                _target(
                    q.tokens_per_second(semconv.TOKEN_TYPE_INPUT, RATE, [q.MODEL]), "in " + _legend_of(q.MODEL), "A"
                ),
                _target(
                    q.tokens_per_second(semconv.TOKEN_TYPE_OUTPUT, RATE, [q.MODEL]), "out " + _legend_of(q.MODEL), "B"
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Context utilization p95",
                "Reported input tokens / effective context window, 95th percentile by model. Auto-compaction "
                "starts around 0.93 of the effective window; the blocking limit is about 0.98.",
                "percentunit",
                _target(q.utilization_quantile(0.95, RATE, [q.MODEL]), _legend_of(q.MODEL), "A"),
            )
        )
        # --- prompt cache ---------------------------------------------------------------------------------
        .with_row(dashboard.Row("Prompt cache").id(next(ids)))
        .with_panel(
            _series(
                ids,
                "Cache hit ratio",
                "Input tokens read from the prompt cache / all input tokens, by provider and model.",
                "percentunit",
                _target(q.cache_hit_ratio(RATE, by_model), model_legend, "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Cache writes vs reads",
                "Tokens written to and read from the prompt cache per second. Writes cost more than plain "
                "input; reads far less. Writes that are never read back are waste.",
                "short",
                _target(
                    q.cache_tokens_per_second(q.CACHE_READ_TOKENS, RATE, [q.PROVIDER]),
                    "reads " + _legend_of(q.PROVIDER),
                    "A",
                ),
                _target(
                    q.cache_tokens_per_second(q.CACHE_WRITE_TOKENS, RATE, [q.PROVIDER]),
                    "writes " + _legend_of(q.PROVIDER),
                    "B",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Cache breaks",
                f"Unexpected prompt-cache breaks by reason ({', '.join(semconv.CACHE_BREAK_REASONS)}), next to "
                "the intentional ones compaction causes.",
                "short",
                _target(
                    q.cache_breaks_per_second(q.UNEXPECTED, RATE, [q.REASON]),
                    "unexpected: " + _legend_of(q.REASON),
                    "A",
                ),
                _target(q.cache_breaks_per_second(q.INTENDED, RATE, []), "intentional (compaction)", "B"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Cache-break detector vs the provider",
                "With the providers' cache diagnostics on (OTEL_CONTEXT_CACHE_DIAGNOSTICS): the share of the "
                "provider's verdicts (a miss and its reason, or a hit) that our cache-break detector agrees with, "
                "by provider. Pending, not-found and unavailable diagnoses are left out.",
                "percentunit",
                _target(q.diagnosis_agreement(RATE, [q.PROVIDER]), _legend_of(q.PROVIDER), "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Detector and provider disagree",
                "Calls per second where the detector's reason (none: no break seen) and the provider's reason "
                "(hit: nothing diverged) differ: a miss the detector did not see, a break the provider calls a "
                "hit, or another cause.",
                "short",
                _target(
                    q.diagnosis_disagreements_per_second(RATE, [q.DETECTOR_REASON, q.PROVIDER_REASON]),
                    "ours: " + _legend_of(q.DETECTOR_REASON) + ", provider: " + _legend_of(q.PROVIDER_REASON),
                    "A",
                ),
            )
        )
        # --- compaction -----------------------------------------------------------------------------------
        .with_row(dashboard.Row("Compaction").id(next(ids)))
        .with_panel(
            _stat(
                ids,
                "Failed compactions",
                "Compactions that failed in the selected time range (the request went out unchanged).",
                q.compaction_failures(RANGE, []),
                6,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Open circuit breakers",
                "Conversations whose auto-compaction stopped after repeated failures or thrashing.",
                q.breakers_open([]),
                6,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Compactions",
                "Compactions of any outcome in the selected time range.",
                q.compactions(RANGE, []),
                6,
            )
        )
        .with_panel(
            _stat(
                ids,
                "Tokens saved",
                "Context tokens removed by compactions in the selected time range.",
                q.tokens_saved(RANGE, []),
                6,
            )
        )
        .with_panel(
            _series(
                ids,
                "Compactions by trigger and outcome",
                "auto (threshold), manual, reactive (provider said too long), provider (server-side) x "
                "success / failure / skipped (breaker open).",
                "short",
                _target(q.compactions(RATE, [q.TRIGGER, q.OUTCOME]), _legend_of(q.TRIGGER, q.OUTCOME), "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Compaction duration",
                "Wall time of compactions by strategy (summary includes the summarizer's LLM call).",
                "s",
                _target(q.compaction_duration_quantile(0.5, RATE, [q.STRATEGY]), "p50 " + _legend_of(q.STRATEGY), "A"),
                _target(q.compaction_duration_quantile(0.95, RATE, [q.STRATEGY]), "p95 " + _legend_of(q.STRATEGY), "B"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Summary compactions by mode",
                "LLM-summary compactions per second: background (prepared past 80 % of the threshold, counted "
                "when ready, applied at the threshold without waiting) vs inline (the call that crossed the "
                "threshold waited for the summarizer), by outcome. background/discarded: a prepared summary that "
                "was never applied (the conversation ended or its history was edited below the summary's cut), "
                "counted again when it is dropped.",
                "cps",
                _target(
                    q.compactions_per_second(RATE, [q.MODE, q.OUTCOME], q.IS_SUMMARY),
                    _legend_of(q.MODE, q.OUTCOME),
                    "A",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Background summaries: prepared, applied, discarded",
                "Summaries prepared in the background per second: prepared (made and ready), applied (a call sent "
                "it), discarded (dropped unsent, by reason: stale, superseded, no_gain, late, unusable, "
                "forgotten, abandoned, exit). Each discarded one is a summarizer call paid for nothing; a "
                "conversation whose summaries are discarded for one of the first five reasons waits longer "
                "before its next one.",
                "cps",
                _target(
                    q.background_summaries_per_second(RATE, [q.BACKGROUND_EVENT, q.DISCARD_REASON]),
                    _legend_of(q.BACKGROUND_EVENT, q.DISCARD_REASON),
                    "A",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Time callers waited for compaction",
                "How long a request waited for a compaction before it went out, by mode: inline is the "
                "summarizer's whole call; background is 0 when the prepared summary was ready (above 0 only when "
                "a request too large to send had to wait for it). Compaction duration shows the work; this "
                "shows what callers paid for it.",
                "s",
                _target(q.compaction_wait_quantile(0.5, RATE, [q.MODE]), "p50 " + _legend_of(q.MODE), "A"),
                _target(q.compaction_wait_quantile(0.95, RATE, [q.MODE]), "p95 " + _legend_of(q.MODE), "B"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Tokens saved per compaction",
                "Average context tokens one compaction removed, by strategy.",
                "short",
                _target(q.tokens_saved_per_compaction(RATE, [q.STRATEGY]), _legend_of(q.STRATEGY), "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Compaction retention",
                "Share of the salient items (paths, error lines, identifiers, numbers with units, the user's "
                "sentences) of what a compaction dropped that reach the request it sends, by strategy: median and "
                "10th percentile. Checked without an LLM call. A summary is repaired from the check before it is "
                "used (what it lost is restored within the repair budget): 'as written' is the summarizer's own "
                "figure (the same as the one sent for microcompaction, which nothing repairs), the others the one "
                "sent. Microcompaction clears old tool results on purpose, so its "
                "retention is low by design; a summary's should stay near 1.",
                "percentunit",
                _target(q.retention_quantile(0.5, RATE, [q.STRATEGY]), "p50 " + _legend_of(q.STRATEGY), "A"),
                _target(q.retention_quantile(0.1, RATE, [q.STRATEGY]), "p10 " + _legend_of(q.STRATEGY), "B"),
                _target(
                    q.retention_before_repair_quantile(0.5, RATE, [q.STRATEGY]),
                    "p50 as written " + _legend_of(q.STRATEGY),
                    "C",
                ),
                _target(
                    q.retention_before_repair_quantile(0.1, RATE, [q.STRATEGY]),
                    "p10 as written " + _legend_of(q.STRATEGY),
                    "D",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Compaction cost vs tokens saved",
                "Tokens per second of the summarizer's own calls (otel_context.call.purpose=compaction), next to "
                "the context tokens compactions removed per second. The removed tokens are not resent by any "
                "later call, so a saving well above the summarizer's input pays for the summaries.",
                "short",
                _target(q.summarizer_tokens_per_second(semconv.TOKEN_TYPE_INPUT, RATE, []), "summarizer in", "A"),
                _target(q.summarizer_tokens_per_second(semconv.TOKEN_TYPE_OUTPUT, RATE, []), "summarizer out", "B"),
                _target(q.tokens_saved_per_second(RATE, []), "context tokens removed", "C"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Open circuit breakers by model",
                "Conversations whose compaction circuit breaker is open; a success or a manual compaction closes it.",
                "short",
                _target(q.breakers_open([q.MODEL]), _legend_of(q.MODEL), "A"),
            )
        )
        # --- cost ---------------------------------------------------------------------------------------
        .with_row(dashboard.Row("Cost").id(next(ids)))
        .with_panel(
            _stat(
                ids,
                "Spend",
                "What the LLM calls cost in the selected time range, USD (otel_context.spend: each call priced "
                "from genai-prices' table or OTEL_CONTEXT_PRICES; calls of models with no known price are not in it).",
                q.spend(RANGE, []),
                6,
            ).unit("currencyUSD")
        )
        .with_panel(
            _series(
                ids,
                "Spend by model",
                "What the calls cost, USD per hour, by provider and model; the summarizer's calls "
                "(otel_context.call.purpose=compaction) apart.",
                "currencyUSD",
                _target(q.spend_per_hour(RATE, by_model, f'{q.PURPOSE}=""'), model_legend, "A"),
                _target(
                    q.spend_per_hour(RATE, by_model, q.IS_COMPACTION_CALL),
                    "summarizer " + model_legend,
                    "B",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Cache-write share of spend",
                "The part of what the calls cost that paid for prompt-cache writes, by provider and model. "
                "Writes cost more than plain input and pay off only when later calls read them: a high share "
                "means prefixes written and not read back (a changing prefix, an expired TTL, one-off prompts).",
                "percentunit",
                _target(q.cache_write_share(RATE, by_model), model_legend, "A"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Spend lost to unexpected cache breaks",
                "What unexpected prompt-cache breaks cost, USD per hour, by reason: the prefix each made the "
                "provider write again instead of reading it (otel_context.cache_break.cost).",
                "currencyUSD",
                _target(
                    q.cache_break_spend_per_hour(q.UNEXPECTED, RATE, [q.REASON]),
                    "unexpected: " + _legend_of(q.REASON),
                    "A",
                ),
            )
        )
        .with_panel(
            _series(
                ids,
                "Compaction's net saving",
                "USD per hour: what compactions saved on the calls that sent their result (the history's tokens "
                "they did not send, at the cache-read price), what compaction cost (its summarizer's calls and "
                "the cache its breaks made the next calls write again), and the difference.",
                "currencyUSD",
                _target(q.compaction_saving_per_hour(RATE), "saved", "A"),
                _target(q.compaction_spend_per_hour(RATE), "cost", "B"),
                _target(q.compaction_net_saving_per_hour(RATE), "net saving", "C"),
            )
        )
        .with_panel(
            _series(
                ids,
                "Spend on summaries never applied",
                "What background summaries that were discarded (never sent) cost, USD per hour, by why they were "
                "not sent: no_gain, late, stale, superseded, unusable are summaries started for nothing (the "
                "start was misjudged, or the history changed under it); forgotten, abandoned, exit are the app's "
                "doing (a conversation evicted, uninstrumented, the process exiting).",
                "currencyUSD",
                _target(q.discarded_spend_per_hour(RATE, [q.DISCARD_REASON]), _legend_of(q.DISCARD_REASON), "A"),
            )
        )
        # --- traces ---------------------------------------------------------------------------------------
        .with_row(dashboard.Row("Traces (Tempo)").id(next(ids)))
        .with_panel(_traceql(ids, "Recent compactions", "Every compact span, newest first.", TRACEQL_COMPACT))
        .with_panel(
            _traceql(
                ids,
                "Failed compactions",
                "compact spans with status error; error.type says why.",
                TRACEQL_COMPACT_FAILED,
            )
        )
        .with_panel(
            _traceql(
                ids,
                "Chat calls on compacted context",
                "The chat spans whose request first carried a compaction's result.",
                TRACEQL_COMPACTED_CHAT,
            )
        )
        .with_panel(
            _traceql(
                ids,
                "Unexpected cache breaks",
                "Chat spans with an unexpected otel_context.cache_break event.",
                TRACEQL_UNEXPECTED_CACHE_BREAK,
            )
        )
        .with_row(
            dashboard.Row("Traces (Jaeger)")
            .id(next(ids))
            .collapsed(True)
            .with_panel(
                _jaeger(
                    ids,
                    "Failed compactions",
                    "compact spans with an error, in the service chosen above.",
                    JaegerSearch("A", semconv.COMPACT_SPAN, "error=true"),
                )
            )
            .with_panel(
                _jaeger(
                    ids,
                    "Chat calls on compacted context",
                    "Spans with gen_ai.conversation.compacted=true.",
                    JaegerSearch("A", "", f"{semconv.GEN_AI_CONVERSATION_COMPACTED}=true"),
                )
            )
            .with_panel(
                _jaeger(
                    ids,
                    "Unexpected cache breaks",
                    "Spans with an unexpected cache-break event (Jaeger's tag search also reads event attributes).",
                    JaegerSearch("A", "", f"{semconv.CACHE_BREAK_INTENTIONAL}=false"),
                )
            )
        )
    )
    result: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return result
