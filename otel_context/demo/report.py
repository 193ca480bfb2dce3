"""The demo's terminal output: a line per turn while it runs, then the summary, the cost and a span tree.

Two renderers with the same content: :class:`RichReport` (colours, a progress bar on a terminal) and
:class:`PlainReport` (plain text, used when ``rich`` is not installed). Both follow the usual terminal
manners: no colour when ``NO_COLOR`` is set or stdout is not a terminal, and no progress bar or cursor
movement when stdout is not a terminal (a log file gets the per-turn lines and the summary, nothing else).

The per-turn line is the TokenMonitor line (turn, input tokens, cache hit rate, compactions) plus the
context utilization, all of one call: the turn's last model call, the request the turn ended with (the
legend under the header says so). A context share is a property of one request, so the other figures are
that request's too; a whole turn's sums would mix the requests before and after a compaction. The context %
is against the effective window the header names (the window less the room kept for the answer), the
figure the instrumentation's ``otel_context.context.utilization`` divides by.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_context import semconv
from otel_context.demo import pricing
from otel_context.demo.agent import TurnOutcome
from otel_context.demo.run import SUMMARY_LATENCY_FACTOR, DemoOptions, DemoResult
from otel_context.demo.stats import KIND_AUTO, KIND_MICRO, KIND_REACTIVE, AppliedFigures, CompactionFigures, TurnStats
from otel_context.sdk_setup import EXIT_SECONDS
from otel_context.terminal import output_width, wrap

__all__ = ["PlainReport", "Report", "RichReport", "make_report", "span_tree"]

#: The width of the plain report in a file or a pipe (COLUMNS, when set, wins; a terminal gives its own).
FILE_WIDTH = 80
#: The least room a table row's note takes beside the row's cells (else it goes on the lines below).
NOTE_ROOM = 20

RICH_MISSING = (
    "otel-context: `rich` is not installed, so the demo prints plain text. "
    "For the full terminal output: pip install 'otel-context[demo]'"
)
TREE_TITLE = "Spans of a turn that compacted (invoke_agent > chat > compact > the summarizer's chat)"
KIND_LABELS = {
    KIND_MICRO: "microcompact (tool results cleared, no LLM call)",
    KIND_AUTO: "autocompact (threshold crossed, LLM summary)",
    KIND_REACTIVE: "reactive (provider said too long, summary + one retry)",
}


class Report(Protocol):
    """What :func:`otel_context.cli` drives."""

    def start(self, options: DemoOptions) -> None: ...
    def turn(self, stats: TurnStats, outcome: TurnOutcome) -> None: ...
    def finish(self, result: DemoResult) -> None: ...
    def message(self, text: str) -> None: ...


# --- shared text ------------------------------------------------------------------------------------------
def header(options: DemoOptions) -> str:
    where = "the real API" if options.live else "the embedded simulated provider"
    turns = f"{options.turns} turn{'s' if options.turns != 1 else ''}"
    latency = ""
    if not options.live:
        latency = f", model latency {options.latency:g} s (summaries {options.latency * SUMMARY_LATENCY_FACTOR:g} s)"
    mode = "summaries prepared in the background" if options.background else "inline summaries"
    effective = options.effective_window
    return (
        f"otel-context demo: {turns} of a coding agent on {where} ({options.provider}, {options.model}{latency}), "
        f"context window {options.window:,} tokens ({effective:,} effective: {options.window - effective:,} are kept "
        f"for the answer), microcompaction on, {mode}, seed {options.seed}. The agent resends its whole history "
        "every turn; otel-context's instrumentation keeps what is sent inside the window."
    )


def legend(options: DemoOptions) -> str:
    """What the figures of a turn line are: one call's, and against which window."""
    return (
        "Each turn line is the turn's last model call (the request the turn ended with, as its chat span shows it): "
        "in = its input tokens, cache hit = the share of them read from the prompt cache, context = in / "
        f"{options.effective_window:,} (the effective window); compactions = the run's so far, +kind = this turn's."
    )


#: Where a turn line's tail goes on when it does not fit: under the figures, past ``turn 12/50 | ``.
TURN_INDENT = "    "


