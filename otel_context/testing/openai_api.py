"""The OpenAI APIs: ``/v1/chat/completions``, ``/v1/responses``, ``/v1/responses/compact``, ``/v1/embeddings``."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .caching import OPENAI_MIN_TOKENS, PromptRecord, openai_diagnosis
from .errors import SimError
from .ids import b62, hex_id
from .models import EMBEDDING_DIMENSIONS, lookup_window
from .results import JsonResult, Request, Result, SseEvent, StreamResult
from .scripted import Turn, plan_reply, summarize
from .state import SimState
from .tokens import COMPACTION_PREFIX, Block, block_text, count_tokens, request_blocks, responses_items

__all__ = [
    "chat_completions_endpoint",
    "compact_endpoint",
    "conversations_endpoint",
    "embeddings_endpoint",
    "responses_endpoint",
]

_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _missing(name: str) -> SimError:
    return SimError(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise SimError(400, "Invalid type for request body: expected an object.", code="invalid_type")
    return body


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise SimError(400, "you must provide a model parameter")
    if not isinstance(model, str) or not model:
        raise SimError(400, "Invalid type for 'model': expected a string.", param="model", code="invalid_type")
    return model


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block_text(p)[0] for p in content if isinstance(p, Mapping) and not block_text(p)[1])
    return ""


def _over_window_chat(total: int, window: int) -> SimError:
    return SimError(
        400,
        f"This model's maximum context length is {window} tokens. However, your messages resulted in {total} "
        "tokens. Please reduce the length of the messages.",
        param="messages",
        code="context_length_exceeded",
    )


def _usage_chat(prompt: int, cached: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _function_tools(tools: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tool in tools or []:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        assert isinstance(fn, Mapping)
        name = fn.get("name")
        if isinstance(name, str):
            out[name] = fn.get("parameters", {})
    return out


def _forced_tool(choice: Any, tools: Mapping[str, Any]) -> str | None:
    """The tool a forcing ``tool_choice`` names ("*" for ``required``), validated against ``tools``."""
    if choice == "required":
        return "*"
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else choice.get("name")
        if name not in tools:
            raise SimError(
                400,
                f"Invalid value for 'tool_choice': tool '{name}' is not in the provided tools.",
                param="tool_choice",
                code="invalid_value",
            )
        return str(name)
    return None


def _format_schema(fmt: Any) -> Mapping[str, Any] | None:
    """The JSON schema a ``response_format`` / ``text.format`` asks for ({} for ``json_object``), if any."""
    if not isinstance(fmt, Mapping):
        return None
    if fmt.get("type") == "json_object":
        return {}
    if fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), Mapping) else fmt
        assert isinstance(inner, Mapping)
        schema = inner.get("schema")
        return schema if isinstance(schema, Mapping) else {}
    return None


def _stop_cut(text: str, stops: Any) -> tuple[str, bool]:
    if isinstance(stops, str):
        stops = [stops]
    if not text or not isinstance(stops, list):
        return text, False
    positions = [text.find(s) for s in stops if isinstance(s, str) and s and s in text]
    if not positions:
        return text, False
    return text[: min(positions)], True


# -- chat completions ----------------------------------------------------------------------------------------


def check_chat_pairing(messages: Sequence[Mapping[str, Any]]) -> None:
    """OpenAI's rules: every ``tool`` message answers a ``tool_calls`` id of the assistant message before the
    run of tool messages, and every tool call gets an answer."""
    i = 0
    n = len(messages)
    while i < n:
        msg = messages[i]
        role = msg.get("role")
        if role == "tool":
            raise SimError(
                400,
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                "'tool_calls'.",
                param=f"messages.[{i}].role",
            )
        calls = msg.get("tool_calls") if role == "assistant" else None
        if calls:
            ids = [str(c.get("id")) for c in calls if isinstance(c, Mapping)]
            j = i + 1
            answered: set[str] = set()
            while j < n and messages[j].get("role") == "tool":
                call_id = messages[j].get("tool_call_id")
                if call_id not in ids:
                    raise SimError(
                        400,
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        "with 'tool_calls'.",
                        param=f"messages.[{j}].role",
                    )
                answered.add(str(call_id))
                j += 1
            missing = [c for c in ids if c not in answered]
            if missing:
                raise SimError(
                    400,
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(missing)}",
                    param=f"messages.[{j if j < n else i}].role",
                )
            i = j
            continue
        i += 1


def _chat_validate(body: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]]]:
    model = _model(body)
    messages = body.get("messages")
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise SimError(400, "Invalid type for 'messages': expected an array.", param="messages", code="invalid_type")
    if not messages:
        raise SimError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise SimError(
                400,
                f"Invalid type for 'messages[{i}]': expected an object.",
                param=f"messages[{i}]",
                code="invalid_type",
            )
        role = msg.get("role")
        if role is None:
            raise SimError(
                400,
                f"Missing required parameter: 'messages[{i}].role'.",
                param=f"messages[{i}].role",
                code="missing_required_parameter",
            )
        if role not in _CHAT_ROLES:
            raise SimError(
                400,
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
                param=f"messages[{i}].role",
                code="invalid_value",
            )
        if role == "tool" and not msg.get("tool_call_id"):
            raise SimError(
                400,
                f"Missing required parameter: 'messages[{i}].tool_call_id'.",
                param=f"messages[{i}].tool_call_id",
                code="missing_required_parameter",
            )
    return model, list(messages)


def _chat_turns(messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
    turns: list[Turn] = []
    for msg in messages:
        role = str(msg.get("role"))
        text = _content_text(msg.get("content"))
        if role == "tool":
            turns.append(Turn("tool", text, tool_result=True, results=1))
        else:
            turns.append(Turn("system" if role == "developer" else role, text))
    return turns


def chat_completions_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/chat/completions``."""
    body = _object(req.body)
    model, messages = _chat_validate(body)
    window = state.window(model, "openai")
    check_chat_pairing(messages)
    blocks = request_blocks(body, "openai_chat")
    total = sum(b.tokens for b in blocks)
    if total > window:
        raise _over_window_chat(total, window)
    cached = state.cache.openai(model, blocks, body.get("prompt_cache_retention"))
    tools = _function_tools(body.get("tools"))
    if body.get("tool_choice") == "none":
        tools = {}
    force = _forced_tool(body.get("tool_choice"), tools)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None
    n = body.get("n") if isinstance(body.get("n"), int) and body.get("n", 1) >= 1 else 1
    assert isinstance(n, int)
    turns = _chat_turns(messages)
    choices: list[dict[str, Any]] = []
    completion = 0
    for index in range(n):
        reply = plan_reply(
            turns,
            tools,
            max_tokens=max_tokens,
            salt=str(index) if index else "",
            force_tool=force,
            json_schema=_format_schema(body.get("response_format")),
            summarizer=state.summarizer,
        )
        text, stopped = _stop_cut(reply.text, body.get("stop"))
        reply.text = text
        completion += reply.output_tokens
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if reply.tool_calls else text,
            "refusal": None,
            "annotations": [],
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": "call_" + b62(24),
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in reply.tool_calls
            ]
            finish = "tool_calls"
        elif reply.truncated and not stopped:
            finish = "length"
        else:
            finish = "stop"
        choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": finish})
    usage = _usage_chat(total, cached, completion)
    completion_id = "chatcmpl-" + b62(29)
    created = int(time.time())
    if body.get("stream") is True:
        include_usage = isinstance(body.get("stream_options"), Mapping) and bool(
            body["stream_options"].get("include_usage")
        )
        return StreamResult(_chat_events(completion_id, created, model, choices, usage, include_usage), usage=usage)
    result = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": "fp_simulated",
    }
    return JsonResult(result, usage=usage)


