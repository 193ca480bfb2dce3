"""Issue 39: a summary is checked against what it replaces and repaired before it is used.

Through the public ``Compactor`` with function summarizers that lose things as real ones do (a long summary
that omits a rule, an unhelpful one that keeps nothing specific), and on the compact span: the figures before
and after the repair, what it restored by kind, what did not fit the budget.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_context import Compactor, semconv
from otel_context.compaction import repair as repair_mod
from otel_context.compaction.prompt import RESTORED_HEADER, SUMMARY_MESSAGE_HEADER, SUPERSEDED_MARK, restored_user_lines
from otel_context.compaction.summary import select_user_messages, verbatim_form
from otel_context.formats import for_format
from otel_context.settings import Settings
from tests.compaction.support import Otel
from tests.values import attrs_of

MODEL = "claude-sonnet-4-6"
RULE = "Never add a dependency on the requests library, the service must stay on the standard library."
UNHELPFUL = "<summary>We worked on the project for a while and made good progress on several things.</summary>"


def _tool_round(index: int, path: str, output: str) -> list[dict[str, Any]]:
    call_id = f"toolu_{index:04d}"
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "run", "input": {"p": path}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}]},
    ]


def _history(turns: int, *, rule_at: int = 3, filler: int = 200) -> list[dict[str, Any]]:
    """A coding session: a user message a turn (the rule at ``rule_at``), a tool round, a reply."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        said = RULE if turn == rule_at else f"Open module_{turn}.py and check how it deals with the cache."
        messages.append({"role": "user", "content": said})
        output = f"src/module_{turn}.py: " + "line of output " * filler
        if turn == 5:
            output += "\nValueError: invoice total must be positive (got -3)\n"
        messages += _tool_round(turn, f"src/module_{turn}.py", output)
        messages.append({"role": "assistant", "content": f"Module {turn} looks fine. " + "detail " * 30})
    messages.append({"role": "user", "content": "Go on with the next module."})
    return messages


def _summary_message(messages: list[Any]) -> str:
    texts: list[str] = [m["content"] for m in messages if isinstance(m.get("content"), str)]
    return next(t for t in texts if t.startswith(SUMMARY_MESSAGE_HEADER))


def _joined(messages: list[Any]) -> str:
    return "\n".join(str(m.get("content")) for m in messages)


def test_a_long_summary_that_omits_a_rule_keeps_the_rule(otel: Otel) -> None:
    """The reproduction of the issue: a 12-turn history at a 200K window, a summary as long as what it
    replaces that omits a rule. Before, the whole verbatim list was dropped (the rule with it); now it is
    trimmed by priority and the repair restores what is still missing."""
    history = _history(12)
    long_summary = (
        "<summary>" + "We reviewed the modules one by one and discussed the caching layer. " * 400 + "</summary>"
    )
    result = Compactor(lambda body: long_summary).compact(history, model=MODEL, wire_format="anthropic_messages")
    assert result.compacted, result.error
    assert RULE in _joined(result.messages)
    (span,) = otel.compact_spans()
    attrs = attrs_of(span)
    assert attrs[semconv.COMPACTION_RETENTION] >= attrs[semconv.COMPACTION_RETENTION_BEFORE_REPAIR]
    assert attrs[semconv.COMPACTION_REPAIR_TOKENS] <= attrs[semconv.COMPACTION_REPAIR_BUDGET]


def test_an_unhelpful_summary_is_repaired_with_the_users_sentences_and_the_artifacts(otel: Otel) -> None:
    history = _history(12, rule_at=4)
    result = Compactor(lambda body: UNHELPFUL).compact(history, model=MODEL, wire_format="anthropic_messages")
    assert result.compacted, result.error
    summary = _summary_message(result.messages)
    assert RESTORED_HEADER in summary
    assert "ValueError: invoice total must be positive (got -3)" in summary  # an error line of a tool result
    assert "src/module_5.py" in _joined(result.messages)
    assert RULE in _joined(result.messages)
    attrs = attrs_of(otel.compact_spans()[0])
    before, after = attrs[semconv.COMPACTION_RETENTION_BEFORE_REPAIR], attrs[semconv.COMPACTION_RETENTION]
    assert before < after
    assert attrs[semconv.COMPACTION_REPAIR_RESTORED] >= 2
    assert attrs[semconv.COMPACTION_REPAIR_RESTORED_PREFIX + semconv.RETENTION_KIND_ERROR] >= 1
    # The retention histogram reports the figure after the repair; the other one the figure before.
    (point,) = otel.metric_points(semconv.METRIC_COMPACTION_RETENTION)
    (raw,) = otel.metric_points(semconv.METRIC_COMPACTION_RETENTION_BEFORE_REPAIR)
    assert point.sum == after and raw.sum == before


