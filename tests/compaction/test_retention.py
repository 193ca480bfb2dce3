"""The retention check on plain items, in each wire format: which salient items it collects from a dropped
span, what it leaves out, and which it finds in a new request (otel_context/compaction/retention.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_context import Compactor, semconv
from otel_context.compaction import retention
from otel_context.compaction.prompt import summary_message_text
from otel_context.formats import for_format
from otel_context.formats.base import CLEARED_PLACEHOLDER
from otel_context.settings import Settings
from tests.compaction import retention_reference
from tests.compaction.support import Otel
from tests.values import attrs_of

FORMATS = ["anthropic_messages", "openai_chat", "openai_responses"]

USER = (
    "Please fix `parse_config()` in src/app/config.py before Friday. It must answer in 250 ms or less.\n"
    "Use 4 GiB at most!"
)
ANSWER = "Reading ./src/app/config.py: `CONFIG_PATH` is set; the run took 3.5s and 95% passed."
TEST_RUN = "\n".join(
    [
        "E   AssertionError: assert 3 == 4",
        "FAILED tests/test_config.py::test_load - AssertionError: assert 3 == 4",
        "error[E0308]: mismatched types",
        "fatal: not a git repository",
        "npm ERR! code ENOENT",
        # Not error lines: handling code, prose, a traceback header; not identifiers or numbers: tool output.
        "    except ValueError:",
        "    log.error('x')",
        "no errors found in `tool_only_identifier`, took 99 ms",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/json/decoder.py", line 3',
    ]
)
EXPECTED = [
    (semconv.RETENTION_KIND_INSTRUCTION, "Please fix `parse_config()` in src/app/config.py before Friday."),
    (semconv.RETENTION_KIND_INSTRUCTION, "It must answer in 250 ms or less."),
    (semconv.RETENTION_KIND_INSTRUCTION, "Use 4 GiB at most!"),
    (semconv.RETENTION_KIND_ERROR, "AssertionError: assert 3 == 4"),
    (semconv.RETENTION_KIND_ERROR, "FAILED tests/test_config.py::test_load - AssertionError: assert 3 == 4"),
    (semconv.RETENTION_KIND_ERROR, "error[E0308]: mismatched types"),
    (semconv.RETENTION_KIND_ERROR, "fatal: not a git repository"),
    (semconv.RETENTION_KIND_ERROR, "ERR! code ENOENT"),
    (semconv.RETENTION_KIND_PATH, "src/app/config.py"),
    (semconv.RETENTION_KIND_PATH, "tests/test_config.py"),
    (semconv.RETENTION_KIND_PATH, "usr/lib/python3.11/json/decoder.py"),
    (semconv.RETENTION_KIND_IDENTIFIER, "parse_config"),
    (semconv.RETENTION_KIND_IDENTIFIER, "CONFIG_PATH"),
    (semconv.RETENTION_KIND_NUMBER, "250 ms"),
    (semconv.RETENTION_KIND_NUMBER, "4 GiB"),
    (semconv.RETENTION_KIND_NUMBER, "3.5s"),
    (semconv.RETENTION_KIND_NUMBER, "95%"),
]


def conversation(fmt: str, user: str = USER, result: str = TEST_RUN) -> list[dict[str, Any]]:
    """A user ask, the model's answer with a tool call, the tool's result, a closing answer."""
    if fmt == "anthropic_messages":
        return [
            {"role": "user", "content": [{"type": "text", "text": user}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": ANSWER},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "pytest"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]},
            {"role": "assistant", "content": "Done."},
        ]
    if fmt == "openai_chat":
        return [
            {"role": "user", "content": user},
            {
                "role": "assistant",
                "content": ANSWER,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": result},
            {"role": "assistant", "content": "Done."},
        ]
    return [
        {"role": "user", "content": [{"type": "input_text", "text": user}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ANSWER}]},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": '{"cmd": "pytest"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": result},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_salient_items_of_a_span_are_the_same_in_every_format(fmt: str) -> None:
    adapter = for_format(fmt)
    assert retention.salient_items(adapter, conversation(fmt)) == EXPECTED


@pytest.mark.parametrize("fmt", FORMATS)
def test_our_summary_message_gives_no_instruction_but_its_content_is_checked(fmt: str) -> None:
    adapter = for_format(fmt)
    summary = adapter.make_user_item(summary_message_text("1. Primary request: fix src/app/config.py quickly now."))
    items = retention.salient_items(adapter, [summary])
    # The earlier summary's path is content a later summary must carry; its wrapper sentences are ours.
    assert items == [(semconv.RETENTION_KIND_PATH, "src/app/config.py")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_check_finds_items_anywhere_in_the_new_request_and_names_the_rest(fmt: str) -> None:
    adapter = for_format(fmt)
    dropped = conversation(fmt)
    kept_text = "\n".join(
        [
            USER,  # the user's message carried verbatim: its 3 sentences, a path, an identifier, 2 numbers
            "Errors: AssertionError: assert 3 == 4 (fixed); fatal: not a git repository.",
            "It ran 3.5 s; `CONFIG_PATH` stays.",  # "3.5s" written with a space still counts
        ]
    )
    after = [adapter.make_user_item(summary_message_text(kept_text)), *dropped[-1:]]
    body = adapter.with_items({"model": "m", "max_tokens": 10}, after)
    if fmt == "anthropic_messages":
        body = {**body, "system": "Repository layout: tests/test_config.py holds the loader tests."}
    result = retention.check(adapter, body, dropped, after)
    lost = [
        (semconv.RETENTION_KIND_ERROR, "FAILED tests/test_config.py::test_load - AssertionError: assert 3 == 4"),
        (semconv.RETENTION_KIND_ERROR, "error[E0308]: mismatched types"),
        (semconv.RETENTION_KIND_ERROR, "ERR! code ENOENT"),
        *([(semconv.RETENTION_KIND_PATH, "tests/test_config.py")] if fmt != "anthropic_messages" else []),
        (semconv.RETENTION_KIND_PATH, "usr/lib/python3.11/json/decoder.py"),
        (semconv.RETENTION_KIND_NUMBER, "95%"),
    ]
    assert list(result.lost) == lost
    assert result.items_checked == len(EXPECTED)
    assert result.retention == pytest.approx((len(EXPECTED) - len(lost)) / len(EXPECTED))


@pytest.mark.parametrize("fmt", FORMATS)
def test_microcompact_checks_the_results_it_cleared(fmt: str) -> None:
    adapter = for_format(fmt)
    before = conversation(fmt)
    (ref,) = adapter.tool_results(before)
    after = adapter.with_tool_results_replaced(before, {ref.call_id: CLEARED_PLACEHOLDER})
    result = retention.check_microcompact(adapter, {}, before, after)
    # Only what the tool result held: error lines and paths (numbers and code spans of tool output are noise).
    tool_items = [(k, t) for k, t in EXPECTED if k in (semconv.RETENTION_KIND_ERROR, semconv.RETENTION_KIND_PATH)]
    tool_items.remove((semconv.RETENTION_KIND_PATH, "src/app/config.py"))
    assert list(result.lost) == tool_items
    assert result.retention == 0.0
    # Nothing cleared, nothing to check.
    assert retention.check_microcompact(adapter, {}, before, before) == retention.Retention(None, 0, ())


def test_items_are_deduplicated_and_capped_evenly_from_oldest_to_newest() -> None:
    adapter = for_format("anthropic_messages")
    listing = "\n".join(f"src/pkg/module_{i:03d}.py" for i in range(100))
    dropped = conversation("anthropic_messages", user="Look.", result=listing + "\n" + listing)
    paths = [t for k, t in retention.salient_items(adapter, dropped) if k == semconv.RETENTION_KIND_PATH]
    cap = retention.CAPS[semconv.RETENTION_KIND_PATH]
    assert len(paths) == cap == len(set(paths))
    assert paths[0] == "src/app/config.py"  # the answer's path comes first (in order of the text)
    assert paths[-1] >= "src/pkg/module_090.py"  # the sample reaches the end of the listing
    assert retention.salient_items(adapter, dropped) == retention.salient_items(adapter, dropped)


def test_a_long_span_is_sampled_from_its_start_to_its_end() -> None:
    """A path named thousands of times (a grep) does not crowd out the rest of the text: each part of the text
    gives at most a few matches (a bounded cost), so the paths of the parts after the flood are still read."""
    adapter = for_format("openai_chat")
    grep = "\n".join(f"src/hot.py:{i}: match" for i in range(20_000))
    tail = "\n".join(f"src/cold/file_{i}.py" for i in range(3_000))
    dropped = conversation("openai_chat", user="Look.", result=grep + "\n" + tail)
    every = retention.salient_items(adapter, dropped, caps=retention.UNCAPPED)
    paths = [t for k, t in every if k == semconv.RETENTION_KIND_PATH]
    assert paths[:2] == ["src/app/config.py", "src/hot.py"]
    assert len(paths) > 10
    assert all(p.startswith("src/cold/file_") for p in paths[2:])
    numbers = [int(p.removeprefix("src/cold/file_").removesuffix(".py")) for p in paths[2:]]
    assert numbers[-1] > 2_000  # the last part of the text is read too
    # The bounded reading: at most PATH_HITS_PER_WINDOW mentions in each of the WINDOWS parts.
    assert len(paths) <= retention.WINDOWS * retention.PATH_HITS_PER_WINDOW


def test_the_explicit_compactor_reports_retention(otel: Otel) -> None:
    """The explicit API runs the same cascade: a summarize function that drops the test run's errors."""
    later = conversation("anthropic_messages", user="Next, ship it now.", result="All 12 tests passed.")
    messages = [*conversation("anthropic_messages"), *later]

    def summarize(request: dict[str, Any]) -> str:
        return "<summary>" + USER + " Then " + ANSWER + "</summary>"

    compactor = Compactor(summarize, settings=Settings(keep_recent_messages=4))
    result = compactor.compact(messages, model="claude-sonnet-4-6", wire_format="anthropic_messages")
    assert result.compacted
    (span,) = otel.compact_spans()
    attrs = attrs_of(span)
    assert attrs[semconv.COMPACTION_TRIGGER_SOURCE] == semconv.TRIGGER_MANUAL
    assert attrs[semconv.COMPACTION_CUT_INDEX] == 4
    assert attrs[semconv.COMPACTION_ITEMS_CHECKED] == len(EXPECTED) + 1  # and the work trail's command: pytest
    assert 0 < attrs[semconv.COMPACTION_RETENTION] < 1
    assert not span.events or all(e.name != semconv.COMPACTION_LOST_EVENT for e in span.events)  # NO_CONTENT
    (point,) = otel.metric_points(semconv.METRIC_COMPACTION_RETENTION)
    assert point.attributes == {
        semconv.COMPACTION_TRIGGER_SOURCE: semconv.TRIGGER_MANUAL,
        semconv.COMPACTION_STRATEGY: semconv.STRATEGY_SUMMARY,
    }
    assert point.sum == pytest.approx(attrs[semconv.COMPACTION_RETENTION])
    json.dumps(result.messages)  # the caller's messages back, plain JSON


