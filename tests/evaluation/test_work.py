"""The judge of the agent's work (issue 48): how a file, a definition, an error, a command and a decision are
recognised in a request, how an item's kind follows the session, and the (compaction, item) counts, against a
small case checked by hand."""

from __future__ import annotations

import json

import pytest

from otel_context.compaction.prompt import summary_message_text
from otel_context.evaluation.classify import SentMessage, request_messages, work_texts
from otel_context.evaluation.report import summary_rows, work_figures
from otel_context.evaluation.runner import CompactionRecord, RunResult
from otel_context.evaluation.scenarios import get_scenario
from otel_context.evaluation.work import (
    CHANGES,
    FAILS,
    FIXES,
    PATH,
    Needle,
    WorkEvent,
    assess_work,
    command,
    count_work,
    decision,
    definition,
    error,
    file,
    kept,
    track,
)

ROOT = "/home/dev/payments"
REFUND = file("src/orders/handlers/refund.py")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("src/orders/handlers/refund.py", True),
        ("Changed src/orders/handlers/refund.py (refund_amount).", True),
        ("src/orders/handlers/refund.py:42:def refund_amount(", True),
        ("`src/orders/handlers/refund.py`", True),
        ("/home/dev/payments/src/orders/handlers/refund.py", True),  # absolute under the root
        ("home/dev/payments/src/orders/handlers/refund.py", True),  # the same without its leading slash
        ('File "/home/dev/payments/src/orders/handlers/refund.py", line 9', True),
        ("src/orders/handlers/refunds.py", False),  # a look-alike
        ("src/orders/handlers/refund_policy.py", False),
        ("tests/src/orders/handlers/refund.py", False),  # another file whose path ends the same
        ("/srv/other/src/orders/handlers/refund.py", False),  # not under the root
        ("src/orders/handlers/refund.pyc", False),
        ("src/orders/handlers/", False),  # a folder alone names no file
        ("refund.py", False),  # a name alone neither
        # grouped by folder: the rest of the path after its folder, on the line or on the lines under it
        ("src/orders/handlers/: refund.py, refunds.py", True),
        ("src/orders/handlers/{refund.py,refunds.py}", True),
        ("src/orders/handlers: refunds.py, refund_policy.py", False),
        ("src/orders: handlers/refund.py, models/money.py", True),
        ("src/orders/handlers/\n  - refunds.py\n  - refund.py (edited)", True),
        ("src/orders/handlers/\n  - refunds.py\nrefund.py", False),  # not under the folder's group any more
        ("src/orders/handlers/refunds.py and refund.py", False),  # a file, not a folder, before the name
    ],
)
def test_a_file_is_its_path_whole_or_grouped_under_its_folder(text: str, found: bool) -> None:
    assert kept(REFUND, [text], ROOT) is found


def test_a_definition_is_its_name_and_its_file_in_one_message() -> None:
    item = definition("RefundPolicy", "src/orders/handlers/refund_policy.py")
    assert kept(item, ["class RefundPolicy: in src/orders/handlers/refund_policy.py"], ROOT)
    assert kept(item, ["RefundPolicy.check (src/orders/handlers/refund_policy.py:31)"], ROOT)
    assert not kept(item, ["class RefundPolicy:", "src/orders/handlers/refund_policy.py"], ROOT)  # two messages
    assert not kept(item, ["refundpolicy in src/orders/handlers/refund_policy.py"], ROOT)  # a name is case sensitive
    assert not kept(item, ["class RefundPolicyV2 in src/orders/handlers/refund_policy.py"], ROOT)
    assert not kept(item, ["class RefundPolicy in src/orders/handlers/refund.py"], ROOT)


def test_an_error_is_where_and_what_in_one_message() -> None:
    item = error("E0308 in money.rs", (Needle("crates/ledger-core/src/money.rs:9", PATH),), (Needle("E0308"),))
    printed = "error[E0308]: mismatched types\n  --> crates/ledger-core/src/money.rs:9:20"
    assert kept(item, [printed], ROOT)
    assert kept(item, ["open: cargo build: E0308 at crates/ledger-core/src/money.rs:9"], ROOT)
    assert not kept(item, ["error[E0308]: mismatched types", "--> crates/ledger-core/src/money.rs:9:20"], ROOT)
    assert not kept(item, ["E0308 at crates/ledger-core/src/money.rs:91"], ROOT)  # another line
    assert not kept(item, ["error[E0308]: mismatched types"], ROOT)  # what, without where
    test = error("t", (Needle("test_partial_refund_rounding"),), (Needle("AssertionError"),))
    assert kept(test, ["FAILED tests/test_refund.py::test_partial_refund_rounding - AssertionError: 1 != 2"], ROOT)
    assert not kept(test, ["def test_partial_refund_rounding(eur_order):\n    assert x == 3333"], ROOT)