def test_the_budget_goes_to_the_users_instructions_first_and_the_span_says_what_did_not_fit(otel: Otel) -> None:
    history = _history(30, rule_at=14, filler=60)
    settings = Settings(repair_budget=1_000, user_messages_budget=0)
    result = Compactor(lambda body: UNHELPFUL, settings=settings).compact(
        history, model=MODEL, wire_format="anthropic_messages", window=30_000
    )
    assert result.compacted, result.error
    summary = _summary_message(result.messages)
    assert RULE in summary  # a constraint ("never", "must") outranks the chatter and the artifacts
    attrs = attrs_of(otel.compact_spans()[0])
    # 1,000 scaled to the window is 150, under the smallest useful block: the budget is that block's.
    assert attrs[semconv.COMPACTION_REPAIR_BUDGET] == repair_mod.MIN_REPAIR_TOKENS
    assert attrs[semconv.COMPACTION_REPAIR_TOKENS] <= attrs[semconv.COMPACTION_REPAIR_BUDGET]
    assert attrs[semconv.COMPACTION_REPAIR_LEFT_OUT] > 0
    left = sum(v for k, v in attrs.items() if k.startswith(semconv.COMPACTION_REPAIR_LEFT_OUT_PREFIX))
    assert left == attrs[semconv.COMPACTION_REPAIR_LEFT_OUT]


def test_the_budget_scales_with_the_window_down_to_the_smallest_useful_block() -> None:
    budget = repair_mod.repair_budget
    assert budget(Settings(), 200_000, 190_000) == 10_000
    assert budget(Settings(), 30_000, 28_000) == 1_500
    assert budget(Settings(), 12_000, 11_000) == 600
    assert budget(Settings(), 6_000, 5_000) == 600  # scaled 300: the floor, an eighth of 5,000 has room for it
    assert budget(Settings(), 3_000, 2_400) == 300  # an eighth of the effective window caps the floor
    assert budget(Settings(repair_budget=200), 6_000, 5_000) == 200  # never above the setting
    assert budget(Settings(repair_budget=0), 6_000, 5_000) == 0  # 0 turns the repair off


def test_a_budget_of_zero_only_measures(otel: Otel) -> None:
    history = _history(12)
    settings = Settings(repair_budget=0)
    result = Compactor(lambda body: UNHELPFUL, settings=settings).compact(
        history, model=MODEL, wire_format="anthropic_messages"
    )
    assert result.compacted and RESTORED_HEADER not in _summary_message(result.messages)
    attrs = attrs_of(otel.compact_spans()[0])
    assert attrs[semconv.COMPACTION_RETENTION] == attrs[semconv.COMPACTION_RETENTION_BEFORE_REPAIR] < 1.0
    assert attrs[semconv.COMPACTION_REPAIR_TOKENS] == 0


def test_what_was_restored_once_is_restored_again_at_the_next_compaction() -> None:
    """The app keeps the compacted history and compacts it again with a summarizer that again keeps nothing:
    the rule, restored into the first summary message, is read as the user's words and restored again."""
    compactor = Compactor(lambda body: UNHELPFUL, settings=Settings(user_messages_budget=0))
    first = compactor.compact(_history(12, rule_at=2), model=MODEL, wire_format="anthropic_messages")
    assert first.compacted and RULE in restored_user_lines(_summary_message(first.messages))
    later = list(first.messages)
    for turn in range(12, 24):
        later.append({"role": "user", "content": f"Open module_{turn}.py and check how it deals with the cache."})
        later += _tool_round(turn, f"src/module_{turn}.py", "line of output " * 200)
        later.append({"role": "assistant", "content": "Looks fine. " + "detail " * 30})
    later.append({"role": "user", "content": "Go on."})
    second = compactor.compact(later, model=MODEL, wire_format="anthropic_messages")
    assert second.compacted, second.error
    assert RULE in restored_user_lines(_summary_message(second.messages))
    assert _summary_message(second.messages).count(RULE) == 1