def test_numbers_need_a_unit_and_stand_on_their_own() -> None:
    adapter = for_format("openai_chat")
    user = "Builds v1.2 s and mod12 ms are not numbers here; 12 ms, 1,500 tokens and 2µs are."
    items = retention.salient_items(adapter, [adapter.make_user_item(user)])
    assert [t for k, t in items if k == semconv.RETENTION_KIND_NUMBER] == ["12 ms", "1,500 tokens", "2µs"]


# -- the same results as before the speed-up (tests/compaction/retention_reference.py), on random histories --

#: Pieces of text the extractors react to (and near misses), plus noise: joined at random, some repeated
#: hundreds of times so that the texts pass the size at which each part of the text is sampled (WINDOWS).
FRAGMENTS = (
    "src/app/main.py",
    "./config.yaml",
    "~/proj/lib.rs:12:4",
    "a.b.c.json",
    "pkg@1.2+x/file_2.tsx",
    ".env",
    "call.py(",
    "mod.pyc",
    "/usr/lib/python3.11/json/decoder.py",
    "ValueError: bad value",
    "E   AssertionError: assert 1 == 2",
    "error[E0308]: mismatched types",
    "fatal: not a git repository",
    "npm ERR! code ENOENT",
    "ERROR the build broke",
    "FAILED tests/t.py::test_x - boom",
    "FAIL: test_y",
    "panic: index out of range",
    "java.lang.NullPointerException: null",
    "except ValueError:",
    "log.error('x')",
    "ERR: short",
    "KeyError:",
    "E   decimal.InvalidOperation: x",
    "E     + nested",
    "src/x.ts(12,5): error TS2322: bad",
    "error TS2322 no colon",
    "deploy failed: oom",
    "log.error('fetch failed: %s')",
    "Failed to start",
    "Nothing. Failed to see",
    "level=error msg=x",
    '"level":"error"',
    "500 Internal Server Error",
    "Traceback (most recent call last):",
    '  File "a.py", line 1',
    "tests/t.py::test_a FAILED   [ 44%]",
    "12:5   error  'x' is never used  no-unused-vars",
    "\u280b FAILED spinning",
    "ERROR at setup of test_z ____",
    "XFAIL tests/t.py::x - known",
    "error: cut\r[===>  ] 3/9",
    "- x failed: y",
    "250 ms",
    "3.5s",
    "4 GiB",
    "95%",
    "1,500 tokens",
    "2µs",
    "v1.2 s",
    "mod12 ms",
    "12x",
    "0.5 secs",
    "é7 ms",
    "`parse_config()`",
    "`CONFIG_PATH`",
    "`123`",
    "`a b`",
    "``",
    "`x`y`",
    "Please fix the parser before Friday.",
    "Keep the public API stable! Really?",
    "Never touch the migrations",
    "ok",
    "\n",
    " ",
    "  ",
    "\\n",
    "\t",
    ". ",
    "! ",
    "? ",
    ":",
    "rror",
    "日本語のテキスト",
)


