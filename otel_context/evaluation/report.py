"""What ``otel-context eval`` prints: a table per run (a row per compaction), a fact grid, a verdict; or JSON.

The tables are plain text (:mod:`otel_context.evaluation.table`: no ``rich``, so a plain install runs the
eval), laid out to the output's width and stacked rather than cut.

How to read the columns is in docs/eval.md. The JSON holds every figure of the tables and, per compaction,
every fact's state and every probe's answers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import IO, Any

from otel_context.evaluation.classify import ABSENT, SUMMARY, VERBATIM
from otel_context.evaluation.runner import CompactionRecord, EvalOptions, RunResult
from otel_context.evaluation.table import Column, output_width, paint, render, use_colour, wrap
from otel_context.evaluation.work import GATED_KINDS, KIND_LABELS, WORK_KINDS, WorkItem, count_work

__all__ = [
    "RunPrinter",
    "compaction_table",
    "curve_table",
    "fact_grid",
    "kept_summary_table",
    "kept_table",
    "repair_figures",
    "repair_table",
    "retention_table",
    "summary_rows",
    "to_json",
    "trail_figures",
    "trail_table",
    "verbatim_curve",
    "work_figures",
    "work_summary_table",
    "work_table",
]

_MARK = {VERBATIM: "V", SUMMARY: "S", ABSENT: "-"}


def _money(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def _score(hit: int, asked: int) -> str:
    return f"{hit}/{asked}" if asked else "-"


def _pct(hit: int, asked: int) -> str:
    return f"{100 * hit / asked:.0f}%" if asked else "-"


def cell(record: CompactionRecord, fact_id: str) -> str:
    """One fact at one compaction: V / S / - (absent), ! (lost user fact or constraint without reversal),
    ~ (a reversed constraint gone, as it may), blank (not planted yet); ``?`` after it: probe missed."""
    status = next((s for s in record.facts if s.fact.id == fact_id), None)
    if status is None:
        return ""
    mark = _MARK[status.state]
    if status.superseded and status.state == ABSENT:
        mark = "~"
    if status.failure:
        mark = "!"
    elif status.old_value_sent:
        mark += "o"
    probe = next((p for p in record.probes if p.fact.id == fact_id), None)
    if probe is not None and not probe.compacted_ok:
        mark += "?"
    return mark


def _sum(pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def _kept(pair: tuple[int, int]) -> str:
    """``x/y``, with the share when there is one: ``34/60 57%``."""
    return f"{pair[0]}/{pair[1]} {_pct(*pair)}" if pair[1] else "-"


def verbatim_curve(result: RunResult) -> list[float | None]:
    """The share of the user's messages that reached the request verbatim, by compaction number."""
    return [c.verbatim_share for c in result.compactions]


