"""The repair's cost per compaction (not a test): ``python benchmarks/repair.py``.

The sessions of ``benchmarks/retention.py`` (about 150,000 estimated tokens before the cut; the "results of
900 chars" shape is ~1,400 messages of ~450,000 characters). Timed side by side in one run, CPU ms of the
calling thread (medians of the runs, and the fastest):

- the check alone (:func:`otel_context.compaction.retention.check`), what every compaction did before;
- the check and the repair (:func:`otel_context.compaction.repair.repair`: the check's extraction once, its
  lookup before and after, the repair's candidates, the block), with a summary that keeps half of the
  salient items, and with one that keeps nothing (the repair's worst case: everything is a candidate);

and what the repair adds: tokens, against its budget at a 200,000 window and the summary's size.
Target (issue 39): the check at most 2 ms for the ~1,400-message case, the repair at most 1 ms more.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retention import PREFIX_TOKENS, RUNS, _summary, _time, session  # type: ignore[import-not-found]

from otel_context.compaction import repair, retention
from otel_context.formats import for_format
from otel_context.settings import Settings
from otel_context.tokens import estimate_text

WINDOW = 200_000


def _repaired(adapter: Any, body: Any, dropped: Any, summary: Any, kept: Any, budget: int) -> repair.Repair:
    return repair.repair(adapter, body, dropped, [summary], kept, budget)


def main() -> None:
    budget = repair.repair_budget(Settings(), WINDOW, 180_000)
    print("## Repair\n")
    print(
        f"One compaction of a ~{PREFIX_TOKENS:,}-token prefix, {RUNS} runs, CPU ms (medians; the fastest run in "
        f"brackets); repair budget {budget:,} tokens (a 200,000 window):\n"
    )
    print(
        "| format | check alone | check + repair, summary keeping half | check + repair, summary keeping nothing "
        "| tokens added (half / nothing) | retention before → after (nothing) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    shapes: list[tuple[str, int | None]] = [("anthropic_messages", None), ("openai_chat", None)]
    shapes += [("anthropic_messages", 900), ("openai_chat", 900)]
    for fmt, result_chars in shapes:
        adapter = for_format(fmt)
        items, cut = session(fmt, PREFIX_TOKENS, result_chars)
        dropped, kept = items[:cut], items[cut:]
        half = adapter.make_user_item(_summary(adapter, dropped, keep=True))
        nothing = adapter.make_user_item(_summary(adapter, dropped, keep=False))
        body = adapter.with_items({"model": "m", "max_tokens": 1024}, [half, *kept])
        alone = _time(retention.check, adapter, body, dropped, [half, *kept])
        with_half = _time(_repaired, adapter, body, dropped, half, kept, budget)
        with_nothing = _time(_repaired, adapter, body, dropped, nothing, kept, budget)
        r_half = _repaired(adapter, body, dropped, half, kept, budget)
        r_nothing = _repaired(adapter, body, dropped, nothing, kept, budget)
        summary_tokens = estimate_text(adapter.item_text(half))
        print(
            f"| {fmt}{'' if result_chars is None else f', results of {result_chars} chars'} "
            f"| {alone[0]:.2f} ({alone[1]:.2f}) | {with_half[0]:.2f} ({with_half[1]:.2f}) "
            f"| {with_nothing[0]:.2f} ({with_nothing[1]:.2f}) "
            f"| {r_half.tokens:,} / {r_nothing.tokens:,} (summary {summary_tokens:,}) "
            f"| {r_nothing.before.retention or 0:.2f} → {r_nothing.after.retention or 0:.2f} |"
        )


if __name__ == "__main__":
    main()
