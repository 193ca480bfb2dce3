"""Hypothesis strategies: random VALID agent histories of the three wire formats.

A format-neutral script (turns of user text, tool batches of 1-3 parallel calls, optional thinking/reasoning,
an optional final answer) is rendered into each wire format the way the SDKs and agents send it, so the
same random story exercises all three adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Item = dict[str, Any]
FORMATS = ("anthropic_messages", "openai_chat", "openai_responses")
TOOL_NAMES = ("read_file", "grep", "get_weather")


@dataclass(frozen=True)
class Call:
    name: str
    arg: str
    result_words: int
    result_as_parts: bool


@dataclass(frozen=True)
class Step:
    thinking: bool
    preamble: bool  # assistant text before the calls
    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Turn:
    user_text: str
    steps: tuple[Step, ...]
    final: bool  # the assistant answered with text (False: history ends on tool results)
    final_thinking: bool


calls_st = st.builds(
    Call,
    name=st.sampled_from(TOOL_NAMES),
    arg=st.text(alphabet="abcdefghij./", min_size=1, max_size=8),
    result_words=st.one_of(st.integers(0, 40), st.integers(200, 1_500)),
    result_as_parts=st.booleans(),
)
steps_st = st.builds(
    Step, thinking=st.booleans(), preamble=st.booleans(), calls=st.lists(calls_st, min_size=1, max_size=3).map(tuple)
)
turn_st = st.builds(
    Turn,
    # Providers reject text that is only whitespace (the adapters call such a history malformed): never blank.
    user_text=st.text(alphabet="abcdefgh ?", min_size=1, max_size=30).filter(lambda t: t.strip() != ""),
    steps=st.lists(steps_st, max_size=3).map(tuple),
    final=st.booleans(),
    final_thinking=st.booleans(),
)


@st.composite
def scripts(draw: st.DrawFn, max_turns: int = 5) -> list[Turn]:
    turns = draw(st.lists(turn_st, min_size=1, max_size=max_turns))
    # Only the last turn may stop on tool results; earlier ones are answered before the next user message.
    return [
        t if i == len(turns) - 1 or not t.steps else Turn(t.user_text, t.steps, True, t.final_thinking)
        for i, t in enumerate(turns)
    ]


def _result_text(call: Call, ident: str) -> str:
    return f"result of {call.name}({call.arg}) {ident}: " + "lorem ipsum " * call.result_words


def render(script: list[Turn], wire_format: str) -> list[Item]:
    """The script as conversation items of ``wire_format``."""
    return {"anthropic_messages": _anthropic, "openai_chat": _chat, "openai_responses": _responses}[wire_format](script)


def _anthropic(script: list[Turn]) -> list[Item]:
    out: list[Item] = []
    n = 0
    for t, turn in enumerate(script):
        out.append({"role": "user", "content": turn.user_text if t % 2 else [{"type": "text", "text": turn.user_text}]})
        for step in turn.steps:
            blocks: list[Item] = []
            if step.thinking:
                blocks.append({"type": "thinking", "thinking": f"plan {n}", "signature": f"sig{n}"})
            if step.preamble:
                blocks.append({"type": "text", "text": f"Let me check {n}."})
            results: list[Item] = []
            for call in step.calls:
                n += 1
                ident = f"toolu_{n:04d}"
                blocks.append({"type": "tool_use", "id": ident, "name": call.name, "input": {"path": call.arg}})
                text = _result_text(call, ident)
                content: Any = [{"type": "text", "text": text}] if call.result_as_parts else text
                results.append({"type": "tool_result", "tool_use_id": ident, "content": content})
            out.append({"role": "assistant", "content": blocks})
            out.append({"role": "user", "content": results})
        if turn.final:
            blocks = [{"type": "thinking", "thinking": "wrap up", "signature": "s"}] if turn.final_thinking else []
            out.append({"role": "assistant", "content": [*blocks, {"type": "text", "text": f"Answer {t}."}]})
    return out


def _chat(script: list[Turn]) -> list[Item]:
    out: list[Item] = []
    n = 0
    for t, turn in enumerate(script):
        out.append({"role": "user", "content": turn.user_text})
        for step in turn.steps:
            calls: list[Item] = []
            results: list[Item] = []
            for call in step.calls:
                n += 1
                ident = f"call_{n:04d}"
                calls.append(
                    {
                        "id": ident,
                        "type": "function",
                        "function": {"name": call.name, "arguments": f'{{"path": "{call.arg}"}}'},
                    }
                )
                text = _result_text(call, ident)
                content: Any = [{"type": "text", "text": text}] if call.result_as_parts else text
                results.append({"role": "tool", "tool_call_id": ident, "content": content})
            out.append(
                {"role": "assistant", "content": f"Checking {n}." if step.preamble else None, "tool_calls": calls}
            )
            out.extend(results)
        if turn.final:
            out.append({"role": "assistant", "content": f"Answer {t}."})
    return out


def _responses(script: list[Turn]) -> list[Item]:
    out: list[Item] = []
    n = 0
    for t, turn in enumerate(script):
        out.append({"role": "user", "content": [{"type": "input_text", "text": turn.user_text}]})
        for step in turn.steps:
            if step.thinking:
                out.append(
                    {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text", "text": f"plan {n}"}]}
                )
            if step.preamble:
                out.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": f"Checking {n}."}],
                    }
                )
            outputs: list[Item] = []
            for call in step.calls:
                n += 1
                ident = f"call_{n:04d}"
                out.append(
                    {
                        "type": "function_call",
                        "call_id": ident,
                        "name": call.name,
                        "arguments": f'{{"path": "{call.arg}"}}',
                    }
                )
                text = _result_text(call, ident)
                output: Any = [{"type": "input_text", "text": text}] if call.result_as_parts else text
                outputs.append({"type": "function_call_output", "call_id": ident, "output": output})
            out.extend(reversed(outputs) if len(outputs) % 2 == 0 else outputs)  # outputs in any order
        if turn.final:
            if turn.final_thinking:
                out.append({"type": "reasoning", "id": f"rs_final_{t}", "summary": []})
            out.append({"role": "assistant", "content": f"Answer {t}."})
    return out


@st.composite
def histories(draw: st.DrawFn, wire_format: str | None = None, max_turns: int = 5) -> tuple[str, list[Item]]:
    """``(wire_format, items)`` of a random valid history."""
    fmt = wire_format or draw(st.sampled_from(FORMATS))
    return fmt, render(draw(scripts(max_turns=max_turns)), fmt)