@st.composite
def texts(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=14))
    text = draw(st.sampled_from(["", " ", "\n"])).join(parts)
    return text * draw(st.sampled_from([1, 1, 1, 2, 60, 400]))


@st.composite
def items_of(draw: st.DrawFn, fmt: str) -> dict[str, Any]:
    """One item of ``fmt``, of the shapes agents send (and a few rarer ones)."""
    text = draw(texts())
    if draw(st.integers(0, 9)) == 0:  # our own summary message, maybe after white space
        text = draw(st.sampled_from(["", " \n"])) + summary_message_text(text)
    shape = draw(st.integers(0, 5))
    call = {"path": draw(st.sampled_from(["src/a.py", "x", "notes/todo.md"]))}
    shapes: list[dict[str, Any]]
    if fmt == "anthropic_messages":
        shapes = [
            {"role": "user", "content": text},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "text", "text": "Also this."}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": text}]},
            {"role": "assistant", "content": text},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "tool_use", "id": "t", "name": "read", "input": call},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": text}, {"type": "text", "text": "Done."}],
            },
        ]
    elif fmt == "openai_chat":
        shapes = [
            {"role": "user", "content": text},
            {"role": "user", "content": [{"type": "text", "text": text}]},
            {"role": "tool", "tool_call_id": "c", "content": text},
            {"role": "assistant", "content": text},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "read", "arguments": json.dumps(call)}}
                ],
            },
            {"role": "assistant", "content": None, "refusal": text},
        ]
    else:
        shapes = [
            {"role": "user", "content": text},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
            {"type": "function_call_output", "call_id": "c", "output": text},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]},
            {"type": "function_call", "call_id": "c", "name": "read", "arguments": json.dumps(call)},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]},
        ]
    return shapes[shape]