def turn_line(
    stats: TurnStats, outcome: TurnOutcome, total_turns: int, compactions_so_far: int, width: int
) -> list[str]:
    """``turn 12/50 | in 18,442 | cache hit  91.2% | context  80% | compactions  3 +auto``: the figures of the
    turn's last call (see :func:`legend`), then what happened in the turn; in lines of at most ``width`` (the
    figures are 73 characters at 2-digit turns; what does not fit beside them goes on an indented line)."""
    counts = Counter(stats.kinds)
    tail = ["".join(f" +{k}" + (f" x{n}" if n > 1 else "") for k, n in counts.items())] if counts else []
    # Background compaction: the summary became ready (prepared past 80 % of the threshold), then the call
    # that crossed the threshold applied it without running the summarizer itself.
    tail += [" | summary prepared"] if stats.prepared else []
    tail += [" | summary applied"] if stats.applied else []
    unexpected = [b.reason for b in stats.cache_breaks if not b.intentional]
    tail += [f" | cache break: {', '.join(unexpected)}"] if unexpected else []
    tail += [f" | FAILED: {outcome.error[:60]}"] if outcome.error else []
    digits = len(str(total_turns))
    figures = [
        f"turn {stats.turn:>{digits}}/{total_turns}",
        f" | in {stats.context_tokens:>6,}",
        f" | cache hit {stats.hit_ratio:6.1%}",
        f" | context {stats.utilization:4.0%}",
        f" | compactions {compactions_so_far:>2}",
    ]
    lines = [""]
    for part in figures + tail:
        if not lines[-1] or len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines += wrap(part.removeprefix(" | ").strip(), width, TURN_INDENT)
    return lines


@dataclass(frozen=True)
class Row:
    label: str
    value: str
    note: str = ""


def summary_rows(result: DemoResult) -> list[Row]:
    stats = result.stats
    calls = stats.calls
    agent = [c for c in calls if not c.summarizer]
    summarizer = [c for c in calls if c.summarizer]
    total_in = stats.total("input_tokens")
    reads = stats.total("cache_read")
    writes = stats.total("cache_write")
    breaks = stats.cache_breaks
    intentional = [b for b in breaks if b.intentional]
    unexpected = [b for b in breaks if not b.intentional]
    reasons = sorted({b.reason for b in unexpected})
    rows = [
        Row(
            "turns",
            f"{len(stats.turns)}",
            f"{stats.failed_turns} failed" + (", interrupted" if result.interrupted else ""),
        ),
        Row(
            "model calls",
            f"{len(calls)}",
            f"{len(agent)} by the agent, {len(summarizer)} by the compactor's summarizer",
        ),
        Row("input tokens", f"{total_in:,}", "cache reads and writes included"),
        Row("output tokens", f"{stats.total('output_tokens'):,}", ""),
        Row("cache reads", f"{reads:,}", f"{reads / total_in:.1%} of input" if total_in else ""),
        Row("cache writes", f"{writes:,}", ""),
        Row(
            "cache breaks",
            f"{len(intentional)} intentional, {len(unexpected)} unexpected",
            ("unexpected: " + ", ".join(reasons)) if reasons else "intentional = caused by a compaction",
        ),
    ]
    rows.append(wait_row(result))
    if result.metrics:
        pairs = {
            semconv.METRIC_COMPACTIONS: len(stats.compactions),
            semconv.METRIC_CACHE_BREAKS: len(breaks),
            semconv.METRIC_USAGE_INPUT_TOKENS: total_in,
            # What the Compactions table says was saved: only what reached the model.
            semconv.METRIC_COMPACTION_TOKENS_SAVED: sum(row[3] for row in compaction_rows(result)),
        }
        differ = [name for name, value in pairs.items() if result.metrics.get(name, 0) != value]
        note = ", ".join(f"{name} = {result.metrics.get(name, 0):,.0f}" for name in (differ or list(pairs)[:2]))
        if not differ:
            note += compaction_count_note(result)
        rows.append(Row("metrics", "agree with the spans" if not differ else "DIFFER from the spans", note))
    if result.facts_kept is not None:
        rows.append(
            Row(
                "user rules kept",
                f"{result.facts_kept}/{result.facts_total}",
                "FACT: lines from early turns still in the final request",
            )
        )
    return rows


def compaction_count_note(result: DemoResult) -> str:
    """How ``otel_context.compactions`` (one per ``compact`` span) adds up to the compactions the turn lines
    and the Compactions table count (those that reached the model), when they differ: a background summary
    counts when it is ready, and once more, as ``discarded``, when it is dropped unsent."""
    stats = result.stats
    compactions = stats.compactions
    ready = [c for c in compactions if c.outcome == semconv.OUTCOME_SUCCESS and c.deferred]
    sent = sum(len(t.kinds) for t in stats.turns)  # what the turn lines count
    unsent = max(0, len(ready) - len(stats.applications))
    discarded = sum(1 for c in compactions if c.outcome == semconv.OUTCOME_DISCARDED)
    failed = sum(1 for c in compactions if c.outcome == semconv.OUTCOME_FAILURE)
    if not (unsent or discarded):
        return ""
    parts = [f"{sent} sent", f"{unsent} prepared and never sent", f"{discarded} discarded"]
    parts += [f"{failed} failed"] if failed else []
    return " (compactions: " + " + ".join(parts) + ")"


