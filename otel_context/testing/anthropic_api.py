"""The Anthropic Messages API: ``POST /v1/messages`` (JSON and SSE) and ``POST /v1/messages/count_tokens``.

The beta namespace of the SDK (``client.beta.messages``) uses the same paths with an ``anthropic-beta``
header (anthropic 2.x no longer sends ``?beta=true``; the query string is ignored if present).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .caching import ANTHROPIC_TTLS, AnthropicCacheResult, PromptRecord, anthropic_diagnosis
from .errors import SimError
from .ids import anthropic_id
from .results import JsonResult, Request, Result, SseEvent, StreamResult
from .scripted import Reply, Turn, plan_reply, thinking_text
from .state import SimState
from .tokens import Block, block_text, count_tokens, request_blocks

__all__ = ["count_tokens_endpoint", "messages_endpoint"]

_ROLES = ("user", "assistant")


def _require_object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise SimError(400, "Request body must be a JSON object")
    return body


def _validate(body: Mapping[str, Any], *, need_max_tokens: bool) -> tuple[str, list[Mapping[str, Any]]]:
    model = body.get("model")
    if model is None:
        raise SimError(400, "model: Field required")
    if not isinstance(model, str) or not model:
        raise SimError(400, "model: Input should be a valid string")
    if need_max_tokens:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise SimError(400, "max_tokens: Field required")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise SimError(400, "max_tokens: Input should be a valid integer greater than or equal to 1")
    messages = body.get("messages")
    if messages is None:
        raise SimError(400, "messages: Field required")
    if not isinstance(messages, list):
        raise SimError(400, "messages: Input should be a valid list")
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise SimError(400, f"messages.{i}: Input should be a valid dictionary")
        if msg.get("role") not in _ROLES:
            raise SimError(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = msg.get("content")
        if content is None:
            raise SimError(400, f"messages.{i}.content: Field required")
        if not isinstance(content, (str, list)):
            raise SimError(400, f"messages.{i}.content: Input should be a valid string or list")
        final_assistant = i == len(messages) - 1 and msg.get("role") == "assistant"
        if not content and not final_assistant:
            raise SimError(
                400,
                f"messages.{i}: all messages must have non-empty content except for the optional final assistant message",
            )
        if isinstance(content, list):
            for j, block in enumerate(content):
                if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                    raise SimError(400, f"messages.{i}.content.{j}.type: Field required")
                if block.get("type") == "text" and not block.get("text") and not final_assistant:
                    raise SimError(400, "messages: text content blocks must be non-empty")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise SimError(400, "tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                raise SimError(400, f"tools.{i}.name: Field required")
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise SimError(400, "system: Input should be a valid string or list")
    return model, list(messages)


def _blocks_of(msg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = msg.get("content")
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def check_pairing(messages: Sequence[Mapping[str, Any]]) -> None:
    """Enforce Anthropic's tool_use/tool_result pairing exactly as the API does (400 on violation)."""
    for i, msg in enumerate(messages):
        blocks = _blocks_of(msg)
        if msg.get("role") == "user":
            prev = messages[i - 1] if i > 0 else None
            offered = (
                {b.get("id") for b in _blocks_of(prev) if b.get("type") == "tool_use"}
                if prev is not None and prev.get("role") == "assistant"
                else set()
            )
            for j, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in offered:
                    raise SimError(
                        400,
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message.",
                    )
        elif msg.get("role") == "assistant" and i + 1 < len(messages):
            uses = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
            if not uses:
                continue
            nxt = messages[i + 1]
            answered = (
                {b.get("tool_use_id") for b in _blocks_of(nxt) if b.get("type") == "tool_result"}
                if nxt.get("role") == "user"
                else set()
            )
            missing = [u for u in uses if u not in answered]
            if missing:
                raise SimError(
                    400,
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                    "in the next message.",
                )


def _turns(body: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
    turns: list[Turn] = []
    system = body.get("system")
    if isinstance(system, str):
        turns.append(Turn("system", system))
    elif isinstance(system, list):
        turns.append(Turn("system", "\n".join(block_text(b)[0] for b in system if isinstance(b, Mapping))))
    for msg in messages:
        content = msg.get("content")
        role = str(msg.get("role"))
        if isinstance(content, str):
            turns.append(Turn(role, content))
            continue
        texts: list[str] = []
        results = 0
        for block in _blocks_of(msg):
            btype = block.get("type")
            if btype == "tool_result":
                results += 1
            if btype in ("text", "tool_result"):
                texts.append(block_text(block)[0])
        turns.append(Turn(role, "\n".join(texts), tool_result=results > 0, results=results))
    return turns


def _apply_stop_sequences(reply: Reply, stops: Any) -> str | None:
    if not reply.text or not isinstance(stops, list):
        return None
    best: tuple[int, str] | None = None
    for stop in stops:
        if isinstance(stop, str) and stop:
            pos = reply.text.find(stop)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, stop)
    if best is None:
        return None
    reply.text = reply.text[: best[0]]
    reply.truncated = False
    return best[1]


