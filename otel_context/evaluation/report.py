"""What ``otel-context eval`` prints: a table per run (a row per compaction), a fact grid, a verdict; or JSON.

How to read the columns is in docs/eval.md. The JSON holds every figure of the tables and, per compaction,
every fact's state and every probe's answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any

from otel_context.evaluation.classify import ABSENT, SUMMARY, VERBATIM
from otel_context.evaluation.runner import CompactionRecord, EvalOptions, RunResult

__all__ = ["RunPrinter", "summary_rows", "to_json", "verbatim_curve"]

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


def to_json(options: EvalOptions, results: Sequence[RunResult]) -> dict[str, Any]:
    """Everything the tables show, and more, as one JSON-ready dict."""
    failures = [line for r in results for line in r.failures()]
    return {
        "provider": options.provider,
        "model": options.resolved_model,
        "summary_model": options.resolved_summary_model,
        "window": options.window,
        "passed": not failures and all(r.compactions for r in results),
        "failures": failures,
        "summary": summary_rows(results),
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
                "failures": r.failures(),
                "interrupted": r.interrupted,
            }
            for r in results
        ],
    }


class RunPrinter:
    """Prints each run's tables as it ends, then the overall table (rich)."""

    def __init__(self, file: IO[str]) -> None:
        from rich.console import Console

        # Not a terminal (a pipe, a CI log): wide enough for the compaction table instead of rich's 80.
        self.console = Console(file=file, highlight=False, width=None if file.isatty() else 150)

    def run(self, r: RunResult) -> None:
        from rich.table import Table

        c = self.console
        title = (
            f"{r.scenario.name}: {r.scenario.title}. {r.turns} turns, window {r.window:,}, model {r.model}, "
            f"summarizer {r.summarizer or r.summary_model} ({r.summarizer_note})"
        )
        c.print(title, style="bold", markup=False)
        if not r.compactions:
            c.print("No compaction happened: lower --window so that the conversation outgrows it.", style="yellow")
            return
        table = Table(
            title="Compactions",
            title_justify="left",
            caption="context: tokens before → after (compact span); probes: answered right from the compacted "
            "request / from the full history; spared: input tokens not sent until the next compaction",
            caption_justify="left",
        )
        columns = (
            "#",
            "turn",
            "context",
            "verbatim",
            "summary",
            "absent",
            "user lost",
            "probes",
            "probes full",
            "summarizer in/out",
            "summary $",
            "spared",
            "spared $",
        )
        show_retention = any(rec.retention is not None for rec in r.compactions)
        for name in columns:
            table.add_column(name, justify="right", no_wrap=True)
        if show_retention:
            table.add_column("retention", justify="right", no_wrap=True)
        for rec in r.compactions:
            lost = len(rec.user_lost) + len(rec.without_reversal)
            row = [
                str(rec.number),
                str(rec.turn),
                f"{rec.tokens_before:,}→{rec.tokens_after:,}",
                str(rec.count(VERBATIM)),
                str(rec.count(SUMMARY)),
                str(rec.count(ABSENT)),
                f"[red]{lost}[/red]" if lost else "0",
                _score(*rec.probe_score()),
                _score(*rec.probe_score(full=True)) if rec.full_probe_error is None else "skipped",
                f"{rec.summary_input_tokens:,}/{rec.summary_output_tokens:,}",
                _money(rec.summary_cost),
                f"{rec.spared_tokens:,}",
                _money(rec.spared_cost),
            ]
            if show_retention:
                row.append("-" if rec.retention is None else f"{rec.retention:.2f}")
            table.add_row(*row)
        c.print(table)
        kept = Table(
            title="What reached the model after each compaction",
            title_justify="left",
            caption="kept / in force (a reversed constraint is not in force); stale: a superseded value sent as if "
            "current; msgs verbatim: the user's messages so far that reached the request verbatim",
            caption_justify="left",
        )
        for name in ("#", "user facts", "artifacts", "decision", "w/o reversal", "stale", "msgs verbatim"):
            kept.add_column(name, justify="right", no_wrap=True)
        for rec in r.compactions:
            share = rec.verbatim_share
            kept.add_row(
                str(rec.number),
                _score(*rec.user_facts),
                _score(*rec.artifacts),
                _score(*rec.decisions),
                f"[red]{len(rec.without_reversal)}[/red]" if rec.without_reversal else "0",
                f"[red]{len(rec.stale)}[/red]" if rec.stale else "0",
                "-" if share is None else f"{100 * share:.0f}%",
            )
        c.print(kept)
        grid = Table(
            title="Facts after each compaction",
            title_justify="left",
            caption="V verbatim, S only in the summary, - absent, ~ reversed constraint gone (allowed), "
            "o the superseded value still sent (before its change, or marked), ! failure (user fact lost, "
            "constraint without its reversal, stale value), ? probe answered wrong",
            caption_justify="left",
        )
        grid.add_column("fact")
        grid.add_column("kind")
        grid.add_column("from")
        for rec in r.compactions:
            grid.add_column(str(rec.number), justify="center")
        for fact in r.scenario.facts:
            cells = [cell(rec, fact.id) for rec in r.compactions]
            styled = [f"[red]{m}[/red]" if m.startswith("!") else m for m in cells]
            grid.add_row(fact.id, fact.kind.replace("_", " "), fact.source, *styled)
        c.print(grid)
        c.print()

    def summary(self, options: EvalOptions, results: Sequence[RunResult]) -> None:
        from rich.table import Table

        table = Table(title="Retention", title_justify="left")
        for name in (
            "scenario",
            "summarizer",
            "compactions",
            "facts kept",
            "user facts kept",
            "constraint w/o reversal",
            "probes compacted",
            "probes full",
            "summary cost",
            "spared cost",
            "verdict",
        ):
            table.add_column(name, justify="left" if name in ("scenario", "summarizer") else "right")
        for row in summary_rows(results):
            table.add_row(
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
                "[green]pass[/green]" if row["passed"] else "[red]FAIL[/red]",
            )
        self.console.print(table)
        self._kept_table(results)
        self._curve_table(results)

    def _kept_table(self, results: Sequence[RunResult]) -> None:
        from rich.table import Table

        table = Table(
            title="Kept, over every (compaction, fact) pair",
            title_justify="left",
            caption="stale: a superseded value sent as if current (a failure); old sent: the superseded value "
            "still in the request, in order or marked",
            caption_justify="left",
        )
        for name in ("run", "user facts", "artifacts", "decision", "w/o rev.", "stale", "old sent"):
            table.add_column(name, justify="left" if name == "run" else "right")
        for row in summary_rows(results):
            table.add_row(
                f"{row['scenario']}/{row['summarizer']}",
                _kept(tuple(row["user_facts"])),  # type: ignore[arg-type]
                _kept(tuple(row["artifacts"])),  # type: ignore[arg-type]
                _kept(tuple(row["decisions"])),  # type: ignore[arg-type]
                str(row["without_reversal"]),
                f"[red]{row['stale_values']}[/red]" if row["stale_values"] else "0",
                f"{row['old_value_sent']}/{row['superseded_checked']}",
            )
        self.console.print(table)

    def _curve_table(self, results: Sequence[RunResult]) -> None:
        from rich.table import Table

        longest = max((len(r.compactions) for r in results), default=0)
        if not longest:
            return
        table = Table(
            title="Verbatim user messages, %",
            title_justify="left",
            caption="the share of the user's messages so far that reach the model verbatim (a message of its own, "
            "or quoted whole in the summary), by compaction number",
            caption_justify="left",
        )
        table.add_column("run", justify="left")
        for number in range(1, longest + 1):
            table.add_column(str(number), justify="right")
        for r in results:
            curve = verbatim_curve(r)
            cells = ["-" if v is None else f"{100 * v:.0f}" for v in curve]
            table.add_row(r.label, *cells, *[""] * (longest - len(cells)))
        self.console.print(table)