def wait_row(result: DemoResult) -> Row:
    """The time requests waited for a compaction before they went out (``otel_context.compaction.wait``)."""
    waits = result.waits
    total = sum(seconds for _, seconds in waits.values())
    parts = [
        f"{mode}: {count} request{'s' if count != 1 else ''}, {seconds:.2f} s"
        for mode in semconv.COMPACTION_MODES
        if mode in waits
        for count, seconds in [waits[mode]]
    ]
    note = "; ".join(parts) if parts else "no summary was due"
    if result.options.background and not result.options.latency and not result.options.live:
        note += " (the simulated model answers at once: try --latency 0.5)"
    return Row("compaction wait", f"{total:.2f} s", note)


def compaction_rows(result: DemoResult) -> list[tuple[str, int, int, int, str]]:
    """(kind, successes, failures, tokens saved, note) per kind seen."""
    rows = []
    stats = result.stats
    for kind, items in stats.compactions_by_kind().items():
        ok = [c for c in items if c.outcome == semconv.OUTCOME_SUCCESS]
        failed = [c for c in items if c.outcome == semconv.OUTCOME_FAILURE]
        # What reached the model: the inline successes, and the background summaries a call sent on this
        # kind's path (each counted, with what it removed from that call, when it was sent: one prepared and
        # never sent saved nothing).
        sent: list[CompactionFigures | AppliedFigures] = [c for c in ok if not c.deferred]
        sent += [a for a in stats.applications if a.kind == kind]
        saved = sum(c.tokens_saved for c in sent)
        note = KIND_LABELS.get(kind, "")
        background = [c for c in ok if c.deferred]
        discarded = [c for c in items if c.outcome == semconv.OUTCOME_DISCARDED]
        if background:
            applied = len(stats.applications)
            note += f"; {len(background)} prepared in the background, {applied} applied without waiting"
        if discarded:
            # Dropped on this kind's path: stale (the history changed below it), or no smaller than what the
            # call sent already.
            note += f"{',' if background else ';'} {len(discarded)} dropped unsent (not counted)"
        if kind == KIND_REACTIVE and result.too_long_turn is not None:
            note += f"; turn {result.too_long_turn}: the provider (an injected fault) said 'prompt is too long'"
        rows.append((kind, len(sent), len(failed), saved, note))
    return rows


def cost_rows(result: DemoResult) -> list[tuple[str, float, str]]:
    cost = result.cost()
    base = cost.actual
    over = result.first_turn_over_window()

    def vs(value: float, what: str) -> str:
        """The ratio to this run, to two decimals; when doing without was cheaper, that said plainly."""
        if not base:
            return ""
        note = f"{value / base:.2f}x this run"
        if value < base:
            note += f": {what} cost more than it saved in this run (${base:.4f} against ${value:.4f} without it)"
        return note

    no_compaction_note = vs(cost.without_compaction, "compaction")
    if over is not None:
        no_compaction_note += f"; hypothetical: from turn {over} the requests exceed the window"
    return [
        ("this run (compaction + caching)", cost.actual, ""),
        ("without prompt caching", cost.without_caching, vs(cost.without_caching, "prompt caching")),
        ("without compaction", cost.without_compaction, no_compaction_note),
        ("without either", cost.without_either, vs(cost.without_either, "compaction and caching")),
    ]


def price_note(result: DemoResult) -> str:
    return pricing.price_note(result.options.provider, result.options.model)


