"""The retention check's cost per compaction (not a test): ``python benchmarks/retention.py``.

A synthetic agent session in each wire format, about 150,000 estimated tokens before the cut: per turn a
user instruction (sentences, a code span, a number with a unit, a path), the model's answer with code spans
and a ``read_file`` call, and a tool result holding a ~10 KB source file or a failing test run (error lines,
paths). The new request is what a summary compaction sends: the summary message (a summary that names half
of the dropped paths and errors and quotes the user's messages, plus 5 rehydrated files) and the kept turns.
Timed: :func:`otel_context.compaction.retention.check` on (dropped items, new items), the median of 30 runs,
and the microcompact variant on a history whose old tool results were cleared. Target: < 5 ms per compaction.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from otel_context.compaction import retention
from otel_context.compaction.prompt import summary_message_text
from otel_context.formats import for_format
from otel_context.formats.base import CLEARED_PLACEHOLDER
from otel_context.tokens import estimate_items

PREFIX_TOKENS = 150_000
RUNS = 40


def _source_file(path: str, turn: int) -> str:
    """About 10 KB of Python-like source, with the error handling real code has (not error lines)."""
    lines = [f'"""{path}: module {turn}."""', "import logging", "", "log = logging.getLogger(__name__)", ""]
    for i in range(60):
        lines += [
            f"def handler_{turn}_{i}(request, retries=3, timeout=2.5):",
            f"    # read config_{i}.yaml and retry on ValueError; see docs/handlers/h{i}.md",
            "    try:",
            f"        value = parse(request.body, field='f{i}')",
            "    except (KeyError, ValueError) as exc:",
            f"        log.error('handler {i} failed: %s', exc)",
            "        raise",
            f"    return value * {i} / max(1, retries)",
            "",
        ]
    return "\n".join(lines)


def _test_run(turn: int) -> str:
    return "\n".join(
        [
            "============================= test session starts ==============================",
            f"collected {40 + turn} items",
            "",
            f"tests/test_mod{turn}.py ........F.....",
            "",
            "=================================== FAILURES ===================================",
            f"___________________________ test_parse_{turn} ___________________________",
            f"    def test_parse_{turn}():",
            f">       assert parse('x{turn}') == {turn}",
            f"E       AssertionError: assert None == {turn}",
            "",
            f"src/mod{turn}/parse.py:{10 + turn}: AssertionError",
            f"FAILED tests/test_mod{turn}.py::test_parse_{turn} - AssertionError: assert None == {turn}",
            f"========================= 1 failed, {39 + turn} passed in {turn % 9 + 1}.2{turn % 7}s =========================",
            *[f"src/mod{turn}/util_{k}.py:{k}: note: checked {k} call sites" for k in range(40)],
        ]
    )


def _user(turn: int) -> str:
    return (
        f"Next, fix `parse_{turn}` in src/mod{turn}/parse.py so that it returns {turn} for 'x{turn}'. "
        f"Keep the public API unchanged and never touch the migrations. The budget is {100 + turn} ms per call. "
        "Run the tests afterwards."
    )


def session(fmt: str, tokens: int, result_chars: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """A history of about ``tokens`` estimated tokens, then six more turns; returns (items, cut index).
    ``result_chars``: tool results cut to that length (many small messages instead of fewer large ones)."""
    adapter = for_format(fmt)
    items: list[dict[str, Any]] = []
    turn = 0
    cut = None
    cut_turn = 0
    while True:
        if cut is None and estimate_items(adapter, items) >= tokens:
            cut, cut_turn = len(items), turn
        if cut is not None and turn >= cut_turn + 6:
            break
        path = f"src/mod{turn}/parse.py"
        result = (_test_run(turn) if turn % 3 == 2 else _source_file(path, turn))[:result_chars]
        answer = f"I read `{path}`: `parse_{turn}` returns `None` for 'x{turn}'; the loop takes 3.5 s."
        call_id = f"call_{turn:04d}"
        if fmt == "anthropic_messages":
            items += [
                {"role": "user", "content": _user(turn)},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": answer},
                        {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": path}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}]},
                {"role": "assistant", "content": f"Done with turn {turn}."},
            ]
        elif fmt == "openai_chat":
            items += [
                {"role": "user", "content": _user(turn)},
                {
                    "role": "assistant",
                    "content": answer,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call_id, "content": result},
                {"role": "assistant", "content": f"Done with turn {turn}."},
            ]
        else:
            items += [
                {"role": "user", "content": _user(turn)},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": "read_file",
                    "arguments": f'{{"path": "{path}"}}',
                },
                {"type": "function_call_output", "call_id": call_id, "output": result},
                {"role": "assistant", "content": f"Done with turn {turn}."},
            ]
        turn += 1
    assert cut is not None
    return items, cut


def _summary(adapter: Any, dropped: list[dict[str, Any]], keep: bool) -> str:
    """With ``keep``: a summary that names half of the dropped paths, errors, identifiers and numbers, quotes
    every user message and restores 5 files. Without: one line (every item lost, the check's worst case)."""
    if not keep:
        return summary_message_text("1. Primary request: fix the parsers.")
    items = retention.salient_items(adapter, dropped)
    kept = [text for i, (kind, text) in enumerate(items) if kind != "instruction" and i % 2 == 0]
    users = adapter.user_text_items(dropped)
    summary = "\n".join(["1. Primary request: fix the parsers.", *kept, "6. All user messages:", *users])
    files = "\n".join(f'<file path="src/mod{t}/parse.py">\n{_source_file("p", t)}\n</file>' for t in range(5))
    return summary_message_text(summary, "Files read before the compaction:\n" + files)


def _time(fn: Callable[..., Any], *args: Any) -> tuple[float, float, float]:
    """(CPU ms, wall ms, lowest CPU ms) over :data:`RUNS` runs (medians, and the fastest run). CPU time is the
    calling thread's: on this shared 2-core box the wall clock also counts the waits for a core that other
    processes hold, and the fastest run is the cost with the least interference."""
    cpu: list[float] = []
    wall: list[float] = []
    gc.disable()
    for _ in range(RUNS):
        start_cpu, start = time.thread_time(), time.perf_counter()
        fn(*args)
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    gc.enable()
    return statistics.median(cpu) * 1000.0, statistics.median(wall) * 1000.0, min(cpu) * 1000.0


def main() -> None:
    print("## Retention check\n")
    print(
        f"One compaction of a ~{PREFIX_TOKENS:,}-token prefix, {RUNS} runs: CPU / wall ms (medians), "
        "and the fastest run's CPU ms:\n"
    )
    print(
        "| format | dropped: items / chars | new request: items / chars | items checked | retention "
        "| summary keeping half | summary keeping nothing | microcompact |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    shapes: list[tuple[str, int | None]] = [
        (fmt, None) for fmt in ("anthropic_messages", "openai_chat", "openai_responses")
    ]
    # The same prefix as many small messages (tool results of 900 characters): the per-item work shows.
    shapes += [("anthropic_messages", 900), ("openai_chat", 900)]
    for fmt, result_chars in shapes:
        adapter = for_format(fmt)
        items, cut = session(fmt, PREFIX_TOKENS, result_chars)
        dropped = items[:cut]
        after = [adapter.make_user_item(_summary(adapter, dropped, keep=True)), *items[cut:]]
        lossy = [adapter.make_user_item(_summary(adapter, dropped, keep=False)), *items[cut:]]
        body = adapter.with_items({"model": "m", "max_tokens": 1024}, after)
        result = retention.check(adapter, body, dropped, after)
        assert result.retention is not None
        half = _time(retention.check, adapter, body, dropped, after)
        nothing = _time(retention.check, adapter, body, dropped, lossy)
        # Microcompact: every tool result but the newest three cleared.
        refs = adapter.tool_results(items)
        cleared = adapter.with_tool_results_replaced(items, {r.call_id: CLEARED_PLACEHOLDER for r in refs[:-3]})
        micro = _time(retention.check_microcompact, adapter, body, items, cleared)
        dropped_chars = sum(len(adapter.item_text(i)) for i in dropped)
        after_chars = sum(len(adapter.item_text(i)) for i in after)
        print(
            f"| {fmt}{'' if result_chars is None else f', results of {result_chars} chars'} | "
            f"{len(dropped):,} / {dropped_chars:,} | {len(after):,} / {after_chars:,} | "
            f"{result.items_checked} | {result.retention:.2f} | {half[0]:.2f} / {half[1]:.2f} ({half[2]:.2f}) "
            f"| {nothing[0]:.2f} / {nothing[1]:.2f} ({nothing[2]:.2f}) | {micro[0]:.2f} / {micro[1]:.2f} "
            f"({micro[2]:.2f}) |"
        )


if __name__ == "__main__":
    main()