@st.composite
def compactions(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(format, dropped items, the new request's items): the summary quotes a random part of the dropped text."""
    fmt = draw(st.sampled_from(FORMATS))
    dropped = draw(st.lists(items_of(fmt), max_size=12))
    adapter = for_format(fmt)
    quoted = [t for t in (adapter.item_text(i) for i in dropped) if draw(st.booleans())]
    summary = adapter.make_user_item(summary_message_text("\n".join(t[: draw(st.integers(0, 400))] for t in quoted)))
    return fmt, dropped, [summary, *draw(st.lists(items_of(fmt), max_size=3))]


def as_fields(result: Any) -> tuple[Any, ...]:
    return (result.retention, result.items_checked, result.lost)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(compactions())
def test_the_check_gives_what_it_gave_before_it_was_made_faster(case: tuple[str, list[Any], list[Any]]) -> None:
    fmt, dropped, after = case
    adapter = for_format(fmt)
    body = adapter.with_items({"model": "m", "max_tokens": 10}, after)
    items = retention.salient_items(adapter, dropped)
    assert items == retention_reference.salient_items(adapter, dropped)
    tool_texts = [adapter.item_text(i) for i in after]
    assert retention.salient_items(adapter, dropped, tool_texts=tool_texts) == retention_reference.salient_items(
        adapter, dropped, tool_texts=tool_texts
    )
    result = retention.check(adapter, body, dropped, after)
    assert as_fields(result) == as_fields(retention_reference.check(adapter, body, dropped, after))
    # The lookup alone, on the items extracted once, says the same.
    assert retention.measure_items(items, adapter, body, after) == result
    assert retention.lookup(items, retention.request_text(adapter, body, after)) == result
    # Microcompact: every tool result of the dropped span cleared.
    cleared = adapter.with_tool_results_replaced(
        dropped, {r.call_id: CLEARED_PLACEHOLDER for r in adapter.tool_results(dropped)}
    )
    assert as_fields(retention.check_microcompact(adapter, body, dropped, cleared)) == as_fields(
        retention_reference.check_microcompact(adapter, body, dropped, cleared)
    )


def test_a_number_is_found_with_or_without_the_space_before_its_unit() -> None:
    number = semconv.RETENTION_KIND_NUMBER
    items = [(number, "250 ms"), (number, "3.5s"), (number, "4 GiB")]
    result = retention.lookup(items, "took 250ms, then 3.5 s")
    assert result.lost == ((number, "4 GiB"),)
    assert result.items_checked == 3


def _errors(text: str) -> list[str]:
    found: dict[str, None] = {}
    retention._error_lines(text, found)
    return list(found)


def test_error_lines_of_what_build_tools_test_runners_and_services_print() -> None:
    """The error lines of real tool output: each form gives its line (from the error word, or whole when its
    subject comes first), whatever the words of the message."""
    output = "\n".join(
        [
            "$ npx tsc --noEmit",
            "src/pages/Report.tsx(88,14): error TS2345: Argument of type 'number' is not assignable.",
            "src/api/client.ts:12:5 - error TS7006: Parameter 'x' implicitly has an 'any' type.",
            "Program.cs(10,5): error CS0103: The name 'total' does not exist in the current context",
            "error TS5023: Unknown compiler option 'strictest'.",
            "_________________________ test_refund_rounding _________________________",
            "E   decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]",
            "E   assert Decimal('0.10') == Decimal('0.1')",
            "E     +  where Decimal('0.10') = round_amount(Decimal('0.095'))",
            "Traceback (most recent call last):",
            '  File "/srv/app/worker.py", line 41, in run',
            "    job()",
            "KeyboardInterrupt: stopped by the supervisor",
            "2024-05-02T10:01:22Z Failed to connect to postgres://db:5432: connection refused",
            "Failed to compile.",
            "integration-tests failed: 3 of 120 checks did not pass",
            "Failed: DID NOT RAISE <class 'ValueError'>",
            'time=2024-05-02T10:01:23Z level=error msg="lease renewal failed" trace_id=4bf92f3577b34da6',
            '{"level":"error","ts":1714644083.2,"msg":"upload failed","bucket":"assets-prod"}',
            "< HTTP/1.1 500 Internal Server Error",
        ]
    )
    assert _errors(output) == [
        "error TS2345: Argument of type 'number' is not assignable.",
        "error TS7006: Parameter 'x' implicitly has an 'any' type.",
        "error CS0103: The name 'total' does not exist in the current context",
        "error TS5023: Unknown compiler option 'strictest'.",
        "decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]",
        "assert Decimal('0.10') == Decimal('0.1')",
        "KeyboardInterrupt: stopped by the supervisor",
        "Failed to connect to postgres://db:5432: connection refused",
        "Failed to compile.",
        "integration-tests failed: 3 of 120 checks did not pass",
        "Failed: DID NOT RAISE <class 'ValueError'>",
        'time=2024-05-02T10:01:23Z level=error msg="lease renewal failed" trace_id=4bf92f3577b34da6',
        '{"level":"error","ts":1714644083.2,"msg":"upload failed","bucket":"assets-prod"}',
        "< HTTP/1.1 500 Internal Server Error",
    ]


def test_prose_and_code_that_mention_errors_or_failures_are_not_error_lines() -> None:
    text = "\n".join(
        [
            "The error handling in the parser looks fine, and the retry failed to matter.",
            "I looked at the error TS reports for the legacy module; nothing new.",
            "Nothing changed. Failed to see why at first, then it was obvious.",
            "    log.error('fetch failed: %s', exc)",
            '    raise RuntimeError(f"upload failed: {key}")',
            'level=info msg="retrying after a failed attempt" attempt=2',
            "E     +  where 3 = len(rows)",
            "We should avoid an Internal Server Errors page.",
            "errors: 0, warnings: 2",
        ]
    )
    assert _errors(text) == []


def test_a_traceback_gives_its_exception_line_whatever_the_exceptions_name() -> None:
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/srv/app/billing.py", line 88, in prorate',
            "    return amount / days",
            "           ~~~~~~~^~~~~~",
            "decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]",
            "",
            "During handling of the above exception, another exception occurred:",
        ]
    )
    assert _errors(text) == ["decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]"]
    # Found by where it stands, not by itself: a repair must carry it (retention.stands_alone).
    assert not retention.stands_alone(semconv.RETENTION_KIND_ERROR, _errors(text)[0])
    assert retention.stands_alone(semconv.RETENTION_KIND_ERROR, "error TS2345: Argument of type 'number'.")
    assert retention.stands_alone(semconv.RETENTION_KIND_PATH, "src/a.py")


