"""The OpenAI Chat Completions wire format (``POST /v1/chat/completions``).

Shapes (checked against ``openai/types/chat/chat_completion_*_message_param.py``): roles ``system``,
``developer``, ``user``, ``assistant``, ``tool`` (and the deprecated ``function``); ``content`` is a string or
a list of parts (``text``, ``image_url``, ``input_audio``, ``file``; ``refusal`` for the assistant); an
assistant message may carry ``tool_calls`` = ``[{"id", "type": "function", "function": {"name",
"arguments": <JSON string>}}]`` (or ``type: "custom"`` with ``custom: {"name", "input"}``); a tool message
answers one call with ``tool_call_id``. The API rejects with a 400:

- an assistant message with ``tool_calls`` not followed by ``tool`` messages answering every id;
- a ``tool`` message that is not a response to a preceding message with ``tool_calls``.

The conversation items are the messages after the leading system/developer messages, which stay put.

The response side lives here too: usage (``usage_from_openai_chat``, and ``usage_from_deepseek`` for DeepSeek,
which speaks this format with its own cache fields), the stream accumulator, content-capture parts, and the
embeddings endpoint, whose usage is spelled like this format's (:data:`EMBEDDINGS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from otel_context import pricing, providers, semconv
from otel_context.formats._common import (
    FieldRules,
    as_field_list,
    as_list,
    captured_arguments,
    captured_text,
    compact_json,
    error_fields,
    finish_reason,
    fixpoint,
    join_text,
    malformed_field,
    mentions_too_long,
    merge_text_messages,
    openai_usage,
    output_cap,
    parse_arguments,
    sampling_attributes,
    text_parts,
    unsendable_item,
    with_cap,
)
from otel_context.formats.base import (
    CLEARED_PLACEHOLDER,
    Accumulator,
    Body,
    CapturedInput,
    Item,
    MessageShape,
    PlainEndpoint,
    PromptLayout,
    ResponseInfo,
    ToolResultRef,
    ToolUse,
    WholeHistory,
)
from otel_context.usage import CacheDiagnosis, TokenUsage, field_getter, first_count, or_zero
from otel_context.usage import get_field as _get

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_INSTRUCTION_ROLES = frozenset({"system", "developer"})
KNOWN_PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})
_MEDIA_PARTS = frozenset({"image_url", "input_audio", "file"})
_CALL_TYPES = frozenset({"function", "custom"})
#: The output cap's names, current first (``max_tokens`` is the older one).
_OUTPUT_CAP = ("max_completion_tokens", "max_tokens")
#: Required fields the provider checks (see _common.malformed_field).
_PART_FIELDS: FieldRules = {
    "text": (("text", str),),
    "image_url": (("image_url", Mapping),),
    "input_audio": (("input_audio", Mapping),),
    "file": (("file", Mapping),),
    "refusal": (("refusal", str),),
}
_CALL_FIELDS: FieldRules = {"function": (("id", str), ("function", Mapping)), "custom": (("id", str),)}
_FUNCTION_FIELDS: FieldRules = {"function": (("name", str), ("arguments", str))}


def _role(item: Item) -> str:
    # Malformed entries (see has_unknown_content) have no role: every rule then leaves them alone. (A plain
    # dict, nearly every item, is told without the ABC isinstance: this runs for every item of a history.)
    return str(item.get("role", "")) if type(item) is dict or isinstance(item, Mapping) else ""


def _calls(item: Item) -> list[Mapping[str, Any]]:
    if _role(item) != "assistant":
        return []
    return [c for c in as_list(item.get("tool_calls")) if isinstance(c, Mapping)]


def _call_text(call: Mapping[str, Any]) -> str:
    """A tool call as text: its name and arguments (custom tools: their input)."""
    function = call.get("function")
    custom = call.get("custom")
    body = function if isinstance(function, Mapping) else custom if isinstance(custom, Mapping) else {}
    args = body.get("arguments", body.get("input", ""))
    return f"{body.get('name', '')} {args if isinstance(args, str) else compact_json(args)}"


def _tool_use(index: int, call: Mapping[str, Any]) -> ToolUse:
    """A tool call as :meth:`OpenAIChatAdapter.tool_results` names it: a function's name and its arguments (the
    JSON string as sent), a custom tool's name and ``{"input": ...}``."""
    function = call.get("function")
    if call.get("type") != "custom" and "custom" not in call and isinstance(function, Mapping):
        arguments = function.get("arguments")
        return ToolUse(index, str(call.get("id")), str(function.get("name")), arguments, None)
    name, tool_input = _call_name_and_input(call)
    return ToolUse(index, str(call.get("id")), name, tool_input, None)