def _export_note(result: DemoResult) -> str:
    """Where the spans and metrics went, by what the collector answered (not by what was asked)."""
    assert result.otlp is not None
    endpoint, protocol = result.otlp
    where = f"{endpoint} over OTLP ({protocol})"
    exports = result.exports
    sent = [name for name, t in exports.items() if t.sent and not (t.failed or t.no_collector or t.unanswered)]
    notes = [f"{' and '.join(sent)} exported to {where}"] if sent else []
    absent = [name for name, t in exports.items() if t.no_collector]
    if absent:
        notes.append(
            f"no collector listened at {endpoint}, so the {' and '.join(absent)} were dropped (start it before "
            "the demo; the demo sends only to a collector that is already running)"
        )
    silent = [name for name, t in exports.items() if t.unanswered]
    if silent:
        notes.append(
            f"the collector at {endpoint} did not answer within {EXIT_SECONDS:g} s of the end, so the "
            f"{' and '.join(silent)} it had not taken were dropped"
        )
    for name, tally in exports.items():
        if tally.failed:
            total = tally.sent + tally.failed
            note = f"{tally.failed} of {total} {name[:-1]} exports to {where} failed (see the exporter's errors above"
            traces_only = name == "metrics" and "spans" in sent
            notes.append(
                note
                + ("; an endpoint that takes traces only wants OTEL_METRICS_EXPORTER=none)" if traces_only else ")")
            )
    return "; ".join(notes) or f"nothing was exported to {where}"


def telemetry_note(result: DemoResult) -> str:
    parts = [f"{len(result.spans)} spans kept in memory for this summary"]
    if result.otlp is not None:
        parts.append(_export_note(result))
        if result.conversation_id:  # what to look for in a viewer (a session in Arize Phoenix)
            parts.append(f"conversation {result.conversation_id}")
    else:
        parts.append("set OTEL_EXPORTER_OTLP_ENDPOINT to send spans and metrics to a collector")
    if result.options.json_path is not None:
        parts.append(f"written to {result.options.json_path}")
    return "Telemetry: " + "; ".join(parts) + "."


# --- the span tree ----------------------------------------------------------------------------------------
@dataclass
class Node:
    label: str
    error: bool
    children: list[Node]


def _attr(span: ReadableSpan, key: str) -> Any:
    return (span.attributes or {}).get(key)


def _label(span: ReadableSpan, turn_numbers: Mapping[int, int]) -> str:
    duration = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    op = _attr(span, semconv.GEN_AI_OPERATION_NAME)
    if span.name == semconv.COMPACT_SPAN:
        return (
            f"compact  {_attr(span, semconv.COMPACTION_TRIGGER_SOURCE)}/{_attr(span, semconv.COMPACTION_STRATEGY)}"
            f"  {_attr(span, semconv.COMPACTION_INPUT_TOKENS) or 0:,} -> {_attr(span, semconv.COMPACTION_OUTPUT_TOKENS) or 0:,}"
            f" tokens  {_attr(span, semconv.COMPACTION_OUTCOME)}  {duration:.0f} ms"
        )
    if op == semconv.OP_CHAT:
        parts = [
            f"in {_attr(span, semconv.GEN_AI_USAGE_INPUT_TOKENS) or 0:,}",
            f"cache read {_attr(span, semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS) or 0:,}",
            f"out {_attr(span, semconv.GEN_AI_USAGE_OUTPUT_TOKENS) or 0:,}",
        ]
        if _attr(span, semconv.GEN_AI_CONVERSATION_COMPACTED):
            parts.append("compacted=true")
        if _attr(span, semconv.ERROR_TYPE):
            parts.append(f"error {_attr(span, semconv.ERROR_TYPE)}")
        return f"{span.name}  " + ", ".join(parts) + f"  {duration:.0f} ms"
    if op == semconv.OP_INVOKE_AGENT:
        number = turn_numbers.get(span.context.span_id if span.context else 0)
        return f"{span.name}  (turn {number})  {duration:.0f} ms"
    return f"{span.name}  {duration:.0f} ms"


def _event_nodes(span: ReadableSpan) -> list[Node]:
    nodes = []
    for event in span.events:
        if event.name != semconv.CACHE_BREAK_EVENT:
            continue
        attrs = event.attributes or {}
        intentional = bool(attrs.get(semconv.CACHE_BREAK_INTENTIONAL))
        tokens = attrs.get(semconv.CACHE_BREAK_EXPECTED_LOST_TOKENS if intentional else semconv.CACHE_BREAK_LOST_TOKENS)
        nodes.append(
            Node(
                f"event {event.name}  intentional={str(intentional).lower()} "
                f"reason={attrs.get(semconv.CACHE_BREAK_REASON)} tokens={tokens}",
                not intentional,
                [],
            )
        )
    return nodes


