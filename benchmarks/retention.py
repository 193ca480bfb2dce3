"""The retention check's cost per compaction (not a test): ``python benchmarks/retention.py``.

A synthetic agent session in each wire format, about 150,000 estimated tokens before the cut: per turn a
user instruction (sentences, a code span, a number with a unit, a path), the model's answer with code spans
and a ``read_file`` call, and a tool result holding a ~10 KB source file or a failing test run (error lines,
paths). The new request is what a summary compaction sends: the summary message (a summary that names half
of the dropped paths and errors and quotes the user's messages, plus 5 rehydrated files) and the kept turns.

Timed, CPU time of the calling thread, the median of :data:`RUNS` runs (and the fastest): the extraction
(:func:`~otel_context.compaction.retention.salient_items` on the dropped items), the lookup
(:func:`~otel_context.compaction.retention.measure_items`: those items in the new request) and the whole
:func:`~otel_context.compaction.retention.check`; the check when the summary keeps nothing, and the
microcompact variant on a history whose old tool results were cleared. "Before" is the code as it is on
``main`` (``git show main:...``: the check's module and the adapters' walk of a span, loaded in this process
under names of their own and run on the same inputs: :func:`before`; left out when git cannot show it), so
both columns share one run's load.
Then linearity: the shape with many small messages at 1x, 2x and 4x the prefix. Target (issue 39): at most 2 ms
for the ~1,400-message prefix ("results of 900 chars"), linear in the prefix.

Last, what a summary compaction runs on its span (issue 48): the check, the repair and the work trail on one walk
(:func:`~otel_context.compaction.summary.repair_and_trail`), beside main's check and repair on the same inputs,
the ranks of the user's sentences forgotten before each run (a first compaction of them), budgets of a 200,000
window; at 1x, 2x and 4x the ~1,400-message prefix. Target (issue 48): check + repair + trail at most 12 ms at
rest for the 1x case, linear in the prefix.
"""

from __future__ import annotations

import gc
import statistics
import subprocess
import sys
import time
import types
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


def _time(fn: Callable[..., Any], *args: Any) -> tuple[float, float]:
    """(median CPU ms, fastest CPU ms) over :data:`RUNS` runs. CPU time is the calling thread's: on a shared
    machine the wall clock also counts the waits for a core that other processes hold, and the fastest run is
    the cost with the least interference."""
    cpu: list[float] = []
    gc.disable()
    for _ in range(RUNS):
        start = time.thread_time()
        fn(*args)
        cpu.append(time.thread_time() - start)
    gc.enable()
    return statistics.median(cpu) * 1000.0, min(cpu) * 1000.0


