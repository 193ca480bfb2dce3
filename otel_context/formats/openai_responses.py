"""The OpenAI Responses wire format (``POST /v1/responses``).

Shapes (checked against ``openai/types/responses/response_input_item_param.py``): ``input`` is a string or a
list of items; ``instructions`` is the system prompt. Items: messages (``{"role", "content"}`` with an optional
``"type": "message"``; content a string or parts ``input_text`` / ``output_text`` / ``input_image`` /
``input_file`` / ``refusal``), ``function_call`` (``call_id``, ``name``, ``arguments`` JSON string) and
``function_call_output`` (``call_id``, ``output`` string or parts), the custom/computer/shell/patch call
pairs, ``reasoning`` (summary, optional ``encrypted_content``), ``compaction`` (opaque ``encrypted_content``
from server-side compaction) and ``item_reference`` (an id of an item stored at OpenAI).

The API rejects with a 400: an output whose ``call_id`` matches no earlier call ("No tool call found for
function call output"), a call without output ("No tool output found for function call"), and a reasoning
item not followed by the item it produced ("provided without its required following item").

The response side lives here too: usage (``usage_from_openai_responses``), finish reasons (a Response has a
status, not a finish reason), the stream accumulator, content-capture parts, and ``responses.compact``
(server-side compaction: a Responses body and usage, :data:`COMPACT`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    openai_usage,
    output_cap,
    parse_arguments,
    provider_reason,
    reply_digest,
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
    EndpointFormat,
    Item,
    MessageShape,
    PlainEndpoint,
    PromptLayout,
    ResponseInfo,
    ToolResultRef,
    ToolUse,
)
from otel_context.usage import CacheDiagnosis, TokenUsage, as_count, has_field, is_mapping
from otel_context.usage import get_field as _get

#: call item type -> its output item type; both carry the same ``call_id``.
CALL_OUTPUT_TYPES: Mapping[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
}
_OUTPUT_TYPES = frozenset(CALL_OUTPUT_TYPES.values())
#: Outputs whose content is text the compactor may clear or cap (the others have structured payloads).
_TEXT_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
#: Items the model produced (what a reasoning item may precede).
_MODEL_ITEM_TYPES = frozenset(
    {
        *CALL_OUTPUT_TYPES,
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
    }
)
#: Every item type whose pairing and meaning this adapter knows. ``additional_tools`` /
#: ``configuration_update`` change the tool set mid-conversation, ``compaction_trigger`` must stay last,
#: ``program`` items have their own call semantics: all of those (and future types) are "unknown", so the
#: compactor sends such a request unchanged.
KNOWN_ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "compaction",
        "item_reference",
        "mcp_approval_response",
        "tool_search_output",
        *_MODEL_ITEM_TYPES,
        *_OUTPUT_TYPES,
    }
)
KNOWN_PART_TYPES = frozenset({"input_text", "output_text", "input_image", "input_file", "input_audio", "refusal"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
_ROLES = frozenset({"user", "assistant", "system", "developer"})
#: The output cap's name.
_OUTPUT_CAP = ("max_output_tokens",)
#: Required fields the provider checks (see _common.malformed_field).
_PART_FIELDS: FieldRules = {
    "input_text": (("text", str),),
    "output_text": (("text", str),),
    "refusal": (("refusal", str),),
}
_ITEM_FIELDS: FieldRules = {
    "function_call": (("call_id", str), ("name", str), ("arguments", str)),
    "function_call_output": (("call_id", str), ("output", (str, list, tuple))),
}


def _type(item: Item) -> str:
    if not isinstance(item, Mapping):
        return ""  # malformed (see has_unknown_content): no rule applies to it
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    if kind is None and "id" in item and len(item) == 1:
        return "item_reference"
    return str(kind)


def _role(item: Item) -> str:
    return str(item.get("role", "")) if _type(item) == "message" else ""


def _call_id(item: Item) -> str:
    return str(item.get("call_id"))


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in as_list(content):
        if isinstance(part, Mapping):
            if part.get("type") in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
                texts.append(str(part.get("text", "")))
            elif part.get("type") == "refusal":
                texts.append(str(part.get("refusal", "")))
    return join_text(texts)


def _media(content: Any) -> int:
    return sum(1 for p in as_list(content) if isinstance(p, Mapping) and p.get("type") in _MEDIA_PARTS)


def _is_model_item(item: Item) -> bool:
    return _type(item) in _MODEL_ITEM_TYPES or _role(item) == "assistant"


def _starts_turn(item: Item) -> bool:
    return _role(item) in ("user", "system", "developer")


def _scan(items: Sequence[Item]) -> tuple[dict[str, int], dict[str, int], set[int]]:
    """``(call index by call_id, output index by call_id, indexes of orphan outputs)``.

    An output is matched with the latest earlier call of its call_id. After an ``item_reference`` an unmatched
    output is not called orphan: the referenced stored item may be its call.
    """
    calls: dict[str, int] = {}
    outputs: dict[str, int] = {}
    orphans: set[int] = set()
    seen_reference = False
    for i, item in enumerate(items):
        kind = _type(item)
        if kind == "item_reference":
            seen_reference = True
        elif kind in CALL_OUTPUT_TYPES:
            calls[_call_id(item)] = i
        elif kind in _OUTPUT_TYPES:
            if _call_id(item) in calls:
                outputs[_call_id(item)] = i
            elif not seen_reference:
                orphans.add(i)
    return calls, outputs, orphans


def _reasoning_without_follower(items: Sequence[Item]) -> set[int]:
    bad: set[int] = set()
    for i, item in enumerate(items):
        if _type(item) != "reasoning":
            continue
        j = i + 1
        while j < len(items) and _type(items[j]) == "reasoning":
            j += 1
        if j == len(items) or not _is_model_item(items[j]):
            bad.add(i)
    return bad


class OpenAIResponsesAdapter:
    """:class:`~otel_context.formats.base.ChatFormat` for the OpenAI Responses API."""

    name = "openai_responses"
    wire_format = "openai_responses"
    automatic_caching = True  # OpenAI caches long prompt prefixes by itself
    cache_control_markers = False
    empty_prefill = False
    message_shape = MessageShape(
        roles=frozenset({"system", "developer", "user", "assistant"}), part_types=KNOWN_PART_TYPES, typed_items=True
    )
    default_for_sdk: str | None = None  # an openai client means Chat Completions unless told otherwise
    provider = providers.OPENAI.name

    # -- body ---------------------------------------------------------------------------------------------

    def items(self, body: Body) -> list[Item]:
        value = body.get("input")
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        return list(value) if isinstance(value, (list, tuple)) else []  # malformed entries included

    def with_items(self, body: Body, items: Sequence[Item]) -> dict[str, Any]:
        return {**body, "input": list(items)}

    def system_text(self, body: Body) -> str:
        instructions = body.get("instructions")
        if isinstance(instructions, str):
            return instructions
        return join_text(self.item_text(i) for i in as_list(instructions) if isinstance(i, Mapping))

    def server_state_reason(self, body: Body) -> str | None:
        if body.get("previous_response_id"):
            return "the request continues a stored response (previous_response_id)"
        if body.get("conversation"):
            return "the request continues a stored conversation (conversation)"
        return None

    def stores_response(self, body: Body) -> bool:
        return body.get("store") is not False

    def continued_response(self, body: Body) -> str | None:
        previous = body.get("previous_response_id")
        return previous if isinstance(previous, str) and previous else None

    def continued_conversation(self, body: Body) -> str | None:
        conversation = body.get("conversation")
        if isinstance(conversation, Mapping):  # ``{"id": "conv_..."}``
            conversation = conversation.get("id")
        return conversation if isinstance(conversation, str) and conversation else None

    def context_managed_by_app(self, body: Body) -> str | None:
        if "context_management" in body:
            return "the app manages the provider's context itself (context_management)"
        if body.get("truncation") == "auto":
            return "the app lets the provider truncate the history (truncation=auto)"
        raw = body.get("input")
        if isinstance(raw, (list, tuple)) and any(_type(item) == "compaction_trigger" for item in raw):
            return "the app asks the provider to compact (a compaction_trigger item)"
        return None

    def with_provider_compaction(self, body: Body, threshold: int) -> dict[str, Any] | None:
        return {**body, "context_management": [{"type": "compaction", "compact_threshold": threshold}]}

    def refuses_provider_compaction(
        self, status: int | None, error_body: Mapping[str, Any] | None, message: str
    ) -> bool:
        if status is not None and status not in (400, 422):
            return False  # a failing or overloaded server says nothing about the field
        inner = error_body.get("error") if isinstance(error_body, Mapping) else None
        source = inner if isinstance(inner, Mapping) else error_body
        param = source.get("param") if isinstance(source, Mapping) else None
        if isinstance(param, str) and param.startswith("context_management"):
            return True
        _kind, _code, text = error_fields(error_body)
        return "context_management" in text or "context_management" in message

    def max_output_tokens(self, body: Body) -> int | None:
        return output_cap(body, _OUTPUT_CAP)

    def with_output_cap(self, body: Body, max_tokens: int) -> dict[str, Any]:
        return with_cap(body, _OUTPUT_CAP, "max_output_tokens", max_tokens)

    # -- structure ----------------------------------------------------------------------------------------

    def has_unknown_content(self, items: Sequence[Item]) -> str | None:
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                return f"input[{index}] is not an object"
            kind = _type(item)
            if kind not in KNOWN_ITEM_TYPES:
                return f"input[{index}] has unknown item type {kind!r}"
            if kind == "message":
                if item.get("role") not in _ROLES:
                    return f"input[{index}] has unknown role {item.get('role')!r}"
                content = item.get("content")
                if not isinstance(content, (str, list, tuple)):
                    return f"input[{index}].content is neither a string nor a list of parts"
                for pos, part in enumerate(as_list(content)):
                    if not isinstance(part, Mapping) or part.get("type") not in KNOWN_PART_TYPES:
                        part_kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                        return f"input[{index}].content[{pos}] has unknown part type {part_kind!r}"
                    problem = malformed_field(part, part["type"], _PART_FIELDS, f"input[{index}].content[{pos}]")
                    if problem:
                        return problem
            problem = malformed_field(item, kind, _ITEM_FIELDS, f"input[{index}]")
            if problem:
                return problem
        return unsendable_item(items, "input[{}]")

    def round_boundaries(self, items: Sequence[Item]) -> list[int]:
        n = len(items)
        ok = [True] * (n + 1)
        calls, outputs, _orphans = _scan(items)
        for call_id, start in calls.items():
            end = outputs.get(call_id, n)  # an unanswered call: nothing after it may be cut off
            for k in range(start + 1, end + 1):
                ok[k] = False
        for i in range(1, n):
            if _type(items[i]) in _OUTPUT_TYPES or _type(items[i - 1]) == "reasoning":
                ok[i] = False
        ok[n] = True
        # Reasoning tool loops: from the first reasoning item to the end of its turn.
        start = 0
        while start < n:
            end = start + 1
            while end < n and not _starts_turn(items[end]):
                end += 1
            first = next((k for k in range(start, end) if _type(items[k]) == "reasoning"), None)
            if first is not None and any(_type(items[k]) in _OUTPUT_TYPES for k in range(first, end)):
                for k in range(first + 1, end):
                    ok[k] = False
            start = end
        return [i for i in range(n + 1) if ok[i]]

    def validate(self, items: Sequence[Item]) -> list[str]:
        problems: list[str] = []
        calls, outputs, orphans = _scan(items)
        for i in sorted(orphans):
            problems.append(
                f"input[{i}]: No tool call found for function call output with call_id {_call_id(items[i])}"
            )
        for call_id, i in sorted(calls.items(), key=lambda kv: kv[1]):
            if call_id not in outputs:
                problems.append(f"input[{i}]: No tool output found for {_type(items[i])} with call_id {call_id}")
        for i in sorted(_reasoning_without_follower(items)):
            problems.append(f"input[{i}]: reasoning item was provided without its required following item")
        return problems

    def repair(self, items: Sequence[Item]) -> list[Item]:
        return fixpoint(items, (_drop_orphan_outputs, _drop_unanswered_calls, _drop_lonely_reasoning))

    # -- tool results -------------------------------------------------------------------------------------

    def tool_results(self, items: Sequence[Item]) -> list[ToolResultRef]:
        calls: dict[str, Item] = {}
        refs: list[ToolResultRef] = []
        for index, item in enumerate(items):
            kind = _type(item)
            if kind in CALL_OUTPUT_TYPES:
                calls[_call_id(item)] = item
            elif kind in _TEXT_OUTPUT_TYPES:
                call = calls.get(_call_id(item))
                tool_input: Mapping[str, Any] | None = None
                if call is not None:
                    tool_input = (
                        parse_arguments(call.get("arguments"))
                        if _type(call) == "function_call"
                        else {"input": call.get("input")}
                    )
                text = _parts_text(item.get("output"))
                refs.append(
                    ToolResultRef(
                        item_index=index,
                        call_id=_call_id(item),
                        tool_name=str(call.get("name")) if call is not None else None,
                        tool_input=tool_input,
                        text=text,
                        cleared=text == CLEARED_PLACEHOLDER,
                        image_count=_media(item.get("output")),
                    )
                )
        return refs

    def with_tool_results_replaced(self, items: Sequence[Item], replacements: Mapping[str, str]) -> list[Item]:
        return [
            {**item, "output": replacements[_call_id(item)]}
            if _type(item) in _TEXT_OUTPUT_TYPES and _call_id(item) in replacements
            else item
            for item in items
        ]

    # -- text ---------------------------------------------------------------------------------------------

    def is_model_output(self, item: Item) -> bool:
        return _type(item) == "reasoning" or _is_model_item(item)

    def item_text(self, item: Item) -> str:
        kind = _type(item)
        if kind == "message":
            return _parts_text(item.get("content"))
        if kind == "function_call":
            return f"{item.get('name', '')} {item.get('arguments', '')}"
        if kind == "custom_tool_call":
            return f"{item.get('name', '')} {item.get('input', '')}"
        if kind in _TEXT_OUTPUT_TYPES:
            return _parts_text(item.get("output"))
        if kind == "reasoning":
            return join_text([_parts_text(item.get("summary")), _parts_text(item.get("content"))])
        if kind in ("compaction", "item_reference"):
            return ""  # opaque: the provider holds the content
        if not isinstance(item, Mapping):
            return compact_json(item)
        return compact_json({k: v for k, v in item.items() if k != "encrypted_content"})

    def image_count(self, item: Item) -> int:
        kind = _type(item)
        if kind == "message":
            return _media(item.get("content"))
        if kind in _TEXT_OUTPUT_TYPES:
            return _media(item.get("output"))
        if kind == "computer_call_output":
            return 1  # a screenshot
        return 0

    def user_text_items(self, items: Sequence[Item]) -> list[str]:
        return [t for t in (_parts_text(i.get("content")) for i in items if _role(i) == "user") if t]

    def item_texts(self, items: Sequence[Item], tools: list[ToolUse] | None = None) -> list[tuple[str, bool, str]]:
        out: list[tuple[str, bool, str]] = []
        for index, item in enumerate(items):
            if type(item) is dict:  # the three kinds nearly every item is, read once here
                kind = item.get("type")
                if kind == "message" or (kind is None and "role" in item):
                    role = item.get("role", "")
                    if type(role) is str:
                        content = item.get("content")
                        text = content if type(content) is str else _parts_text(content)
                        out.append((text, role == "assistant", text if role == "user" else ""))
                        continue
                elif kind == "function_call":
                    out.append((f"{item.get('name', '')} {item.get('arguments', '')}", kind in _MODEL_ITEM_TYPES, ""))
                    if tools is not None:
                        tools.append(ToolUse(index, _call_id(item), str(item.get("name")), item.get("arguments"), None))
                    continue
                elif kind in _TEXT_OUTPUT_TYPES:
                    output = item.get("output")
                    text = output if type(output) is str else _parts_text(output)
                    out.append((text, kind in _MODEL_ITEM_TYPES, ""))
                    if tools is not None:
                        tools.append(ToolUse(index, _call_id(item), None, None, text))
                    continue
            out.append((self.item_text(item), self.is_model_output(item), "\n".join(self.user_text_items((item,)))))
            if tools is not None:
                kind = _type(item)
                if kind in CALL_OUTPUT_TYPES:
                    arguments = item.get("arguments") if kind == "function_call" else {"input": item.get("input")}
                    tools.append(ToolUse(index, _call_id(item), str(item.get("name")), arguments, None))
                elif kind in _TEXT_OUTPUT_TYPES:
                    tools.append(ToolUse(index, _call_id(item), None, None, _parts_text(item.get("output"))))
        return out

    def make_user_item(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def summary_prompt_item(self, body: Body, items: Sequence[Item], prompt: str) -> dict[str, Any]:
        return self.make_user_item(prompt)  # OpenAI caches prefixes by itself: nothing to mark

    def make_summary_request(
        self, body: Body, transcript_items: Sequence[Item], prompt: str, max_tokens: int, model: str
    ) -> dict[str, Any]:
        # No tools: calls and outputs become text; compaction items stay (they are valid without tools and
        # carry the provider's own summary of what came before); reasoning is the model's scratch work.
        transcript: list[Item] = []
        for item in transcript_items:
            kind = _type(item)
            if kind == "compaction":
                transcript.append(item)
                continue
            if kind in ("reasoning", "item_reference"):
                continue
            if kind == "message":
                role = str(item.get("role"))
                text = join_text([_parts_text(item.get("content")), *["[image]"] * self.image_count(item)])
            elif kind in CALL_OUTPUT_TYPES:
                role, text = (
                    "assistant",
                    f"[tool call {item.get('name', kind)} id={_call_id(item)}] {self.item_text(item)}",
                )
            elif kind in _OUTPUT_TYPES:  # next to its call, so the user turns are only what the user wrote
                role, text = "assistant", f"[tool result id={_call_id(item)}]\n{self.item_text(item)}"
            else:
                role, text = "assistant", f"[{kind}] {self.item_text(item)}"
            if text:
                transcript.append({"role": role, "content": text})
        transcript.append({"role": "user", "content": prompt})
        request: dict[str, Any] = {"model": model, "input": _merge_plain(transcript), "max_output_tokens": max_tokens}
        if body.get("instructions"):
            request["instructions"] = body["instructions"]
        return request

    # -- responses (the instrumentation's side) -----------------------------------------------------------

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return sampling_attributes(body, _OUTPUT_CAP)

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        usage = _get(response, "usage")
        return ResponseInfo(
            response_id=_get(response, "id"),
            response_model=_get(response, "model"),
            finish_reasons=_finish_reasons(response),
            usage=usage_from_openai_responses(usage) if usage is not None else None,
            cache_diagnosis=diagnosis_from_openai_responses(response),
            price_context=pricing.price_context(_get(response, "service_tier")),
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _ResponsesAccumulator(self)

    def response_text(self, response: Any) -> str:
        # The SDK's ``Response.output_text`` (a property; compatible servers may send the field): every
        # ``output_text`` part of the message items, concatenated. Refusals and reasoning are not text.
        shortcut = _get(response, "output_text")
        if isinstance(shortcut, str):
            return shortcut
        return "".join(
            text_parts(_get(item, "content"), ("output_text",))
            for item in _get(response, "output") or ()
            if _get(item, "type") == "message"
        )

    def usage(self, raw: Any, provider: str) -> TokenUsage:
        return usage_from_openai_responses(raw)

    def capture_input(self, body: Mapping[str, Any]) -> CapturedInput:
        instructions = body.get("instructions")
        system = [{"type": "text", "content": instructions}] if isinstance(instructions, str) else []
        raw = body.get("input")
        if isinstance(raw, str):
            return [{"role": "user", "parts": [{"type": "text", "content": raw}]}], system
        return [m for item in as_list(raw) if (m := _captured_item(item)) is not None], system

    def capture_output(self, response: Any) -> list[Any]:
        # One output message of every item's parts (the conventions' one message per candidate), with the
        # finish reason the schema requires of an output message: a viewer that validates the schema drops
        # the whole output otherwise.
        items = [m for item in _get(response, "output") or () if (m := _captured_item(item)) is not None]
        if not items:
            return []
        message: dict[str, Any] = {"role": "assistant", "parts": [p for m in items for p in m["parts"]]}
        reasons = _finish_reasons(response)
        if reasons:
            message["finish_reason"] = reasons[0]
        return [message]

    # -- the Compactor API, summary requests, the prompt cache -------------------------------------------

    def compactor_body(
        self,
        messages: Sequence[Any],
        model: str,
        system: str | None,
        tools: Sequence[Any] | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "input": list(messages)}
        if system:
            body["instructions"] = system
        if max_tokens:
            body["max_output_tokens"] = max_tokens
        if tools:
            body["tools"] = list(tools)
        return body

    def compactor_messages(self, body: Mapping[str, Any], system: str | None) -> list[Any]:
        return list(body.get("input") or [])

    def sdk_create(self, client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    # -- the provider's cache diagnostics -------------------------------------------------------------------

    def with_cache_comparison(self, body: Mapping[str, Any], previous: str | None) -> dict[str, Any] | None:
        if previous is None:
            return None  # nothing to compare with: the request goes as the app wrote it
        options = body.get("prompt_cache_options", _ABSENT)
        if options is _ABSENT:
            return {**body, "prompt_cache_options": {"comparison_response_id": previous}}
        if isinstance(options, Mapping) and "comparison_response_id" not in options:
            return {**body, "prompt_cache_options": {**options, "comparison_response_id": previous}}
        return None  # the app's own comparison, or options of a shape we do not add to

    def settle_diagnosis(self, body: Mapping[str, Any], read: CacheDiagnosis | None) -> CacheDiagnosis | None:
        # Asked, and the response neither answers nor names the comparison (pending reads from a response that
        # does): an endpoint that ignores prompt_cache_options (an older API, a compatible server), which says
        # nothing, rather than a comparison forever pending.
        options = body.get("prompt_cache_options")
        asked = isinstance(options, Mapping) and isinstance(options.get("comparison_response_id"), str)
        return CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN) if asked and read is None else read

    def reply_signature(self, response: Mapping[str, Any] | None) -> str:
        if response is None:
            return ""
        return _reply_digest(as_list(response.get("output")))

    def items_reply_signature(self, items: Sequence[Item]) -> str:
        return _reply_digest(items)

    def prompt_layout(self, body: Mapping[str, Any]) -> PromptLayout:
        options = body.get("prompt_cache_options")
        return PromptLayout(
            system=as_field_list(body.get("instructions")),
            tools=as_field_list(body.get("tools")),
            items=as_field_list(body.get("input")),
            leading_system_items=0,
            ttl=options.get("ttl") if isinstance(options, Mapping) else None,
            whole_prompt_marker=False,
            server_state=isinstance(body.get("previous_response_id"), str)
            or isinstance(body.get("conversation"), (str, Mapping)),
        )

    def is_too_long_error(self, status: int | None, error_body: Mapping[str, Any] | None, message: str) -> bool:
        _kind, code, text = error_fields(error_body)
        return code == "context_length_exceeded" or mentions_too_long(text, message)


def _merge_plain(items: list[Item]) -> list[Item]:
    """Adjacent plain messages of one role merged (compaction items stay where they are)."""
    out: list[Item] = []
    for item in items:
        prev = out[-1] if out else None
        if (
            prev is not None
            and "type" not in item
            and "type" not in prev
            and prev.get("role") == item.get("role")
            and item is not items[-1]
        ):
            out[-1] = {"role": item["role"], "content": f"{prev['content']}\n\n{item['content']}"}
        else:
            out.append(item)
    return out


def _drop_orphan_outputs(items: list[Item]) -> list[Item]:
    _calls, _outputs, orphans = _scan(items)
    return [it for i, it in enumerate(items) if i not in orphans] if orphans else items


def _drop_unanswered_calls(items: list[Item]) -> list[Item]:
    calls, outputs, _orphans = _scan(items)
    drop = {i for call_id, i in calls.items() if call_id not in outputs}
    return [it for i, it in enumerate(items) if i not in drop] if drop else items


def _drop_lonely_reasoning(items: list[Item]) -> list[Item]:
    drop = _reasoning_without_follower(items)
    return [it for i, it in enumerate(items) if i not in drop] if drop else items


# --- usage and finish reasons ---------------------------------------------------------------------------------


def usage_from_openai_responses(u: Any) -> TokenUsage:
    """Normalize a Responses API ``usage``: ``input_tokens`` includes cached tokens.

    ``input_tokens_details.cached_tokens`` / ``cache_write_tokens`` and
    ``output_tokens_details.reasoning_tokens`` where reported (older responses lack the cache-write field).
    """
    return openai_usage(
        u,
        input_names=("input_tokens", "prompt_tokens"),
        output_names=("output_tokens", "completion_tokens"),
        input_details=("input_tokens_details", "prompt_tokens_details"),
        output_details=("output_tokens_details", "completion_tokens_details"),
    )


_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _finish_reasons(response: Any) -> tuple[str, ...]:
    """A Response's status as GenAI finish reasons (a completed response that calls a function: tool_calls)."""
    status = _get(response, "status")
    if status == "completed":
        for item in _get(response, "output") or ():
            if _get(item, "type") == "function_call":
                return (finish_reason("tool_calls") or "tool_call",)
        return ("stop",)
    if status == "incomplete":
        reason = _get(_get(response, "incomplete_details"), "reason")
        return (_INCOMPLETE.get(str(reason), str(reason)),) if reason else ("incomplete",)
    if status == "failed":
        return ("error",)
    return ()