def test_a_changed_value_leaves_the_model_one_current_value() -> None:
    old = "Keep the payment gateway retry limit at 3 attempts for every merchant."
    new = "The payment gateway retry limit is now 5 attempts for every merchant."
    history = _history(14, rule_at=99)
    history[4 * 3]["content"] = old  # the user message of turn 3
    history[4 * 8]["content"] = new  # of turn 8
    compactor = Compactor(lambda body: UNHELPFUL, settings=Settings(user_messages_budget=0))
    result = compactor.compact(history, model=MODEL, wire_format="anthropic_messages")
    summary = _summary_message(result.messages)
    assert f"{SUPERSEDED_MARK} {old}" in summary and new in summary
    assert summary.index(old) < summary.index(new)
    assert restored_user_lines(summary).count(new) == 1 and old not in restored_user_lines(summary)


def test_a_changed_value_whose_old_statement_is_kept_verbatim_names_it() -> None:
    old = "Keep the payment gateway retry limit at 3 attempts for every merchant."
    new = "The payment gateway retry limit is now 5 attempts for every merchant."
    head = [{"role": "user", "content": old}]
    kept_text = [{"role": "user", "content": "[Context compacted] x"}]
    fixed = repair_mod.repair(
        _adapter(), {"messages": []}, [{"role": "user", "content": new}, *head], [*head, *kept_text], [], 500
    )
    assert "the latest: it replaces the earlier" not in fixed.text  # the new one comes later in the span: plain
    fixed = repair_mod.repair(_adapter(), {"messages": []}, [*head, {"role": "user", "content": new}], head, [], 500)
    assert f'{new} (the latest: it replaces the earlier "{old}")' in fixed.text
    assert restored_user_lines(fixed.text) == [new]


def _adapter() -> Any:
    from otel_context.formats import for_format

    return for_format("anthropic_messages")


def test_a_paste_in_a_user_message_gives_way_to_its_sentences() -> None:
    pasted = "\n".join(f"    def handler_{i}(request): return render(request, 'page_{i}.html')" for i in range(40))
    message = f"Please refactor this so that handlers never touch the session directly.\n{pasted}\nThanks."
    form = verbatim_form(message)
    assert form.startswith("Please refactor this so that handlers never touch the session directly.")
    assert "handler_3" not in form and "40 pasted lines left out" in form
    kept = select_user_messages(["Build the site.", message, "Now the tests."], budget=80)
    assert form in kept.texts  # the sentences fit where the whole message would not
    roomy = select_user_messages(["Build the site.", message, "Now the tests."], budget=10_000)
    assert message in roomy.texts


def test_a_pasted_file_of_plain_lines_is_told_from_the_words_before_it() -> None:
    """A file whose lines read like words (no indent, few symbols) is still a paste: its lines share one shape.
    The user's own line before it, digits and all, is what stays."""
    message = "Turn 0. Secret-0. # f0.py\n" + "".join(f"line {i} of f0.py\n" for i in range(200))
    assert (
        verbatim_form(message) == "Turn 0. Secret-0. # f0.py\n[200 pasted lines left out here; the summary covers them]"
    )
    log = "Why does the deploy fail?\n" + "\n".join(
        f"2026-12-0{i % 9 + 1} 10:0{i % 10}:00 ERROR retry {i}" for i in range(30)
    )
    assert verbatim_form(log).startswith("Why does the deploy fail?\n[30 pasted lines")
    short = "Keep the API on port 8080.\n$ curl localhost:8080"
    assert verbatim_form(short) == short  # a cut that saves little is not worth making


def test_the_priority_puts_instructions_before_chatter_and_pastes() -> None:
    adapter = _adapter()
    dropped = [
        {"role": "user", "content": "Open src/a.py and check it."},
        {"role": "user", "content": "From now on the API version is v3, not v2."},
        {"role": "user", "content": "You must not change the public signatures."},
        {"role": "user", "content": "The failing account is ACCT-88213 in the ledger."},
        {"role": "user", "content": "Where is parse_config used?"},
    ]
    ranked = [c.text for c in repair_mod.candidates(adapter, dropped) if c.kind == semconv.RETENTION_KIND_INSTRUCTION]
    assert ranked[:3] == [
        "From now on the API version is v3, not v2.",
        "You must not change the public signatures.",
        "The failing account is ACCT-88213 in the ledger.",
    ]
    assert set(ranked[3:]) == {"Open src/a.py and check it.", "Where is parse_config used?"}