def test_a_command_is_its_command_line_whole() -> None:
    item = command("cargo test -p ledger-core")
    assert kept(item, ['{"command": "cargo test -p ledger-core", "description": "Run cargo"}'], ROOT)
    assert kept(item, ["ran cargo test -p ledger-core: 1 failed"], ROOT)
    assert not kept(item, ["cargo test -p ledger-core-macros"], ROOT)
    assert not kept(item, ["cargo test -p ledger-api"], ROOT)


def test_a_decision_is_its_sentence_anywhere_or_its_gist_on_one_line() -> None:
    item = decision("money", "We will store money as i128 minor units, never f64.", "i128", "minor units")
    assert kept(item, ["... We will store money as i128 minor units, never f64. Building now."], ROOT)
    assert kept(item, ["- decided: money as I128 Minor Units (never f64)"], ROOT)  # any case
    assert not kept(item, ["i128 everywhere\nstored in minor units"], ROOT)  # the gist split over two lines
    assert not kept(item, ["MinorUnits(i128)"], ROOT)
    dated = decision("migration", "Plan: migrate the refunds table on 2027-01-15.", "2027-01-15")
    assert kept(dated, ["migration planned for 2027-01-15"], ROOT)
    assert not kept(dated, ["migration planned for 2027-01-16"], ROOT)


def test_an_items_kind_follows_the_session() -> None:
    """A file is read, then changed; an error open, then closed; an assistant's decision reaches the next
    request, not its own (its reply joins the history after it)."""
    err = error("e", (Needle("test_x"),), (Needle("AssertionError"),))
    chosen = decision("d", "Decision: X.", "X")
    timeline = track(
        [
            [WorkEvent(REFUND)],  # turn 0: read
            [WorkEvent(err, FAILS), WorkEvent(chosen, in_reply=True)],  # turn 1
            [WorkEvent(REFUND, CHANGES)],  # turn 2
            [WorkEvent(err, FIXES)],  # turn 3
            [WorkEvent(REFUND)],  # turn 4: read again, still changed
        ]
    )
    by_id = {t.item.id: t for t in timeline}
    assert [by_id[REFUND.id].kind_at(t) for t in range(5)] == ["read", "read", "changed", "changed", "changed"]
    errors = [by_id["e"].kind_at(t) for t in range(5)]
    assert errors == [None, "open_error", "open_error", "closed_error", "closed_error"]
    assert [by_id["d"].kind_at(t) for t in range(4)] == [None, None, "decision", "decision"]
    created = track([[WorkEvent(file("new.py"), CHANGES)]])[0]
    assert created.kind_at(0) == "changed"  # a created file is changed from the start
    with pytest.raises(ValueError, match="only a file is changed"):
        track([[WorkEvent(chosen, CHANGES)]])


def _messages(*texts: str, summary: str | None = None) -> list[SentMessage]:
    out = [SentMessage("system", "You are a coding agent. src/a.py cargo test")]  # the system prompt is not read
    if summary is not None:
        out.append(SentMessage("user", summary_message_text(summary), summary=True))
    return out + [SentMessage("user", t) for t in texts]