def served_tier(body: Mapping[str, Any]) -> str:
    """The service tier a response says it was served at: the one the request asked for when it names a tier of
    its own rates (``flex``, ``priority``), else ``default`` (``auto`` and no tier), as the API answers."""
    tier = body.get("service_tier")
    return tier if tier in ("flex", "priority") else "default"


def _chunks(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _chat_events(
    cid: str, created: int, model: str, choices: Sequence[Mapping[str, Any]], usage: dict[str, Any], include_usage: bool
) -> list[SseEvent]:
    events: list[SseEvent] = []

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> None:
        data: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_simulated",
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            data["usage"] = None
        events.append((None, data))

    for choice in choices:
        index = int(choice["index"])
        message = choice["message"]
        chunk(index, {"role": "assistant", "content": "", "refusal": None})
        for piece in _chunks(message["content"] or ""):
            chunk(index, {"content": piece})
        for k, call in enumerate(message.get("tool_calls") or []):
            chunk(
                index,
                {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                },
            )
            for piece in _chunks(call["function"]["arguments"], 12):
                chunk(index, {"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
        chunk(index, {}, choice["finish_reason"])
    if include_usage:
        events.append(
            (
                None,
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "service_tier": "default",
                    "system_fingerprint": "fp_simulated",
                    "choices": [],
                    "usage": usage,
                },
            )
        )
    events.append((None, "[DONE]"))
    return events


# -- responses -----------------------------------------------------------------------------------------------


def _responses_input(state: SimState, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = body.get("input")
    if raw is not None and not isinstance(raw, (str, list)):
        raise SimError(
            400, "Invalid type for 'input': expected one of a string or array.", param="input", code="invalid_type"
        )
    items: list[Mapping[str, Any]] = []
    previous = body.get("previous_response_id")
    conversation = _conversation_id(body)
    if conversation is not None:
        if previous is not None:
            raise SimError(
                400,
                "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or "
                "'conversation'.",
                param=None,
                code="mutually_exclusive_parameters",
            )
        held = state.conversation_items(conversation)
        if held is None:
            raise SimError(404, f"Conversation with id '{conversation}' not found.", param="conversation", code=None)
        items.extend(held)
    if previous is not None:
        stored = state.stored_items(str(previous))
        if stored is None:
            raise SimError(
                400,
                f"Previous response with id '{previous}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        items.extend(stored)
    if isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise SimError(
                    400, f"Invalid type for 'input[{i}]': expected an object.", param=f"input[{i}]", code="invalid_type"
                )
    items.extend(responses_items(body))
    return items


def _conversation_id(body: Mapping[str, Any]) -> str | None:
    """The stored conversation a Responses request names (``"conv_..."`` or ``{"id": "conv_..."}``), if any."""
    raw = body.get("conversation")
    if raw is None:
        return None
    value = raw.get("id") if isinstance(raw, Mapping) else raw
    if not isinstance(value, str) or not value:
        raise SimError(
            400, "Invalid type for 'conversation': expected a string or an object with an id.", param="conversation"
        )
    return value


def conversations_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/conversations``: a stored conversation, with its initial ``items`` (at most 20)."""
    body = _object(req.body) if req.body is not None else {}
    raw = body.get("items") or []
    if not isinstance(raw, list) or len(raw) > 20 or not all(isinstance(i, Mapping) for i in raw):
        raise SimError(400, "Invalid 'items': expected an array of at most 20 items.", param="items")
    items = responses_items({"input": raw})
    check_responses_pairing(items)
    conversation_id = hex_id("conv", 24)
    state.store_conversation(conversation_id, items)
    metadata = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
    created = {"id": conversation_id, "object": "conversation", "created_at": int(time.time()), "metadata": metadata}
    return JsonResult(created)


def check_responses_pairing(items: Sequence[Mapping[str, Any]]) -> None:
    """Every ``function_call_output`` answers an earlier ``function_call``, and every call is answered."""
    calls: list[str] = []
    outputs: set[str] = set()
    for item in items:
        itype = item.get("type")
        if itype == "function_call":
            calls.append(str(item.get("call_id")))
        elif itype == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                raise SimError(
                    400, f"No tool call found for function call output with call_id {call_id}.", param="input"
                )
            outputs.add(call_id)
    for call_id in calls:
        if call_id not in outputs:
            raise SimError(400, f"No tool output found for function call {call_id}.", param="input")


def _responses_turns(instructions: Any, items: Sequence[Mapping[str, Any]]) -> list[Turn]:
    turns: list[Turn] = []
    if isinstance(instructions, str) and instructions:
        turns.append(Turn("system", instructions))
    for item in items:
        itype = item.get("type", "message")
        if itype == "function_call_output":
            turns.append(Turn("tool", block_text(item)[0], tool_result=True, results=1))
        elif itype == "function_call":
            turns.append(Turn("assistant", ""))
        elif itype == "compaction":
            turns.append(Turn("user", block_text(item)[0]))
        elif itype == "message" or "role" in item:
            role = str(item.get("role", "user"))
            turns.append(Turn("system" if role == "developer" else role, _content_text(item.get("content"))))
    return turns


def _usage_responses(total: int, cached: int, output: int) -> dict[str, Any]:
    return {
        "input_tokens": total,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": total + output,
    }


def _response_object(
    rid: str,
    body: Mapping[str, Any],
    model: str,
    created: int,
    status: str,
    output: list[Any],
    usage: Any,
    incomplete: Any,
) -> dict[str, Any]:
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "billing": {"payer": "developer"},
        "completed_at": created if status == "completed" else None,
        "error": None,
        "frequency_penalty": body.get("frequency_penalty", 0.0),
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "presence_penalty": body.get("presence_penalty", 0.0),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "prompt_cache_retention": body.get("prompt_cache_retention", "in_memory"),
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": served_tier(body),
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": tools,
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def _fit_window(
    state: SimState, body: Mapping[str, Any], items: list[Mapping[str, Any]], window: int
) -> tuple[list[Mapping[str, Any]], list[Any], int]:
    blocks = request_blocks(body, "openai_responses", items=items)
    total = sum(b.tokens for b in blocks)
    if total > window and body.get("truncation") == "auto":
        while total > window and len(items) > 1:
            items = items[1:]
            while items and items[0].get("type") == "function_call_output":
                items = items[1:]
            blocks = request_blocks(body, "openai_responses", items=items)
            total = sum(b.tokens for b in blocks)
    if total > window:
        raise SimError(
            400,
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            param="input",
            code="context_length_exceeded",
        )
    return items, blocks, total


#: A ``compaction`` entry without ``compact_threshold`` compacts past this share of the model's window (the
#: real API documents no default: the simulator's choice).
DEFAULT_COMPACT_SHARE = 0.8


def _compact_threshold(state: SimState, body: Mapping[str, Any], model: str, window: int) -> int | None:
    """The token threshold of the request's ``context_management`` compaction entry (None: none asked), the
    field checked as the API checks it; refused as an endpoint or a model without server-side compaction
    refuses it (:attr:`SimState.refuses_compaction`)."""
    raw = body.get("context_management")
    if raw is None:
        return None
    refused = state.refuses_compaction
    if refused is True:
        raise SimError(
            400, "Unknown parameter: 'context_management'.", param="context_management", code="unknown_parameter"
        )
    if refused and lookup_window(model, dict.fromkeys(refused, 1)) is not None:
        raise SimError(
            400,
            "Unsupported parameter: 'context_management' is not supported with this model.",
            param="context_management",
            code="unsupported_parameter",
        )
    if not isinstance(raw, list):
        raise SimError(
            400,
            "Invalid type for 'context_management': expected an array of objects.",
            param="context_management",
            code="invalid_type",
        )
    threshold: int | None = None
    for i, entry in enumerate(raw):
        where = f"context_management[{i}]"
        if not isinstance(entry, Mapping):
            raise SimError(400, f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
        kind = entry.get("type")
        if kind is None:
            raise _missing(f"{where}.type")
        if kind != "compaction":
            raise SimError(
                400,
                f"Invalid value: '{kind}'. Supported values are: 'compaction'.",
                param=f"{where}.type",
                code="invalid_value",
            )
        value = entry.get("compact_threshold")
        if value is None:
            value = int(window * DEFAULT_COMPACT_SHARE)
        elif not isinstance(value, int) or isinstance(value, bool):
            raise SimError(
                400,
                f"Invalid type for '{where}.compact_threshold': expected an integer.",
                param=f"{where}.compact_threshold",
                code="invalid_type",
            )
        elif value < 1:
            raise SimError(
                400,
                f"Invalid '{where}.compact_threshold': integer below minimum value. Expected a value >= 1, but got "
                f"{value} instead.",
                param=f"{where}.compact_threshold",
                code="integer_below_min_value",
            )
        threshold = value if threshold is None else min(threshold, value)
    return threshold


def _turn_start(items: Sequence[Mapping[str, Any]]) -> int:
    """Where the current turn starts: the last user message, moved back before any call whose output the turn
    carries (a compaction never parts a call from its output)."""
    start = next((i for i in range(len(items) - 1, -1, -1) if items[i].get("role") == "user"), 0)
    answered = {str(i.get("call_id")) for i in items[start:] if i.get("type") == "function_call_output"}
    for i in range(start):
        if items[i].get("type") == "function_call" and str(items[i].get("call_id")) in answered:
            return i
    return start


def _compact_inline(
    state: SimState, body: Mapping[str, Any], items: list[Mapping[str, Any]], threshold: int
) -> tuple[list[Mapping[str, Any]], dict[str, Any] | None]:
    """Server-side compaction: once the rendered context (instructions, tools, stored items and the new input)
    is above ``threshold``, everything before the current turn becomes one ``compaction`` item, whose
    ``encrypted_content`` is ``"simcompact:" + base64(summary)`` (the scripted summary: ``FACT:`` lines and
    the user's messages survive). Returns the items the model then reads (the compaction item first) and the
    compaction item for the output; the items unchanged and None when the context is at or under the threshold
    or nothing precedes the current turn."""
    total = sum(b.tokens for b in request_blocks(body, "openai_responses", items=items))
    if total <= threshold:
        return items, None
    cut = _turn_start(items)
    if cut == 0:
        return items, None
    summary = summarize([*_responses_turns(None, items[:cut]), Turn("user", "<summary>")], state.summarizer)
    item = _compaction_item(summary)
    return [item, *items[cut:]], item


def _compaction_item(summary: str) -> dict[str, Any]:
    """A ``compaction`` output item carrying ``summary`` (see :data:`COMPACTION_PREFIX`)."""
    encrypted = COMPACTION_PREFIX + base64.b64encode(summary.encode()).decode()
    return {"id": hex_id("cmp", 24), "type": "compaction", "encrypted_content": encrypted, "created_by": None}


def responses_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/responses``."""
    body = _object(req.body)
    model = _model(body)
    window = state.window(model, "openai")
    items = _responses_input(state, body)
    check_responses_pairing(items)
    threshold = _compact_threshold(state, body, model, window)
    compaction = None
    if threshold is not None:
        items, compaction = _compact_inline(state, body, items, threshold)
    items, blocks, total = _fit_window(state, body, items, window)
    cached = state.cache.openai(model, blocks, body.get("prompt_cache_retention"))
    tools = _function_tools(
        [t for t in body.get("tools") or [] if isinstance(t, Mapping) and t.get("type", "function") == "function"]
    )
    if body.get("tool_choice") == "none":
        tools = {}
    force = _forced_tool(body.get("tool_choice"), tools)
    max_out = body.get("max_output_tokens")
    max_out = max_out if isinstance(max_out, int) and not isinstance(max_out, bool) else None
    text_config = body.get("text")
    schema = _format_schema(text_config.get("format")) if isinstance(text_config, Mapping) else None
    reply = plan_reply(
        _responses_turns(body.get("instructions"), items),
        tools,
        max_tokens=max_out,
        force_tool=force,
        json_schema=schema,
        summarizer=state.summarizer,
    )
    replied: list[dict[str, Any]] = []
    if reply.tool_calls:
        for call in reply.tool_calls:
            replied.append(
                {
                    "id": hex_id("fc", 24),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": json.dumps(call.arguments),
                    "call_id": "call_" + b62(24),
                    "name": call.name,
                }
            )
    else:
        replied.append(
            {
                "id": hex_id("msg", 24),
                "type": "message",
                "status": "incomplete" if reply.truncated else "completed",
                "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": reply.text}],
                "role": "assistant",
            }
        )
    # A compaction comes first, before the reply it made room for; the usage is the reply's pass only (the
    # compacted context and the reply), as the final pass of Anthropic's server-side compaction is reported.
    output = [compaction, *replied] if compaction is not None else replied
    usage = _usage_responses(total, cached, reply.output_tokens)
    status = "incomplete" if reply.truncated else "completed"
    incomplete = {"reason": "max_output_tokens"} if reply.truncated else None
    rid = hex_id("resp", 25)
    created = int(time.time())
    final = _response_object(rid, body, model, created, status, output, usage, incomplete)
    _diagnose(state, body, model, blocks, total, cached, final)
    if body.get("store", True) is not False:
        state.store_response(rid, [*items, *replied])  # after a compaction, the chain continues from it
    conversation = _conversation_id(body)
    if conversation is not None:
        final["conversation"] = {"id": conversation}
        state.store_conversation(conversation, [*items, *replied])  # so does the conversation
    if body.get("stream") is True:
        return StreamResult(_responses_events(body, model, created, final), usage=usage)
    return JsonResult(final, usage=usage)


def _diagnose(
    state: SimState,
    body: Mapping[str, Any],
    model: str,
    blocks: Sequence[Block],
    total: int,
    cached: int,
    final: dict[str, Any],
) -> None:
    """Record the request's prompt under the response's id, and answer ``prompt_cache_options.
    comparison_response_id`` with ``prompt_cache_diagnostics`` (and the options applied); a request without
    it gets neither field, as before the API had them."""
    text = body.get("text") if isinstance(body.get("text"), Mapping) else {}
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), Mapping) else {}
    assert isinstance(text, Mapping) and isinstance(reasoning, Mapping)
    settings = {
        "prompt_cache_key": body.get("prompt_cache_key"),
        "text_format": text.get("format"),
        "reasoning_effort": reasoning.get("effort"),
        "verbosity": text.get("verbosity"),
        "service_tier": body.get("service_tier"),
    }
    # Automatic caching: the whole prompt is left in the cache once long enough.
    record = PromptRecord.of(model, blocks, total if total >= OPENAI_MIN_TOKENS else cached, settings)
    options = body.get("prompt_cache_options")
    # An endpoint that does not diagnose ignores the options: it echoes nothing and answers nothing.
    if isinstance(options, Mapping) and "comparison_response_id" in options and state.diagnoses != "ignored":
        compared = options.get("comparison_response_id")
        final["prompt_cache_options"] = {
            "mode": options.get("mode", "implicit"),
            "ttl": options.get("ttl", "30m"),
            "comparison_response_id": compared,
        }
        diagnosis: dict[str, Any] | None = None
        if state.diagnoses == "unreadable":
            diagnosis = {"type": "cache_maybe"}  # a type the API does not document
        elif isinstance(compared, str) and state.diagnoses != "pending":
            diagnosis = openai_diagnosis(state.cache.record(compared), record)
            if state.diagnoses == "bad_counts" and diagnosis.get("type") == "cache_miss":
                diagnosis = {**diagnosis, "cache_missed_tokens": -5, "comparison_reusable_tokens": 2**70}
        final["prompt_cache_diagnostics"] = diagnosis
    state.cache.remember(final["id"], record)


def _responses_events(body: Mapping[str, Any], model: str, created: int, final: dict[str, Any]) -> list[SseEvent]:
    events: list[SseEvent] = []

    def emit(etype: str, **fields: Any) -> None:
        data = {"type": etype, **fields, "sequence_number": len(events)}
        events.append((etype, data))

    shell = _response_object(final["id"], body, model, created, "in_progress", [], None, None)
    emit("response.created", response=shell)
    emit("response.in_progress", response=shell)
    for oi, item in enumerate(final["output"]):
        if item["type"] == "message":
            emit("response.output_item.added", output_index=oi, item={**item, "status": "in_progress", "content": []})
            text = item["content"][0]["text"]
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            emit("response.content_part.added", item_id=item["id"], output_index=oi, content_index=0, part=part)
            for piece in _chunks(text):
                emit(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=oi,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=oi,
                content_index=0,
                text=text,
                logprobs=[],
            )
            emit(
                "response.content_part.done",
                item_id=item["id"],
                output_index=oi,
                content_index=0,
                part={**part, "text": text},
            )
        elif item["type"] == "compaction":
            # The summary is sampled while the item is open; the encrypted content comes with its ``done``.
            emit("response.output_item.added", output_index=oi, item={**item, "encrypted_content": ""})
            emit("response.compaction.compacting", item_id=item["id"], output_index=oi)
        else:
            emit("response.output_item.added", output_index=oi, item={**item, "status": "in_progress", "arguments": ""})
            for piece in _chunks(item["arguments"], 12):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=oi, delta=piece)
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=oi,
                name=item["name"],
                arguments=item["arguments"],
            )
        emit("response.output_item.done", output_index=oi, item=item)
    emit("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)
    return events


def compact_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/responses/compact``: the user messages verbatim plus one ``compaction`` item whose
    ``encrypted_content`` is ``"simcompact:" + base64(summary)``; the summary follows the scripted summary
    convention, so FACT lines survive and are counted again when the item is sent back."""
    body = _object(req.body)
    model = _model(body)
    window = state.window(model, "openai")
    items = _responses_input(state, body)
    items, _, total = _fit_window(state, body, items, window)
    turns = _responses_turns(body.get("instructions"), items)
    summary = summarize([*turns, Turn("user", "<summary>")], state.summarizer)
    output: list[dict[str, Any]] = []
    for item in items:
        if (item.get("type", "message") == "message" or "role" in item) and item.get("role") == "user":
            text = _content_text(item.get("content"))
            output.append(
                {
                    "id": hex_id("msg", 24),
                    "type": "message",
                    "status": "completed",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }
            )
    output.append(_compaction_item(summary))
    usage = _usage_responses(total, 0, count_tokens(summary))
    result = {
        "id": hex_id("resp", 25),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage,
    }
    return JsonResult(result, usage=usage)


# -- embeddings ----------------------------------------------------------------------------------------------


def _vector(text: str, model: str, dims: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(f"{model}\x00{text}".encode()).digest()[:8], "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_endpoint(state: SimState, req: Request) -> Result:
    """``POST /v1/embeddings``: deterministic unit vectors (seeded by model and text), float or base64."""
    body = _object(req.body)
    model = _model(body)
    raw = body.get("input")
    if raw is None:
        raise _missing("input")
    inputs: list[str]
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        inputs = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        inputs = [" ".join(map(str, raw))]
    elif isinstance(raw, list) and raw and all(isinstance(x, list) for x in raw):
        inputs = [" ".join(map(str, x)) for x in raw]
    else:
        raise SimError(
            400,
            "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
            param=None,
        )
    window = state.window(model, "openai")
    dims = EMBEDDING_DIMENSIONS.get(model, 1536)
    wanted = body.get("dimensions")
    if wanted is not None:
        if not isinstance(wanted, int) or isinstance(wanted, bool) or not 1 <= wanted <= dims:
            raise SimError(400, f"This model does not support specifying dimensions of {wanted}.", param="dimensions")
        dims = wanted
    total = 0
    data: list[dict[str, Any]] = []
    for index, text in enumerate(inputs):
        tokens = count_tokens(text) if isinstance(raw, str) or isinstance(raw[0], str) else len(text.split())
        if tokens > window:
            raise SimError(
                400,
                f"This model's maximum context length is {window} tokens, however you requested {tokens} tokens "
                f"({tokens} in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",
                code="context_length_exceeded",
            )
        total += tokens
        vector = _vector(text, model, dims)
        embedding: Any = vector
        if body.get("encoding_format") == "base64":
            embedding = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    usage = {"prompt_tokens": total, "total_tokens": total}
    return JsonResult({"object": "list", "data": data, "model": model, "usage": usage}, usage=usage)
