"""The alert conditions, written once and rendered twice: as Prometheus alerting rules and as Grafana
alert-rule provisioning, so that users who alert from Prometheus and users who alert from Grafana get the
same conditions, thresholds and on-call text.

Each alert is ``value > threshold``: Prometheus gets ``(value) > threshold``; Grafana gets query A = value
and a threshold expression C on A (Grafana's own way of writing the same comparison).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import alerting, expr, prometheus
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import alerting as alerting_model

from . import queries as q

#: Placeholder in annotation text for the alert's value; each target has its own template syntax.
VALUE = "<<value>>"


#: ``count``: a whole number (increase() extrapolates, so a count of failures would read "9.344").
_COUNT = 'printf "%.0f"'


def _prometheus_value(fmt: str) -> str:
    return "{{ $value | " + (_COUNT if fmt == "count" else fmt) + " }}"


def _grafana_value(fmt: str) -> str:
    return "{{ " + (_COUNT if fmt == "count" else fmt) + " $values.A.Value }}"


GROUP = "otel-context"
#: The Prometheus datasource uid the provisioned datasources (and otel-lgtm's) use.
PROMETHEUS_UID = "prometheus"
GRAFANA_EXPRESSION_UID = "__expr__"
GRAFANA_EVALUATION_INTERVAL = "1m"


@dataclass(frozen=True)
class Alert:
    """One condition: fires when ``value`` stays above ``threshold`` for ``for_``."""

    name: str
    uid: str  #: Grafana rule uid (stable, so re-provisioning updates instead of duplicating)
    value: str
    threshold: float
    for_: str
    severity: str
    summary: str
    description: str
    #: How far back Grafana's query A needs data (the longest range in ``value``, offsets included).
    lookback_seconds: int
    #: Template function that formats the value in annotations (``humanize``, ``humanizePercentage``, or
    #: ``count`` for a whole number).
    value_format: str = "humanize"

    @property
    def prometheus_expr(self) -> str:
        return f"(\n{self.value}\n) > {_number(self.threshold)}"


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def _lbl(name: str) -> str:
    return "{{ $labels." + name + " }}"


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="OtelContextCompactionFailing",
        uid="otel-context-compaction-failing",
        value=q.compaction_failures("10m", [q.JOB, q.TRIGGER]),
        threshold=0,
        for_="0m",
        severity="warning",
        summary=f"Context compaction is failing on {_lbl(q.JOB)} (trigger: {_lbl(q.TRIGGER)})",
        description=(
            f"{VALUE} compaction(s) failed in the last 10 minutes. Nothing was lost (the request went out "
            "unchanged; for reactive compaction the provider's error reached the app), but these conversations "
            "keep growing toward the context limit, and after 3 consecutive failures their circuit breaker "
            'opens. What to do: open the failed compact spans (TraceQL: { name = "compact" && status = error '
            "}); their error.type and the summarizer's child chat span say why (rate limit, summarizer request "
            "too long, wrong summary model). Fix the summarizer (OTEL_CONTEXT_SUMMARY_MODEL, quota), or set "
            "OTEL_CONTEXT_COMPACTION=observe while you investigate."
        ),
        lookback_seconds=1200,
        value_format="count",
    ),
    Alert(
        name="OtelContextCircuitBreakerOpen",
        uid="otel-context-breaker-open",
        value=q.breakers_open([q.JOB, q.MODEL]),
        threshold=0,
        for_="5m",
        severity="warning",
        summary=f"Auto-compaction stopped for {VALUE} conversation(s) of {_lbl(q.MODEL)} on {_lbl(q.JOB)}",
        description=(
            "The compaction circuit breaker opened after 3 consecutive failed compactions, or 3 compactions "
            "that left the context above the threshold (thrashing). These conversations are no longer "
            "compacted, neither automatically nor when the provider rejects a request as too long, and will hit "
            "the model's context limit (the app's log has a warning per conversation). What to do: look at the conversation's compact spans "
            "(gen_ai.conversation.id) for the cause; a too-small window override (OTEL_CONTEXT_AUTO_COMPACT_WINDOW) "
            "or very large recent messages cause thrashing. A successful or manual compaction closes the breaker."
        ),
        lookback_seconds=300,
        value_format="count",
    ),
    Alert(
        name="OtelContextUnexpectedCacheBreaks",
        uid="otel-context-unexpected-cache-breaks",
        value=f"{q.cache_breaks_per_second(q.UNEXPECTED, '15m', [q.JOB, q.REASON])} * 60",
        threshold=1,
        for_="15m",
        severity="warning",
        summary=f"Prompt cache keeps breaking on {_lbl(q.JOB)} (reason: {_lbl(q.REASON)})",
        description=(
            f"{VALUE} unexpected prompt-cache breaks per minute over the last 15 minutes. Each one re-bills the "
            "cached prefix at the full input price and slows the call. What to do, by reason: system_changed: "
            "something in the system prompt changes every call (a timestamp, a request id): move it after the "
            "last cache breakpoint; tools_changed: tool definitions are regenerated or reordered: make them "
            "stable; model_changed: calls of one conversation alternate models; messages_changed: an earlier "
            "message is edited: append instead; ttl_expired: gaps between calls exceed the cache TTL: use the "
            "1-hour TTL or accept it; betas_changed: the anthropic-beta flags differ between calls of one "
            "conversation: send the same flags on every call; unknown: likely provider side. The chat spans carry an "
            "otel_context.cache_break event with the reason and lost tokens."
        ),
        lookback_seconds=900,
    ),
    Alert(
        name="OtelContextCacheBreakSpend",
        uid="otel-context-cache-break-spend",
        value=q.unexpected_break_spend_share("15m", [q.JOB]),
        threshold=0.2,
        for_="15m",
        severity="warning",
        summary=f"Unexpected prompt-cache breaks cost {VALUE} of the LLM spend on {_lbl(q.JOB)}",
        description=(
            f"Over the last 15 minutes {VALUE} of what the LLM calls cost went to writing again prefixes the "
            "prompt cache had held: unexpected cache breaks (otel_context.cache_breaks.cost against "
            'otel_context.spend). What to do: the dashboard\'s "Spend lost to unexpected cache breaks" panel '
            "names the reasons; the chat spans' otel_context.cache_break events (TraceQL: { event:name = "
            '"otel_context.cache_break" && event.otel_context.cache_break.intentional = false }) say which '
            "conversations and what each break cost. Fix the cause the reason names (a timestamp in the system "
            "prompt, regenerated tools, edited history, gaps longer than the cache TTL), as in "
            "OtelContextUnexpectedCacheBreaks."
        ),
        lookback_seconds=900,
        value_format="humanizePercentage",
    ),
    Alert(
        name="OtelContextUtilizationNearLimit",
        uid="otel-context-utilization-near-limit",
        value=q.utilization_quantile(0.95, "15m", [q.JOB, q.MODEL]),
        threshold=0.95,
        for_="15m",
        severity="warning",
        summary=f"Calls to {_lbl(q.MODEL)} on {_lbl(q.JOB)} run close to the context limit",
        description=(
            f"95th percentile context utilization is {VALUE} of the effective window (the blocking limit is "
            "about 98 %). Auto-compaction should keep it below about 93 %: if it does not, compaction is off "
            "(OTEL_CONTEXT_COMPACTION, kill switches), failing, or its breaker is open, or single requests are "
            "too large to fit. What to do: check the compaction panels and alerts, and the "
            "otel_context.context.state attribute of the chat spans; raise the window only if the model really "
            "has a larger one."
        ),
        lookback_seconds=900,
        value_format="humanizePercentage",
    ),
    Alert(
        name="OtelContextCompactionLosesMuch",
        uid="otel-context-compaction-loses-much",
        value=q.low_retention_share("1h", [q.JOB, q.TRIGGER]),
        threshold=0.2,
        for_="15m",
        severity="warning",
        summary=f"Summaries lose much of the context on {_lbl(q.JOB)} (trigger: {_lbl(q.TRIGGER)})",
        description=(
            f"{VALUE} of the summary compactions of the last hour kept at most half of the salient items "
            "(paths, error lines, identifiers, numbers with units, the user's sentences) of the messages they "
            "replaced: the agent continues without facts it had, and may redo work or break an instruction. "
            "What to do: open the compact spans with a low otel_context.compaction.retention (TraceQL: "
            '{ name = "compact" && span.otel_context.compaction.retention < 0.5 }); with content capture on, '
            "their otel_context.compaction.lost event names what was lost. Use a stronger summary model "
            "(OTEL_CONTEXT_SUMMARY_MODEL), keep more recent messages (OTEL_CONTEXT_KEEP_RECENT_MESSAGES), or "
            "add must-keep instructions with the pre_compact hook."
        ),
        lookback_seconds=3600,
        value_format="humanizePercentage",
    ),
    Alert(
        name="OtelContextLLMErrorRatio",
        uid="otel-context-llm-error-ratio",
        value=q.error_ratio("10m", [q.JOB, q.PROVIDER, q.MODEL], zero_fill=False),
        threshold=0.05,
        for_="10m",
        severity="warning",
        summary=f"More than 5 % of calls to {_lbl(q.PROVIDER)} {_lbl(q.MODEL)} fail on {_lbl(q.JOB)}",
        description=(
            f"{VALUE} of LLM calls failed over the last 10 minutes. What to do: group the failing chat spans by "
            'error.type (TraceQL: { span.gen_ai.operation.name = "chat" && status = error }): rate_limit_error '
            "or 429 means quota; overloaded_error or 5xx means the provider; invalid_request_error or "
            "context_length_exceeded means requests the API rejects (check the compaction alerts too)."
        ),
        lookback_seconds=600,
        value_format="humanizePercentage",
    ),
)


def _annotations(alert: Alert, value_template: str) -> dict[str, str]:
    """Summary and description with the value placeholder replaced by ``value_template``."""
    return {
        "summary": alert.summary.replace(VALUE, value_template),
        "description": alert.description.replace(VALUE, value_template),
    }


def prometheus_rules() -> dict[str, Any]:
    """The Prometheus rule file (``groups:``). No group ``interval``: the server's evaluation interval applies."""
    rules = [
        {
            "alert": a.name,
            "expr": a.prometheus_expr,
            "for": a.for_,
            "labels": {"severity": a.severity},
            "annotations": _annotations(a, _prometheus_value(a.value_format)),
        }
        for a in ALERTS
    ]
    return {"groups": [{"name": GROUP, "rules": rules}]}