def test_one_extraction_serves_the_figure_and_the_repair() -> None:
    """The repair extracts once, uncapped, and samples it: the figure's items are those the check alone takes."""
    from otel_context.compaction import retention

    adapter = _adapter()
    dropped = _history(40, filler=20)
    every = retention.salient_items(adapter, dropped, caps=retention.UNCAPPED)
    assert retention.sample(every, retention.CAPS) == retention.salient_items(adapter, dropped)
    assert retention.sample(every, retention.REPAIR_CAPS) == retention.salient_items(
        adapter, dropped, caps=retention.REPAIR_CAPS
    )


def _tool_span(output: str, index: int = 1) -> list[dict[str, Any]]:
    """A user ask, a tool call and its result, a closing answer: the span a summary replaces."""
    return [
        {"role": "user", "content": "Run the checks again."},
        *_tool_round(index, "ci", output),
        {"role": "assistant", "content": "The output above says what went wrong."},
    ]


def _summary_item(summary: str) -> dict[str, Any]:
    from otel_context.compaction.prompt import summary_message_text

    return {"role": "user", "content": summary_message_text(summary)}


CI_OUTPUT = "\n".join(
    [
        "$ make check",
        "src/pages/Report.tsx(88,14): error TS2345: Argument of type 'number' is not assignable.",
        'time=2024-05-02T10:01:23Z level=error msg="lease renewal failed" trace_id=4bf92f3577b34da6',
        "see `renew_lease` in internal/lease/renew.go",
    ]
)


def test_artifacts_are_restored_as_found_and_read_back_the_same_at_the_next_compaction() -> None:
    """A restored artifact is written as found, without a label (``error: ...`` would be an error word of its
    own, read back one label longer at each compaction); the next repair restores it again, the same."""
    from otel_context.compaction import retention
    from otel_context.compaction.prompt import RESTORED_ARTIFACTS_LINE, restored_artifact_lines

    adapter = _adapter()
    span = _tool_span(CI_OUTPUT)
    span[-1]["content"] = "The error is in `renew_lease`; see above."
    first = repair_mod.repair(adapter, {"messages": []}, span, [_summary_item("We ran the checks.")], [], 500)
    lines = restored_artifact_lines(first.text)
    assert RESTORED_ARTIFACTS_LINE in first.text
    assert "error TS2345: Argument of type 'number' is not assignable." in lines
    assert 'time=2024-05-02T10:01:23Z level=error msg="lease renewal failed" trace_id=4bf92f3577b34da6' in lines
    assert "`renew_lease`" in lines and "internal/lease/renew.go" in lines
    assert not any(line.startswith(("error: ", "path: ", "identifier: ")) for line in lines)
    # The next compaction replaces the summary message that holds the block, with a summary that keeps nothing.
    previous = _summary_item(f"We ran the checks.\n\n{first.text}")
    later = [previous, *_tool_span("ok   all 12 checks passed", index=2)]
    second = repair_mod.repair(adapter, {"messages": []}, later, [_summary_item("Checks run.")], [], 500)
    assert restored_artifact_lines(second.text) == lines
    # And the retention check reads the block back as the same items, not one label longer.
    items = set(retention.salient_items(adapter, [previous], caps=retention.UNCAPPED))
    assert (semconv.RETENTION_KIND_ERROR, "error TS2345: Argument of type 'number' is not assignable.") in items
    assert (semconv.RETENTION_KIND_IDENTIFIER, "renew_lease") in items


def test_a_block_is_read_back_whole_however_many_paths_the_span_names() -> None:
    """The repair reads an earlier block's artifacts back line by line: the extraction's sample of a long span
    (a few mentions in each part of the text) need not reach them."""
    from otel_context.compaction.prompt import restored_artifact_lines

    adapter = _adapter()
    block = "\n".join(["[Restored] x", "From the work:", *(f"- src/pkg_{i}/module_{i}.py" for i in range(40))])
    listing = "\n".join(f"src/other/file_{i}.py" for i in range(4_000))
    later = [_summary_item(f"Summary.\n\n{block}"), *_tool_span(listing)]
    fixed = repair_mod.repair(adapter, {"messages": []}, later, [_summary_item("Nothing.")], [], 10_000)
    restored = restored_artifact_lines(fixed.text)
    assert all(f"src/pkg_{i}/module_{i}.py" in restored for i in range(40))