def span_tree(spans: Sequence[ReadableSpan]) -> Node | None:
    """The ``invoke_agent`` span of a turn that compacted, as a tree: the last with a reactive compaction
    (the richest: a refused request, a summary, the retry), else the last with a summary, else the last
    with any compaction; None when no turn compacted."""
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    turns = [s for s in spans if _attr(s, semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT]
    turns.sort(key=lambda s: s.start_time or 0)
    numbers = {s.context.span_id: i for i, s in enumerate(turns, 1) if s.context is not None}

    def descendants(span: ReadableSpan) -> list[ReadableSpan]:
        out = []
        for child in children.get(span.context.span_id if span.context else 0, []):
            out.append(child)
            out.extend(descendants(child))
        return out

    def pick(key: str | None, value: str | None) -> ReadableSpan | None:
        for turn in reversed(turns):
            for span in descendants(turn):
                if span.name == semconv.COMPACT_SPAN and (key is None or _attr(span, key) == value):
                    return turn
        return None

    chosen = (
        pick(semconv.COMPACTION_TRIGGER_SOURCE, semconv.TRIGGER_REACTIVE)
        or pick(semconv.COMPACTION_STRATEGY, semconv.STRATEGY_SUMMARY)
        or pick(None, None)
    )
    if chosen is None:
        return None

    def build(span: ReadableSpan) -> Node:
        kids = sorted(children.get(span.context.span_id if span.context else 0, []), key=lambda s: s.start_time or 0)
        return Node(
            _label(span, numbers),
            span.status.status_code == StatusCode.ERROR,
            _event_nodes(span) + [build(k) for k in kids],
        )

    return build(chosen)


def plain_tree(node: Node, width: int, prefix: str = "", last: bool = True, root: bool = True) -> list[str]:
    """The tree in lines of at most ``width``: a long label goes on under itself, past its branch."""
    child_prefix = prefix if root else prefix + ("    " if last else "|   ")
    # Under the label: past the branch, and past the line down to the children when there are any.
    under = child_prefix + ("|   " if node.children else "    ")
    first = prefix if root else f"{prefix}{'`-- ' if last else '|-- '}"
    lines = wrap(node.label, width, first, under)
    for i, child in enumerate(node.children):
        lines.extend(plain_tree(child, width, child_prefix, i == len(node.children) - 1, root=False))
    return lines


# --- plain renderer ---------------------------------------------------------------------------------------
class PlainReport:
    """Plain text, no colour, no cursor movement; every line fits the output's width (80 columns for a file or
    a pipe, the terminal's on one, ``COLUMNS`` when set)."""

    def __init__(self, out: IO[str] | None = None, width: int | None = None) -> None:
        self.out = out or sys.stdout
        self.width = width if width is not None else output_width(self.out, FILE_WIDTH)
        self.total = 0
        self.compactions = 0

    def _print(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def _paragraph(self, text: str, indent: str = "") -> None:
        for line in wrap(text, self.width, indent):
            self._print(line)

    def _row(self, cells: str, note: str) -> None:
        """A table row: its cells, then its note beside them, going on under itself when long; on the lines
        below the cells, indented, when the width leaves it too little room beside them."""
        beside = self.width - len(cells) - 2
        if not note:
            lines = [cells]
        elif beside >= max(NOTE_ROOM, *(len(word) for word in note.split())):
            lines = wrap(note, self.width, cells + "  ", " " * (len(cells) + 2))
        else:
            lines = [cells, *wrap(note, self.width, "      ")]
        for line in lines:
            self._print(line.rstrip())

    def message(self, text: str) -> None:
        self._paragraph(text)

    def start(self, options: DemoOptions) -> None:
        self.total = options.turns
        self._paragraph(header(options))
        self._paragraph(legend(options))
        self._print()

    def turn(self, stats: TurnStats, outcome: TurnOutcome) -> None:
        self.compactions += len(stats.kinds)
        for line in turn_line(stats, outcome, self.total, self.compactions, self.width):
            self._print(line)

    def finish(self, result: DemoResult) -> None:
        self._print()
        if result.interrupted:
            self._print("Interrupted: figures so far; telemetry flushed.")
        self._print("Summary")
        rows = summary_rows(result)
        values = max(len(row.value) for row in rows)
        for row in rows:
            self._row(f"  {row.label:<16} {row.value:>{values}}", row.note)
        self._print()
        self._print("Compactions          count  failed  tokens saved")
        kinds = compaction_rows(result)
        for kind, ok, failed, saved, note in kinds:
            self._row(f"  {kind:<18} {ok:>5}  {failed:>6}  {saved:>12,}", note)
        if not kinds:
            self._print("  (none)")
        self._print()
        self._print("Estimated cost")
        for label, value, note in cost_rows(result):
            self._row(f"  {label:<32} ${value:>8.4f}", note)
        self._paragraph(price_note(result), "  ")
        tree = span_tree(result.spans)
        if tree is not None:
            self._print()
            self._paragraph(TREE_TITLE)
            for line in plain_tree(tree, self.width - 2):
                self._print(f"  {line}")
        self._print()
        self._paragraph(telemetry_note(result))


# --- rich renderer ----------------------------------------------------------------------------------------
class RichReport:
    """Colours and a progress bar on a terminal; rich's own plain rendering elsewhere."""

    def __init__(self, file: IO[str] | None = None) -> None:
        from rich.console import Console

        # rich itself honours NO_COLOR and drops colours and cursor movement when ``file`` is not a terminal; it
        # lays everything out in the terminal's width, COLUMNS when set, else 80 columns (a file, a pipe).
        self.console = Console(file=file, highlight=False)
        self.total = 0
        self.compactions = 0
        self._progress: Any = None
        self._task: Any = None

    def message(self, text: str) -> None:
        self.console.print(text, markup=False)

    def start(self, options: DemoOptions) -> None:
        self.total = options.turns
        self.console.print(header(options), markup=False, style="bold")
        self.console.print(legend(options), markup=False)
        self.console.print()
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("turns"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._task = self._progress.add_task("turns", total=options.turns)
            self._progress.start()

    def turn(self, stats: TurnStats, outcome: TurnOutcome) -> None:
        from rich.text import Text

        self.compactions += len(stats.kinds)
        line = Text("\n".join(turn_line(stats, outcome, self.total, self.compactions, self.console.width)))
        if outcome.error:
            line.stylize("red")
        elif KIND_REACTIVE in stats.kinds:
            line.stylize("bold magenta")
        elif KIND_AUTO in stats.kinds:
            line.stylize("bold yellow")
        elif KIND_MICRO in stats.kinds:
            line.stylize("cyan")
        self.console.print(line, soft_wrap=True)
        if self._progress is not None:
            self._progress.advance(self._task)

    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def finish(self, result: DemoResult) -> None:
        from rich.table import Table
        from rich.text import Text
        from rich.tree import Tree

        self._stop_progress()
        self.console.print()
        if result.interrupted:
            self.console.print("Interrupted: figures so far; telemetry flushed.", style="yellow")
        summary = Table(title="Run summary", title_justify="left", show_header=False)
        summary.add_column(style="bold")
        summary.add_column(justify="right")
        summary.add_column(style="dim")
        for row in summary_rows(result):
            summary.add_row(row.label, row.value, row.note)
        self.console.print(summary)

        compactions = Table(title="Compactions", title_justify="left")
        for name, justify in (
            ("kind", "left"),
            ("count", "right"),
            ("failed", "right"),
            ("tokens saved", "right"),
            ("", "left"),
        ):
            compactions.add_column(name, justify=justify)  # type: ignore[arg-type]
        rows = compaction_rows(result)
        for kind, ok, failed, saved, note in rows:
            compactions.add_row(kind, str(ok), str(failed), f"{saved:,}", note)
        if not rows:
            compactions.add_row("(none)", "0", "0", "0", "")
        self.console.print(compactions)

        cost = Table(title="Estimated cost", title_justify="left", caption=price_note(result), caption_justify="left")
        cost.add_column("")
        cost.add_column("USD", justify="right")
        cost.add_column("")
        for label, value, note in cost_rows(result):
            cost.add_row(label, f"${value:.4f}", note)
        self.console.print(cost)

        tree = span_tree(result.spans)
        if tree is not None:
            self.console.print()
            self.console.print(TREE_TITLE, style="bold")

            def add(parent: Tree, node: Node) -> None:
                branch = parent.add(Text(node.label, style="red" if node.error else ""))
                for child in node.children:
                    add(branch, child)

            root = Tree(Text(tree.label))
            for child in tree.children:
                add(root, child)
            self.console.print(root)
        self.console.print()
        self.console.print(telemetry_note(result), style="dim", markup=False)

    def __del__(self) -> None:
        self._stop_progress()


def make_report(prefer_rich: bool = True, out: IO[str] | None = None) -> tuple[Report, str | None]:
    """The rich report when ``rich`` imports, else the plain one and the message saying why."""
    if prefer_rich:
        try:
            import rich  # noqa: F401
        except ImportError:
            return PlainReport(out), RICH_MISSING
        return RichReport(out), None
    return PlainReport(out), None