def test_a_compilers_location_is_a_path_and_a_call_is_not() -> None:
    found: dict[str, None] = {}
    retention._paths("src/charts/Legend.tsx(41,7): error TS2322\nProgram.cs(10,5)\njson.py(data)\nrun.py(", found)
    assert list(found) == ["src/charts/Legend.tsx", "Program.cs"]


def test_a_path_named_once_among_a_dense_listing_is_read() -> None:
    """A grep in a long span: its parts hold many mentions each, and the one path named once is still read."""
    adapter = for_format("anthropic_messages")
    hits = [f"src/module_{i % 7}.py:{i}: handler_{i}(request)" for i in range(400)]
    hits.insert(200, "src/hooks/chart-theme/useChartTheme.ts:9:export function useChartTheme() {")
    assert 8 < len(hits) / retention.WINDOWS < retention.PATH_HITS_PER_WINDOW  # denser than 8 mentions a part
    dropped = conversation("anthropic_messages", user="Look.", result="\n".join(hits))
    every = retention.salient_items(adapter, dropped, caps=retention.UNCAPPED)
    assert (semconv.RETENTION_KIND_PATH, "src/hooks/chart-theme/useChartTheme.ts") in every


def test_a_match_across_the_cut_between_two_parts_is_read() -> None:
    """The text is read in parts; an error word that a part's end cuts is read whole all the same."""
    line = 'level=error msg="offset commit failed" consumer_group=orders-cg partition=7'
    for shift in range(0, 40, 3):
        text = "x" * (retention.WINDOWS * 300 - shift) + "\n" + line + "\n" + "y" * 20_000
        assert line in _errors(text), shift


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([semconv.RETENTION_KIND_PATH, semconv.RETENTION_KIND_NUMBER]),
            st.sampled_from(["a.py", "b c", "250 ms", "250ms", "x\ny", "y\n", "\na", "3 s", "q"]),
        ),
        max_size=8,
    ),
    st.text(alphabet="ab.py cqxy250ms3\n", max_size=30),
    st.text(alphabet="ab.py cqxy250ms3\n", max_size=30),
)
def test_the_lookup_of_an_added_block_is_the_lookup_of_the_joined_text(
    items: list[tuple[str, str]], text: str, added: str
) -> None:
    """The repair's second lookup (the request, then its block) looks for the lost items in the block alone:
    the same result as the whole lookup, items with a line break (which could cross the join) included."""
    before = retention.lookup(items, text)
    assert retention.lookup_added(items, before, text, added) == retention.lookup(items, text + "\n" + added)