def test_an_error_line_known_by_where_it_stood_is_restored_even_when_the_summary_kept_it() -> None:
    """pytest's ``E   `` line is an error line by its prefix: a summary that kept the line without the prefix
    gives the next check nothing to find it by, so the block carries it; a line that is an error line by itself
    (``ValueError: ...``) is not restored when the summary kept it."""
    from otel_context.compaction.prompt import restored_artifact_lines

    adapter = _adapter()
    output = "\n".join(
        [
            "____________________ test_prorate ____________________",
            "E   decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]",
            "ValueError: days must be positive",
        ]
    )
    kept_both = _summary_item(
        "The refund test failed: decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]\n"
        "and ValueError: days must be positive"
    )
    fixed = repair_mod.repair(adapter, {"messages": []}, _tool_span(output), [kept_both], [], 500)
    assert restored_artifact_lines(fixed.text) == ["decimal.InvalidOperation: [<class 'decimal.DivisionUndefined'>]"]


# -- the repair's output pinned, in every wire format (its speed-up changed no candidate, rank or block) --

SESSION_SAID = [
    "Build the invoice service in src/billing/invoice.py. It must stay on the standard library.",
    "Open src/billing/tax.py and check it.",
    "Where is `round_cents` used?",
    "The failing account is ACCT-88213 in the ledger; it is 250 ms slow.",
    "Here is the log:\n"
    + "\n".join(f"2026-12-01 10:00:0{i} ERROR retry {i + 1}" for i in range(3)),  # a paste: rows of one shape
    "Actually, the port is now 8443 instead of 8080. Never log card numbers!",
    "Ünïcode sentence: keep the café menu as it is.",  # not ASCII: ranked by the reference patterns
]
SESSION_RESULT = "\n".join(
    [
        "E   ValueError: invoice total must be positive (got -3)",
        "FAILED tests/test_invoice.py::test_total - ValueError: invoice total must be positive (got -3)",
        "src/billing/invoice.py:42: in total",
    ]
)
SESSION_ANSWER = "I read `src/billing/invoice.py`: `total` rejects negatives. I will store the cents as integers."
FORMATS = ["anthropic_messages", "openai_chat", "openai_responses"]


def _session(fmt: str) -> list[dict[str, Any]]:
    """A turn a message of SESSION_SAID: the user's message, the model's answer and tool call, the result."""
    items: list[dict[str, Any]] = []
    for turn, said in enumerate(SESSION_SAID):
        call = f"call_{turn}"
        if fmt == "anthropic_messages":
            items += [
                {"role": "user", "content": [{"type": "text", "text": said}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": SESSION_ANSWER},
                        {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": "pytest"}},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": SESSION_RESULT}]},
            ]
        elif fmt == "openai_chat":
            items += [
                {"role": "user", "content": said},
                {
                    "role": "assistant",
                    "content": SESSION_ANSWER,
                    "tool_calls": [
                        {"id": call, "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": call, "content": SESSION_RESULT},
            ]
        else:
            items += [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": said}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": SESSION_ANSWER}]},
                {"type": "function_call", "call_id": call, "name": "bash", "arguments": '{"cmd": "pytest"}'},
                {"type": "function_call_output", "call_id": call, "output": SESSION_RESULT},
            ]
    return items