def _call_ids(item: Item) -> list[str]:
    return [str(c.get("id")) for c in _calls(item)]


def _call_name_and_input(call: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any] | None]:
    if call.get("type") == "custom" or "custom" in call:
        custom = call.get("custom")
        if isinstance(custom, Mapping):
            return str(custom.get("name")), {"input": custom.get("input")}
        return None, None
    function = call.get("function")
    if isinstance(function, Mapping):
        return str(function.get("name")), parse_arguments(function.get("arguments"))
    return None, None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in as_list(content):
        if isinstance(part, Mapping):
            if part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif part.get("type") == "refusal":
                parts.append(str(part.get("refusal", "")))
    return join_text(parts)


def _leading_instructions(messages: Sequence[Any]) -> int:
    """How many messages at the start are system/developer instructions."""
    count = 0
    for msg in messages:
        if not (isinstance(msg, Mapping) and msg.get("role") in _INSTRUCTION_ROLES):
            break
        count += 1
    return count


def _answering_block(items: Sequence[Item], index: int) -> set[str]:
    """Ids answered by the contiguous tool messages right after ``items[index]``."""
    answered: set[str] = set()
    j = index + 1
    while j < len(items) and _role(items[j]) == "tool":
        answered.add(str(items[j].get("tool_call_id")))
        j += 1
    return answered


def _calling_message(items: Sequence[Item], index: int) -> Item | None:
    """The message a tool message at ``index`` responds to: the one before its run of tool messages."""
    k = index - 1
    while k >= 0 and _role(items[k]) == "tool":
        k -= 1
    return items[k] if k >= 0 else None