def _grafana_rule(alert: Alert) -> dict[str, Any]:
    rule = (
        alerting.Rule(alert.name)
        .uid(alert.uid)
        .condition("C")
        .with_query(
            alerting.Query("A")
            .datasource_uid(PROMETHEUS_UID)
            .relative_time_range(alerting_model.RelativeTimeRange(from_val=alert.lookback_seconds, to=0))
            .model(prometheus.Dataquery().expr(alert.value).instant().ref_id("A"))
        )
        .with_query(
            alerting.Query("C")
            .datasource_uid(GRAFANA_EXPRESSION_UID)
            .model(
                expr.TypeThreshold()
                .ref_id("C")
                .expression("A")
                .conditions(
                    [
                        expr.ExprTypeThresholdConditions().evaluator(
                            expr.ExprTypeThresholdConditionsEvaluator().type("gt").params([float(alert.threshold)])
                        )
                    ]
                )
            )
        )
        .for_val(alert.for_)
        .labels({"severity": alert.severity})
        .annotations(_annotations(alert, _grafana_value(alert.value_format)))
        # No series means nothing to alert on (no traffic, no failures), not a problem.
        .no_data_state("OK")
        .exec_err_state("Error")
    )
    built: dict[str, Any] = json.loads(json.dumps(rule.build(), cls=JSONEncoder))
    # The SDK models the HTTP API's rule; file provisioning takes the rule without folder/group/org fields
    # (those are set on the group below).
    for api_only in ("folderUID", "orgID", "ruleGroup"):
        built.pop(api_only, None)
    return built


def grafana_alert_provisioning() -> dict[str, Any]:
    """Grafana's alerting provisioning file (``apiVersion: 1``, ``groups:``)."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": GROUP,
                "folder": GROUP,
                "interval": GRAFANA_EVALUATION_INTERVAL,
                "rules": [_grafana_rule(a) for a in ALERTS],
            }
        ],
    }