def test_real_tool_output_gives_its_errors_and_none_of_its_progress_lines() -> None:
    """Issue 48: per-line noise is not an error (pytest -v's ``FAILED   [ 44%]`` beside the ``FAILED tests/...``
    line that says the same, a heading, an expected failure, cargo's ``Compiling``, a bar, a spinner), and what
    the tools report as errors is (eslint's rows included)."""
    from tests.compaction import tool_outputs as out

    assert _errors(out.PYTEST_V) == [
        "KeyError: 'LEDGER_URL'",
        "AssertionError: assert <Refund id=2> is <Refund id=1>",
        "FAILED tests/test_refunds.py::test_prorate_by_days - decimal.InvalidOperation: "
        "[<class 'decimal.DivisionUndefined'>]",
        "FAILED tests/test_refunds.py::test_idempotent_retry - AssertionError: assert <Refund id=2> is <Refund id=1>",
        "ERROR tests/test_refunds.py::test_zero_amount - KeyError: 'LEDGER_URL'",
    ]
    assert _errors(out.CARGO) == [
        "error[E0308]: mismatched types",
        "error: could not compile `ledger` (lib) due to 1 previous error; 1 warning emitted",
    ]
    assert _errors(out.CARGO_TEST) == ["error: test failed, to rerun pass `--lib`"]
    assert _errors(out.TSC) == [
        "error TS2345: Argument of type 'number' is not assignable to parameter of type 'string'.",
        "error TS2322: Type 'undefined' is not assignable to type 'Session'.",
    ]
    assert _errors(out.ESLINT) == [
        "12:5   error    'legendItems' is assigned a value but never used  @typescript-eslint/no-unused-vars",
        '7:1  error  React Hook "useEffect" is called conditionally  react-hooks/rules-of-hooks',
    ]
    assert _errors(out.TRACEBACK) == ["ValueError: invalid literal for int() with base 10: 'three'"]
    assert _errors(out.NPM) == [
        "ERR! code ERESOLVE",
        "ERR! ERESOLVE unable to resolve dependency tree",
        "ERR! Found: react@18.2.0",
    ]
    assert _errors(out.JEST) == ["FAIL  src/components/Chart.test.tsx"]
    # A line a terminal overwrote: the part before the carriage return; a spinner's frame is none.
    assert _errors("error: cannot reach the registry\r[=====>    ] 3/9\n\u280b FAILED to spin up, retrying") == [
        "error: cannot reach the registry"
    ]