def _show(path: str) -> str | None:
    """``path`` as it is on ``main`` (None when git cannot show it)."""
    root = Path(__file__).resolve().parents[1]
    shown = subprocess.run(["git", "show", f"main:{path}"], cwd=root, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def _load(name: str, path: str, source: str, **names: Any) -> types.ModuleType:
    """``source`` (``path`` on main) run as a module of its own ``name`` (``names`` set in it first)."""
    module = types.ModuleType(name)
    module.__dict__.update(names)
    sys.modules[name] = module  # its dataclasses look their module up there
    exec(compile(source, f"main:{path}", "exec"), module.__dict__)
    return module


#: The modules of the check and the repair, and of the walk of a span (the adapters' item_texts, with the
#: compact_json they call), as on ``main``.
_COMMON = "otel_context/formats/_common.py"
_ADAPTERS = {
    "anthropic_messages": ("otel_context/formats/anthropic_messages.py", "AnthropicMessagesAdapter"),
    "openai_chat": ("otel_context/formats/openai_chat.py", "OpenAIChatAdapter"),
    "openai_responses": ("otel_context/formats/openai_responses.py", "OpenAIResponsesAdapter"),
}


def before() -> types.SimpleNamespace | None:
    """The check (``retention``), the repair (``repair``) and the adapters (``adapters``, by format) as they
    are on ``main``, each loaded under its own name, the repair on main's check and the adapters on main's
    ``_common``; None when git cannot show them. Everything else is this tree's."""
    sources = {path: _show(path) for path in [_COMMON, *(p for p, _ in _ADAPTERS.values())]}
    retention_source = _show("otel_context/compaction/retention.py")
    repair_source = _show("otel_context/compaction/repair.py")
    if retention_source is None or repair_source is None or None in sources.values():
        return None
    common = _load("formats_common_on_main", _COMMON, sources[_COMMON] or "")
    adapters = {}
    for fmt, (path, cls) in _ADAPTERS.items():
        source = (sources[path] or "").replace("otel_context.formats._common", common.__name__)
        adapters[fmt] = getattr(_load(f"{fmt}_on_main", path, source), cls)()
    check = _load("retention_on_main", "otel_context/compaction/retention.py", retention_source)
    import_line = "from otel_context.compaction import retention as retention_mod\n"
    repairing = _load(
        "repair_on_main",
        "otel_context/compaction/repair.py",
        repair_source.replace(import_line, ""),
        retention_mod=check,
    )
    return types.SimpleNamespace(retention=check, repair=repairing, adapters=adapters)


def _cell(after: tuple[float, float], before: tuple[float, float] | None) -> str:
    text = f"{after[0]:.2f} ({after[1]:.2f})"
    return text if before is None else f"{before[0]:.2f} ({before[1]:.2f}) → **{text}**"


def _case(fmt: str, tokens: int, result_chars: int | None) -> dict[str, Any]:
    adapter = for_format(fmt)
    items, cut = session(fmt, tokens, result_chars)
    dropped = items[:cut]
    after = [adapter.make_user_item(_summary(adapter, dropped, keep=True)), *items[cut:]]
    lossy = [adapter.make_user_item(_summary(adapter, dropped, keep=False)), *items[cut:]]
    refs = adapter.tool_results(items)
    cleared = adapter.with_tool_results_replaced(items, {r.call_id: CLEARED_PLACEHOLDER for r in refs[:-3]})
    return {
        "adapter": adapter,
        "items": items,
        "dropped": dropped,
        "after": after,
        "lossy": lossy,
        "cleared": cleared,
        "body": adapter.with_items({"model": "m", "max_tokens": 1024}, after),
    }


def _figures(module: Any, case: dict[str, Any], adapter: Any = None) -> dict[str, tuple[float, float]]:
    """The timings of ``module``'s check on ``case``, with ``adapter`` (main's) or the case's own."""
    body, dropped, after = case["body"], case["dropped"], case["after"]
    adapter = adapter or case["adapter"]
    found = module.salient_items(adapter, dropped)
    lookup = getattr(module, "measure_items", None) or module._measure  # main's name for it: _measure
    return {
        "extract": _time(module.salient_items, adapter, dropped),
        "lookup": _time(lookup, found, adapter, body, after),
        "check": _time(module.check, adapter, body, dropped, after),
        "nothing": _time(module.check, adapter, body, dropped, case["lossy"]),
        "micro": _time(module.check_microcompact, adapter, body, case["items"], case["cleared"]),
    }


def main() -> None:
    main = before()
    print("## Retention check\n")
    print(
        f"One compaction of a ~{PREFIX_TOKENS:,}-token prefix: CPU ms, median of {RUNS} runs (fastest run)"
        + (", main → this tree" if main is not None else "")
        + ":\n"
    )
    print(
        "| format | dropped: items / chars | new request: items / chars | items checked | retention "
        "| extraction | lookup | check (summary keeping half) | check (summary keeping nothing) | microcompact |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    shapes: list[tuple[str, int | None]] = [
        (fmt, None) for fmt in ("anthropic_messages", "openai_chat", "openai_responses")
    ]
    # The same prefix as many small messages (tool results of 900 characters): the per-item work shows.
    shapes += [(fmt, 900) for fmt in ("anthropic_messages", "openai_chat", "openai_responses")]
    for fmt, result_chars in shapes:
        case = _case(fmt, PREFIX_TOKENS, result_chars)
        adapter = case["adapter"]
        result = retention.check(adapter, case["body"], case["dropped"], case["after"])
        assert result.retention is not None
        if main is not None:  # the same items, lost list and figure as before
            old = main.retention.check(main.adapters[fmt], case["body"], case["dropped"], case["after"])
            assert (old.retention, old.items_checked, old.lost) == (result.retention, result.items_checked, result.lost)
        now = _figures(retention, case)
        then = _figures(main.retention, case, main.adapters[fmt]) if main is not None else {}
        dropped_chars = sum(len(adapter.item_text(i)) for i in case["dropped"])
        after_chars = sum(len(adapter.item_text(i)) for i in case["after"])
        cells = " | ".join(_cell(now[k], then.get(k)) for k in ("extract", "lookup", "check", "nothing", "micro"))
        print(
            f"| {fmt}{'' if result_chars is None else f', results of {result_chars} chars'} | "
            f"{len(case['dropped']):,} / {dropped_chars:,} | {len(case['after']):,} / {after_chars:,} | "
            f"{result.items_checked} | {result.retention:.2f} | {cells} |"
        )
    print("\nLinearity: anthropic_messages, results of 900 chars, the prefix at 1x, 2x and 4x (this tree):\n")
    print("| prefix tokens | dropped: items / chars | extraction | lookup | check | check µs per 1,000 dropped chars |")
    print("|---:|---:|---:|---:|---:|---:|")
    for scale in (1, 2, 4):
        case = _case("anthropic_messages", PREFIX_TOKENS * scale, 900)
        adapter = case["adapter"]
        now = _figures(retention, case)
        dropped_chars = sum(len(adapter.item_text(i)) for i in case["dropped"])
        print(
            f"| {PREFIX_TOKENS * scale:,} | {len(case['dropped']):,} / {dropped_chars:,} | "
            f"{_cell(now['extract'], None)} | {_cell(now['lookup'], None)} | {_cell(now['check'], None)} | "
            f"{now['check'][0] * 1e6 / dropped_chars:.2f} |"
        )


#: The window whose budgets the repair and the trail get in the last table.
WINDOW = 200_000


def _forget(module: Any) -> None:
    """The remembered ranks of the user's sentences and messages forgotten: a first compaction of them."""
    for remembered in ("_sentence_priority", "_cut_and_ranked_kept"):
        forget = getattr(getattr(module, remembered, None), "cache_clear", None)
        if forget is not None:
            forget()


def _now(module: Any, *args: Any, forget: bool = True) -> Any:
    """This tree's check, repair and trail of one compaction, the ranks forgotten first (``forget``)."""
    from otel_context.compaction.summary import repair_and_trail

    if forget:
        _forget(module)
    return repair_and_trail(*args)


def _now_warm(module: Any, *args: Any) -> Any:
    return _now(module, *args, forget=False)


def _then(module: Any, *args: Any, forget: bool = True) -> Any:
    """Main's check and repair of one compaction (``args``: the repair's, ``said`` last), the ranks forgotten
    first (``forget``)."""
    if forget:
        _forget(module)
    return module.repair(*args[:-1], said=args[-1])


def _then_warm(module: Any, *args: Any) -> Any:
    return _then(module, *args, forget=False)


def with_trail() -> None:
    """The check, the repair and the trail of one compaction, beside main's check and repair (see the docstring)."""
    from otel_context.compaction import repair
    from otel_context.settings import Settings

    settings = Settings()
    effective = WINDOW - 20_000
    main = before()
    print(
        f"\nCheck + repair + trail (issue 48), ~{PREFIX_TOKENS:,}-token prefix of results of 900 chars, CPU ms, "
        f"median of {RUNS} runs (fastest); a first compaction of the span's sentences (their ranks forgotten before "
        "each run) and a later one (remembered)"
        + (": main's check + repair → this tree's check + repair + trail" if main is not None else "")
        + ":\n"
    )
    print(
        "| format | prefix | dropped: items / chars | check + repair + trail | the same, ranks remembered "
        "| trail tokens / budget | µs per 1,000 chars |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for fmt, scales in (("anthropic_messages", (1, 2, 4)), ("openai_chat", (1,)), ("openai_responses", (1,))):
        for scale in scales:
            case = _case(fmt, PREFIX_TOKENS * scale, 900)
            adapter, body, dropped = case["adapter"], case["body"], case["dropped"]
            head, kept = case["after"][:1], case["after"][1:]
            said = adapter.user_text_items(dropped)
            args = (adapter, body, dropped, head, kept, settings, WINDOW, effective, 1 << 30, said)
            timed, warm = _time(_now, repair, *args), _time(_now_warm, repair, *args)
            then = then_warm = None
            if main is not None:
                budget = main.repair.repair_budget(settings, WINDOW, effective)
                old = (main.repair, main.adapters[fmt], body, dropped, head, kept, budget, said)
                then, then_warm = _time(_then, *old), _time(_then_warm, *old)
            work = _now(repair, *args)[1]
            chars = sum(len(adapter.item_text(i)) for i in dropped)
            print(
                f"| {fmt} | {scale}x | {len(dropped):,} / {chars:,} | {_cell(timed, then)} | {_cell(warm, then_warm)} "
                f"| {work.tokens:,} / {work.budget:,} | {timed[0] * 1e6 / chars:.1f} |"
            )


if __name__ == "__main__":
    main()
    with_trail()
