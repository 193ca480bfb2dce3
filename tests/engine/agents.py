"""Tool-using agent loops that resend their full, growing history every turn (transparent mode's user)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from otel_context.testing.fleet import (
    ANTHROPIC_TOOLS,
    OPENAI_TOOLS,
    SYSTEM,
    file_content,
    user_turn,
)
from otel_context.testing.fleet import with_breakpoint as with_breakpoint

__all__ = ["ANTHROPIC_TOOLS", "OPENAI_TOOLS", "SYSTEM", "file_content", "user_turn", "with_breakpoint"]


def run_anthropic_agent(
    client: Any, model: str, turns: int, file_lines: int = 400, after_call: Callable[[], object] | None = None
) -> list[dict[str, Any]]:
    """Each turn: a user ask, tool calls answered, until a final answer. Returns the full history.
    ``after_call`` runs after each response (an agent that thinks between calls: a summary started in the
    background then lands before the next one)."""
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": [{"type": "text", "text": user_turn(turn)}]})
        for _ in range(5):
            response = client.messages.create(
                model=model, max_tokens=1024, system=SYSTEM, tools=ANTHROPIC_TOOLS, messages=with_breakpoint(history)
            )
            history.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
            )
            if after_call is not None:
                after_call()
            if response.stop_reason != "tool_use":
                break
            history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": b.id,
                            "content": file_content(b.input["path"], file_lines),
                        }
                        for b in response.content
                        if b.type == "tool_use"
                    ],
                }
            )
    return history


def run_openai_chat_agent(
    client: Any, model: str, turns: int, file_lines: int = 400, after_call: Callable[[], object] | None = None
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        history.append({"role": "user", "content": user_turn(turn)})
        for _ in range(5):
            response = client.chat.completions.create(
                model=model, max_tokens=1024, tools=OPENAI_TOOLS, messages=history
            )
            message = response.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            if after_call is not None:
                after_call()
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                path = json.loads(call.function.arguments)["path"]
                history.append({"role": "tool", "tool_call_id": call.id, "content": file_content(path, file_lines)})
    return history


def long_history(turns: int = 18, lines: int = 600) -> list[dict[str, Any]]:
    """User turns carrying a file each, with short answers: ~66K estimated tokens at the defaults, over the
    auto-compaction threshold of a 60K ``auto_compact_window`` even with a small ``max_tokens``."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages += [
            {"role": "user", "content": f"Turn {t}. " + file_content(f"f{t}.py", lines)},
            {"role": "assistant", "content": f"Read f{t}.py."},
        ]
    return [*messages, {"role": "user", "content": "What did you learn?"}]
