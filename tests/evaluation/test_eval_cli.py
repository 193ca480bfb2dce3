"""``otel-context eval`` as CI and users run it: offline on the simulated provider, through the real SDKs and
the real transparent compaction; and the guard rails of a live run (never run live here)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_context.cli import main
from otel_context.evaluation.classify import is_summarizer_request
from otel_context.evaluation.scenarios import DEFAULT_SCENARIOS, get_scenario

SCRIPT = Path(sys.executable).parent / "otel-context"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_"))}
    env.pop("COLUMNS", None)
    return env


def _kept(run: dict[str, Any], compaction: dict[str, Any]) -> int:
    """Facts the request carried that the probes ask about (a reversed constraint is not asked)."""
    return sum(1 for f in compaction["facts"] if f["state"] != "absent" and not f["superseded"])


def _in_force(compaction: dict[str, Any], which: Any) -> list[int]:
    facts = [f for f in compaction["facts"] if not f["superseded"] and which(f)]
    return [sum(1 for f in facts if f["state"] != "absent"), len(facts)]


def _consistent(payload: dict[str, Any]) -> None:
    """What holds on the simulated provider whatever the compaction keeps: its probes answer by lookup, so the
    compacted score is what reached the request (an artifact kept without its key, in a bare list, is kept but
    not found by the key), the full history answers everything, and the new figures agree with the facts."""
    kinds = {f["id"]: f for run in payload["runs"] for f in run["facts"]}
    for run in payload["runs"]:
        assert len(run["compactions"]) >= 3, run["scenario"]
        for c in run["compactions"]:
            asked = len(c["probes"]["answers"])
            assert asked == sum(1 for f in c["facts"] if not f["superseded"]) >= 1  # every fact in force
            hit, total = c["probes"]["compacted"]
            assert total == asked and hit <= _kept(run, c)
            assert hit >= _kept(run, c) - sum(1 for f in c["facts"] if f["source"] == "tool")
            assert c["probes"]["full"] == [asked, asked]
            assert c["tokens_before"] > c["tokens_after"] > 0
            assert c["summary_input_tokens"] > 0 and c["summary_output_tokens"] > 0
            assert c["summary_cost_usd"] > 0 and c["spared_tokens"] > 0
            assert c["user_facts"] == _in_force(c, lambda f: f["source"] == "user")
            assert c["artifacts"] == _in_force(c, lambda f: f["source"] == "tool")
            assert c["decisions"] == _in_force(c, lambda f: f["kind"] == "decision")
            assert c["stale_values"] == [f["id"] for f in c["facts"] if f["stale"]]
            assert all(kinds[i]["reverses"] is None and kinds[i]["kind"] == "constraint" for i in c["stale_values"])
            said = c["user_messages"]
            spoke = sum(1 for t in get_scenario(run["scenario"]).script(run["turns"])[: c["turn"]] if t.user)
            assert said["said"] == spoke and 0 < said["verbatim"] + said["quoted_in_summary"] <= said["said"]
            assert said["share"] == pytest.approx((said["verbatim"] + said["quoted_in_summary"]) / said["said"])
            # The repair: within its budget (at most an eighth of the effective window), never worse.
            assert (
                c["repair_tokens"] is not None and 0 <= c["repair_tokens"] <= c["repair_budget"] <= run["window"] // 8
            )
            assert c["retention_before_repair"] is not None and c["retention_before_repair"] <= c["retention"]
        assert run["peak_request_tokens"] <= run["window"]


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The gate as CI will run it: every scenario with every fact-blind summarizer, cut to 60 turns."""
    out = tmp_path_factory.mktemp("gate") / "eval.json"
    args = ["eval", "--turns", "60", "--window", "6000", "--json", str(out)]
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=_env(), timeout=240)
    return proc, json.loads(out.read_text())