def test_the_counts_of_a_small_case_checked_by_hand() -> None:
    """Four items over two compactions, counted by hand:

    * ``src/a.py``: read at turn 0, changed at turn 3;
    * ``cargo test``: run at turn 1;
    * error ``E1`` (``src/a.py:3`` + ``E0599``): printed at turn 1, fixed at turn 4;
    * decision ``d``: in the reply of turn 2, so from the request of turn 3.

    Compaction 1, the request of turn 2: ``src/a.py`` read and kept (in the summary); the command lost; E1 open
    and kept (verbatim); the decision not yet there. Compaction 2, the request of turn 5: ``src/a.py`` changed,
    lost; the command kept (in a block the compactor restored, inside the summary); E1 closed, lost; the decision
    kept (its gist on one line of the summary).

    Per kind: read 1/1, changed 0/1, command 1/2, open errors 1/1, closed errors 0/1, decisions 1/1.
    """
    a = file("src/a.py")
    run = command("cargo test")
    e1 = error("E1", (Needle("src/a.py:3", PATH),), (Needle("E0599"),))
    d = decision("d", "Decision: amounts stay in minor units until 2027-01-15.", "minor units", "2027-01-15")
    timeline = track(
        [
            [WorkEvent(a)],
            [WorkEvent(run), WorkEvent(e1, FAILS)],
            [WorkEvent(d, in_reply=True)],
            [WorkEvent(a, CHANGES)],
            [WorkEvent(e1, FIXES)],
            [],
        ]
    )
    first = _messages(
        "error[E0599]: no method named `b`\n --> src/a.py:3:5", summary="Read /home/dev/payments/src/a.py."
    )
    second = _messages(
        "Continue.",
        summary="The user wants tests.\n[Restored]\n- ran cargo test (passed)\n- plan: minor units, 2027-01-15",
    )

    one = assess_work(timeline, 2, work_texts(first), ROOT)
    two = assess_work(timeline, 5, work_texts(second), ROOT)
    assert [(w.tracked.item.id, w.kind, w.kept) for w in one] == [
        ("src/a.py", "read", True),
        ("cargo test", "command", False),
        ("E1", "open_error", True),
    ]
    assert [(w.tracked.item.id, w.kind, w.kept) for w in two] == [
        ("src/a.py", "changed", False),
        ("cargo test", "command", True),
        ("E1", "closed_error", False),
        ("d", "decision", True),
    ]
    by_hand = {
        "read": [1, 1],
        "changed": [0, 1],
        "definition": [0, 0],
        "open_error": [1, 1],
        "closed_error": [0, 1],
        "command": [1, 2],
        "decision": [1, 1],
    }
    assert count_work([*one, *two]) == by_hand

    # The same through the report: the run's row, and the overall figures of two such runs.
    result = RunResult(get_scenario("long"), "start", "crafted", "simulated", "m", "m", 30_000, 6, timeline=timeline)
    for number, (turn, statuses) in enumerate(((3, one), (6, two)), 1):
        record = CompactionRecord(number, turn, "threshold", 9_000, 3_000, 8_000, 500, None, None, [])
        record.work = statuses
        result.compactions.append(record)
    (row,) = summary_rows([result])
    assert row["work"] == by_hand and row["work_gated"] and row["work_failed"]
    assert row["work_lost"] == {"changed": ["src/a.py"], "closed_error": ["E1"], "command": ["cargo test"]}
    assert work_figures([result, result]) == {kind: [2 * k, 2 * c] for kind, (k, c) in by_hand.items()}
    assert result.work_failures() == [
        "long/start: 1 of 1 files changed lost after a compaction (the first at compaction 2, turn 6): src/a.py"
    ]


def test_a_decision_fact_of_a_short_scenario_is_a_decision_of_the_work() -> None:
    """The short scenarios' one decision of the assistant is judged as the long one's are: its sentence, or its
    key and its answer on one line."""
    billing = get_scenario("billing")
    timeline = billing.work(60)
    (decided,) = [t for t in timeline if t.item.family == "decision"]
    fact = billing.fact("refund-storage")
    assert decided.item.sentence == fact.text
    assert kept(decided.item, ["- refund amounts: a new refund_cents column"])
    assert not kept(decided.item, ["refund amounts are stored", "refund_cents"])
    (failure,) = [t for t in timeline if t.item.family == "error"]
    assert kept(failure.item, ["E   decimal.InvalidOperation: DivisionUndefined (billing/refunds.py:88)"])
    assert not kept(failure.item, ["DivisionUndefined"])  # the error's code without where it is


def _read_round(wire_format: str) -> dict[str, object]:
    """A request whose last round is a Read: the call names the file, the result shows the class."""
    call = {"file_path": f"{ROOT}/src/orders/handlers/refund_policy.py"}
    result = "    41\tclass RefundPolicy:\n    42\t    def check(self, order, amount):"
    if wire_format == "anthropic_messages":
        return {
            "system": "You are a coding agent.",
            "messages": [
                {"role": "user", "content": "Look at the policy."},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Reading it."},
                        {"type": "tool_use", "id": "t1", "name": "Read", "input": call},
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result}]},
            ],
        }
    return {
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Look at the policy."},
            {
                "role": "assistant",
                "content": "Reading it.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "Read", "arguments": json.dumps(call)}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": result},
        ]
    }


@pytest.mark.parametrize("wire_format", ["anthropic_messages", "openai_chat"])
def test_a_tool_call_and_its_result_are_read_together(wire_format: str) -> None:
    """A definition read verbatim is kept: its name is in the tool's result, its file in the call before it."""
    messages = request_messages(_read_round(wire_format), wire_format)
    texts = work_texts(messages)
    assert len(texts) == 2 and "You are a coding agent." not in "".join(texts)
    assert kept(definition("RefundPolicy", "src/orders/handlers/refund_policy.py"), texts, ROOT)
    assert not kept(definition("RefundPolicy", "src/orders/handlers/refund_policy.py"), [texts[1][-60:]], ROOT)
