"""Compaction hooks: keep a must-keep rule through every compaction, and re-inject a file after one.

    python examples/hooks.py

``pre_compact`` runs before the summarizer is called: it may veto the compaction or, as here, add
instructions the summarizer must follow (keep the team's rule verbatim). ``post_compact`` runs after a
successful summary: it may add messages, as here the project's style guide, which the summary would
otherwise have reduced to a mention. Both run in transparent mode (the app just resends its history) and
with the explicit ``Compactor``.

Without ANTHROPIC_API_KEY it runs on the simulated provider and checks what was actually sent; with the
key, on the real API (about 12 short calls with a pretend window of 5,000 tokens).
"""

from __future__ import annotations

import os
import queue
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider

import otel_context
from otel_context.compaction.hooks import PostCompactEvent, PreCompactDecision, PreCompactEvent

RULE = "RULE: never edit files under migrations/; add a new migration instead."
STYLE_GUIDE = "STYLEGUIDE.md\n- type hints everywhere\n- no print() in library code\n- one concept per module"
#: What the hooks saw. They run where the summary runs, by default in a background thread: they leave a note
#: here and the app's own thread prints it, so that the two never print over each other.
NOTES: queue.SimpleQueue[str] = queue.SimpleQueue()


def keep_the_rule(event: PreCompactEvent) -> PreCompactDecision:
    NOTES.put(f"pre_compact: {event.trigger} compaction of ~{event.estimated_tokens:,} tokens; asking to keep the rule")
    return PreCompactDecision(instructions=f"Quote this rule verbatim in the summary: {RULE}")


def reinject_style_guide(event: PostCompactEvent) -> list[str]:
    NOTES.put(f"post_compact: summary of {len(event.summary):,} characters; re-injecting the style guide")
    return [f"(Re-injected after compaction) {STYLE_GUIDE}"]


def print_notes() -> None:
    while not NOTES.empty():
        print(NOTES.get())


otel_context.instrument(
    tracer_provider=TracerProvider(),  # spans are not the point here; see the other examples
    auto_compact_window=5_000,
    pre_compact=keep_the_rule,
    post_compact=reinject_style_guide,
)

MODEL = "claude-sonnet-4-6"


def main(client: anthropic.Anthropic, sim: Any) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": f"{RULE}\nHere is our style guide: {STYLE_GUIDE}"}]
    history.append({"role": "assistant", "content": "Understood."})
    for i in range(1, 13):
        ask = f"Review change #{i} to the billing module."
        history.append({"role": "user", "content": ask + (" words:300" if sim is not None else "")})
        response = client.messages.create(model=MODEL, max_tokens=600, messages=history)
        history.append({"role": "assistant", "content": response.content[0].text})
        print_notes()
    otel_context.uninstrument()  # done: a summary still running in the background is dropped, its hooks quiet
    print_notes()
    if sim is not None:  # what the simulated provider actually received
        bodies = [str(e.body) for e in sim.exchanges]
        print(
            f"summarizer requests carrying the pre_compact instructions: {sum('Quote this rule verbatim' in b for b in bodies)}"
        )
        # The app's own last request: a background summary's request may reach the provider after it.
        asks = [e.body for e in sim.exchanges if str(e.body["messages"][-1]["content"]).startswith("Review change")]
        last = str(asks[-1])
        print(f"the rule is in the last request: {RULE in last}")
        print(f"the style guide was re-injected into the last request: {'(Re-injected after compaction)' in last}")


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic(), None)
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.anthropic(), sim)
    otel_context.uninstrument()
