"""``otel-context eval`` as CI and users run it: offline on the simulated provider, through the real SDKs and
the real transparent compaction; and the guard rails of a live run (never run live here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_context.cli import main
from otel_context.evaluation.classify import is_summarizer_request

SCRIPT = Path(sys.executable).parent / "otel-context"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_"))}
    env.pop("COLUMNS", None)
    return env


def _kept(run: dict[str, Any], compaction: dict[str, Any]) -> int:
    """Facts the request carried that the probes ask about (a reversed constraint is not asked)."""
    return sum(1 for f in compaction["facts"] if f["state"] != "absent" and not f["superseded"])


def _consistent(payload: dict[str, Any]) -> None:
    """What holds on the simulated provider whatever the compaction keeps: its probes answer by lookup, so the
    compacted score is exactly what reached the request, and the full history answers everything."""
    for run in payload["runs"]:
        assert len(run["compactions"]) >= 3, run["scenario"]
        for c in run["compactions"]:
            asked = len(c["probes"]["answers"])
            assert asked >= 5
            assert c["probes"]["compacted"] == [_kept(run, c), asked]
            assert c["probes"]["full"] == [asked, asked]
            assert c["tokens_before"] > c["tokens_after"] > 0
            assert c["summary_input_tokens"] > 0 and c["summary_output_tokens"] > 0
            assert c["summary_cost_usd"] > 0 and c["spared_tokens"] > 0
        assert run["peak_request_tokens"] <= run["window"]


def test_ci_gate_no_user_fact_is_lost_with_lossy_summarizers(tmp_path: Path) -> None:
    """The gate CI runs: every scenario with the summarizers that lose things, cut to 60 turns.

    Exit 0 means every fact the user stated reached every request after each compaction that followed it.
    """
    out = tmp_path / "eval.json"
    args = ["eval", "--summarizer", "bounded,end", "--turns", "60", "--window", "6000", "--json", str(out)]
    proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=_env(), timeout=120)
    payload = json.loads(out.read_text())
    assert [(r["scenario"], r["summarizer"]) for r in payload["runs"]] == [
        (s, style) for s in ("billing", "frontend", "pipeline") for style in ("bounded", "end")
    ]
    _consistent(payload)
    lost = {(r["scenario"], r["summarizer"]): r["user_facts_lost"] for r in payload["summary"]}
    assert lost == dict.fromkeys(lost, 0), proc.stderr[-3000:]
    assert payload["failures"] == [] and payload["passed"]
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_faithful_run_on_the_openai_sdk_prints_its_tables_and_keeps_every_fact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval.json"
    code = main(
        [
            "eval",
            "--sdk",
            "openai",
            "--scenario",
            "pipeline",
            "--summarizer",
            "faithful",
            "--turns",
            "50",
            "--window",
            "6000",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    payload = json.loads(out.read_text())
    _consistent(payload)
    (run,) = payload["runs"]
    last = run["compactions"][-1]
    assert {f["id"] for f in last["facts"]} == {f["id"] for f in run["facts"]}  # all planted by then
    assert all(f["state"] != "absent" or f["superseded"] for f in last["facts"])
    assert payload["summary"][0]["user_facts_kept"] == payload["summary"][0]["user_facts_checked"] > 0
    # gpt-4.1's list price: summaries cost 2 $/M in, 8 $/M out
    assert last["summary_cost_usd"] == pytest.approx(
        (last["summary_input_tokens"] * 2 + last["summary_output_tokens"] * 8) / 1e6
    )
    for title in ("Compactions", "Facts after each compaction", "Retention", "pipeline: Hardening a Go"):
        assert title in printed.out


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
    assert code == 0, err
    assert "real anthropic API" in err and "claude-sonnet-4-6 list prices" in err  # the estimate came first
    assert models == {("claude-sonnet-4-6", False), ("claude-haiku-4-5", True)}  # the summarizer's own model
    payload = json.loads(out.read_text())
    assert payload["provider"] == "anthropic" and payload["passed"]
    (run,) = payload["runs"]
    assert run["summarizer"] is None and run["peak_request_tokens"] <= 6_000 < run["full_history_tokens"]
    compactions = run["compactions"]
    assert len(compactions) >= 3
    fit = [c for c in compactions if c["probes"]["full_error"] is None]
    skipped = [c for c in compactions if c["probes"]["full_error"] is not None]
    assert fit and skipped and compactions.index(skipped[0]) == len(fit)  # once the history outgrew 9,000
    assert all(c["probes"]["full"] == [0, 0] and "prompt is too long" in c["probes"]["full_error"] for c in skipped)
    assert all(c["probes"]["compacted"][0] == c["probes"]["compacted"][1] > 0 for c in compactions)
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
        (["--summarizer", "bounded,lazy"], "--summarizer 'lazy'"),
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