RANKED = [
    ("instruction", "Actually, the port is now 8443 instead of 8080.", 0),
    ("instruction", "Ünïcode sentence: keep the café menu as it is.", 1),
    ("instruction", "Never log card numbers!", 1),
    ("instruction", "It must stay on the standard library.", 1),
    ("instruction", "The failing account is ACCT-88213 in the ledger; it is 250 ms slow.", 2),
    ("instruction", "Build the invoice service in src/billing/invoice.py.", 2),
    ("error", "ERROR retry 3", 3),
    ("error", "ERROR retry 2", 3),
    ("error", "ERROR retry 1", 3),
    ("error", "FAILED tests/test_invoice.py::test_total - ValueError: invoice total must be positive (got -3)", 3),
    ("error", "ValueError: invoice total must be positive (got -3)", 3),
    ("path", "src/billing/tax.py", 4),
    ("path", "tests/test_invoice.py", 4),
    ("path", "src/billing/invoice.py", 4),
    ("identifier", "round_cents", 5),
    ("identifier", "total", 5),
    ("identifier", "src/billing/invoice.py", 5),
    ("instruction", "Here is the log:", 7),
    ("instruction", "Where is `round_cents` used?", 7),
    ("instruction", "Open src/billing/tax.py and check it.", 7),
    ("instruction", "2026-12-01 10:00:02 ERROR retry 3", 8),
    ("instruction", "2026-12-01 10:00:01 ERROR retry 2", 8),
    ("instruction", "2026-12-01 10:00:00 ERROR retry 1", 8),
]
USER_LINES = [
    "- Build the invoice service in src/billing/invoice.py.",
    "- It must stay on the standard library.",
    "- Open src/billing/tax.py and check it.",
    "- Where is `round_cents` used?",
    "- The failing account is ACCT-88213 in the ledger; it is 250 ms slow.",
    "- Here is the log:",
    "- 2026-12-01 10:00:00 ERROR retry 1",
    "- 2026-12-01 10:00:01 ERROR retry 2",
    "- 2026-12-01 10:00:02 ERROR retry 3",
    "- Actually, the port is now 8443 instead of 8080.",
    "- Never log card numbers!",
    "- Ünïcode sentence: keep the café menu as it is.",
]
WORK_LINES = [  # artifacts as found (no label: ``error:`` would be an error word of its own); decisions: the trail's
    "- FAILED tests/test_invoice.py::test_total - ValueError: invoice total must be positive (got -3)",
    "- ERROR retry 1",
    "- ERROR retry 2",
    "- ERROR retry 3",
    "- src/billing/tax.py",
    "- `round_cents`",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_candidates_their_ranks_and_the_block_are_pinned_in_every_format(fmt: str) -> None:
    """What main gave before the repair was made faster (the shared walk, the ranking's fast patterns), item
    for item. (The error lines and paths are the extractors': a change of their patterns updates this pin.)"""
    from otel_context.compaction import retention
    from otel_context.compaction.prompt import RESTORED_ARTIFACTS_LINE, RESTORED_USER_LINE, summary_message_text
    from otel_context.formats import for_format

    adapter = for_format(fmt)
    dropped = _session(fmt)
    assert [(c.kind, c.text, c.priority) for c in repair_mod.candidates(adapter, dropped)] == RANKED
    # With the walk and the items handed in (as repair() does): the same list.
    walked = retention.walk(adapter, dropped)
    extracted = retention.salient_items(adapter, dropped, caps=retention.REPAIR_CAPS)
    assert repair_mod.candidates(adapter, dropped, None, extracted, walked) == repair_mod.candidates(adapter, dropped)
    summary = adapter.make_user_item(summary_message_text("We worked on the invoices."))
    kept = [adapter.make_user_item("Go on with the tax module.")]
    body = adapter.with_items({"model": "m", "max_tokens": 10}, [summary, *kept])
    roomy = repair_mod.repair(adapter, body, dropped, [summary], kept, 10_000)
    assert roomy.text == "\n".join(
        [RESTORED_HEADER, RESTORED_USER_LINE, *USER_LINES, RESTORED_ARTIFACTS_LINE, *WORK_LINES]
    )
    assert (roomy.before.retention, roomy.after.retention, roomy.tokens) == (0.0, 1.0, 262)  # 278 with the decision
    assert roomy.restored == {"instruction": 12, "error": 4, "path": 1, "identifier": 1}
    assert roomy.left_out == {}
    tight = repair_mod.repair(adapter, body, dropped, [summary], kept, 120)
    assert tight.text == "\n".join([RESTORED_HEADER, RESTORED_USER_LINE, *[USER_LINES[i] for i in (0, 1, 9, 10, 11)]])
    assert (tight.before.retention, tight.after.retention, tight.tokens) == (0.0, 0.2916666666666667, 107)
    assert tight.restored == {"instruction": 5}
    assert tight.left_out == {"instruction": 7, "error": 5, "path": 2, "identifier": 2}


# -- the ranking's fast forms say what its patterns say (repair._MARKERS, _CHANGE, _ACTION_START, _VALUE) --


def _rank_by_the_patterns(sentence: str) -> int:
    """_sentence_priority as the patterns define it (ignoring case, any text): the reference."""
    marker = repair_mod._MARKERS.search(sentence)
    if marker is not None:
        if marker.group("change") is not None or repair_mod._CHANGE.search(sentence, marker.end()):
            return repair_mod._PRIORITY_CORRECTION
        return repair_mod._PRIORITY_DURABLE
    if sentence.endswith("?") or repair_mod._ACTION_START.match(sentence):
        return repair_mod._PRIORITY_CHATTER
    if repair_mod._VALUE.search(sentence):
        return repair_mod._PRIORITY_STATEMENT
    return repair_mod._PRIORITY_CHATTER


_WORDS = [
    *(w for w in "|".join([repair_mod._CHANGE_WORDS, repair_mod._DURABLE_WORDS, repair_mod._ACTION_WORDS]).split("|")),
    "use black not",
    "use ruff instead",
    "follow-up",
    "follow up",
    "preferred",
    "required",
    "to-do",
    "I'll",
]
_PIECES = st.sampled_from(_WORDS).flatmap(
    lambda w: st.sampled_from([w, w.upper(), w.title(), w.capitalize(), w.lower()])
) | st.text(alphabet="aAnNoOwWiIsSkK _-./`\"'?!019é\u0130\u0131\u212a\u017f\u0663", max_size=6)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=9), st.sampled_from([" ", "", "-", "_", " x ", ". "]))
def test_the_fast_ranking_ranks_as_the_patterns_do(pieces: list[str], glue: str) -> None:
    sentence = glue.join(pieces)
    assert repair_mod._sentence_priority(sentence) == _rank_by_the_patterns(sentence)
    assert repair_mod._has_value(sentence) == bool(repair_mod._VALUE.search(sentence))


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet='aZbQ_-./`"/ 09é\u0663AB:', max_size=16))
def test_a_value_is_found_as_the_pattern_finds_it(text: str) -> None:
    assert repair_mod._has_value(text) == bool(repair_mod._VALUE.search(text))


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="aZ 09.,;:-_()[]{}#=é\t", max_size=40))
def test_a_paste_line_is_told_as_by_the_character_tables(line: str) -> None:
    if line.startswith(("    ", "\t", "```", "$ ", ">>> ", "+", "@@")):
        return
    others = line.translate(repair_mod._PROSE_CHARS)
    symbols = len(others.translate(repair_mod._DIGITS))
    expected = symbols + (len(others) - symbols) / 2 > 0.3 * len(line) and bool(line.strip())
    assert repair_mod._is_paste_line(line) == expected