# --- streams ------------------------------------------------------------------------------------------------


class _ResponsesAccumulator(Accumulator):
    __slots__ = ("_format", "final")

    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
    _START = frozenset({"response.created", "response.in_progress"})

    def __init__(self, fmt: EndpointFormat) -> None:
        super().__init__()
        self._format = fmt
        #: The final Response object of the stream, when it arrived.
        self.final: Any = None

    def add(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind in self._FINAL:
            response = _get(event, "response")
            self.final = response
            self.info = self._format.response_info(response, "")
        elif kind in self._START and self.info.response_id is None:
            response = _get(event, "response")
            self.info.response_id = _get(response, "id")
            self.info.response_model = _get(response, "model")


# --- the provider's cache diagnostics --------------------------------------------------------------------------

_ABSENT: Any = object()

#: ``prompt_cache_diagnostics.type`` -> our status.
_DIAGNOSIS_STATUS = {
    "cache_hit": semconv.DIAGNOSIS_HIT,
    "cache_miss": semconv.DIAGNOSIS_MISS,
    "comparison_response_not_found": semconv.DIAGNOSIS_NOT_FOUND,
    "unavailable": semconv.DIAGNOSIS_UNAVAILABLE,
}


def diagnosis_from_openai_responses(response: Any) -> CacheDiagnosis | None:
    """A response's ``prompt_cache_diagnostics`` as a :class:`CacheDiagnosis`; null while the response names a
    ``prompt_cache_options.comparison_response_id`` is a comparison still pending; None when neither says
    anything (none was asked, or the endpoint ignored the request); ``unknown`` for a shape we cannot read."""
    diagnostics = _get(response, "prompt_cache_diagnostics")
    if diagnostics is None:
        options = _get(response, "prompt_cache_options")
        compared = _get(options, "comparison_response_id") if options is not None else None
        return CacheDiagnosis(semconv.DIAGNOSIS_PENDING) if isinstance(compared, str) else None
    kind = _get(diagnostics, "type") if is_mapping(diagnostics) or has_field(diagnostics, "type") else None
    status = _DIAGNOSIS_STATUS.get(kind) if isinstance(kind, str) else None
    if status is None:
        return CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN)
    if status != semconv.DIAGNOSIS_MISS:
        return CacheDiagnosis(status)
    return CacheDiagnosis(
        status,
        provider_reason(_get(diagnostics, "reason")),
        as_count(_get(diagnostics, "cache_missed_tokens")),
        as_count(_get(diagnostics, "comparison_reusable_tokens")),
    )


