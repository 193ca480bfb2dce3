"""Where a planted fact stands in a request that went out, on hand-built requests of the three wire formats,
and the scenarios' own invariants (eight kinds, 150-250 turns, keys that only their fact's line carries)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_context.compaction.prompt import build_prompt, summary_message_text
from otel_context.evaluation.classify import (
    ABSENT,
    SUMMARY,
    VERBATIM,
    assess,
    classify,
    is_summarizer_request,
    parse_answers,
    request_messages,
    stale_value,
    user_messages_kept,
)
from otel_context.evaluation.scenarios import SCENARIOS, get_scenario
from otel_context.evaluation.script import KINDS, answer_matches
from otel_context.evaluation.work import command, kept

BILLING = get_scenario("billing")
ACCOUNT = BILLING.fact("account")  # a user identifier
ERROR = BILLING.fact("refund-error")  # in a tool result
LIMIT = BILLING.fact("retry-limit")  # a constraint the user reverses
LIMIT_NOW = BILLING.fact("retry-limit-now")


def _summary(*lines: str) -> str:
    return summary_message_text("\n".join(["Facts:", *lines]))


def _anthropic(user: str, tool_result: str, summary: str | None) -> tuple[dict[str, Any], str]:
    messages: list[dict[str, Any]] = []
    if summary is not None:
        messages.append({"role": "user", "content": summary})
        messages.append({"role": "assistant", "content": "Understood."})
    messages += [
        {"role": "user", "content": [{"type": "text", "text": user}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run_command", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": tool_result}]}
            ],
        },
    ]
    return {"model": "m", "system": "You are an agent.", "messages": messages}, "anthropic_messages"


def _chat(user: str, tool_result: str, summary: str | None) -> tuple[dict[str, Any], str]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    if summary is not None:
        messages.append({"role": "user", "content": summary})
    messages += [
        {"role": "user", "content": [{"type": "text", "text": user}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {}}]},
        {"role": "tool", "tool_call_id": "c1", "content": tool_result},
    ]
    return {"model": "m", "messages": messages}, "openai_chat"


def _responses(user: str, tool_result: str, summary: str | None) -> tuple[dict[str, Any], str]:
    items: list[dict[str, Any]] = []
    if summary is not None:
        items.append({"role": "user", "content": summary})
    items += [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": user}]},
        {"type": "function_call", "call_id": "c1", "name": "run_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": tool_result},
    ]
    return {"model": "m", "instructions": "You are an agent.", "input": items}, "openai_responses"


FORMATS = pytest.mark.parametrize("build", [_anthropic, _chat, _responses], ids=["anthropic", "chat", "responses"])


@FORMATS
def test_a_fact_in_a_kept_message_is_verbatim(build: Any) -> None:
    body, wire = build(f"Here it is.\n{ACCOUNT.text}", f"collected 3 items\n{ERROR.text}", _summary())
    messages = request_messages(body, wire)
    assert classify(ACCOUNT, messages) == VERBATIM  # a user message
    assert classify(ERROR, messages) == VERBATIM  # a tool result
    assert [m.summary for m in messages].count(True) == 1


@FORMATS
def test_a_fact_only_in_the_summary_message_is_summary_even_rephrased(build: Any) -> None:
    rephrased = "- The user's failing customer account: acct-88213 (from support)."  # key + answer on one line
    body, wire = build("Next file.", "ok", _summary(ERROR.text, rephrased))
    messages = request_messages(body, wire)
    assert classify(ERROR, messages) == SUMMARY
    assert classify(ACCOUNT, messages) == SUMMARY


@FORMATS
def test_a_fact_nowhere_or_without_its_answer_is_absent(build: Any) -> None:
    # The key alone is not the fact: the answer must be on the same line.
    body, wire = build("Next file.", "ok", _summary("- There was a failing customer account."))
    messages = request_messages(body, wire)
    assert classify(ACCOUNT, messages) == ABSENT
    assert classify(ERROR, messages) == ABSENT
    status = {s.fact.id: s for s in assess([ACCOUNT, ERROR], messages)}
    assert status["account"].lost and status["account"].failure  # a user fact lost fails the evaluation
    assert status["refund-error"].lost and not status["refund-error"].failure  # a tool's fact is reported only


@FORMATS
def test_a_reversed_constraint_must_not_reach_the_model_without_its_reversal(build: Any) -> None:
    alone = request_messages(*build("Go on.", "ok", _summary(LIMIT.text)))
    status = {s.fact.id: s for s in assess([LIMIT, LIMIT_NOW], alone)}
    assert status["retry-limit"].without_reversal and status["retry-limit"].failure
    assert status["retry-limit-now"].lost and status["retry-limit-now"].failure

    both = request_messages(*build(LIMIT_NOW.text, "ok", _summary(LIMIT.text)))
    assert not any(s.failure for s in assess([LIMIT, LIMIT_NOW], both))

    superseded = request_messages(*build(LIMIT_NOW.text, "ok", _summary()))
    status = {s.fact.id: s for s in assess([LIMIT, LIMIT_NOW], superseded)}
    assert status["retry-limit"].state == ABSENT and status["retry-limit"].superseded
    assert not any(s.failure for s in status.values())


def _status(messages: Any) -> Any:
    return {s.fact.id: s for s in assess([LIMIT, LIMIT_NOW], messages)}["retry-limit"]


@FORMATS
def test_a_superseded_value_after_its_change_is_stale_unless_marked(build: Any) -> None:
    """The reader of a request takes the latest statement as the one in force: the old value (3) after the
    new one (5) is stale, a failure; the same old line marked as replaced, or kept before the change, is not."""
    old_after_new = request_messages(*build("Go on.", "ok", _summary(LIMIT_NOW.text, f"- The user said: {LIMIT.text}")))
    status = _status(old_after_new)
    assert status.stale and status.failure and status.old_value_sent and not status.without_reversal

    marked = request_messages(*build("Go on.", "ok", _summary(LIMIT_NOW.text, f"- Superseded: {LIMIT.text}")))
    status = _status(marked)
    assert not status.stale and not status.failure and status.old_value_sent

    in_order = request_messages(*build(LIMIT_NOW.text, "ok", _summary(LIMIT.text)))
    status = _status(in_order)
    assert not status.stale and status.old_value_sent  # kept, before its change: the latest says 5

    change = request_messages(*build("Go on.", "ok", _summary("- The retry limit is 5 attempts now (it was 3).")))
    status = _status(change)
    assert not status.stale and not status.old_value_sent  # one line stating the change is the new value

    alone = request_messages(*build("Go on.", "ok", _summary(LIMIT.text)))
    status = _status(alone)
    assert status.stale and status.without_reversal  # no new value at all: stale, and without its reversal


def test_a_marker_on_the_first_line_of_a_message_marks_its_old_value() -> None:
    body, wire = _anthropic(f"[Replaced by a later message]\n{LIMIT.text}", "ok", _summary(LIMIT_NOW.text))
    body["messages"].append({"role": "user", "content": f"Reminder: {LIMIT.text}"})  # unmarked, last: stale
    messages = request_messages(body, wire)
    assert stale_value(LIMIT, LIMIT_NOW, messages) == (True, True)
    body["messages"].pop()
    assert stale_value(LIMIT, LIMIT_NOW, request_messages(body, wire)) == (False, True)


@FORMATS
def test_an_artifact_is_kept_by_the_artifact_itself_a_user_fact_by_its_key_and_answer(build: Any) -> None:
    listed = _summary("Artifacts: DivisionUndefined, ACCT-88213, billing/refunds.py")  # answers without keys
    messages = request_messages(*build("Go on.", "ok", listed))
    assert classify(ERROR, messages) == SUMMARY  # a tool's artifact: the error itself is there
    assert classify(ACCOUNT, messages) == ABSENT  # a user's fact: which account it is is not said


def test_the_users_messages_that_reach_the_request_verbatim_are_counted_copy_by_copy() -> None:
    said = ["Run the tests.", LIMIT.text, "Run the tests.", "Open billing/tax.py.", "Thanks."]
    body, wire = _anthropic("Thanks.", "ok", _summary("- The user asked: Open billing/tax.py."))
    body["messages"].insert(0, {"role": "user", "content": "Run the tests."})
    messages = request_messages(body, wire)
    # "Run the tests." twice, once kept; one quoted whole in the summary; the rest absent.
    assert user_messages_kept(said, messages) == (2, 1)


def test_the_summarizer_request_is_told_apart_from_the_apps_requests() -> None:
    body, wire = _anthropic("Next file.", "ok", None)
    assert not is_summarizer_request(body, wire)
    body["messages"].append({"role": "user", "content": build_prompt()})
    assert is_summarizer_request(body, wire)


def test_answers_are_matched_whole_and_read_by_number() -> None:
    assert answer_matches("5", "It is 5 attempts now") and not answer_matches("5", "It is 15 attempts")
    assert answer_matches("billing/fx/rates_2024.csv", "In `billing/fx/rates_2024.csv`.")
    assert answer_matches("acct-88213", "ACCT-88213")
    reply = "Here you go:\n1. ACCT-88213\n2) **5**\nattempts\n3: unknown"
    answers = parse_answers(reply)
    assert sorted(answers) == [1, 2, 3] and answers[1] == "ACCT-88213" and answers[3] == "unknown"
    assert answer_matches("5", answers[2]) and answers[2].endswith("attempts")  # a wrapped line continues


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_scenario_plants_every_kind_once_keyed_uniquely(name: str) -> None:
    scenario = get_scenario(name)
    assert 150 <= scenario.turns <= 250
    assert sorted({f.kind for f in scenario.facts}) == sorted(KINDS)
    script = scenario.script()  # raises if a key is found on a line other than its fact's
    assert len(script) == scenario.turns
    planted = [fact_id for turn in script for fact_id in turn.planted]
    assert sorted(planted) == sorted(f.id for f in scenario.facts)
    text = json.dumps([t.lines() for t in script])
    for fact in scenario.facts:
        assert text.count(json.dumps(fact.text)[1:-1]) == 1, fact.id
    assert scenario.script(40) != script[:40]  # a shorter run plants every fact too, in proportion
    assert sum(len(t.planted) for t in scenario.script(40)) == len(scenario.facts)


QUOTED = 'git add crates && git commit -m "fix(ledger-core): round half to even"'


@pytest.mark.parametrize("wire_format", ["anthropic_messages", "openai_chat", "openai_responses"])
def test_a_command_with_quotes_in_a_kept_tool_call_is_kept_as_the_model_reads_it(wire_format: str) -> None:
    """The request carries a tool call's arguments as JSON, where the command's quotes are escaped; the model
    reads the command whole, and so does the judge (the long scenario counted such commands lost while they
    were still in the recent turns)."""
    arguments = {"command": QUOTED}
    if wire_format == "anthropic_messages":
        body: dict[str, Any] = {
            "messages": [
                {"role": "user", "content": "Commit it."},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": arguments}],
                },
            ]
        }
    elif wire_format == "openai_chat":
        call = {"id": "t1", "type": "function", "function": {"name": "bash", "arguments": json.dumps(arguments)}}
        body = {"messages": [{"role": "user", "content": "Commit it."}, {"role": "assistant", "tool_calls": [call]}]}
    else:
        body = {
            "input": [
                {"type": "message", "role": "user", "content": "Commit it."},
                {"type": "function_call", "call_id": "t1", "name": "bash", "arguments": json.dumps(arguments)},
            ]
        }
    texts = [m.text for m in request_messages(body, wire_format)]
    assert QUOTED not in json.dumps(arguments)  # escaped in what the request carries
    assert any(QUOTED in text for text in texts)
    assert kept(command(QUOTED), texts)
    # An argument JSON leaves as it is is not written twice; one that is not JSON is read as it is.
    plain = request_messages(
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": '{"path": "a.py"}'}}]}]},
        "openai_chat",
    )
    assert plain[0].text == '\n{"path": "a.py"}'
    broken = request_messages(
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": '{"path": "a'}}]}]}, "openai_chat"
    )
    assert broken[0].text == '\n{"path": "a'