# -- who replaces whom: worked out once per repair, the same answers as the definition --------------------------


def _reference_replaces(later: str, earlier: str) -> bool:
    return repair_mod.replaces(later, earlier)  # the definition, read afresh each time


def _reference_said_block(chosen: list[Any], said_all: list[Any], newer: list[str]) -> tuple[list[str], int]:
    """The block's user lines by the definition, every statement against every other (how it was written
    before the answers were remembered: seconds for a repair of 2,000 corrections)."""
    changes = [c for c in said_all if c.priority == repair_mod._PRIORITY_CORRECTION]
    newer_changes = [s for s in newer if repair_mod._CHANGE.search(s)]
    chosen_texts = {c.text for c in chosen}
    lines: list[str] = []
    marked = 0
    for candidate in chosen:
        if any(c.position > candidate.position and _reference_replaces(c.text, candidate.text) for c in changes) or any(
            _reference_replaces(s, candidate.text) for s in newer_changes
        ):
            lines.append(f"- {SUPERSEDED_MARK} {candidate.text}")
            marked += 1
            continue
        if candidate.priority == repair_mod._PRIORITY_CORRECTION:
            earlier = next(
                (
                    c.text
                    for c in reversed(said_all)
                    if c.position < candidate.position
                    and c.text not in chosen_texts
                    and _reference_replaces(candidate.text, c.text)
                ),
                None,
            )
            if earlier is not None:
                lines.append(f'- {candidate.text} (the latest: it replaces the earlier "{earlier[:160]}")')
                marked += 1
                continue
        lines.append(f"- {candidate.text}")
    return lines, marked


