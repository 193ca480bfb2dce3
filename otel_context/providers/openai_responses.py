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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_context.providers._common import (
    FieldRules,
    as_list,
    compact_json,
    error_fields,
    fixpoint,
    join_text,
    malformed_field,
    mentions_too_long,
    parse_arguments,
    unsendable_item,
)
from otel_context.providers.base import CLEARED_PLACEHOLDER, Body, Item, ToolResultRef

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
    """:class:`~otel_context.providers.base.WireFormatAdapter` for the OpenAI Responses API."""

    name = "openai_responses"

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

    def max_output_tokens(self, body: Body) -> int | None:
        value = body.get("max_output_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

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

    def make_user_item(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

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

    def response_text(self, response: Mapping[str, Any]) -> str:
        if isinstance(response.get("output_text"), str):
            return str(response["output_text"])
        return "".join(
            _parts_text(item.get("content"))
            for item in as_list(response.get("output"))
            if isinstance(item, Mapping) and item.get("type") == "message"
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