def _nearest_rank(values: Sequence[float], share: float) -> float:
    """The ``share`` quantile of ``values`` by nearest rank: a value the run had (no interpolation)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "p95": _nearest_rank(values, 0.95), "max": max(values)}


def repair_figures(compactions: Sequence[tuple[CompactionRecord, int]]) -> dict[str, Any] | None:
    """What the repair added to the summaries of ``compactions`` (each with its run's window): the tokens
    (median, 95th percentile by nearest rank, largest), the same against the summary the summarizer wrote (its
    output tokens) and against the window, the largest budget it had, and whether every repair stayed within
    its own (a span without a budget is not held to one); None when no compaction was repaired (a span
    without the repair's figures)."""
    return _added(compactions, lambda c: (c.repair_tokens, c.repair_budget, c.repair_over_budget))


def trail_figures(compactions: Sequence[tuple[CompactionRecord, int]]) -> dict[str, Any] | None:
    """What the work trail took in the summary messages of ``compactions``: the figures :func:`repair_figures`
    gives for the repair; None when no compaction carried one."""
    return _added(compactions, lambda c: (c.trail_tokens, c.trail_budget, c.trail_over_budget))


def _added(
    compactions: Sequence[tuple[CompactionRecord, int]],
    figures: Callable[[CompactionRecord], tuple[int | None, int | None, bool]],
) -> dict[str, Any] | None:
    """The tokens a block added to the summary messages of ``compactions`` (``figures``: a compaction's tokens,
    budget and whether it went over), against the summary and the window; None when no compaction has it."""
    added = [(c, window, *figures(c)) for c, window in compactions if figures(c)[0] is not None]
    if not added:
        return None
    tokens = [float(t or 0) for _, _, t, _, _ in added]
    of_summary = [(t or 0) / c.summary_output_tokens for c, _, t, _, _ in added if c.summary_output_tokens]
    return {
        "compactions": len(added),
        "tokens": _spread(tokens),
        "of_summary": _spread(of_summary) if of_summary else None,
        "of_window": _spread([(t or 0) / window for _, window, t, _, _ in added]),
        "budget": max((b or 0) for _, _, _, b, _ in added),
        "within_budget": not any(over for *_, over in added),
    }


def work_figures(results: Sequence[RunResult]) -> dict[str, list[int]]:
    """kind -> [kept, checked] of the agent's work over every (compaction, item) pair of ``results``."""
    return count_work(w for r in results for c in r.compactions for w in c.work)


def _work_lost(r: RunResult) -> dict[str, list[str]]:
    """kind -> the items lost at one compaction at least, in the order they were first lost."""
    lost: dict[str, dict[str, None]] = {}
    for c in r.compactions:
        for w in c.work_lost():
            lost.setdefault(w.kind, {})[w.tracked.item.id] = None
    return {kind: list(lost[kind]) for kind in WORK_KINDS if kind in lost}


def summary_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per run: the published table (docs/eval.md)."""
    rows = []
    for r in results:
        kept = sum(r_.count(VERBATIM) + r_.count(SUMMARY) for r_ in r.compactions)
        checked = sum(sum(1 for s in r_.facts if not (s.superseded and s.state == ABSENT)) for r_ in r.compactions)
        user_kept = sum(
            1 for c in r.compactions for s in c.facts if s.fact.user_fact and not s.superseded and s.state != ABSENT
        )
        user_checked = sum(1 for c in r.compactions for s in c.facts if s.fact.user_fact and not s.superseded)
        probe_hit = sum(c.probe_score()[0] for c in r.compactions)
        probe_asked = sum(c.probe_score()[1] for c in r.compactions)
        full_hit = sum(c.probe_score(full=True)[0] for c in r.compactions)
        full_asked = sum(c.probe_score(full=True)[1] for c in r.compactions)
        costs = [c.summary_cost for c in r.compactions]
        spared = [c.spared_cost for c in r.compactions]
        rows.append(
            {
                "scenario": r.scenario.name,
                "summarizer": r.summarizer or r.summary_model,
                "turns": r.turns,
                "compactions": len(r.compactions),
                "facts_kept": kept,
                "facts_checked": checked,
                "user_facts_kept": user_kept,
                "user_facts_checked": user_checked,
                "user_facts_lost": sum(len(c.user_lost) for c in r.compactions),
                "without_reversal": sum(len(c.without_reversal) for c in r.compactions),
                "user_facts": list(_sum([c.user_facts for c in r.compactions])),
                "artifacts": list(_sum([c.artifacts for c in r.compactions])),
                "decisions": list(_sum([c.decisions for c in r.compactions])),
                "stale_values": sum(len(c.stale) for c in r.compactions),
                "old_value_sent": sum(1 for c in r.compactions for s in c.facts if s.old_value_sent),
                "superseded_checked": sum(1 for c in r.compactions for s in c.facts if s.superseded),
                "verbatim_share": verbatim_curve(r),
                "probes_compacted": [probe_hit, probe_asked],
                "probes_full": [full_hit, full_asked],
                "summary_tokens": [
                    sum(c.summary_input_tokens for c in r.compactions),
                    sum(c.summary_output_tokens for c in r.compactions),
                ],
                "spared_tokens": sum(c.spared_tokens for c in r.compactions),
                "summary_cost": None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
                "spared_cost": None if any(c is None for c in spared) else sum(c for c in spared if c is not None),
                "repair": repair_figures([(c, r.window) for c in r.compactions]),
                "repair_over_budget": sum(1 for c in r.compactions if c.repair_over_budget),
                "trail": trail_figures([(c, r.window) for c in r.compactions]),
                "trail_over_budget": sum(1 for c in r.compactions if c.trail_over_budget),
                "work": work_figures([r]),
                "work_lost": _work_lost(r),
                "work_gated": r.scenario.work_gated,
                "work_failed": bool(r.work_failures()),
                "passed": not r.failures() and bool(r.compactions),
            }
        )
    return rows


def _record_json(c: CompactionRecord) -> dict[str, Any]:
    return {
        "number": c.number,
        "turn": c.turn,
        "trigger": c.trigger,
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "tokens_saved": c.tokens_saved,
        "summary_input_tokens": c.summary_input_tokens,
        "summary_output_tokens": c.summary_output_tokens,
        "summary_cost_usd": c.summary_cost,
        "spared_tokens": c.spared_tokens,
        "spared_cost_usd": c.spared_cost,
        "retention": c.retention,
        "counts": {state: c.count(state) for state in (VERBATIM, SUMMARY, ABSENT)},
        "user_facts_lost": [s.fact.id for s in c.user_lost],
        "facts_lost": [s.fact.id for s in c.lost],
        "without_reversal": [s.fact.id for s in c.without_reversal],
        "stale_values": [s.fact.id for s in c.stale],
        "user_facts": list(c.user_facts),
        "artifacts": list(c.artifacts),
        "decisions": list(c.decisions),
        "user_messages": {
            "said": c.user_messages,
            "verbatim": c.user_messages_verbatim,
            "quoted_in_summary": c.user_messages_quoted,
            "share": c.verbatim_share,
        },
        "retention_before_repair": c.retention_before_repair,
        "repair_tokens": c.repair_tokens,
        "repair_budget": c.repair_budget,
        "trail_tokens": c.trail_tokens,
        "trail_budget": c.trail_budget,
        "work": c.work_counts,
        "work_lost": {
            kind: [w.tracked.item.id for w in c.work_lost((kind,))] for kind in WORK_KINDS if c.work_lost((kind,))
        },
        "facts": [
            {
                "id": s.fact.id,
                "kind": s.fact.kind,
                "source": s.fact.source,
                "state": s.state,
                "lost": s.lost,
                "superseded": s.superseded,
                "without_reversal": s.without_reversal,
                "stale": s.stale,
                "old_value_sent": s.old_value_sent,
            }
            for s in c.facts
        ],
        "probes": {
            "compacted": list(c.probe_score()),
            "full": list(c.probe_score(full=True)),
            "full_error": c.full_probe_error,
            "answers": [
                {
                    "fact": p.fact.id,
                    "expected": p.fact.answer,
                    "compacted": p.compacted_answer,
                    "compacted_ok": p.compacted_ok,
                    "full": p.full_answer,
                    "full_ok": p.full_ok,
                }
                for p in c.probes
            ],
        },
    }


def _common_window(results: Sequence[RunResult]) -> int | None:
    """The window every run used (each scenario's own when ``--window`` did not say), None when they differ."""
    windows = {r.window for r in results}
    return windows.pop() if len(windows) == 1 else None


def to_json(options: EvalOptions, results: Sequence[RunResult]) -> dict[str, Any]:
    """Everything the tables show, and more, as one JSON-ready dict."""
    failures = [line for r in results for line in r.failures()]
    return {
        "provider": options.provider,
        "model": options.resolved_model,
        "summary_model": options.resolved_summary_model,
        "window": options.window if options.window is not None else _common_window(results),
        "passed": not failures and all(r.compactions for r in results),
        "failures": failures,
        "summary": summary_rows(results),
        "repair": repair_figures([(c, r.window) for r in results for c in r.compactions]),
        "trail": trail_figures([(c, r.window) for r in results for c in r.compactions]),
        "work": work_figures(results),
        "runs": [
            {
                "scenario": r.scenario.name,
                "title": r.scenario.title,
                "summarizer": r.summarizer,
                "summarizer_note": r.summarizer_note,
                "turns": r.turns,
                "window": r.window,
                "compactions": [_record_json(c) for c in r.compactions],
                "failed_compactions": r.failed_compactions,
                "peak_request_tokens": r.peak_request_tokens,
                "full_history_tokens": r.full_history_tokens,
                "model_tokens": [r.model_input_tokens, r.model_output_tokens],
                "probe_tokens": [r.probe_input_tokens, r.probe_output_tokens],
                "facts": [
                    {
                        "id": f.id,
                        "kind": f.kind,
                        "source": f.source,
                        "user_fact": f.user_fact,
                        "artifact": f.artifact,
                        "text": f.text,
                        "question": f.question,
                        "answer": f.answer,
                        "reverses": f.reverses,
                    }
                    for f in r.scenario.facts
                ],
                "work_items": [
                    {
                        "id": t.item.id,
                        "family": t.item.family,
                        "appears_turn": t.appears + 1,
                        "shifts_turn": None if t.shifts is None else t.shifts + 1,
                    }
                    for t in r.timeline
                ],
                "failures": r.failures(),
                "interrupted": r.interrupted,
            }
            for r in results
        ],
    }


class RunPrinter:
    """Prints each run's tables as it ends, then the overall table: plain text laid out to the output's width
    (:func:`otel_context.evaluation.table.output_width`), stacked rather than cut, coloured on a terminal."""

    def __init__(self, file: IO[str], width: int | None = None) -> None:
        self.file = file
        self.width = width if width is not None else output_width(file)
        self.colour = use_colour(file)

    def _print(self, lines: Sequence[str] = ("",)) -> None:
        for line in lines:
            print(line, file=self.file)
        self.file.flush()

    def run(self, r: RunResult) -> None:
        title = (
            f"{r.scenario.name}: {r.scenario.title}. {r.turns} turns, window {r.window:,}, model {r.model}, "
            f"summarizer {r.summarizer or r.summary_model} ({r.summarizer_note})"
        )
        self._print([paint(line, "bold", self.colour) for line in wrap(title, self.width)])
        if not r.compactions:
            self._print(
                [
                    paint(line, "yellow", self.colour)
                    for line in wrap(
                        "No compaction happened: lower --window so that the conversation outgrows it.", self.width
                    )
                ]
            )
            self._print()
            return
        self._print()
        self._print(compaction_table(r, self.width, self.colour))
        self._print()
        self._print(kept_table(r, self.width, self.colour))
        self._print()
        self._print(work_table(r, self.width, self.colour))
        self._print()
        self._print(fact_grid(r, self.width, self.colour))
        self._print()

    def summary(self, options: EvalOptions, results: Sequence[RunResult]) -> None:
        self._print(retention_table(results, self.width, self.colour))
        self._print()
        self._print(kept_summary_table(results, self.width, self.colour))
        self._print()
        self._print(work_summary_table(results, self.width, self.colour))
        for added in (repair_table(results, self.width, self.colour), trail_table(results, self.width, self.colour)):
            if added:
                self._print()
                self._print(added)
        curve = curve_table(results, self.width, self.colour)
        if curve:
            self._print()
            self._print(curve)


def compaction_table(r: RunResult, width: int, colour: bool = False) -> list[str]:
    """A row per compaction of one run (docs/eval.md says how to read the columns)."""
    show_retention = any(rec.retention is not None for rec in r.compactions)
    columns = [
        Column("#", key=True),
        Column("turn", key=True),
        Column("context"),
        Column("verbatim"),
        Column("summary"),
        Column("absent"),
        Column("user lost"),
        Column("probes"),
        Column("probes full"),
        Column("summarizer in/out"),
        Column("summary $"),
        Column("spared"),
        Column("spared $"),
    ]
    if show_retention:
        columns.append(Column("retention"))
    rows = []
    styles = {}
    for n, rec in enumerate(r.compactions):
        lost = len(rec.user_lost) + len(rec.without_reversal)
        if lost:
            styles[(n, 6)] = "red"
        row = [
            str(rec.number),
            str(rec.turn),
            f"{rec.tokens_before:,}→{rec.tokens_after:,}",
            str(rec.count(VERBATIM)),
            str(rec.count(SUMMARY)),
            str(rec.count(ABSENT)),
            str(lost),
            _score(*rec.probe_score()),
            _score(*rec.probe_score(full=True)) if rec.full_probe_error is None else "skipped",
            f"{rec.summary_input_tokens:,}/{rec.summary_output_tokens:,}",
            _money(rec.summary_cost),
            f"{rec.spared_tokens:,}",
            _money(rec.spared_cost),
        ]
        if show_retention:
            row.append("-" if rec.retention is None else f"{rec.retention:.2f}")
        rows.append(row)
    return render(
        columns,
        rows,
        width,
        title="Compactions",
        caption="context: tokens before → after (compact span); probes: answered right from the compacted "
        "request / from the full history; spared: input tokens not sent until the next compaction",
        styles=styles,
        colour=colour,
    )


def fact_grid(r: RunResult, width: int, colour: bool = False) -> list[str]:
    """A row per planted fact, a column per compaction: what reached the request after it."""
    columns = [Column("fact", "left", key=True), Column("kind", "left", key=True), Column("from", "left", key=True)]
    columns += [Column(str(rec.number), "center") for rec in r.compactions]
    rows = []
    styles = {}
    for n, fact in enumerate(r.scenario.facts):
        cells = [cell(rec, fact.id) for rec in r.compactions]
        styles.update({(n, 3 + i): "red" for i, mark in enumerate(cells) if mark.startswith("!")})
        rows.append([fact.id, fact.kind.replace("_", " "), fact.source, *cells])
    return render(
        columns,
        rows,
        width,
        title="Facts after each compaction",
        caption="V verbatim, S only in the summary, - absent, ~ reversed constraint gone (allowed), "
        "o the superseded value still sent (before its change, or marked), ! failure (user fact lost, "
        "constraint without its reversal, stale value), ? probe answered wrong",
        styles=styles,
        colour=colour,
    )


def retention_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run: the published table (docs/eval.md)."""
    columns = [
        Column("scenario", "left", key=True),
        Column("summarizer", "left", key=True),
        Column("compactions"),
        Column("facts kept"),
        Column("user facts kept"),
        Column("constraint w/o reversal"),
        Column("probes compacted"),
        Column("probes full"),
        Column("summary cost"),
        Column("spared cost"),
        Column("verdict"),
    ]
    rows = []
    styles = {}
    for n, row in enumerate(summary_rows(results)):
        styles[(n, 10)] = "green" if row["passed"] else "red"
        rows.append(
            [
                row["scenario"],
                row["summarizer"],
                str(row["compactions"]),
                f"{_pct(row['facts_kept'], row['facts_checked'])} ({row['facts_kept']}/{row['facts_checked']})",
                f"{_pct(row['user_facts_kept'], row['user_facts_checked'])} "
                f"({row['user_facts_kept']}/{row['user_facts_checked']})",
                str(row["without_reversal"]),
                _pct(*row["probes_compacted"]),
                _pct(*row["probes_full"]),
                _money(row["summary_cost"]),
                _money(row["spared_cost"]),
                "pass" if row["passed"] else "FAIL",
            ]
        )
    return render(columns, rows, width, title="Retention", styles=styles, colour=colour)


def kept_table(r: RunResult, width: int, colour: bool = False) -> list[str]:
    """A row per compaction of one run: what reached the model of each kind of fact."""
    columns = [Column("#", key=True)]
    columns += [Column(n) for n in ("user facts", "artifacts", "decision", "w/o reversal", "stale", "msgs verbatim")]
    rows = []
    styles = {}
    for n, rec in enumerate(r.compactions):
        share = rec.verbatim_share
        if rec.without_reversal:
            styles[(n, 4)] = "red"
        if rec.stale:
            styles[(n, 5)] = "red"
        rows.append(
            [
                str(rec.number),
                _score(*rec.user_facts),
                _score(*rec.artifacts),
                _score(*rec.decisions),
                str(len(rec.without_reversal)),
                str(len(rec.stale)),
                "-" if share is None else f"{100 * share:.0f}%",
            ]
        )
    return render(
        columns,
        rows,
        width,
        title="What reached the model after each compaction",
        caption="kept / in force (a reversed constraint is not in force); stale: a superseded value sent as if "
        "current; msgs verbatim: the user's messages so far that reached the request verbatim",
        styles=styles,
        colour=colour,
    )


def kept_summary_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run: every (compaction, fact) pair of each kind, added up."""
    columns = [Column("run", "left", key=True)]
    columns += [Column(n) for n in ("user facts", "artifacts", "decision", "w/o rev.", "stale", "old sent")]
    rows = []
    styles = {}
    for n, row in enumerate(summary_rows(results)):
        if row["stale_values"]:
            styles[(n, 5)] = "red"
        rows.append(
            [
                f"{row['scenario']}/{row['summarizer']}",
                _kept(tuple(row["user_facts"])),  # type: ignore[arg-type]
                _kept(tuple(row["artifacts"])),  # type: ignore[arg-type]
                _kept(tuple(row["decisions"])),  # type: ignore[arg-type]
                str(row["without_reversal"]),
                str(row["stale_values"]),
                f"{row['old_value_sent']}/{row['superseded_checked']}",
            ]
        )
    return render(
        columns,
        rows,
        width,
        title="Kept, over every (compaction, fact) pair",
        caption="stale: a superseded value sent as if current (a failure); old sent: the superseded value still "
        "in the request, in order or marked",
        styles=styles,
        colour=colour,
    )


def _tokens_cells(figures: dict[str, float]) -> str:
    return f"{figures['median']:,.0f} / {figures['p95']:,.0f} / {figures['max']:,.0f}"


def _share_cells(figures: dict[str, float] | None) -> str:
    if figures is None:
        return "-"
    return f"{100 * figures['median']:.0f} / {100 * figures['p95']:.0f} / {100 * figures['max']:.0f}"


def repair_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run and one for them all: the tokens the repair added, against the summary and the window
    (see :func:`repair_figures`); nothing when no compaction was repaired."""
    return _added_table(
        results,
        width,
        colour,
        repair_figures,
        "tokens added",
        title="What the repair added",
        caption="median / 95th percentile / largest over the compactions; the summary: the tokens its summarizer "
        "wrote; budget: the largest the repair had (scaled with the window)",
    )


def trail_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run and one for them all: the tokens of the work trail, against the summary and the window (see
    :func:`trail_figures`); nothing when no compaction carried one."""
    return _added_table(
        results,
        width,
        colour,
        trail_figures,
        "tokens",
        title="What the work trail took",
        caption="median / 95th percentile / largest over the compactions; the summary: the tokens its summarizer "
        "wrote; budget: the largest the trail had (scaled with the window)",
    )


def _added_table(
    results: Sequence[RunResult],
    width: int,
    colour: bool,
    figures_of: Callable[[Sequence[tuple[CompactionRecord, int]]], dict[str, Any] | None],
    tokens_header: str,
    *,
    title: str,
    caption: str,
) -> list[str]:
    columns = [Column("run", "left", key=True)]
    columns += [
        Column(n)
        for n in ("compactions", tokens_header, "% of the summary", "% of the window", "budget", "within budget")
    ]
    rows: list[list[str]] = []
    styles: dict[tuple[int, int], str] = {}
    labelled = [(r.label, figures_of([(c, r.window) for c in r.compactions])) for r in results]
    labelled.append(("all", figures_of([(c, r.window) for r in results for c in r.compactions])))
    for label, figures in labelled:
        if figures is None:
            continue
        if not figures["within_budget"]:
            styles[(len(rows), 6)] = "red"
        rows.append(
            [
                label,
                str(figures["compactions"]),
                _tokens_cells(figures["tokens"]),
                _share_cells(figures["of_summary"]),
                _share_cells(figures["of_window"]),
                f"{figures['budget']:,}",
                "yes" if figures["within_budget"] else "NO",
            ]
        )
    if not rows:
        return []
    return render(columns, rows, width, title=title, caption=caption, styles=styles, colour=colour)


def curve_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run, a column per compaction: the share of the user's messages that reach the model verbatim."""
    longest = max((len(r.compactions) for r in results), default=0)
    if not longest:
        return []
    columns = [Column("run", "left", key=True), *(Column(str(n)) for n in range(1, longest + 1))]
    rows = []
    for r in results:
        cells = ["-" if v is None else f"{100 * v:.0f}" for v in verbatim_curve(r)]
        rows.append([r.label, *cells, *[""] * (longest - len(cells))])
    return render(
        columns,
        rows,
        width,
        title="Verbatim user messages, %",
        caption="the share of the user's messages so far that reach the model verbatim (a message of its own, or "
        "quoted whole in the summary), by compaction number",
        colour=colour,
    )


def _kind_header(kind: str) -> str:
    return KIND_LABELS[kind]


def work_table(r: RunResult, width: int, colour: bool = False) -> list[str]:
    """A row per compaction of one run: the agent's work that reached the request, by kind, and how many items
    this compaction lost that the one before kept (or that appeared since)."""
    columns = [Column("#", key=True), Column("turn", key=True)]
    columns += [Column(_kind_header(kind)) for kind in WORK_KINDS]
    columns.append(Column("newly lost"))
    rows = []
    styles = {}
    before_checked: set[WorkItem] = set()
    before_kept: set[WorkItem] = set()
    for n, rec in enumerate(r.compactions):
        counts = rec.work_counts
        cells = []
        for i, kind in enumerate(WORK_KINDS):
            kept, checked = counts[kind]
            cells.append(_score(kept, checked))
            if r.scenario.work_gated and kind in GATED_KINDS and kept < checked:
                styles[(n, 2 + i)] = "red"
        ids = {w.tracked.item: w.kept for w in rec.work}
        newly = sum(1 for i, kept in ids.items() if not kept and (i in before_kept or i not in before_checked))
        before_checked, before_kept = set(ids), {i for i, kept in ids.items() if kept}
        rows.append([str(rec.number), str(rec.turn), *cells, str(newly)])
    gate = (
        "a lost changed file, open error or decision fails the run" if r.scenario.work_gated else "measured, not gated"
    )
    return render(
        columns,
        rows,
        width,
        title="The agent's work after each compaction",
        caption=f"kept / appeared so far, by the kind each item had then ({gate}); newly lost: items the compaction "
        "before kept, or that appeared since, which this one lost",
        styles=styles,
        colour=colour,
    )


def work_summary_table(results: Sequence[RunResult], width: int, colour: bool = False) -> list[str]:
    """A row per run and one for them all: the agent's work kept over every (compaction, item) pair, by kind,
    and the verdict of the gate on changed files, open errors and decisions."""
    columns = [Column("run", "left", key=True)]
    columns += [Column(_kind_header(kind)) for kind in WORK_KINDS]
    columns.append(Column("gate"))
    rows = []
    styles = {}
    labelled: list[tuple[str, dict[str, list[int]], RunResult | None]] = [
        (r.label, work_figures([r]), r) for r in results
    ]
    labelled.append(("all", work_figures(results), None))
    for n, (label, figures, run) in enumerate(labelled):
        gate = ""
        if run is not None:
            gate = ("FAIL" if run.work_failures() else "pass") if run.scenario.work_gated else "not gated"
            if gate == "FAIL":
                styles[(n, 1 + len(WORK_KINDS))] = "red"
        rows.append([label, *(_kept(tuple(figures[kind])) for kind in WORK_KINDS), gate])  # type: ignore[arg-type]
    return render(
        columns,
        rows,
        width,
        title="The agent's work, over every (compaction, item) pair",
        caption="kept / checked: an item is checked at every compaction after it appears, under the kind it had "
        "then (a file read, then changed; an error open, then closed); kept: in the request anywhere (verbatim, "
        "the summary, a restored block)",
        styles=styles,
        colour=colour,
    )
