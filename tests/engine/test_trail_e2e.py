"""Issue 48, end to end: the agent's own work survives every compaction, whatever the summarizer writes.

Through the real SDK clients against the simulated provider, whose summarizer says nothing specific (the eval's
``unhelpful``: a generic paragraph): a coding agent's session (Claude Code's ``Read`` with ``cat -n`` lines,
``Edit``, ``Write``, ``Bash`` running pytest, cargo and tsc) that the app resends whole on every call, as the
eval does, on a 30,000-token window. After every compaction, each request carries the files changed so far,
the open errors and the assistant's decisions, in the summary message's work trail; an error a later run of its
target fixed is closed; the span says what the trail holds, its size within its budget; inline and in the
background, on both SDKs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_context import semconv
from otel_context.compaction.prompt import SUMMARY_MESSAGE_HEADER, WORK_TRAIL_HEADER
from otel_context.testing import SimulatedProvider, SummarizerStyle
from tests.compaction import tool_outputs as out
from tests.compaction.support import Otel
from tests.compaction.tool_outputs import Session, cat_n
from tests.values import attrs_of

WINDOW = 30_000
MODELS = {"anthropic_messages": "claude-sonnet-4-6", "openai_chat": "gpt-4o"}
UNHELPFUL = SummarizerStyle(keeps="nothing")
ROOT = "/home/dev/shop"
DECISION = "We will store money as i128 minor units, never f64."
CHANGED = f"{ROOT}/src/orders/refund.py"
OPEN_ERROR = "error TS2345: Argument of type 'number' is not assignable to parameter of type 'string'."
FIXED_ERROR = "tests/test_refunds.py::test_prorate_by_days"


def _module(n: int) -> str:
    return "\n".join(
        [f"class Handler{n}:", "    pass", "", *(f"def step_{n}_{k}(x):\n    return x + {k}\n" for k in range(40))]
    )


def _session(fmt: str) -> list[list[dict[str, Any]]]:
    """The session in turns (each what one request adds): reads of look-alike modules between the work that
    matters: a decision, a failing test run and an open compiler error early, an edit, the fix much later."""
    turns: list[list[dict[str, Any]]] = []
    s = Session(fmt)

    def turn() -> None:
        turns.append(s.items[:])
        s.items.clear()

    s.user("Make duplicate refunds harmless.")
    s.call("Read", {"file_path": CHANGED}, cat_n(out.REFUND_PY), "I'll read the handler first.")
    s.say(f"{DECISION} I'll look at the tests next.")
    turn()
    s.call("Bash", {"command": "pytest -v tests/test_refunds.py"}, out.PYTEST_V)
    turn()
    s.call("Bash", {"command": "npx tsc --noEmit"}, out.TSC)
    turn()
    s.call(
        "Edit",
        {
            "file_path": CHANGED,
            "old_string": "def refund_amount(order, ratio):",
            "new_string": "def refund_amount(order, ratio, key=None):",
        },
        "ok",
    )
    turn()
    for n in range(90):
        s.call("Read", {"file_path": f"{ROOT}/src/orders/handlers/module_{n:02d}.py"}, cat_n(_module(n)))
        turn()
        if n == 50:
            s.call("Bash", {"command": "pytest tests/"}, "........\n8 passed in 0.40s")
            turn()
    return turns


def _text(message: Any) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or [] if isinstance(b, dict))


def _send(client: Any, fmt: str, history: list[dict[str, Any]]) -> None:
    if fmt == "anthropic_messages":
        client.messages.create(model=MODELS[fmt], max_tokens=256, messages=history)
    else:
        client.chat.completions.create(model=MODELS[fmt], max_tokens=256, messages=history)


@pytest.mark.parametrize(
    ("fmt", "background"), [("anthropic_messages", False), ("openai_chat", True), ("anthropic_messages", True)]
)
def test_the_agents_work_reaches_every_request_after_every_compaction(
    otel: Otel, instrumented: Any, fmt: str, background: bool
) -> None:
    instrumented(auto_compact_window=WINDOW, background_compaction=background)
    sent: list[str] = []
    with SimulatedProvider(summarizer=UNHELPFUL) as sim:
        client = sim.anthropic() if fmt == "anthropic_messages" else sim.openai()
        history: list[dict[str, Any]] = []
        for items in _session(fmt):
            history += items
            if history[-1].get("role") == "assistant" and fmt == "anthropic_messages":
                history.append({"role": "user", "content": "Go on."})
            _send(client, fmt, history)
        sim.wait_idle(10)
        for exchange in sim.exchanges:
            body = exchange.body
            messages = body.get("messages") if isinstance(body, dict) else None
            if not messages or "<summary>" in json.dumps(messages[-1]):  # the summarizer's own request
                continue
            summary = next((_text(m) for m in messages if _text(m).startswith(SUMMARY_MESSAGE_HEADER)), None)
            if summary is not None:
                sent.append(summary)
    compacted = list(dict.fromkeys(sent))
    assert len(compacted) >= 3, len(compacted)  # several compactions, each anchored on the trail before it
    for summary in compacted:
        trail = summary[summary.index(WORK_TRAIL_HEADER) :]
        assert "\n- refund.py (changed refund_amount" in trail and f"Paths from {ROOT}/src/orders/:" in trail
        assert DECISION in trail
        assert OPEN_ERROR in trail.split("Errors closed:")[0]
    last = compacted[-1]
    closed = last[last.index("Errors closed:") :]
    assert FIXED_ERROR in closed  # the run of its suite that passed closed it (over its budget: one line of them)
    assert FIXED_ERROR not in last[: last.index("Errors closed:")]
    spans = [
        s
        for s in otel.compact_spans()
        if attrs_of(s).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS
        and attrs_of(s).get(semconv.COMPACTION_STRATEGY) == semconv.STRATEGY_SUMMARY
    ]
    assert spans
    for span in spans:
        attrs = attrs_of(span)
        assert 0 < attrs[semconv.COMPACTION_TRAIL_TOKENS] <= attrs[semconv.COMPACTION_TRAIL_BUDGET]
        assert attrs[semconv.COMPACTION_TRAIL_PREFIX + semconv.TRAIL_KIND_CHANGED] == 1
        assert attrs[semconv.COMPACTION_TRAIL_PREFIX + semconv.TRAIL_KIND_DECISION] == 1
        assert attrs[semconv.COMPACTION_TRAIL_PREFIX + semconv.TRAIL_KIND_OPEN_ERROR] >= 1
        assert attrs[semconv.COMPACTION_TRAIL_DROPPED] == sum(
            v for k, v in attrs.items() if k.startswith(semconv.COMPACTION_TRAIL_DROPPED_PREFIX)
        )
    # The span's retention counts the trail's own kinds: what it holds of the span reached the request.
    assert any(
        attrs_of(s)[semconv.COMPACTION_RETENTION] > attrs_of(s)[semconv.COMPACTION_RETENTION_BEFORE_REPAIR]
        for s in spans
    )
