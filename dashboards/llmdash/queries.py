"""The PromQL the dashboard panels and the alert rules share, built from the names in ``otel_context.semconv``.

Each function takes the range window (``$__rate_interval`` on the dashboard, a fixed duration in alerts) and
the labels to group by, so a panel and the alert watching the same condition cannot drift apart.

Older GenAI instrumentations (and otel-context's own ``OTEL_CONTEXT_LEGACY_METRICS`` switch) emit
``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` instead of the semconv-genai v0.1.0
names. Queries read both with ``or`` *after* aggregating: ``or`` keeps the new series and adds the legacy
ones only for label sets the new name lacks, so an app that emits both is not counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from otel_context import semconv

from .names import BUCKET, COUNT, SUM, Metric, label

# --- metrics -------------------------------------------------------------------------------------------------
INFERENCE_DURATION = Metric(semconv.METRIC_INFERENCE_DURATION, semconv.PROM_INFERENCE_DURATION, "histogram", "_seconds")
TIME_TO_FIRST_CHUNK = Metric(
    semconv.METRIC_TIME_TO_FIRST_CHUNK, semconv.PROM_TIME_TO_FIRST_CHUNK, "histogram", "_seconds"
)
INPUT_TOKENS = Metric(semconv.METRIC_USAGE_INPUT_TOKENS, semconv.PROM_USAGE_INPUT_TOKENS_TOTAL, "counter")
OUTPUT_TOKENS = Metric(semconv.METRIC_USAGE_OUTPUT_TOKENS, semconv.PROM_USAGE_OUTPUT_TOKENS_TOTAL, "counter")
CACHE_READ_TOKENS = Metric(
    semconv.METRIC_USAGE_CACHE_READ_INPUT_TOKENS, semconv.PROM_USAGE_CACHE_READ_INPUT_TOKENS_TOTAL, "counter"
)
CACHE_WRITE_TOKENS = Metric(
    semconv.METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS, semconv.PROM_USAGE_CACHE_WRITE_INPUT_TOKENS_TOTAL, "counter"
)
LEGACY_OPERATION_DURATION = Metric(
    semconv.METRIC_LEGACY_OPERATION_DURATION, semconv.PROM_LEGACY_OPERATION_DURATION, "histogram", "_seconds"
)
LEGACY_TIME_TO_FIRST_CHUNK = Metric(
    semconv.METRIC_LEGACY_TIME_TO_FIRST_CHUNK, semconv.PROM_LEGACY_TIME_TO_FIRST_CHUNK, "histogram", "_seconds"
)
LEGACY_TOKEN_USAGE = Metric(semconv.METRIC_LEGACY_TOKEN_USAGE, semconv.PROM_LEGACY_TOKEN_USAGE, "histogram")
COMPACTIONS = Metric(semconv.METRIC_COMPACTIONS, semconv.PROM_COMPACTIONS_TOTAL, "counter")
COMPACTION_DURATION = Metric(
    semconv.METRIC_COMPACTION_DURATION, semconv.PROM_COMPACTION_DURATION, "histogram", "_seconds"
)
COMPACTION_WAIT = Metric(semconv.METRIC_COMPACTION_WAIT, semconv.PROM_COMPACTION_WAIT, "histogram", "_seconds")
TOKENS_SAVED = Metric(semconv.METRIC_COMPACTION_TOKENS_SAVED, semconv.PROM_COMPACTION_TOKENS_SAVED, "histogram")
BREAKERS_OPEN = Metric(semconv.METRIC_BREAKERS_OPEN, semconv.PROM_BREAKERS_OPEN, "gauge")
CACHE_BREAKS = Metric(semconv.METRIC_CACHE_BREAKS, semconv.PROM_CACHE_BREAKS_TOTAL, "counter")
#: Emitted only with ``OTEL_CONTEXT_CACHE_DIAGNOSTICS`` on (or when the app asks the providers itself): not in
#: :data:`CURRENT`, which a scrape of any instrumented app must show.
CACHE_DIAGNOSES = Metric(semconv.METRIC_CACHE_DIAGNOSES, semconv.PROM_CACHE_DIAGNOSES_TOTAL, "counter")
CONTEXT_UTILIZATION = Metric(semconv.METRIC_CONTEXT_UTILIZATION, semconv.PROM_CONTEXT_UTILIZATION, "histogram")
BACKGROUND_SUMMARIES = Metric(semconv.METRIC_BACKGROUND_SUMMARIES, semconv.PROM_BACKGROUND_SUMMARIES_TOTAL, "counter")
COMPACTION_RETENTION = Metric(semconv.METRIC_COMPACTION_RETENTION, semconv.PROM_COMPACTION_RETENTION, "histogram")
COMPACTION_RETENTION_BEFORE_REPAIR = Metric(
    semconv.METRIC_COMPACTION_RETENTION_BEFORE_REPAIR, semconv.PROM_COMPACTION_RETENTION_BEFORE_REPAIR, "histogram"
)
SPEND = Metric(semconv.METRIC_SPEND, semconv.PROM_SPEND_TOTAL, "counter")
SPEND_CACHE_WRITE = Metric(semconv.METRIC_SPEND_CACHE_WRITE, semconv.PROM_SPEND_CACHE_WRITE_TOTAL, "counter")
COMPACTION_SAVING = Metric(semconv.METRIC_COMPACTION_SAVING, semconv.PROM_COMPACTION_SAVING_TOTAL, "counter")
CACHE_BREAK_COST = Metric(semconv.METRIC_CACHE_BREAK_COST, semconv.PROM_CACHE_BREAK_COST_TOTAL, "counter")
COMPACTION_DISCARDED_SPEND = Metric(
    semconv.METRIC_COMPACTION_DISCARDED_SPEND, semconv.PROM_COMPACTION_DISCARDED_SPEND_TOTAL, "counter"
)

#: Metrics otel-context emits by default (what a scrape of an instrumented app must show).
CURRENT: tuple[Metric, ...] = (
    INFERENCE_DURATION,
    TIME_TO_FIRST_CHUNK,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    CACHE_READ_TOKENS,
    CACHE_WRITE_TOKENS,
    COMPACTIONS,
    COMPACTION_DURATION,
    COMPACTION_WAIT,
    TOKENS_SAVED,
    BREAKERS_OPEN,
    CACHE_BREAKS,
    CONTEXT_UTILIZATION,
    COMPACTION_RETENTION,
    COMPACTION_RETENTION_BEFORE_REPAIR,
    SPEND,
    SPEND_CACHE_WRITE,
    COMPACTION_SAVING,
    CACHE_BREAK_COST,
    COMPACTION_DISCARDED_SPEND,
    BACKGROUND_SUMMARIES,
)
#: Older names, read only as the right-hand side of an ``or`` whose left-hand side reads a CURRENT metric.
LEGACY: tuple[Metric, ...] = (LEGACY_OPERATION_DURATION, LEGACY_TIME_TO_FIRST_CHUNK, LEGACY_TOKEN_USAGE)

# --- labels --------------------------------------------------------------------------------------------------
JOB = "job"
PROVIDER = label(semconv.GEN_AI_PROVIDER_NAME)
MODEL = label(semconv.GEN_AI_REQUEST_MODEL)
ERROR = label(semconv.ERROR_TYPE)
TOKEN_TYPE = label(semconv.GEN_AI_TOKEN_TYPE)
TRIGGER = label(semconv.COMPACTION_TRIGGER_SOURCE)
STRATEGY = label(semconv.COMPACTION_STRATEGY)
OUTCOME = label(semconv.COMPACTION_OUTCOME)
MODE = label(semconv.COMPACTION_MODE)
REASON = label(semconv.CACHE_BREAK_REASON)
INTENTIONAL = label(semconv.CACHE_BREAK_INTENTIONAL)
PURPOSE = label(semconv.CALL_PURPOSE)
AGREEMENT = label(semconv.CACHE_DIAGNOSIS_AGREEMENT)
DETECTOR_REASON = label(semconv.CACHE_DIAGNOSIS_DETECTOR_REASON)
PROVIDER_REASON = label(semconv.CACHE_DIAGNOSIS_PROVIDER_REASON)
BACKGROUND_EVENT = label(semconv.BACKGROUND_EVENT)
DISCARD_REASON = label(semconv.COMPACTION_DISCARD_REASON)

# Boolean attributes reach Prometheus as the strings "true" / "false".
IS_FAILURE = f'{OUTCOME}="{semconv.OUTCOME_FAILURE}"'
#: Summaries only: microcompaction makes no LLM call, so it is never prepared in the background.
IS_SUMMARY = f'{STRATEGY}="{semconv.STRATEGY_SUMMARY}"'
UNEXPECTED = f'{INTENTIONAL}="false"'
INTENDED = f'{INTENTIONAL}="true"'
HAS_ERROR = f'{ERROR}!=""'
#: The summarizer's own calls (the app's calls carry no purpose label).
IS_COMPACTION_CALL = f'{PURPOSE}="{semconv.PURPOSE_COMPACTION}"'


def _sum(labels: Sequence[str], inner: str) -> str:
    return f"sum by ({', '.join(labels)}) ({inner})" if labels else f"sum({inner})"


def _rate(selector: str, window: str) -> str:
    return f"rate({selector}[{window}])"


def _either(current: str, legacy: str) -> str:
    """``current``, plus ``legacy`` for label sets ``current`` lacks (both already aggregated)."""
    return f"(\n  {current}\nor\n  {legacy}\n)"


# --- LLM calls -----------------------------------------------------------------------------------------------
def calls_per_second(window: str, labels: Sequence[str], matchers: str = "") -> str:
    """Calls per second (from the duration histogram's count), optionally restricted by ``matchers``."""
    return _either(
        _sum(labels, _rate(INFERENCE_DURATION.selector(COUNT, matchers), window)),
        _sum(labels, _rate(LEGACY_OPERATION_DURATION.selector(COUNT, matchers), window)),
    )


def error_ratio(window: str, labels: Sequence[str], zero_fill: bool) -> str:
    """Failed calls / all calls. ``zero_fill`` shows 0 (instead of nothing) for groups without errors."""
    errors = calls_per_second(window, labels, HAS_ERROR)
    calls = calls_per_second(window, labels)
    if zero_fill:
        errors = f"(\n{errors}\nor\n{calls} * 0\n)"
    return f"{errors}\n/\n{calls}"


def latency_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of call duration."""
    by = ["le", *labels]
    return "histogram_quantile({}, {})".format(
        quantile,
        _either(
            _sum(by, _rate(INFERENCE_DURATION.selector(BUCKET), window)),
            _sum(by, _rate(LEGACY_OPERATION_DURATION.selector(BUCKET), window)),
        ),
    )


def time_to_first_chunk_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of the time to the first chunk of streamed responses."""
    by = ["le", *labels]
    return "histogram_quantile({}, {})".format(
        quantile,
        _either(
            _sum(by, _rate(TIME_TO_FIRST_CHUNK.selector(BUCKET), window)),
            _sum(by, _rate(LEGACY_TIME_TO_FIRST_CHUNK.selector(BUCKET), window)),
        ),
    )


def tokens_per_second(direction: str, window: str, labels: Sequence[str]) -> str:
    """Input or output tokens per second; ``direction`` is ``semconv.TOKEN_TYPE_INPUT`` or ``_OUTPUT``."""
    metric = {semconv.TOKEN_TYPE_INPUT: INPUT_TOKENS, semconv.TOKEN_TYPE_OUTPUT: OUTPUT_TOKENS}[direction]
    return _either(
        _sum(labels, _rate(metric.selector(), window)),
        _sum(labels, _rate(LEGACY_TOKEN_USAGE.selector(SUM, f'{TOKEN_TYPE}="{direction}"'), window)),
    )


# --- prompt cache --------------------------------------------------------------------------------------------
def cache_hit_ratio(window: str, labels: Sequence[str]) -> str:
    """Cache-read input tokens / all input tokens (input tokens include cached ones, per semconv)."""
    reads = _sum(labels, _rate(CACHE_READ_TOKENS.selector(), window))
    inputs = _sum(labels, _rate(INPUT_TOKENS.selector(), window))
    return f"(\n  {reads}\nor\n  {inputs} * 0\n)\n/\n{inputs}"


def cache_tokens_per_second(metric: Metric, window: str, labels: Sequence[str]) -> str:
    """Cache reads or writes (tokens per second)."""
    return _sum(labels, _rate(metric.selector(), window))


def cache_breaks_per_second(matchers: str, window: str, labels: Sequence[str]) -> str:
    """Prompt-cache breaks per second (``UNEXPECTED`` or ``INTENDED``)."""
    return _sum(labels, _rate(CACHE_BREAKS.selector(matchers=matchers), window))


def diagnosis_agreement(window: str, labels: Sequence[str]) -> str:
    """The share of the provider's cache diagnoses our detector agrees with, among those with a verdict
    (``agree`` or ``disagree``; pending, not found and unavailable are left out)."""
    agree = _sum(labels, _rate(CACHE_DIAGNOSES.selector(matchers=f'{AGREEMENT}="{semconv.AGREEMENT_AGREE}"'), window))
    judged = _sum(
        labels,
        _rate(
            CACHE_DIAGNOSES.selector(matchers=f'{AGREEMENT}=~"{semconv.AGREEMENT_AGREE}|{semconv.AGREEMENT_DISAGREE}"'),
            window,
        ),
    )
    return f"(\n  {agree}\nor\n  {judged} * 0\n)\n/\n{judged}"


def diagnosis_disagreements_per_second(window: str, labels: Sequence[str]) -> str:
    """Calls where the detector and the provider disagree, per second."""
    matcher = f'{AGREEMENT}="{semconv.AGREEMENT_DISAGREE}"'
    return _sum(labels, _rate(CACHE_DIAGNOSES.selector(matchers=matcher), window))


# --- compaction ----------------------------------------------------------------------------------------------
def compactions(window: str, labels: Sequence[str], matchers: str = "") -> str:
    """Compactions counted over ``window``."""
    return _sum(labels, f"increase({COMPACTIONS.selector(matchers=matchers)}[{window}])")


def compactions_per_second(window: str, labels: Sequence[str], matchers: str = "") -> str:
    """Compactions per second, optionally restricted by ``matchers``."""
    return _sum(labels, _rate(COMPACTIONS.selector(matchers=matchers), window))


def background_summaries_per_second(window: str, labels: Sequence[str]) -> str:
    """The lives of the summaries prepared in the background per second: prepared, applied, discarded (the
    discarded ones by their reason, when ``labels`` name it)."""
    return _sum(labels, _rate(BACKGROUND_SUMMARIES.selector(), window))


def compaction_failures(window: str, labels: Sequence[str]) -> str:
    """Failed compactions over ``window``, also when the failure counter's series is born already at 1.

    ``increase()`` needs two samples, so a series whose first scrape already says 1 shows no increase and
    the first failure would be missed. The second branch catches such a series: it exists now but did not
    ``window`` ago. The inner ``> 0`` matters: without it ``or`` keeps the first branch's zero and drops the
    second.
    """
    failures = COMPACTIONS.selector(matchers=IS_FAILURE)
    return _sum(
        labels,
        f"\n  (increase({failures}[{window}]) > 0)\nor\n  ({failures} unless {failures} offset {window})\n",
    )


def _quantile(metric: Metric, quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of one histogram (no legacy alternate), per ``labels``."""
    return f"histogram_quantile({quantile}, {_sum(['le', *labels], _rate(metric.selector(BUCKET), window))})"


def compaction_duration_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of compaction wall time."""
    return _quantile(COMPACTION_DURATION, quantile, window, labels)


def compaction_wait_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of the time callers' requests waited for a compaction before they went out.

    The compaction's own duration is not the caller's cost: a background summary takes as long as an inline
    one but nobody waits for it (its calls record 0 here), so this is the figure that says whether
    compaction is off the critical path.
    """
    return _quantile(COMPACTION_WAIT, quantile, window, labels)


def tokens_saved_per_compaction(window: str, labels: Sequence[str]) -> str:
    """Average context tokens one compaction removed."""
    saved = _sum(labels, _rate(TOKENS_SAVED.selector(SUM), window))
    count = _sum(labels, _rate(TOKENS_SAVED.selector(COUNT), window))
    return f"{saved}\n/\n{count}"


def tokens_saved(window: str, labels: Sequence[str]) -> str:
    """Context tokens removed by compactions over ``window``."""
    return _sum(labels, f"increase({TOKENS_SAVED.selector(SUM)}[{window}])")


def summarizer_tokens_per_second(direction: str, window: str, labels: Sequence[str]) -> str:
    """Input or output tokens per second of the summarizer's own calls (what compaction costs)."""
    metric = {semconv.TOKEN_TYPE_INPUT: INPUT_TOKENS, semconv.TOKEN_TYPE_OUTPUT: OUTPUT_TOKENS}[direction]
    legacy = f'{IS_COMPACTION_CALL}, {TOKEN_TYPE}="{direction}"'
    return _either(
        _sum(labels, _rate(metric.selector(matchers=IS_COMPACTION_CALL), window)),
        _sum(labels, _rate(LEGACY_TOKEN_USAGE.selector(SUM, legacy), window)),
    )


def tokens_saved_per_second(window: str, labels: Sequence[str]) -> str:
    """Context tokens compactions removed, per second (each removed token is also not resent by the calls
    that follow, so this is a floor of what compaction saves)."""
    return _sum(labels, _rate(TOKENS_SAVED.selector(SUM), window))


def retention_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of compaction retention (the share of the dropped salient items the new request kept)."""
    return _quantile(COMPACTION_RETENTION, quantile, window, labels)


def retention_before_repair_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """The same quantile for summaries as the summarizer wrote them, before the repair restored what they lost."""
    return _quantile(COMPACTION_RETENTION_BEFORE_REPAIR, quantile, window, labels)


#: Retention at or below this (a bucket bound of ``semconv.RETENTION_BUCKETS``) is a compaction that lost much.
LOW_RETENTION = 0.5


def low_retention_share(window: str, labels: Sequence[str]) -> str:
    """Share of summary compactions over ``window`` that kept at most :data:`LOW_RETENTION` of the salient items
    they dropped (microcompaction clears old tool results on purpose: not counted)."""
    low = _sum(labels, _rate(COMPACTION_RETENTION.selector(BUCKET, f'{IS_SUMMARY}, le="{LOW_RETENTION}"'), window))
    every = _sum(labels, _rate(COMPACTION_RETENTION.selector(COUNT, IS_SUMMARY), window))
    return f"{low}\n/\n{every}"


def breakers_open(labels: Sequence[str]) -> str:
    """Conversations whose compaction circuit breaker is open."""
    return _sum(labels, BREAKERS_OPEN.selector())


# --- context window ------------------------------------------------------------------------------------------
def utilization_quantile(quantile: float, window: str, labels: Sequence[str]) -> str:
    """A quantile of context utilization (reported input tokens / effective window)."""
    return _quantile(CONTEXT_UTILIZATION, quantile, window, labels)


# --- cost (docs/telemetry.md, "Cost"; every figure in USD) ----------------------------------------------------
#: Seconds in an hour: the cost panels show USD per hour (a rate per second of dollars reads as noise).
HOUR = 3600


def spend_per_hour(window: str, labels: Sequence[str], matchers: str = "") -> str:
    """What the calls cost, USD per hour."""
    return f"{_sum(labels, _rate(SPEND.selector(matchers=matchers), window))} * {HOUR}"


def spend(window: str, labels: Sequence[str]) -> str:
    """What the calls cost over ``window``, USD."""
    return _sum(labels, f"increase({SPEND.selector()}[{window}])")


def _share(part: str, whole: str) -> str:
    """``part`` / ``whole`` (both aggregated alike), 0 where ``whole`` has series and ``part`` has none."""
    return f"(\n  {part}\nor\n  {whole} * 0\n)\n/\n{whole}"


def cache_write_share(window: str, labels: Sequence[str]) -> str:
    """The share of spend that paid for cache writes (writes that are never read back are the waste)."""
    return _share(
        _sum(labels, _rate(SPEND_CACHE_WRITE.selector(), window)), _sum(labels, _rate(SPEND.selector(), window))
    )


def cache_break_spend_per_hour(matchers: str, window: str, labels: Sequence[str]) -> str:
    """What cache breaks cost (``UNEXPECTED`` or ``INTENDED``), USD per hour."""
    return f"{_sum(labels, _rate(CACHE_BREAK_COST.selector(matchers=matchers), window))} * {HOUR}"


def unexpected_break_spend_share(window: str, labels: Sequence[str]) -> str:
    """The share of spend lost to unexpected cache breaks: what they made the provider write again, against
    everything the calls cost."""
    lost = _sum(labels, _rate(CACHE_BREAK_COST.selector(matchers=UNEXPECTED), window))
    return _share(lost, _sum(labels, _rate(SPEND.selector(), window)))


def _or_zero(expr: str) -> str:
    return f"({expr} or vector(0))"


def compaction_saving_per_hour(window: str) -> str:
    """What compactions saved on the calls that sent their result, USD per hour (all series together)."""
    return f"{_or_zero(_sum([], _rate(COMPACTION_SAVING.selector(), window)))} * {HOUR}"


def compaction_spend_per_hour(window: str) -> str:
    """What compaction cost, USD per hour: its summarizer's calls, and the cache its breaks made the next calls
    write again (all series together)."""
    summarizer = _or_zero(_sum([], _rate(SPEND.selector(matchers=IS_COMPACTION_CALL), window)))
    rewrites = _or_zero(_sum([], _rate(CACHE_BREAK_COST.selector(matchers=INTENDED), window)))
    return f"({summarizer} + {rewrites}) * {HOUR}"


def compaction_net_saving_per_hour(window: str) -> str:
    """Compaction's net saving, USD per hour: what it saved less what it cost (docs/telemetry.md, "Cost")."""
    return f"{compaction_saving_per_hour(window)}\n-\n{compaction_spend_per_hour(window)}"


def discarded_spend_per_hour(window: str, labels: Sequence[str]) -> str:
    """What summaries that were never applied cost, USD per hour."""
    return f"{_sum(labels, _rate(COMPACTION_DISCARDED_SPEND.selector(), window))} * {HOUR}"
