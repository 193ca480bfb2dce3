"""The repair's cost per compaction (not a test): ``python benchmarks/repair.py``.

The sessions of ``benchmarks/retention.py`` (about 150,000 estimated tokens before the cut; the "results of
900 chars" shape is ~1,400 messages of ~450,000 characters). Timed side by side in one run, CPU ms of the
calling thread (medians of the runs, and the fastest):

- the check alone (:func:`otel_context.compaction.retention.check`), what every compaction did before;
- the check and the repair (:func:`otel_context.compaction.repair.repair`: the check's extraction once, its
  lookup before and after, the repair's candidates, the block), with a summary that keeps half of the
  salient items, and with one that keeps nothing (the repair's worst case: everything is a candidate);

and what the repair adds: tokens, against its budget at a 200,000 window and the summary's size. "Before" is
the code on ``main`` (the check, the repair and the adapters' walk of a span, loaded by
``benchmarks/retention.py``'s ``before``), run on the same inputs in the same run; its repair must give the
same block and figures. Every timed repair forgets the ranks of the user's sentences first (a first
compaction of them); the column "ranks remembered" is a later compaction's, which meets them again.
Target (issue 39): the check at most 2 ms for the ~1,400-message case, the repair at most 1 ms more.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from retention import PREFIX_TOKENS, RUNS, _summary, _time, before, session  # type: ignore[import-not-found]

from otel_context.compaction import repair, retention
from otel_context.compaction.summary import user_messages
from otel_context.formats import for_format
from otel_context.settings import Settings
from otel_context.tokens import estimate_text

WINDOW = 200_000


def _repaired(
    module: Any, adapter: Any, body: Any, dropped: Any, summary: Any, kept: Any, budget: int, said: Any = None
) -> Any:
    """One repair with ``module`` (this tree's or main's), its remembered ranks forgotten first: every
    timed run is a first compaction of these sentences (see :func:`_warm`)."""
    for remembered in ("_sentence_priority", "_cut_and_ranked_kept"):  # the ranks, the user messages' sentences
        forget = getattr(getattr(module, remembered, None), "cache_clear", None)
        if forget is not None:
            forget()
    return module.repair(adapter, body, dropped, [summary], kept, budget, said=said)


def _warm(adapter: Any, body: Any, dropped: Any, summary: Any, kept: Any, budget: int, said: Any = None) -> Any:
    """One repair with the ranks of the span's sentences remembered (a compaction after one that ranked them:
    the whole conversation in transparent mode, the restored lines and verbatim messages otherwise)."""
    return repair.repair(adapter, body, dropped, [summary], kept, budget, said=said)


def _cell(after: tuple[float, float], then: tuple[float, float] | None) -> str:
    text = f"{after[0]:.2f} ({after[1]:.2f})"
    return text if then is None else f"{then[0]:.2f} ({then[1]:.2f}) → **{text}**"


def main() -> None:
    budget = repair.repair_budget(Settings(), WINDOW, 180_000)
    on_main = before()
    print("## Repair\n")
    print(
        f"One compaction of a ~{PREFIX_TOKENS:,}-token prefix, {RUNS} runs, CPU ms (medians; the fastest run in "
        f"brackets){', main → this tree' if on_main is not None else ''}; repair budget {budget:,} tokens "
        "(a 200,000 window):\n"
    )
    print(
        "| format | check alone | check + repair, summary keeping half | check + repair, summary keeping nothing "
        "| the same, ranks remembered (half / nothing) | tokens added (half / nothing) "
        "| retention before → after (nothing) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    shapes: list[tuple[str, int | None]] = [("anthropic_messages", None), ("openai_chat", None)]
    shapes += [("anthropic_messages", 900), ("openai_chat", 900)]
    for fmt, result_chars in shapes:
        adapter = for_format(fmt)
        items, cut = session(fmt, PREFIX_TOKENS, result_chars)
        dropped, kept = items[:cut], items[cut:]
        half = adapter.make_user_item(_summary(adapter, dropped, keep=True))
        nothing = adapter.make_user_item(_summary(adapter, dropped, keep=False))
        body = adapter.with_items({"model": "m", "max_tokens": 1024}, [half, *kept])
        r_half = _repaired(repair, adapter, body, dropped, half, kept, budget)
        r_nothing = _repaired(repair, adapter, body, dropped, nothing, kept, budget)
        cells: dict[str, tuple[float, float] | None] = {}
        for name, module, check, fmt_adapter in (
            ("now", repair, retention, adapter),
            *([("then", on_main.repair, on_main.retention, on_main.adapters[fmt])] if on_main is not None else []),
        ):
            if name == "then":  # the same repair as before: block, figures, counts
                for summary, now in ((half, r_half), (nothing, r_nothing)):
                    old = _repaired(module, fmt_adapter, body, dropped, summary, kept, budget)
                    assert (old.text, old.restored, old.left_out, old.superseded, old.checked) == (
                        now.text,
                        now.restored,
                        now.left_out,
                        now.superseded,
                        now.checked,
                    )
                    for was, is_ in ((old.before, now.before), (old.after, now.after)):  # two classes: by field
                        assert (was.retention, was.items_checked, was.lost) == (
                            is_.retention,
                            is_.items_checked,
                            is_.lost,
                        )
            cells[f"{name} alone"] = _time(check.check, fmt_adapter, body, dropped, [half, *kept])
            cells[f"{name} half"] = _time(_repaired, module, fmt_adapter, body, dropped, half, kept, budget)
            cells[f"{name} nothing"] = _time(_repaired, module, fmt_adapter, body, dropped, nothing, kept, budget)
        warm_half = _time(_warm, adapter, body, dropped, half, kept, budget)
        warm_nothing = _time(_warm, adapter, body, dropped, nothing, kept, budget)
        summary_tokens = estimate_text(adapter.item_text(half))
        row = " | ".join(_cell(cells[f"now {k}"], cells.get(f"then {k}")) for k in ("alone", "half", "nothing"))  # type: ignore[arg-type]
        print(
            f"| {fmt}{'' if result_chars is None else f', results of {result_chars} chars'} | {row} "
            f"| {warm_half[0]:.2f} ({warm_half[1]:.2f}) / {warm_nothing[0]:.2f} ({warm_nothing[1]:.2f}) "
            f"| {r_half.tokens:,} / {r_nothing.tokens:,} (summary {summary_tokens:,}) "
            f"| {r_nothing.before.retention or 0:.2f} → {r_nothing.after.retention or 0:.2f} |"
        )

    _session_growth(budget, on_main)
    _corrections(on_main)


def _session_growth(budget: int, on_main: Any) -> None:
    """Transparent mode's repair reads every message of the user's in the conversation (``said``), not only
    the replaced span's: the k-th compaction of a session of spans like this one reads k spans' messages."""
    fmt = "anthropic_messages"
    adapter = for_format(fmt)
    items, cut = session(fmt, PREFIX_TOKENS, 900)
    dropped, kept = items[:cut], items[cut:]
    half = adapter.make_user_item(_summary(adapter, dropped, keep=True))
    body = adapter.with_items({"model": "m", "max_tokens": 1024}, [half, *kept])
    long_session, _ = session(fmt, PREFIX_TOKENS * 10, 900)
    print(
        "\nThe k-th compaction of a session (transparent mode: the repair reads the user's messages of the whole "
        "conversation so far, `said`), anthropic_messages, results of 900 chars, summary keeping half; check + "
        f"repair, CPU ms, median of {RUNS} runs (fastest){', main → this tree' if on_main is not None else ''}; "
        "each run forgets what is remembered first, then with it remembered (the compactions before met the same "
        "messages):\n"
    )
    print("| compaction | the user's messages read | first meeting | remembered |\n|---:|---:|---:|---:|")
    for k in (1, 5, 10):
        said = user_messages(adapter, long_session[: len(long_session) * k // 10])
        now = repair.repair(adapter, body, dropped, [half], kept, budget, said=said)
        first = _time(_repaired, repair, adapter, body, dropped, half, kept, budget, said)
        warm = _time(_warm, adapter, body, dropped, half, kept, budget, said)
        then = then_warm = None
        if on_main is not None:
            old = on_main.repair.repair(on_main.adapters[fmt], body, dropped, [half], kept, budget, said=said)
            assert (old.text, old.restored, old.left_out, old.superseded) == (
                now.text,
                now.restored,
                now.left_out,
                now.superseded,
            )
            then = _time(_repaired, on_main.repair, on_main.adapters[fmt], body, dropped, half, kept, budget, said)
            then_warm = _time(on_main.repair.repair, on_main.adapters[fmt], body, dropped, [half], kept, budget, said)
        print(f"| {k} | {len(said):,} | {_cell(first, then)} | {_cell(warm, then_warm)} |")


def _corrections(on_main: Any) -> None:
    """A span of 2,000 of the user's corrections ("Now the ... instead."), each quoted by the summary: every
    one is found in the request and asks whether an earlier statement it replaces is there too, and the block,
    over its budget, is rendered again as it shrinks."""
    adapter = for_format("anthropic_messages")
    rng = random.Random(1)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(20_000)]
    items: list[dict[str, Any]] = []
    for _ in range(2_000):
        w = rng.sample(words, 4)
        items.append({"role": "user", "content": f"Now the {w[0]} should call {w[1]} with {w[2]} and {w[3]} instead."})
        items.append({"role": "assistant", "content": "ok"})
    dropped, kept = items[:-10], items[-10:]
    quoted = "Summary:\n" + "\n".join(m["content"] for m in dropped if m["role"] == "user")
    summary = adapter.make_user_item(quoted)
    body = adapter.with_items({"model": "m", "max_tokens": 10}, [summary, *kept])
    runs = 5

    def timed(module: Any, fmt_adapter: Any) -> tuple[float, float]:
        cpu = []
        for _ in range(runs):
            start = time.thread_time()
            _repaired(module, fmt_adapter, body, dropped, summary, kept, 10_000)
            cpu.append(time.thread_time() - start)
        return statistics.median(cpu) * 1000.0, min(cpu) * 1000.0

    now = timed(repair, adapter)
    then = timed(on_main.repair, on_main.adapters["anthropic_messages"]) if on_main is not None else None
    print(
        "\n2,000 of the user's corrections in the replaced span, each quoted by the summary (check + repair, "
        f"budget 10,000; CPU ms, median of {runs} runs (fastest)): {_cell(now, then)}"
    )


if __name__ == "__main__":
    main()