def _output_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema of ``output_config.format`` (or the older beta ``output_format``), if any."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, Mapping) else body.get("output_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return schema if isinstance(schema, Mapping) else {}
    return None


def _thinking_budget(body: Mapping[str, Any]) -> int:
    """-1 when thinking is off, 0 for adaptive thinking, else the validated ``budget_tokens``."""
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") in (None, "disabled"):
        return -1
    if thinking.get("type") == "adaptive":
        return 0
    if thinking.get("type") != "enabled":
        raise SimError(400, "thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise SimError(400, "thinking.enabled.budget_tokens: Field required")
    if budget < 1024:
        raise SimError(400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    if int(body.get("max_tokens", 0)) <= budget:
        raise SimError(400, "`max_tokens` must be greater than `thinking.budget_tokens`.")
    return budget


def _prepare(state: SimState, req: Request) -> tuple[Mapping[str, Any], str, list[Mapping[str, Any]], int]:
    body = _require_object(req.body)
    model, messages = _validate(body, need_max_tokens=True)
    window = state.window(model, "anthropic")
    check_pairing(messages)
    return body, model, messages, window


#: Blocks the API never puts the automatic marker on (it cannot cache them by themselves).
_NOT_CACHEABLE = frozenset({"thinking", "redacted_thinking"})


def _with_automatic_marker(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """Automatic caching: a top-level ``cache_control`` puts that marker on the last cacheable block (the
    newest message's last block that is not thinking nor empty text; else the system prompt, else the last
    tool), so the breakpoint moves forward as the conversation grows. A block that already carries a marker
    keeps its own. The marker counts toward the limit of 4 breakpoints. The caller's body is not changed."""
    marker = body.get("cache_control")
    if marker is None:
        return body
    if not isinstance(marker, Mapping) or marker.get("type") != "ephemeral":
        raise SimError(400, "cache_control.type: Input should be 'ephemeral'")
    if marker.get("ttl") not in (None, *ANTHROPIC_TTLS):
        raise SimError(400, "cache_control.ttl: Input should be '5m' or '1h'")
    out = {k: v for k, v in body.items() if k != "cache_control"}
    messages = list(out.get("messages") or [])
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        for j in range(len(blocks) - 1, -1, -1):
            block = blocks[j]
            if not isinstance(block, Mapping) or block.get("type") in _NOT_CACHEABLE:
                continue
            if block.get("type") == "text" and not block.get("text"):
                continue
            if "cache_control" not in block:
                blocks[j] = {**block, "cache_control": dict(marker)}
                messages[i] = {**messages[i], "content": blocks}
                out["messages"] = messages
            return out
    system = out.get("system")
    if isinstance(system, str) and system:
        out["system"] = [{"type": "text", "text": system, "cache_control": dict(marker)}]
    elif isinstance(system, list) and system and isinstance(system[-1], Mapping):
        if "cache_control" not in system[-1]:
            out["system"] = [*system[:-1], {**system[-1], "cache_control": dict(marker)}]
    elif isinstance(out.get("tools"), list) and out["tools"] and isinstance(out["tools"][-1], Mapping):
        tools = out["tools"]
        if "cache_control" not in tools[-1]:
            out["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(marker)}]
    return out


def messages_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/messages``."""
    body, model, messages, window = _prepare(state, req)
    body = _with_automatic_marker(body)
    blocks = request_blocks(body, "anthropic_messages")
    total = sum(b.tokens for b in blocks)
    if total > window:
        raise SimError(400, f"prompt is too long: {total} tokens > {window} maximum")
    cache = state.cache.anthropic(model, blocks)
    tools = {str(t.get("name")): t.get("input_schema", {}) for t in body.get("tools") or [] if isinstance(t, Mapping)}
    tool_choice = body.get("tool_choice")
    force: str | None = None
    if isinstance(tool_choice, Mapping):
        if tool_choice.get("type") == "none":
            tools = {}
        elif tool_choice.get("type") == "any":
            force = "*"
        elif tool_choice.get("type") == "tool":
            force = str(tool_choice.get("name"))
            if force not in tools:
                raise SimError(400, f"Tool '{force}' not found in provided tools")
    turns = _turns(body, messages)
    budget = _thinking_budget(body)
    thinking = thinking_text(turns, budget if budget > 0 else None) if budget >= 0 else None
    # thinking counts against max_tokens: the visible reply gets what is left
    room = max(int(body["max_tokens"]) - (count_tokens(thinking) if thinking else 0), 1)
    reply = plan_reply(
        turns,
        tools,
        max_tokens=room,
        force_tool=force,
        json_schema=_output_schema(body),
        summarizer=state.summarizer,
    )
    stop_sequence = _apply_stop_sequences(reply, body.get("stop_sequences"))
    content: list[dict[str, Any]] = []
    if thinking is not None:
        signature = base64.b64encode(hashlib.sha256(thinking.encode()).digest() * 3).decode()
        content.append({"type": "thinking", "thinking": thinking, "signature": signature})
    if reply.text or not reply.tool_calls:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        content.append({"type": "tool_use", "id": anthropic_id("toolu"), "name": call.name, "input": call.arguments})
    if stop_sequence is not None:
        stop_reason = "stop_sequence"
    elif reply.tool_calls:
        stop_reason = "tool_use"
    elif reply.truncated:
        stop_reason = "max_tokens"
    else:
        stop_reason = "end_turn"
    usage: dict[str, Any] = {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation,
        "cache_read_input_tokens": cache.cache_read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": cache.ephemeral_5m,
            "ephemeral_1h_input_tokens": cache.ephemeral_1h,
        },
        "output_tokens": reply.output_tokens + (count_tokens(thinking) if thinking else 0),
        "service_tier": "standard",
        "inference_geo": "global",
    }
    if thinking is not None:
        usage["output_tokens_details"] = {"thinking_tokens": count_tokens(thinking)}
    message: dict[str, Any] = {
        "model": model,
        "id": anthropic_id("msg"),
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }
    if isinstance(body.get("diagnostics"), Mapping):
        if state.diagnoses != "ignored":  # an endpoint that does not diagnose sends no field at all
            message["diagnostics"] = _diagnostics(state, body, model, blocks, cache)
        state.cache.remember(message["id"], _record(body, model, blocks, cache))
    if body.get("stream") is True:
        retracted = state.diagnoses == "retracted" and "diagnostics" in message
        return StreamResult(_stream_events(message, retracted), usage=usage)
    return JsonResult(message, usage=usage)


def _record(body: Mapping[str, Any], model: str, blocks: Sequence[Block], cache: AnthropicCacheResult) -> PromptRecord:
    """The request's prompt as the diagnostics compare it: blocks, what it left in the cache, and the
    prompt-affecting settings besides them (thinking, tool choice)."""
    settings = {"thinking": body.get("thinking"), "tool_choice": body.get("tool_choice")}
    return PromptRecord.of(model, blocks, cache.cache_read + cache.cache_creation, settings)


def _diagnostics(
    state: SimState, body: Mapping[str, Any], model: str, blocks: Sequence[Block], cache: AnthropicCacheResult
) -> dict[str, Any] | None:
    """The response's ``diagnostics`` for a request that opted in: null when nothing diverged from the
    message it names (or it names none), else the ``cache_miss_reason`` (null while pending)."""
    previous = body["diagnostics"].get("previous_message_id")
    if not isinstance(previous, str):
        return None
    if state.diagnoses == "pending":
        return {"cache_miss_reason": None}
    if state.diagnoses == "unreadable":
        return {"cache_miss_reason": "messages_changed"}  # a bare word where the API sends an object
    reason = anthropic_diagnosis(state.cache.record(previous), _record(body, model, blocks, cache))
    if reason is not None and state.diagnoses == "bad_counts" and "cache_missed_input_tokens" in reason:
        reason = {**reason, "cache_missed_input_tokens": 2**70}
    return None if reason is None else {"cache_miss_reason": reason}


def _chunks(text: str, size: int = 24) -> list[str]:
    """Split ``text`` into deltas of about ``size`` characters on word boundaries (never empty)."""
    if not text:
        return []
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            if space > start:
                end = space
        out.append(text[start:end])
        start = end
    return out


def _stream_events(message: Mapping[str, Any], retracted: bool = False) -> list[SseEvent]:
    """The SSE events of ``message``; ``retracted``: its ``message_delta`` says ``cache_miss_reason: null``
    after ``message_start`` gave the diagnosis (``diagnoses == "retracted"``)."""
    usage = message["usage"]
    start_usage = dict(usage)
    start_usage["output_tokens"] = 1
    start = {k: v for k, v in message.items() if k not in ("content", "usage", "stop_reason", "stop_sequence")}
    start.update({"content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    events: list[SseEvent] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            shell = {"type": "thinking", "thinking": "", "signature": ""}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": shell})
            )
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            for piece in _chunks(block["thinking"]):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "thinking_delta", "thinking": piece},
                        },
                    )
                )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]},
                    },
                )
            )
        elif block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            for piece in _chunks(block["text"]):
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}},
                    )
                )
        else:
            tool_shell: dict[str, Any] = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": tool_shell})
            )
            if index == 0:
                events.append(("ping", {"type": "ping"}))
            arguments = json.dumps(block["input"], ensure_ascii=False)
            for piece in ["", *_chunks(arguments, 12)]:
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta_usage = {
        "input_tokens": usage["input_tokens"],
        "cache_creation_input_tokens": usage["cache_creation_input_tokens"],
        "cache_read_input_tokens": usage["cache_read_input_tokens"],
        "output_tokens": usage["output_tokens"],
    }
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
        "usage": delta_usage,
    }
    if retracted:
        delta["diagnostics"] = {"cache_miss_reason": None}
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def count_tokens_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/messages/count_tokens``: the input tokens the same request would be charged (no caching)."""
    body = _require_object(req.body)
    model, messages = _validate(body, need_max_tokens=False)
    state.window(model, "anthropic")
    check_pairing(messages)
    total = sum(b.tokens for b in request_blocks(body, "anthropic_messages"))
    return JsonResult({"input_tokens": total})