class OpenAIChatAdapter(WholeHistory):
    """:class:`~otel_context.formats.base.ChatFormat` for OpenAI Chat Completions."""

    name = "openai_chat"
    wire_format = "openai_chat"
    automatic_caching = True  # OpenAI caches long prompt prefixes by itself
    cache_control_markers = False
    empty_prefill = False
    message_shape = MessageShape(
        roles=frozenset({"system", "developer", "user", "assistant", "tool"}),
        part_types=KNOWN_PART_TYPES,
        own_keys=frozenset({"tool_calls", "tool_call_id", "function_call"}),
        null_content=True,
    )
    default_for_sdk: str | None = "openai"
    provider = providers.OPENAI.name

    # -- body ---------------------------------------------------------------------------------------------

    def _messages(self, body: Body) -> list[Any]:
        messages = body.get("messages")
        return list(messages) if isinstance(messages, (list, tuple)) else []

    def items(self, body: Body) -> list[Item]:
        messages = self._messages(body)
        return messages[_leading_instructions(messages) :]  # malformed entries included: see has_unknown_content

    def with_items(self, body: Body, items: Sequence[Item]) -> dict[str, Any]:
        messages = self._messages(body)
        return {**body, "messages": messages[: _leading_instructions(messages)] + list(items)}

    def system_text(self, body: Body) -> str:
        messages = self._messages(body)
        return join_text(_content_text(m.get("content")) for m in messages[: _leading_instructions(messages)])

    def max_output_tokens(self, body: Body) -> int | None:
        return output_cap(body, _OUTPUT_CAP)

    def with_output_cap(self, body: Body, max_tokens: int) -> dict[str, Any]:
        # A body without a cap gets the older name, which every compatible server understands.
        return with_cap(body, _OUTPUT_CAP, "max_tokens", max_tokens)

    # -- structure ----------------------------------------------------------------------------------------

    def has_unknown_content(self, items: Sequence[Item]) -> str | None:
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                return f"messages[{index}] is not an object"
            role = item.get("role")
            if role not in _ROLES:
                return f"messages[{index}] has unknown role {role!r}"
            content = item.get("content")
            if content is not None and not isinstance(content, (str, list, tuple)):
                return f"messages[{index}].content is neither a string nor a list of parts"
            if content is None and role != "assistant":
                return f"messages[{index}].content is missing (a {role} message needs content)"
            for pos, part in enumerate(as_list(content)):
                if not isinstance(part, Mapping) or part.get("type") not in KNOWN_PART_TYPES:
                    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                    return f"messages[{index}].content[{pos}] has unknown part type {kind!r}"
                problem = malformed_field(part, part["type"], _PART_FIELDS, f"messages[{index}].content[{pos}]")
                if problem:
                    return problem
            if role == "tool" and not isinstance(item.get("tool_call_id"), str):
                return f"messages[{index}].tool_call_id is missing (malformed tool message)"
            for pos, call in enumerate(as_list(item.get("tool_calls"))):
                if not isinstance(call, Mapping) or call.get("type", "function") not in _CALL_TYPES:
                    return f"messages[{index}].tool_calls[{pos}] has an unknown tool call type"
                kind = call.get("type", "function")
                where = f"messages[{index}].tool_calls[{pos}]"
                problem = malformed_field(call, kind, _CALL_FIELDS, where)
                function = call.get("function")
                if problem is None and kind == "function" and isinstance(function, Mapping):
                    problem = malformed_field(function, "function", _FUNCTION_FIELDS, where + ".function")
                if problem:
                    return problem
        return unsendable_item(items, "messages[{}]")

    def round_boundaries(self, items: Sequence[Item]) -> list[int]:
        n = len(items)
        ok = [True] * (n + 1)
        for i in range(1, n):
            if _role(items[i]) in ("tool", "function") or _calls(items[i - 1]):
                ok[i] = False  # tool_calls and all their tool messages (parallel calls too) stay together
        return [i for i in range(n + 1) if ok[i]]

    def validate(self, items: Sequence[Item]) -> list[str]:
        problems: list[str] = []
        for i, item in enumerate(items):
            ids = _call_ids(item)
            if ids:
                answered = _answering_block(items, i)
                missing = [c for c in ids if c not in answered]
                if missing:
                    problems.append(
                        f"messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages "
                        f"responding to each 'tool_call_id'; no response for: {', '.join(missing)}"
                    )
            if _role(item) == "tool":
                caller = _calling_message(items, i)
                call_id = str(item.get("tool_call_id"))
                if caller is None or call_id not in _call_ids(caller):
                    problems.append(
                        f"messages[{i}]: messages with role 'tool' must be a response to a preceding message "
                        f"with 'tool_calls' (tool_call_id {call_id})"
                    )
        return problems

    def repair(self, items: Sequence[Item]) -> list[Item]:
        return fixpoint(items, (_drop_orphan_tool_messages, _drop_unanswered_calls))

    # -- tool results -------------------------------------------------------------------------------------

    def tool_results(self, items: Sequence[Item]) -> list[ToolResultRef]:
        calls: dict[str, Mapping[str, Any]] = {}
        refs: list[ToolResultRef] = []
        for index, item in enumerate(items):
            for call in _calls(item):
                calls[str(call.get("id"))] = call
            if _role(item) != "tool":
                continue
            call_id = str(item.get("tool_call_id"))
            matching = calls.get(call_id)
            name, tool_input = _call_name_and_input(matching) if matching is not None else (None, None)
            text = _content_text(item.get("content"))
            refs.append(
                ToolResultRef(
                    item_index=index,
                    call_id=call_id,
                    tool_name=name,
                    tool_input=tool_input,
                    text=text,
                    cleared=text == CLEARED_PLACEHOLDER,
                    image_count=self.image_count(item),
                )
            )
        return refs

    def with_tool_results_replaced(self, items: Sequence[Item], replacements: Mapping[str, str]) -> list[Item]:
        return [
            {**item, "content": replacements[str(item.get("tool_call_id"))]}
            if _role(item) == "tool" and str(item.get("tool_call_id")) in replacements
            else item
            for item in items
        ]

    # -- text ---------------------------------------------------------------------------------------------

    def is_model_output(self, item: Item) -> bool:
        return _role(item) == "assistant"

    def item_text(self, item: Item) -> str:
        if not isinstance(item, Mapping):
            return compact_json(item)
        parts = [_content_text(item.get("content")), str(item.get("refusal") or ""), *map(_call_text, _calls(item))]
        legacy = item.get("function_call")
        if isinstance(legacy, Mapping):
            parts.append(f"{legacy.get('name', '')} {legacy.get('arguments', '')}")
        return join_text(parts)

    def image_count(self, item: Item) -> int:
        if not isinstance(item, Mapping):
            return 0
        return sum(1 for p in as_list(item.get("content")) if isinstance(p, Mapping) and p.get("type") in _MEDIA_PARTS)

    def user_text_items(self, items: Sequence[Item]) -> list[str]:
        return [t for t in (_content_text(i.get("content")) for i in items if _role(i) == "user") if t]

    def item_texts(self, items: Sequence[Item], tools: list[ToolUse] | None = None) -> list[tuple[str, bool, str]]:
        out: list[tuple[str, bool, str]] = []
        for index, item in enumerate(items):
            role = item.get("role", "") if type(item) is dict else None
            # A plain message (nearly every item): no refusal, no legacy function_call (those take the long way).
            if type(role) is str and not item.get("refusal") and "function_call" not in item:
                content = item.get("content")
                text = content if type(content) is str else _content_text(content)
                if role == "assistant" and "tool_calls" in item:
                    calls = item["tool_calls"]
                    if type(calls) is list:  # _calls and _call_text, without an ABC check a call
                        parts = [text]
                        for call in calls:
                            function = call.get("function") if type(call) is dict else None
                            args = (
                                function.get("arguments", function.get("input", "")) if type(function) is dict else None
                            )
                            if type(function) is dict and type(args) is str:
                                parts.append(f"{function.get('name', '')} {args}")
                                if tools is not None and "arguments" in function:
                                    tools.append(
                                        ToolUse(index, str(call.get("id")), str(function.get("name")), args, None)
                                    )
                                    continue
                            elif isinstance(call, Mapping):
                                parts.append(_call_text(call))
                            if tools is not None and isinstance(call, Mapping):
                                tools.append(_tool_use(index, call))
                        text = join_text(parts)
                    else:
                        text = join_text([text, *map(_call_text, _calls(item))])
                        if tools is not None:
                            tools.extend(_tool_use(index, call) for call in _calls(item))
                elif role == "tool" and tools is not None:
                    tools.append(ToolUse(index, str(item.get("tool_call_id")), None, None, text))
                out.append((text, role == "assistant", text if role == "user" else ""))
                continue
            out.append((self.item_text(item), self.is_model_output(item), "\n".join(self.user_text_items((item,)))))
            if tools is not None:
                tools.extend(_tool_use(index, call) for call in _calls(item))
                if _role(item) == "tool":
                    tools.append(
                        ToolUse(index, str(item.get("tool_call_id")), None, None, _content_text(item.get("content")))
                    )
        return out

    def make_user_item(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def summary_prompt_item(self, body: Body, items: Sequence[Item], prompt: str) -> dict[str, Any]:
        return self.make_user_item(prompt)  # OpenAI caches prefixes by itself: nothing to mark

    def make_summary_request(
        self, body: Body, transcript_items: Sequence[Item], prompt: str, max_tokens: int, model: str
    ) -> dict[str, Any]:
        # No tools are sent, so tool calls and tool messages become plain text (a tool message without the
        # matching tool_calls would be rejected); results join the assistant side, next to their calls, so the
        # user turns of the transcript are exactly what the user wrote.
        messages: list[dict[str, Any]] = self._messages(body)[: _leading_instructions(self._messages(body))]
        rendered: list[dict[str, Any]] = []
        for item in transcript_items:
            role = _role(item)
            if role == "tool":
                text = f"[tool result id={item.get('tool_call_id', '')}]\n{_content_text(item.get('content'))}"
                rendered.append({"role": "assistant", "content": text})
                continue
            lines = [_content_text(item.get("content"))]
            lines += ["[image]"] * self.image_count(item)
            for call in _calls(item):
                name, _ = _call_name_and_input(call)
                function = call.get("function")
                args = function.get("arguments", "") if isinstance(function, Mapping) else ""
                lines.append(f"[tool call {name} id={call.get('id', '')}] {args}")
            text = join_text(lines)
            if text:
                rendered.append(
                    {
                        "role": role if role in ("user", "assistant", "system", "developer") else "assistant",
                        "content": text,
                    }
                )
        messages += merge_text_messages(rendered)
        messages.append({"role": "user", "content": prompt})
        limit_key = (
            "max_tokens" if "max_tokens" in body and "max_completion_tokens" not in body else "max_completion_tokens"
        )
        return {"model": model, "messages": messages, limit_key: max_tokens}

    # -- responses (the instrumentation's side) -----------------------------------------------------------

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return sampling_attributes(body, _OUTPUT_CAP)

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        get = field_getter(response)  # one type decision for the reads below (this runs on every call)
        choices = get("choices") or ()
        if type(choices) is list and len(choices) == 1:  # nearly every response: no generator
            reason = finish_reason(_get(choices[0], "finish_reason"))
            reasons: tuple[str, ...] = (reason,) if reason else ()
        else:
            reasons = tuple(r for c in choices if (r := finish_reason(_get(c, "finish_reason"))))
        usage = get("usage")
        return ResponseInfo(
            response_id=get("id"),
            response_model=get("model"),
            finish_reasons=reasons,
            usage=self.usage(usage, provider) if usage is not None else None,
            price_context=pricing.price_context(get("service_tier")),
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _ChatAccumulator(self, provider)

    def response_text(self, response: Any) -> str:
        # The first choice that has text (n > 1 answers alike; a choice with only tool calls or a refusal has
        # none), its content a string or text parts (compatible servers send parts).
        for choice in _get(response, "choices") or ():
            text = text_parts(_get(_get(choice, "message"), "content"), ("text",))
            if text:
                return text
        return ""

    def usage(self, raw: Any, provider: str) -> TokenUsage:
        return usage_from_deepseek(raw) if provider == semconv.PROVIDER_DEEPSEEK else usage_from_openai_chat(raw)

    def capture_input(self, body: Mapping[str, Any]) -> CapturedInput:
        messages: list[Any] = []
        instructions: list[Any] = []
        for m in as_list(body.get("messages")):
            role = _get(m, "role")
            if role in ("system", "developer"):
                instructions.extend(_captured_parts(m))
            elif role == "tool":
                response = captured_text(_get(m, "content"))
                part = {"type": "tool_call_response", "id": _get(m, "tool_call_id"), "response": response}
                messages.append({"role": "tool", "parts": [part]})
            else:
                messages.append({"role": role, "parts": _captured_parts(m)})
        return messages, instructions

    def capture_output(self, response: Any) -> list[Any]:
        out = []
        for choice in _get(response, "choices") or ():
            reason = _get(choice, "finish_reason")
            message: dict[str, Any] = {"role": "assistant", "parts": _captured_parts(_get(choice, "message"))}
            if reason:
                message["finish_reason"] = finish_reason(reason)
            out.append(message)
        return out

    # -- the Compactor API, summary requests, the prompt cache -------------------------------------------

    def compactor_body(
        self,
        messages: Sequence[Any],
        model: str,
        system: str | None,
        tools: Sequence[Any] | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        lead = [{"role": "system", "content": system}] if system else []
        body: dict[str, Any] = {"model": model, "messages": [*lead, *messages]}
        if max_tokens:
            body["max_completion_tokens"] = max_tokens
        if tools:
            body["tools"] = list(tools)
        return body

    def compactor_messages(self, body: Mapping[str, Any], system: str | None) -> list[Any]:
        messages = list(body.get("messages") or [])
        return messages[1:] if system else messages  # without the system message compactor_body put in front

    def sdk_create(self, client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    # -- the provider's cache diagnostics: Chat Completions has none ------------------------------------------

    def with_cache_comparison(self, body: Mapping[str, Any], previous: str | None) -> dict[str, Any] | None:
        return None

    def settle_diagnosis(self, body: Mapping[str, Any], read: CacheDiagnosis | None) -> CacheDiagnosis | None:
        return None

    def reply_signature(self, response: Mapping[str, Any] | None) -> str:
        return ""

    def items_reply_signature(self, items: Sequence[Item]) -> str:
        return ""

    def prompt_layout(self, body: Mapping[str, Any]) -> PromptLayout:
        options = body.get("prompt_cache_options")
        items = as_field_list(body.get("messages"))
        return PromptLayout(
            system=[],
            tools=as_field_list(body.get("tools")),
            items=items,
            leading_system_items=_leading_instructions(items),
            ttl=options.get("ttl") if isinstance(options, Mapping) else None,
            whole_prompt_marker=False,
            server_state=False,
        )

    def is_too_long_error(self, status: int | None, error_body: Mapping[str, Any] | None, message: str) -> bool:
        _kind, code, text = error_fields(error_body)
        return code == "context_length_exceeded" or mentions_too_long(text, message)


def _drop_orphan_tool_messages(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    for item in items:
        if _role(item) == "tool":
            caller = _calling_message(out, len(out))
            if caller is None or str(item.get("tool_call_id")) not in _call_ids(caller):
                continue
        out.append(item)
    return out if len(out) != len(items) else items


def _drop_unanswered_calls(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    changed = False
    for i, item in enumerate(items):
        calls = _calls(item)
        if not calls:
            out.append(item)
            continue
        answered = _answering_block(items, i)
        kept = [c for c in calls if str(c.get("id")) in answered]
        if len(kept) == len(calls):
            out.append(item)
            continue
        changed = True
        new = {k: v for k, v in item.items() if k != "tool_calls"}
        if kept:
            new["tool_calls"] = kept
        elif not _content_text(new.get("content")) and not new.get("function_call") and not new.get("audio"):
            continue  # nothing left to say: drop the message
        out.append(new)
    return out if changed else items


# --- usage --------------------------------------------------------------------------------------------------


def usage_from_openai_chat(u: Any) -> TokenUsage:
    """Normalize a Chat Completions (or legacy Completions, or Embeddings) ``usage``.

    ``prompt_tokens`` already includes cached reads and writes; ``prompt_tokens_details.cached_tokens`` /
    ``cache_write_tokens`` and ``completion_tokens_details.reasoning_tokens`` where reported. A usage in
    the Responses spelling (``input_tokens``), as some compatible servers send, is read too.
    """
    return openai_usage(
        u,
        input_names=("prompt_tokens", "input_tokens"),
        output_names=("completion_tokens", "output_tokens"),
        input_details=("prompt_tokens_details", "input_tokens_details"),
        output_details=("completion_tokens_details", "output_tokens_details"),
    )


def usage_from_deepseek(u: Any) -> TokenUsage:
    """Normalize a DeepSeek (OpenAI-compatible chat) ``usage``.

    DeepSeek reports cache reads as ``prompt_cache_hit_tokens`` (and misses as ``prompt_cache_miss_tokens``);
    ``prompt_tokens`` is hit + miss. When ``prompt_tokens`` is missing the input is rebuilt from hit + miss.
    """
    hit = first_count(u, "prompt_cache_hit_tokens")
    miss = first_count(u, "prompt_cache_miss_tokens")
    usage = openai_usage(
        u,
        input_names=("prompt_tokens", "input_tokens"),
        output_names=("completion_tokens", "output_tokens"),
        input_details=("prompt_tokens_details",),
        output_details=("completion_tokens_details",),
    )
    changes: dict[str, Any] = {}
    if hit is not None:
        changes["cache_read_tokens"] = hit
        changes["reported_cache"] = True
    if first_count(u, "prompt_tokens", "input_tokens") is None and (hit is not None or miss is not None):
        changes["input_tokens"] = or_zero(hit) + or_zero(miss)
    return replace(usage, **changes) if changes else usage


# --- streams ------------------------------------------------------------------------------------------------


class _ChatAccumulator(Accumulator):
    __slots__ = ("_format", "_provider", "_reasons")

    def __init__(self, fmt: OpenAIChatAdapter, provider: str) -> None:
        super().__init__()
        self._format = fmt
        self._provider = provider
        self._reasons: dict[int, str] = {}

    def add(self, event: Any) -> None:
        info = self.info
        if info.response_id is None:
            info.response_id = _get(event, "id")
            info.response_model = _get(event, "model")
            info.price_context = pricing.price_context(_get(event, "service_tier"))
        for choice in _get(event, "choices") or ():
            if self.texts is not None and not _get(choice, "index"):
                text = _get(_get(choice, "delta"), "content")
                if isinstance(text, str):
                    self.texts.append(text)
            reason = _get(choice, "finish_reason")
            if reason is not None:
                self._reasons[_get(choice, "index") or 0] = finish_reason(reason) or ""
                info.finish_reasons = tuple(self._reasons[i] for i in sorted(self._reasons))
        usage = _get(event, "usage")
        if usage is not None:
            info.usage = self._format.usage(usage, self._provider)


# --- content capture (GenAI semconv message parts) -----------------------------------------------------------


def _captured_parts(message: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    content = _get(message, "content")
    if isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, (list, tuple)):
        for part in content:
            kind = _get(part, "type")
            if kind == "text":
                parts.append({"type": "text", "content": _get(part, "text") or ""})
            elif kind in ("image_url", "input_audio", "file"):
                parts.append({"type": "blob", "modality": "image" if kind == "image_url" else str(kind)})
    for call in as_list(_get(message, "tool_calls")):
        function = _get(call, "function")
        parts.append(
            {
                "type": "tool_call",
                "id": _get(call, "id"),
                "name": _get(function, "name"),
                "arguments": captured_arguments(_get(function, "arguments")),
            }
        )
    return parts


# --- the embeddings endpoint ---------------------------------------------------------------------------------


class _Embeddings(PlainEndpoint):
    """``POST /v1/embeddings``: the model and a usage in this format's spelling (``prompt_tokens``)."""

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        usage = _get(response, "usage")
        tokens = usage_from_openai_chat(usage) if usage is not None else None
        return ResponseInfo(response_model=_get(response, "model"), usage=tokens)


EMBEDDINGS = _Embeddings()