def _reply_digest(items: Sequence[Any]) -> str:
    """:func:`reply_digest` of the model's output items: the text of its messages, the call ids of its tool
    calls (reasoning is left out: apps that send the reply back do not all keep it)."""
    texts: list[str] = []
    ids: list[str] = []
    for item in items:
        kind = _get(item, "type")
        if kind in CALL_OUTPUT_TYPES:
            call_id = _get(item, "call_id")
            if isinstance(call_id, str):
                ids.append(call_id)
        elif kind in (None, "message") and _get(item, "role") == "assistant":
            content = _get(item, "content")
            if isinstance(content, str):
                texts.append(content)
            else:
                texts.extend(
                    t
                    for part in as_list(content)
                    if _get(part, "type") == "output_text" and isinstance(t := _get(part, "text"), str)
                )
    return reply_digest(texts, ids)


# --- content capture (GenAI semconv message parts) -----------------------------------------------------------


def _captured_item(item: Any) -> dict[str, Any] | None:
    kind = _get(item, "type")
    role = _get(item, "role")
    if kind in (None, "message") and role is not None:
        content = _get(item, "content")
        if isinstance(content, str):
            parts = [{"type": "text", "content": content}]
        else:
            parts = [
                {"type": "text", "content": _get(c, "text") or ""}
                for c in as_list(content)
                if _get(c, "type") in ("input_text", "output_text", "text")
            ]
        return {"role": role, "parts": parts}
    if kind == "function_call":
        part = {
            "type": "tool_call",
            "id": _get(item, "call_id"),
            "name": _get(item, "name"),
            "arguments": captured_arguments(_get(item, "arguments")),
        }
        return {"role": "assistant", "parts": [part]}
    if kind == "function_call_output":
        output = _get(item, "output")
        part = {
            "type": "tool_call_response",
            "id": _get(item, "call_id"),
            "response": output if isinstance(output, str) else captured_text(output),
        }
        return {"role": "tool", "parts": [part]}
    if kind == "reasoning":
        text = "".join(t for s in as_list(_get(item, "summary")) if isinstance(t := _get(s, "text"), str))
        return {"role": "assistant", "parts": [{"type": "reasoning", "content": text}]}
    if kind == "compaction":
        return {"role": "assistant", "parts": [{"type": "compaction", "content": ""}]}
    return None


# --- the responses.compact endpoint --------------------------------------------------------------------------


class _Compact(PlainEndpoint):
    """``POST /v1/responses/compact``: server-side compaction; its usage reads like a Responses usage and it
    finishes with no reason. The engine does not plan it and its content is not captured."""

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        usage = _get(response, "usage")
        return ResponseInfo(
            response_id=_get(response, "id"),
            response_model=_get(response, "model"),
            usage=usage_from_openai_responses(usage) if usage is not None else None,
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _ResponsesAccumulator(self)


COMPACT = _Compact()