def test_the_gate_measures_every_run_and_exits_1_for_each_kind_of_failure(
    gate: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    proc, payload = gate
    assert [(r["scenario"], r["summarizer"]) for r in payload["runs"]] == [
        (s, style) for s in DEFAULT_SCENARIOS for style in ("start", "end", "sample", "unhelpful")
    ]
    _consistent(payload)
    failing = {
        (r["scenario"], r["summarizer"])
        for r in payload["summary"]
        if r["user_facts_lost"]
        or r["without_reversal"]
        or r["stale_values"]
        or r["repair_over_budget"]
        or r["work_failed"]
    }
    assert all(r["work_gated"] == get_scenario(r["scenario"]).work_gated for r in payload["summary"])
    assert {(r["scenario"], r["summarizer"]) for r in payload["summary"] if not r["passed"]} == failing
    assert payload["passed"] == (not failing) == (not payload["failures"])
    assert proc.returncode == (0 if payload["passed"] else 1), proc.stderr[-3000:]
    for line in payload["failures"]:
        assert line in proc.stderr


def test_the_gate_passes_with_every_fact_blind_summarizer(
    gate: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """Issue 39's "Done when", what holds whatever the summarizer writes: every user fact after every
    compaction, no constraint without its reversal, no stale value, with each blind summarizer (exit 0)."""
    proc, payload = gate
    assert payload["failures"] == [] and payload["passed"] and proc.returncode == 0, proc.stderr[-3000:]


def test_the_tool_result_artifacts_reach_90_percent_with_every_fact_blind_summarizer(
    gate: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """Issue 39's "Done when": at least 90 % of the tool-result artifacts, with each blind summarizer."""
    _, payload = gate
    for row in payload["summary"]:
        kept, checked = row["artifacts"]
        assert kept >= 0.9 * checked, row


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(values), "p95": ordered[math.ceil(0.95 * len(ordered)) - 1], "max": ordered[-1]}


def test_the_gate_reports_what_the_repair_added_against_the_summary_and_the_window(
    gate: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """Issue 39 item 6: the tokens the repair adds (median, p95, max), against the summary's size and the
    window, per run and over all runs, computed from the compactions the JSON lists, and printed."""
    proc, payload = gate
    everything: list[tuple[dict[str, Any], int]] = []
    for run, row in zip(payload["runs"], payload["summary"], strict=True):
        pairs = [(c, run["window"]) for c in run["compactions"]]
        everything += pairs
        assert row["repair"] == _figures(pairs)
        assert row["repair_over_budget"] == 0 and row["repair"]["within_budget"]
    overall = payload["repair"]
    assert overall == _figures(everything) and overall["compactions"] == len(everything) >= 36
    assert 0 < overall["tokens"]["median"] <= overall["tokens"]["p95"] <= overall["tokens"]["max"] <= overall["budget"]
    assert overall["of_window"]["max"] <= 1 / 8
    assert "What the repair added" in proc.stdout
    last = proc.stdout[proc.stdout.index("What the repair added") :].splitlines()
    tokens = overall["tokens"]
    assert any(
        line.startswith("all ") and f"{tokens['median']:,.0f} / {tokens['p95']:,.0f} / {tokens['max']:,.0f}" in line
        for line in last
    )


def _figures(pairs: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """What the report should say of ``pairs`` (compaction, window), from the JSON's own per-compaction figures."""
    return {
        "compactions": len(pairs),
        "tokens": _spread([float(c["repair_tokens"]) for c, _ in pairs]),
        "of_summary": _spread([c["repair_tokens"] / c["summary_output_tokens"] for c, _ in pairs]),
        "of_window": _spread([c["repair_tokens"] / window for c, window in pairs]),
        "budget": max(c["repair_budget"] for c, _ in pairs),
        "within_budget": all(c["repair_tokens"] <= c["repair_budget"] for c, _ in pairs),
    }


def test_a_run_on_the_openai_sdk_prints_its_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval.json"
    code = main(
        [
            "eval",
            "--sdk",
            "openai",
            "--scenario",
            "pipeline",
            "--summarizer",
            "sample",
            "--turns",
            "50",
            "--window",
            "6000",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    payload = json.loads(out.read_text())
    assert code == (0 if payload["passed"] else 1), printed.err
    _consistent(payload)
    (run,) = payload["runs"]
    last = run["compactions"][-1]
    assert {f["id"] for f in last["facts"]} == {f["id"] for f in run["facts"]}  # all planted by then
    (row,) = payload["summary"]
    assert row["verbatim_share"] == [c["user_messages"]["share"] for c in run["compactions"]]
    assert row["user_facts"] == [sum(c["user_facts"][i] for c in run["compactions"]) for i in (0, 1)]
    # gpt-4.1's list price: summaries cost 2 $/M in, 8 $/M out
    assert last["summary_cost_usd"] == pytest.approx(
        (last["summary_input_tokens"] * 2 + last["summary_output_tokens"] * 8) / 1e6
    )
    for title in (
        "Compactions",
        "What reached the model after each compaction",
        "Facts after each compaction",
        "Retention",
        "Kept, over every (compaction, fact) pair",
        "Verbatim user messages, %",
        "pipeline: Hardening a Go",
    ):
        assert title in printed.out


def _record(facts: list[Any], number: int = 1) -> Any:
    from otel_context.evaluation.runner import CompactionRecord

    return CompactionRecord(number, 30 * number, "threshold", 9_000, 3_000, 8_000, 500, None, None, facts)


def _crafted(stale: bool) -> Any:
    """A run whose one compaction sent the retry limit of 3 after its change to 5 (``stale``), or before it."""
    from otel_context.compaction.prompt import summary_message_text
    from otel_context.evaluation.classify import SentMessage, assess
    from otel_context.evaluation.runner import RunResult
    from otel_context.evaluation.scenarios import get_scenario

    billing = get_scenario("billing")
    old, new = billing.fact("retry-limit"), billing.fact("retry-limit-now")
    lines = [new.text, old.text] if stale else [old.text, new.text]
    messages = [SentMessage("user", summary_message_text("\n".join(lines)), summary=True)]
    result = RunResult(billing, "start", "crafted", "simulated", "m", "m", 12_000, 60)
    result.compactions.append(_record(assess([old, new], messages)))
    return result


def _eval_of(result: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any, Any]:
    """``otel-context eval --json -`` whose one run is ``result`` (the runner replaced by one that reports it;
    the rest is the command's own): the exit status, what it printed, the JSON."""
    from otel_context.evaluation import cli as eval_cli

    def run(options: Any, on_run: Any = None) -> list[Any]:
        on_run(result)
        return [result]

    monkeypatch.setattr(eval_cli, "run", run)
    code = main(["eval", "--scenario", "billing", "--summarizer", "start", "--json", "-"])
    printed = capsys.readouterr()
    return code, printed, json.loads(printed.out)


def test_a_repair_over_its_budget_fails_the_run_and_the_exit_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The repair must stay within its budget (issue 39's "done when"): a compaction whose span says it added
    more fails the run with one line, and the exit status is 1; at the budget it passes."""
    for added, code_expected in ((601, 1), (600, 0)):
        result = _crafted(stale=False)
        result.compactions[0].repair_tokens, result.compactions[0].repair_budget = added, 600

        code, printed, payload = _eval_of(result, monkeypatch, capsys)
        assert code == code_expected and payload["summary"][0]["repair_over_budget"] == code_expected
        line = "billing/start: the repair at compaction 1 (turn 30) added 601 tokens, over its budget of 600"
        assert (line in printed.err) == bool(code_expected)
        assert payload["repair"]["tokens"] == {"median": added, "p95": added, "max": added}


@pytest.mark.parametrize("stale", [True, False])
def test_a_stale_value_fails_the_run_and_the_exit_status(
    stale: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exit status of ``otel-context eval`` for a run whose request carried a superseded value as current:
    the run is the crafted one (the runner replaced by one that reports it), the rest is the command's own."""
    result = _crafted(stale)
    assert [s.stale for s in result.compactions[0].facts] == [stale, False]

    code, printed, payload = _eval_of(result, monkeypatch, capsys)
    assert payload["summary"][0]["stale_values"] == int(stale)
    if stale:
        assert code == 1 and not payload["passed"]
        assert "billing/start: a superseded value sent as if current at compaction 1 (turn 30)" in printed.err
    else:
        assert code == 0 and payload["passed"] and payload["summary"][0]["old_value_sent"] == 1


def _work_run(scenario: Any, lost: str | None) -> Any:
    """A run of ``scenario`` whose one compaction (turn 30) carried the agent's work but ``lost``: a file changed,
    one only read, an open error, a closed one, a decision, a definition, a command (or nothing lost)."""
    from otel_context.evaluation.runner import RunResult
    from otel_context.evaluation.work import (
        CHANGES,
        FAILS,
        FIXES,
        Needle,
        WorkEvent,
        assess_work,
        command,
        decision,
        definition,
        error,
        file,
        track,
    )

    items = {
        "changed": file("src/orders/handlers/refund.py"),
        "read": file("src/orders/handlers/refunds.py"),
        "open_error": error("E0308 in money.rs", (Needle("money.rs:9"),), (Needle("E0308"),)),
        "closed_error": error("TS2322 in Form.tsx", (Needle("Form.tsx:41"),), (Needle("TS2322"),)),
        "decision": decision("money", "We will store money as i128 minor units, never f64.", "i128", "minor units"),
        "definition": definition("RefundPolicy", "src/orders/handlers/refund_policy.py"),
        "command": command("cargo test -p ledger-core"),
    }
    timeline = track(
        [
            [WorkEvent(items["read"]), WorkEvent(items["definition"]), WorkEvent(items["changed"])],
            [WorkEvent(items["changed"], CHANGES), WorkEvent(items["command"])],
            [WorkEvent(items["open_error"], FAILS), WorkEvent(items["closed_error"], FAILS)],
            [WorkEvent(items["closed_error"], FIXES), WorkEvent(items["decision"], in_reply=True)],
        ]
    )
    lines = {
        "changed": "changed src/orders/handlers/refund.py",
        "read": "read src/orders/handlers/refunds.py",
        "definition": "RefundPolicy in src/orders/handlers/refund_policy.py",
        "open_error": "open: E0308 at money.rs:9",
        "closed_error": "fixed: TS2322 at Form.tsx:41",
        "decision": "We will store money as i128 minor units, never f64.",
        "command": "ran cargo test -p ledger-core",
    }
    text = "\n".join(line for kind, line in lines.items() if kind != lost)
    result = RunResult(scenario, "start", "crafted", "simulated", "m", "m", 30_000, 60, timeline=timeline)
    record = _record([])
    record.work = assess_work(timeline, 29, [text], None)
    result.compactions.append(record)
    return result


@pytest.mark.parametrize(
    ("lost", "label"),
    [("changed", "files changed"), ("open_error", "open errors"), ("decision", "decisions")],
)
def test_a_lost_changed_file_open_error_or_decision_fails_a_gated_run(
    lost: str, label: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48's gate: in a gated scenario, a changed file, an open error or a decision absent from a request
    after a compaction fails the run with one line naming it (exit 1); in a scenario not gated, the same loss is
    measured and the run passes."""
    import dataclasses

    long = get_scenario("long")
    code, printed, payload = _eval_of(_work_run(long, lost), monkeypatch, capsys)
    assert code == 1 and not payload["passed"]
    (line,) = payload["failures"]
    assert line.startswith(f"long/start: 1 of 1 {label} lost after a compaction (the first at compaction 1, turn 30)")
    assert line in printed.err
    (row,) = payload["summary"]
    assert row["work_failed"] and row["work"][lost] == [0, 1]
    assert payload["runs"][0]["compactions"][0]["work_lost"] == {lost: [row["work_lost"][lost][0]]}

    measured = dataclasses.replace(long, work_gated=False)
    code, printed, payload = _eval_of(_work_run(measured, lost), monkeypatch, capsys)
    assert code == 0 and payload["passed"] and payload["failures"] == []
    assert payload["summary"][0]["work"][lost] == [0, 1] and not payload["summary"][0]["work_failed"]


@pytest.mark.parametrize("lost", [None, "read", "definition", "closed_error", "command"])
def test_nothing_lost_or_a_loss_the_gate_does_not_hold_passes(
    lost: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files only read, definitions, closed errors and commands are measured, not gated."""
    code, printed, payload = _eval_of(_work_run(get_scenario("long"), lost), monkeypatch, capsys)
    assert code == 0 and payload["passed"] and payload["failures"] == [] and "lost after" not in printed.err
    (row,) = payload["summary"]
    kept = {kind: figures for kind, figures in row["work"].items() if figures[1]}
    assert kept == {kind: [0 if kind == lost else 1, 1] for kind in kept}
    assert set(kept) == {"read", "changed", "definition", "open_error", "closed_error", "command", "decision"}


def test_the_live_path_against_a_provider_at_the_sdks_base_url_skips_a_full_history_over_its_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--provider anthropic`` as a user runs it (key and base URL from the SDK's variables, the SDK's own
    client), pointed at a simulated provider whose model window is smaller than the full history: the
    compacted requests fit, the full-history probe is refused by the provider and reported as skipped."""
    from otel_context.testing import SimulatedProvider

    out = tmp_path / "eval.json"
    with SimulatedProvider(windows={"claude-sonnet-4-6": 9_000}) as sim:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sim-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", sim.base_url)
        args = ["--scenario", "pipeline", "--turns", "50", "--window", "6000", "--json", str(out)]
        code = main(["eval", "--provider", "anthropic", "--summary-model", "claude-haiku-4-5", "--yes", *args])
        models = {
            (e.body["model"], is_summarizer_request(e.body, "anthropic_messages"))
            for e in sim.exchanges
            if e.path == "/v1/messages"
        }
    err = capsys.readouterr().err
    payload = json.loads(out.read_text())
    assert code == (0 if payload["passed"] else 1), err
    assert "real anthropic API" in err and "claude-sonnet-4-6 list prices" in err  # the estimate came first
    assert models == {("claude-sonnet-4-6", False), ("claude-haiku-4-5", True)}  # the summarizer's own model
    assert payload["provider"] == "anthropic"
    (run,) = payload["runs"]
    assert run["summarizer"] is None and run["peak_request_tokens"] <= 6_000 < run["full_history_tokens"]
    compactions = run["compactions"]
    assert len(compactions) >= 3
    fit = [c for c in compactions if c["probes"]["full_error"] is None]
    skipped = [c for c in compactions if c["probes"]["full_error"] is not None]
    assert fit and skipped and compactions.index(skipped[0]) == len(fit)  # once the history outgrew 9,000
    assert all(c["probes"]["full"] == [0, 0] and "prompt is too long" in c["probes"]["full_error"] for c in skipped)
    assert all(0 < c["probes"]["compacted"][0] <= c["probes"]["compacted"][1] for c in compactions)
    last = compactions[-1]  # priced at Claude Haiku 4.5's list price: 1 $/M in, 5 $/M out
    assert last["summary_cost_usd"] == pytest.approx(
        (last["summary_input_tokens"] * 1 + last["summary_output_tokens"] * 5) / 1e6
    )


def test_a_provider_that_fails_a_request_stops_the_run_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from otel_context.testing import Fault, SimulatedProvider

    with SimulatedProvider() as sim:
        sim.inject(Fault(status=400, error_type="invalid_request_error", message="model is retired"))
        monkeypatch.setenv("OPENAI_API_KEY", "sim-key")
        monkeypatch.setenv("OPENAI_BASE_URL", sim.openai_base_url)
        code = main(["eval", "--provider", "openai", "--scenario", "billing", "--turns", "30", "--yes"])
    err = capsys.readouterr().err
    assert code == 1
    assert "otel-context eval: the openai API failed a request, the run stops:" in err and "model is retired" in err
    assert "Traceback" not in err


def test_a_live_run_without_its_key_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["eval", "--provider", "openai", "--yes"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "OPENAI_API_KEY is not set" in err


def test_a_live_run_says_what_it_may_spend_and_asks_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # were anything sent, it would fail here
    assert main(["eval", "--provider", "anthropic", "--scenario", "billing"]) == 2  # stdin is not a terminal
    err = capsys.readouterr().err
    assert "real anthropic API" in err and "input and" in err and "claude-sonnet-4-6 list prices" in err
    assert "pass --yes to confirm" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "openai", "--summarizer", "end"], "--summarizer chooses a simulated summarizer"),
        (["--scenario", "payroll"], "unknown scenario 'payroll'"),
        (["--summarizer", "start,lazy"], "--summarizer 'lazy'"),
        (["--summarizer", "faithful"], "--summarizer 'faithful'"),  # no eval style knows the planted facts
        (["--turns", "10"], "--turns 10: must be at least"),
        (["--window", "1000"], "--window 1000: must be at least 6,000 tokens"),
        (["--window", "-1"], "--window -1: must be at least 6,000 tokens"),
        (["--turns", "-1"], "--turns -1: must be at least"),
        (["--yes"], "--yes confirms a live run"),
    ],
)
def test_bad_options_are_refused_with_a_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", *args]) == 2
    assert message in capsys.readouterr().err
