"""Issue 48: the work trail, what the agent itself did, kept beside every summary whatever the summarizer writes.

Built from sessions as Claude Code and Codex send them (Read's ``cat -n`` lines, Edit, Write, Bash running pytest,
cargo, tsc and eslint, Grep, Codex's ``apply_patch``), in the three wire formats: what the trail holds (files by
what was done to them, definitions, errors with their status, commands, decisions), that it is read back and
merged at the next compaction (anchored), and how it is compressed and bounded.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_context import semconv
from otel_context.compaction import retention
from otel_context.compaction import trail as trail_mod
from otel_context.compaction.prompt import WORK_TRAIL_HEADER, summary_message_text
from otel_context.formats import for_format
from otel_context.settings import Settings
from tests.compaction import tool_outputs as out
from tests.compaction.tool_outputs import MONEY_RS, REFUND_PY, Session, cat_n

FORMATS = ["anthropic_messages", "openai_chat", "openai_responses"]
ROOT = "/home/dev/payments"
PATCH = """*** Begin Patch
*** Update File: crates/ledger-core/src/money.rs
@@
-pub fn to_minor_units(value: f64) -> i128 {
+pub fn to_minor_units(value: Decimal) -> i128 {
*** Add File: crates/ledger-core/src/rounding.rs
+pub enum Rounding {
+    HalfEven,
+}
+pub fn round_half_even(value: i128) -> i128 {
+    value
+}
*** End Patch"""


def refunds_session(fmt: str) -> Session:
    """A refunds rework: reads, a search, failing runs and the runs that fix them, edits, a new file, a patch,
    and the assistant's decisions among its narration."""
    s = Session(fmt)
    s.user("Make duplicate refund requests harmless in src/orders/handlers/refund.py.")
    s.call(
        "Read", {"file_path": f"{ROOT}/src/orders/handlers/refund.py"}, cat_n(REFUND_PY), "I'll read the handler first."
    )
    s.call("Read", {"file_path": f"{ROOT}/crates/ledger-core/src/money.rs"}, cat_n(MONEY_RS))
    s.call("Grep", {"pattern": "def prorate", "output_mode": "content", "-n": True}, out.GREP)
    s.call("Bash", {"command": "pytest -v tests/test_refunds.py"}, out.PYTEST_V)
    s.say("We will store money as i128 minor units, never f64. I'll look at the failing test next.")
    s.call(
        "Edit",
        {
            "file_path": f"{ROOT}/src/orders/handlers/refund.py",
            "old_string": "def refund_amount(order, ratio):",
            "new_string": "def refund_amount(order, ratio, *, key=None):",
        },
        "The file has been updated.",
    )
    s.call(
        "Write",
        {"file_path": f"{ROOT}/src/orders/idempotency.py", "content": "class IdempotencyStore:\n    pass\n"},
        "ok",
    )
    s.call("Bash", {"command": "cargo build -p ledger-core"}, out.CARGO)
    s.call("apply_patch", {"input": PATCH}, "Success. Updated the following files:\nM crates/ledger-core/src/money.rs")
    s.call("Bash", {"command": "cargo build -p ledger-core 2>&1 | tail -n 40"}, out.CARGO_OK)
    s.call("Bash", {"command": "npx tsc --noEmit"}, out.TSC)
    s.call("Bash", {"command": "npx eslint src"}, out.ESLINT)
    s.say("Fixed the TS2322 in src/api/client.ts: the session is optional now. Let's go with date-fns for dates.")
    s.say("Plan: migrate the refunds table on 2027-01-15. I won't touch the ledger schema.")
    s.call("Bash", {"command": "pytest tests/"}, "....\n4 passed in 0.31s")
    return s


def build(items: list[Any], fmt: str) -> trail_mod.Trail:
    tools: list[Any] = []
    walked = retention.walk(for_format(fmt), items, tools)
    return trail_mod.build(walked, tools, Settings())


def lines_under(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    if heading not in lines:
        return []
    out_lines: list[str] = []
    for line in lines[lines.index(heading) + 1 :]:
        if not line.startswith("- "):
            break
        out_lines.append(line[2:])
    return out_lines


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_trail_of_a_session_says_what_the_agent_did(fmt: str) -> None:
    written = trail_mod.render(build(refunds_session(fmt).items, fmt), 5_000)
    text = written.text
    # The tools' absolute paths written from their root once (a tool named money.rs absolute, apply_patch relative).
    assert text.startswith(f"{WORK_TRAIL_HEADER}\nPaths from {ROOT}/:\n")
    # Files by what was done to them, a read later changed folded into the change, with their definitions.
    assert lines_under(text, "Files changed:") == [
        "src/orders/handlers/refund.py (changed refund_amount; RefundHandler)",
        "crates/ledger-core/src/money.rs (changed to_minor_units; Money)",
    ]
    assert lines_under(text, "Files created:") == [
        "src/orders/idempotency.py (changed IdempotencyStore)",
        "crates/ledger-core/src/rounding.rs (changed Rounding, round_half_even)",
    ]
    assert "Files read:" not in text
    assert lines_under(text, "Definitions found:") == ["prorate_by_days: src/orders/proration.py:17"]
    # Errors with where they are; pytest's progress lines are none; a run that passes closes its target's.
    assert lines_under(text, "Errors open:") == [
        "src/pages/Report.tsx(88,14) error TS2345: Argument of type 'number' is not assignable to parameter of type "
        "'string'. [`npx tsc --noEmit`]",
        "/home/dev/web/src/components/Chart.tsx 12:5   error    'legendItems' is assigned a value but never used  "
        "@typescript-eslint/no-unused-vars [`npx eslint src`]",
        '/home/dev/web/src/hooks/useSession.ts 7:1  error  React Hook "useEffect" is called conditionally  '
        "react-hooks/rules-of-hooks [`npx eslint src`]",
    ]
    closed = lines_under(text, "Errors closed:")
    assert (
        closed[0]
        == "src/money.rs:22:20 error[E0308]: mismatched types [`cargo build -p ledger-core 2>&1 | tail -n 40` ok]"
    )
    assert (
        "src/api/client.ts:41:7 error TS2322: Type 'undefined' is not assignable to type 'Session'. [said fixed]"
        in closed
    )
    assert (
        "FAILED tests/test_refunds.py::test_prorate_by_days - decimal.InvalidOperation: [<class "
        "'decimal.DivisionUndefined'>] [`pytest tests/` ok]"
    ) in closed
    assert not any("[ 33%]" in line or "[ 44%]" in line for line in text.splitlines())
    assert lines_under(text, "Commands, last outcome:") == [
        "`pytest -v tests/test_refunds.py`: failed",
        "`cargo build -p ledger-core`: failed",
        "`cargo build -p ledger-core 2>&1 | tail -n 40`: ok",
        "`npx tsc --noEmit`: failed",
        "`npx eslint src`: failed",
        "`pytest tests/`: ok",
    ]
    # Decisions whole, in several phrasings; the narration of the next step is none.
    assert lines_under(text, "Decisions and commitments:") == [
        "We will store money as i128 minor units, never f64.",
        "Let's go with date-fns for dates.",
        "Plan: migrate the refunds table on 2027-01-15.",
        "I won't touch the ledger schema.",
    ]
    assert written.counts == {
        semconv.TRAIL_KIND_CHANGED: 2,
        semconv.TRAIL_KIND_CREATED: 2,
        semconv.TRAIL_KIND_READ: 0,
        semconv.TRAIL_KIND_DEFINITION: 8,
        semconv.TRAIL_KIND_OPEN_ERROR: 3,
        semconv.TRAIL_KIND_CLOSED_ERROR: 6,
        semconv.TRAIL_KIND_COMMAND: 6,
        semconv.TRAIL_KIND_DECISION: 4,
    }
    assert written.dropped == {} and written.tokens <= 5_000


def test_the_three_wire_formats_give_one_trail() -> None:
    texts = {fmt: trail_mod.render(build(refunds_session(fmt).items, fmt), 5_000).text for fmt in FORMATS}
    assert texts["openai_chat"] == texts["anthropic_messages"] == texts["openai_responses"]


def _summary_item(fmt: str, text: str) -> dict[str, Any]:
    return for_format(fmt).make_user_item(summary_message_text(f"We worked on refunds.\n\n{text}"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_trail_is_read_back_and_updated_at_the_next_compaction(fmt: str) -> None:
    """Anchored: the next compaction replaces the summary message that holds the trail and a new span; the trail
    it writes is the old one updated (nothing of the first span is read again: it is gone)."""
    first = trail_mod.render(build(refunds_session(fmt).items, fmt), 5_000)
    assert trail_mod.render(trail_mod.parse(first.text), 5_000).text == first.text  # read back as written
    later = Session(fmt)
    later.items.append(_summary_item(fmt, first.text))
    later.user("Now the admin page.")
    later.call(
        "Read", {"file_path": f"{ROOT}/admin/src/pages/Refunds.tsx"}, cat_n("export function RefundsPage() {\n}\n")
    )
    later.call("Bash", {"command": "npx tsc --noEmit"}, "")  # tsc prints nothing when it passes
    later.say("The eslint rows are still open; I decided to keep them for the lint pass on Friday.")
    second = trail_mod.render(build(later.items, fmt), 5_000)
    text = second.text
    for line in first.text.splitlines():
        if line.startswith("- ") and "npx tsc --noEmit" not in line:
            assert line in text, line
    assert lines_under(text, "Files read:") == ["admin/src/pages/Refunds.tsx (RefundsPage)"]
    assert "src/pages/Report.tsx(88,14) error TS2345" in "\n".join(lines_under(text, "Errors closed:"))
    assert len(lines_under(text, "Errors open:")) == 2  # the eslint rows
    assert lines_under(text, "Decisions and commitments:")[-1] == (
        "The eslint rows are still open; I decided to keep them for the lint pass on Friday."
    )
    assert text.count(WORK_TRAIL_HEADER) == 1


def test_a_read_of_many_files_is_compressed_before_anything_is_dropped() -> None:
    """Over its budget the trail groups paths by folder, folds closed errors to one line, drops the definitions of
    the oldest files, folds the oldest reads to their folder: an open error, a changed file and a decision stay
    while a read remains; what goes is counted by kind."""
    s = refunds_session("anthropic_messages")
    for n in range(60):
        s.call(
            "Read", {"file_path": f"src/orders/handlers/look_alike_{n:02d}.py"}, cat_n(f"class Handler{n}:\n    pass\n")
        )
    full = trail_mod.render(build(s.items, "anthropic_messages"), 20_000)
    assert not full.dropped and full.counts[semconv.TRAIL_KIND_READ] == 60
    budgets = [full.tokens * 3 // 4, full.tokens // 2, full.tokens // 3]
    for budget in budgets:
        written = trail_mod.render(build(s.items, "anthropic_messages"), budget)
        text = written.text
        assert 0 < written.tokens <= budget
        assert "- src/orders/handlers/: look_alike_" in text or "- src/orders/handlers/: 59 files read" in text
        for kept in ("Errors open:", "Decisions and commitments:", "Files changed:", "Files created:"):
            assert lines_under(text, kept) == lines_under(full.text, kept) or kept.startswith("Files")
        assert "src/orders/handlers/refund.py" in text or "refund.py (changed" in text
        assert all(d in text for d in lines_under(full.text, "Decisions and commitments:"))
        assert all(e.split(" [")[0] in text for e in lines_under(full.text, "Errors open:"))
        if written.dropped:
            assert "Not listed for room: " in text
            assert set(written.dropped) <= {
                semconv.TRAIL_KIND_READ,
                semconv.TRAIL_KIND_DEFINITION,
                semconv.TRAIL_KIND_COMMAND,
                semconv.TRAIL_KIND_CLOSED_ERROR,
            }
    tight = trail_mod.render(build(s.items, "anthropic_messages"), full.tokens // 3)
    assert tight.dropped.get(semconv.TRAIL_KIND_READ, 0) > 0


def test_the_budget_scales_with_the_window() -> None:
    budget = trail_mod.trail_budget
    assert budget(Settings(), 200_000, 190_000) == 23_750  # an eighth of the effective window caps 25,000
    assert budget(Settings(), 30_000, 29_744) == 3_718
    assert budget(Settings(), 12_000, 11_744) == 1_468
    assert budget(Settings(), 6_000, 5_000) == 625  # an eighth of 5,000 (the scaled 750 over it)
    assert budget(Settings(), 3_000, 2_400) == 300  # an eighth of the effective window caps the floor
    assert budget(Settings(trail_budget=0), 30_000, 28_000) == 0
    assert budget(Settings(trail_budget=1_000), 30_000, 28_000) == 600  # scaled 150: the floor


@pytest.mark.parametrize(
    ("later", "earlier", "covers"),
    [
        ("pytest -q tests/test_refunds.py", "pytest -q tests/test_refunds.py", True),
        ("pytest tests/", "pytest -v tests/test_refunds.py", True),
        ("python -m pytest", "pytest tests/test_refunds.py::test_x", True),
        ("cd svc && uv run pytest tests/test_refunds.py -x", "pytest tests/test_refunds.py::test_x", True),
        ("cargo test", "cargo test -p ledger-core", True),
        ("cargo build -p ledger-core 2>&1 | tail -n 40", "cargo build -p ledger-core", True),
        ("pytest -k refund", "pytest tests/test_refunds.py", False),
        ("cargo build", "cargo test", False),
        ("pytest tests/test_invoices.py", "pytest tests/test_refunds.py", False),
        ("npx tsc --noEmit", "npx eslint src", False),
    ],
)
def test_a_run_that_passes_closes_the_errors_of_what_it_covers(later: str, earlier: str, covers: bool) -> None:
    assert trail_mod._covers(later, earlier) is covers


@pytest.mark.parametrize(
    ("sentence", "decision"),
    [
        ("We will store money as i128 minor units, never f64.", True),
        ("I'll avoid touching the migrations until the backfill is merged.", True),
        ("Decision: refunds are idempotent by order id and key.", True),
        ("Going forward we round half-even everywhere.", True),
        ("Let's go with date-fns for dates.", True),
        ("Plan: migrate the refunds table on 2027-01-15.", True),
        ("I won't touch the ledger schema.", True),
        ("We decided to keep the v1 endpoint alive for the partners.", True),
        ("I'll read the handler first.", False),
        ("Let me run the tests again.", False),
        ("I will look at it next.", False),
        ("Understood, I will keep that in mind for the rest of the session.", False),
        ("The handler returns a list of refunds.", False),
        ("I'll run the migration on 2027-01-15 at 02:00 UTC.", True),
        ("We're keeping the v2 export format as it is for the partners.", True),
        ("Rather than a new column, I'm reusing the amount field with minor units.", True),
        ("My approach: cache the rates per day and refresh them at midnight.", True),
        ("From now on every webhook handler checks the signature first.", True),
        ("I'm reading the handler now.", False),
        ("We're seeing the same failure in the webhook tests.", False),
    ],
)
def test_decisions_and_commitments_are_told_from_the_narration_of_a_turn(sentence: str, decision: bool) -> None:
    assert trail_mod._is_decision(sentence) is decision


def _trails() -> dict[str, trail_mod.Trail]:
    """Trails of several shapes: a session's (errors open and closed, commands, decisions, a root), reads one per
    folder (grouping changes nothing, no error), and many reads of a folder after an older trail read back (its
    folded folders and what it left out)."""
    fmt = "anthropic_messages"
    one_per_folder = Session(fmt)
    for n in range(12):
        one_per_folder.call("Read", {"file_path": f"src/mod{n}/parse.py"}, cat_n(f"def parse_{n}():\n    pass\n"))
    many = refunds_session(fmt)
    for n in range(30):
        many.call(
            "Read", {"file_path": f"src/orders/handlers/look_alike_{n:02d}.py"}, cat_n(f"class H{n}:\n    pass\n")
        )
    older = trail_mod.render(build(refunds_session(fmt).items, fmt), 150).text
    merged = Session(fmt)
    merged.items.append(_summary_item(fmt, older))
    merged.items += many.items
    return {
        "session": build(refunds_session(fmt).items, fmt),
        "one_per_folder": build(one_per_folder.items, fmt),
        "merged": build(merged.items, fmt),
    }


_KEPT = st.one_of(st.integers(0, 6), st.just(1 << 30))


@settings(max_examples=150, deadline=None)
@given(
    shape=st.sampled_from(["session", "one_per_folder", "merged"]),
    plan=st.builds(
        trail_mod._Plan,
        grouped=st.booleans(),
        closed_folded=st.booleans(),
        **{name: _KEPT for name in ("defs_per_file", "defs_kept", "reads_kept", "commands_kept", "folders_kept")},
        **{name: _KEPT for name in ("found_kept", "closed_kept", "decisions_kept", "open_kept", "changed_kept")},
    ),
)
def test_plans_that_write_the_same_block_are_written_once(shape: str, plan: Any) -> None:
    """A render writes each block once: a plan is written as its key, which takes back the steps that change
    nothing of the trail's block (grouping where no folder holds two files, folding closed errors where there are
    none, keeping more of a kind than there is); the key writes the very block the plan does."""
    trail = _TRAILS[shape]
    writer = trail_mod._Writer(trail)
    assert writer.write(plan) == trail_mod._write(trail_mod._Writer(trail), plan)
    assert writer.size(plan) == len("\n".join(writer.write(plan)[0])) + 1


_TRAILS = _trails()