_SUBJECT_WORDS = ["timeout", "retries", "database", "cache", "port", "region", "logger", "queue"]
_STATEMENT = st.builds(
    lambda change, words, value, form: form.format(change=change, w=words, value=value),
    st.sampled_from(["", "Now ", "Actually, ", "Instead, ", "From now on ", "Please "]),
    st.lists(st.sampled_from(_SUBJECT_WORDS), min_size=3, max_size=3),
    st.integers(1, 99),
    st.sampled_from(
        [
            "{change}the {w[0]} and {w[1]} use {value} for {w[2]}.",  # a value, changed or not
            "{change}run the checks of the {w[0]} and {w[1]} for {w[2]} now.",  # a request of the moment
            "{change}the {w[0]} and {w[1]} use {w[2]} instead of the {w[1]}.",  # a choice
        ]
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    statements=st.lists(_STATEMENT, min_size=1, max_size=30),
    newer=st.lists(_STATEMENT, max_size=3),
    picks=st.lists(st.booleans(), min_size=30, max_size=30),
    in_request=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_who_replaces_whom_is_the_definitions_answer_however_often_it_is_asked(
    statements: list[str], newer: list[str], picks: list[bool], in_request: list[bool]
) -> None:
    """The block's marks, and whether a correction found in the request is restated, as the definition says
    (every statement against every other), asked again and again as the block is rendered while it shrinks."""
    messages = [{"role": "user", "content": s} for s in statements]
    ranked = repair_mod.candidates(for_format("anthropic_messages"), messages)
    said_all = sorted((c for c in ranked if c.kind == semconv.RETENTION_KIND_INSTRUCTION), key=lambda c: c.position)
    subjects = repair_mod._Subjects(ranked, lambda: newer)
    haystack = "\n".join(c.text for c, keep in zip(said_all, in_request, strict=False) if keep)
    chosen = [c for c, pick in zip(said_all, picks, strict=False) if pick]
    while True:  # the block rendered again with one fewer each time, as the repair does when it is over budget
        assert repair_mod._said_block(chosen, subjects) == _reference_said_block(chosen, said_all, newer)
        if not chosen:
            break
        chosen.pop()
    for candidate in said_all:
        expected = candidate.priority == repair_mod._PRIORITY_CORRECTION and any(
            c.position < candidate.position and _reference_replaces(candidate.text, c.text) and c.text in haystack
            for c in said_all
        )
        assert subjects.restates_a_change(candidate, haystack) == expected


# -- issue 48: a statement is replaced only by one that changes what it states -------------------------------

REPLACES = [
    # (later, earlier, replaced)
    (
        "Run the tests for payments/idempotency.py now.",
        "Make duplicate requests harmless in payments/idempotency.py.",
        False,
    ),
    ("Now run the ledger tests again with the slow ones.", "The ledger tests must stay under 2 seconds.", False),
    ("The ledger tests pass now.", "Make the ledger tests pass before the release.", False),
    ("Is the payment gateway retry limit now 5?", "Keep the payment gateway retry limit at 3 attempts.", False),
    ("Actually, the cache timeout is now 30 seconds.", "The request timeout is 10 seconds.", False),
    (
        "Change of plan: the payment gateway retry limit is now 5 attempts, the gateway team asked for it.",
        "keep the payment gateway retry limit at 3 attempts.",
        True,
    ),
    ("From now on the API version is v3, not v2.", "The API version is v2 for every client.", True),
    ("The cache timeout is now 30 seconds.", "The cache timeout is 10 seconds.", True),
    ("For date handling we now use date-fns instead of moment.", "Use moment for all date handling in the app.", True),
    ("We no longer need to keep the legacy export endpoint alive.", "Keep the legacy export endpoint alive.", True),
    ("Keep the legacy export endpoint alive.", "We no longer need to keep the legacy export endpoint alive.", False),
]


@pytest.mark.parametrize(("later", "earlier", "replaced"), REPLACES)
def test_a_statement_is_replaced_only_by_one_that_changes_a_value_or_a_choice_it_states(
    later: str, earlier: str, replaced: bool
) -> None:
    assert repair_mod.replaces(later, earlier) is replaced


def test_requests_of_the_moment_leave_every_instruction_live_in_the_block() -> None:
    """The issue's case, through the compactor: the user's tasks and their requests of the moment ("Run the tests
    for X now.") share subjects and a word of change; nothing is marked replaced, every sentence is restored as
    the user's, and a real change of value in the same session is still marked."""
    said = [
        "Make duplicate requests harmless in payments/idempotency.py.",
        "Keep the payment gateway retry limit at 3 attempts.",
        "Run the tests for payments/idempotency.py now.",
        "Now open payments/webhooks.py and check the signature handling.",
        "The webhook signatures must be checked before parsing the body.",
        "Now run the webhook tests.",
        "The payment gateway retry limit is now 5 attempts.",
    ]
    history = _history(len(said) + 6, rule_at=99)
    for index, sentence in enumerate(said):
        history[4 * index]["content"] = sentence
    result = Compactor(lambda body: UNHELPFUL, settings=Settings(user_messages_budget=0)).compact(
        history, model=MODEL, wire_format="anthropic_messages"
    )
    assert result.compacted, result.error
    summary = _summary_message(result.messages)
    assert summary.count(SUPERSEDED_MARK) == 1
    assert f"{SUPERSEDED_MARK} Keep the payment gateway retry limit at 3 attempts." in summary
    live = restored_user_lines(summary)
    for sentence in said[:1] + said[2:]:
        assert sentence in live
