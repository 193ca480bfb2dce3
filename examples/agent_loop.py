"""A tool-using agent that resends its whole history every turn, kept inside the window transparently.

    python examples/agent_loop.py

The loop below never compacts anything: it appends to ``history`` and sends all of it on every call, as
most agents do. otel-context rewrites what is *sent* once the context crosses the threshold (here a
pretend window of 8,000 tokens, so it happens within a few turns): older turns are replaced by a summary.
``history`` itself is never modified, and later calls reuse the same summary, so the prefix stays
byte-identical and cacheable. (Add ``microcompact=True`` to clear old tool results first, without an LLM
call; the ``otel-context demo`` command shows every layer.)

Without ANTHROPIC_API_KEY it runs on the simulated provider; with the key, on the real API (about 25 short
calls, each under 8,000 input tokens).
"""

from __future__ import annotations

import os
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import semconv

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
# What `import otel_context.auto` does, with a setting from code: a small pretend window.
# Inline compaction: the summary is made on the call that crosses the threshold, so the printout shows it
# there (by default it is prepared in the background and applied when it lands).
otel_context.instrument(tracer_provider=provider, auto_compact_window=8_000, background_compaction=False)

MODEL = "claude-sonnet-4-6"
FILES = {
    f"src/module_{i}.py": "\n".join(f"def f{i}_{n}(x):\n    return x * {n}  # step {n}" for n in range(60))
    for i in range(8)
}
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the project.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    return FILES.get(str(arguments.get("path")), f"Error: no such file {arguments.get('path')!r}")


def ask(client: anthropic.Anthropic, history: list[dict[str, Any]], text: str) -> str:
    """One agent turn: append the request, call the model with the FULL history until it answers in text."""
    history.append({"role": "user", "content": text})
    while True:
        response = client.messages.create(model=MODEL, max_tokens=512, tools=TOOLS, messages=history)
        history.append(
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in response.content]}
        )
        calls = [block for block in response.content if block.type == "tool_use"]
        if not calls:
            return "".join(block.text for block in response.content if block.type == "text")
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": run_tool(c.name, dict(c.input))}
                    for c in calls
                ],
            }
        )


def main(client: anthropic.Anthropic, simulated: bool) -> None:
    history: list[dict[str, Any]] = []
    seen = 0
    for i, path in enumerate([*FILES, *FILES][:12], 1):
        # On the simulated provider, `tool:read_file{...}` tells the scripted model which tool to call.
        directive = f' tool:read_file{{"path": "{path}"}}' if simulated else ""
        ask(client, history, f"Read {path} and tell me what it does.{directive}")
        finished = spans.get_finished_spans()[seen:]
        seen += len(finished)
        chats = [s for s in finished if (s.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]
        compactions = [
            f"{(s.attributes or {}).get(semconv.COMPACTION_STRATEGY)}"
            f" {(s.attributes or {}).get(semconv.COMPACTION_INPUT_TOKENS)}->{(s.attributes or {}).get(semconv.COMPACTION_OUTPUT_TOKENS)}"
            for s in finished
            if s.name == semconv.COMPACT_SPAN
        ]
        sent = (chats[-1].attributes or {}).get(semconv.GEN_AI_USAGE_INPUT_TOKENS) if chats else None
        print(
            f"turn {i}: history {len(history):2d} messages, last request {sent} input tokens"
            + (f", compacted: {', '.join(compactions)}" if compactions else "")
        )
    print(f"your history list still has all {len(history)} messages; the compactor only changed what was sent")


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        main(anthropic.Anthropic(), simulated=False)
    else:
        from otel_context.testing import SimulatedProvider

        with SimulatedProvider() as sim:
            main(sim.anthropic(), simulated=True)
    otel_context.uninstrument()
    provider.shutdown()
