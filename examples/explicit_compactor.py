"""The explicit Compactor API, for apps that manage their own history.

    python examples/explicit_compactor.py

Here the app decides when to compact (``should_compact``) and replaces its own list with the compacted
one (``Compactor.compact`` returns a new list; the old one is untouched). The instrumentation runs in
``observe`` mode, so the SDK calls are traced but never rewritten: every compaction is the app's. Each
compaction names the app's conversation (``conversation=``: its breaker and state, shared with nothing
else), asks for a result of at most half the pretend window (``target_tokens=``), and prints what the
result kept of what it dropped (``retention``, ``lost``). At the end, a summarize function of the app's
own compacts the history too (no model, no wire format needed), and ``microcompact`` clears old tool
results without an LLM call. The ``compact`` spans are printed last.

Without ANTHROPIC_API_KEY it runs on the simulated provider; with the key, on the real API (about 15
short calls with a pretend window of 6,000 tokens).
"""

from __future__ import annotations

import os
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import Compactor, semconv, should_compact

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
otel_context.instrument(tracer_provider=provider, compaction="observe")

MODEL = "claude-sonnet-4-6"
WINDOW = 6_000  # pretend window, so that a few turns are enough
QUESTIONS = [
    "FACT: the service is written in Go 1.22 and deployed on Kubernetes.",
    *[
        f"Question {i}: how should we size the connection pool for {i * 50} requests per second? words:150"
        for i in range(1, 13)
    ],
]


def tool_loop(turns: int) -> list[dict[str, Any]]:
    """An agent's history: each turn reads a large file."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"Read part {t} of the log."})
        read = {"type": "tool_use", "id": f"toolu_{t:02d}", "name": "read_file", "input": {"path": f"log{t}.txt"}}
        messages.append({"role": "assistant", "content": [read]})
        output = f"log{t}.txt\n" + "GET /health 200 1ms\n" * 400
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": read["id"], "content": output}]}
        )
        messages.append({"role": "assistant", "content": f"Part {t} is all health checks."})
    return messages


def main(client: anthropic.Anthropic, simulated: bool) -> None:
    compactor = Compactor(client=client)
    history: list[dict[str, Any]] = []
    for question in QUESTIONS:
        if not simulated:
            question = question.split(" words:")[0]  # the simulated model's reply-length directive
        history.append({"role": "user", "content": question})
        if should_compact(history, model=MODEL, window=WINDOW):
            result = compactor.compact(
                history, model=MODEL, window=WINDOW, target_tokens=WINDOW // 2, conversation="example-chat"
            )
            print(
                f"compacted: {len(history)} -> {len(result.messages)} messages, "
                f"{result.input_tokens:,} -> {result.output_tokens:,} tokens ({result.outcome}), "
                f"retention {result.retention if result.retention is None else round(result.retention, 2)}, "
                f"lost {sum(len(items) for items in result.lost.values())} item(s)"
            )
            history = result.messages
        response = client.messages.create(model=MODEL, max_tokens=400, messages=history)
        history.append({"role": "assistant", "content": response.content[0].text})
        print(f"asked: {question[:50]!r}... history now {len(history)} messages")

    facts = [m for m in history if "FACT:" in str(m["content"])]
    print(f"the FACT line survived the compactions: {bool(facts)}")

    # The app's own summarizer: a function of the request body (here it keeps the user's lines); the wire
    # format comes from the messages' shape and, without a model, window= sizes the summary.
    def summarize(body: dict[str, Any]) -> str:
        texts: list[str] = []
        for message in body["messages"]:
            content = message["content"]
            blocks = [{"text": content}] if isinstance(content, str) else content
            texts += [block.get("text", "") for block in blocks]
        facts = {line.strip() for text in texts for line in text.splitlines() if "FACT:" in line}
        return "<summary>The user asks how to size connection pools.\n" + "\n".join(sorted(facts)) + "</summary>"

    own = Compactor(summarize).compact(history, window=WINDOW)
    print(f"own summarizer: compacted={own.compacted} ({len(history)} -> {len(own.messages)} messages)")
    print(f"own summary keeps the FACT line: {'FACT: the service is written in Go' in own.summary}")

    # Microcompaction: old tool results cleared, no LLM call.
    tools_history = tool_loop(8)
    micro = compactor.microcompact(tools_history, window=WINDOW)
    print(f"microcompact: {micro.input_tokens:,} -> {micro.output_tokens:,} tokens ({micro.outcome})")
    for span in spans.get_finished_spans():
        if span.name == semconv.COMPACT_SPAN:
            attrs = span.attributes or {}
            print(
                f"span compact: trigger={attrs.get(semconv.COMPACTION_TRIGGER_SOURCE)} "
                f"strategy={attrs.get(semconv.COMPACTION_STRATEGY)} outcome={attrs.get(semconv.COMPACTION_OUTCOME)}"
            )


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic(), simulated=False)
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.anthropic(), simulated=True)
    otel_context.uninstrument()
    provider.shutdown()
