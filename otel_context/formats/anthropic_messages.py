"""The Anthropic Messages wire format (``POST /v1/messages``, also the beta namespace).

Shapes (checked against ``anthropic/types/*_param.py`` and ``beta/beta_content_block_param.py`` of the SDK):
``messages[i] = {"role": "user"|"assistant"|"system", "content": str | [block, ...]}``; ``system`` is a string
or a list of text blocks. Pairing rules the API enforces with a 400 ``invalid_request_error``:

- every ``tool_use`` block of an assistant message is answered by a ``tool_result`` block (same id) in the
  very next message, which is a user message (parallel calls: all results in that one message);
- every ``tool_result`` answers a ``tool_use`` of the message right before it.

Server tools (``server_tool_use`` / ``mcp_tool_use``) carry their results in the same assistant message, so
they never cross a message boundary and are not paired here. With extended thinking, an assistant message
holding thinking + ``tool_use``, the user message with its results and the assistant continuation are one
unit: the API checks the thinking blocks of the tool loop it continues, so a cut never lands inside.

The response side lives here too: usage (``usage_from_anthropic``, the stream's ``merge_stream_usage``), the
stream accumulator, content-capture parts, and the ``count_tokens`` endpoint (a Messages body whose response
carries nothing the span reads: :data:`COUNT_TOKENS`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

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
    output_cap,
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
    Item,
    MessageShape,
    PlainEndpoint,
    PromptLayout,
    ResponseInfo,
    ToolResultRef,
    ToolUse,
    WholeHistory,
)
from otel_context.usage import (
    DIAGNOSTICS_NULL,
    MAX_TOKEN_COUNT,
    CacheDiagnosis,
    TokenUsage,
    as_count,
    as_sequence,
    field_getter,
    first_count,
    has_field,
    is_mapping,
    or_zero,
)
from otel_context.usage import get_field as _get

#: Top-level block types whose meaning for pairing and estimates this adapter knows. Anything else (e.g.
#: ``fallback``, ``tool_addition``/``tool_removal``, ``mcp_tool_listing``, future types) makes the compactor
#: leave the request alone, because moving or dropping such a block may change what the API accepts.
KNOWN_BLOCK_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "tool_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "advisor_tool_result",
        "container_upload",
        "compaction",
        "mcp_tool_use",
        "mcp_tool_result",
    }
)
_ROLES = frozenset({"user", "assistant", "system"})
_SEQ = (list, tuple)
#: Required fields of the blocks the compactor reads or rewrites (see _common.malformed_field).
_BLOCK_FIELDS: FieldRules = {
    "text": (("text", str),),
    "tool_use": (("id", str), ("name", str), ("input", Mapping)),
    "server_tool_use": (("id", str), ("name", str), ("input", Mapping)),
    "tool_result": (("tool_use_id", str), ("content", (str, *_SEQ, type(None)))),
    "thinking": (("thinking", str),),
    "redacted_thinking": (("data", str),),
    "image": (("source", Mapping),),
    "document": (("source", Mapping),),
}
_THINKING = frozenset({"thinking", "redacted_thinking"})
#: The output cap's name.
_OUTPUT_CAP = ("max_tokens",)
_CALL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _blocks(item: Item) -> list[Mapping[str, Any]]:
    if not isinstance(item, Mapping):
        return []
    return [b for b in as_list(item.get("content")) if isinstance(b, Mapping)]


def _role(item: Item) -> str:
    # Malformed entries (see has_unknown_content) have no role: every rule then leaves them alone. (A plain
    # dict, nearly every item, is told without the ABC isinstance: this runs for every item of a history.)
    return str(item.get("role", "")) if type(item) is dict or isinstance(item, Mapping) else ""


def _tool_uses(index: int, item: Item) -> list[ToolUse]:
    """The tool calls and results of ``item`` (the long way, for the shapes ``item_texts`` does not read itself),
    as :meth:`AnthropicMessagesAdapter.tool_results` reads them."""
    role = _role(item)
    out: list[ToolUse] = []
    for block in _blocks(item):
        kind = block.get("type")
        if kind == "tool_use" and role == "assistant":
            out.append(ToolUse(index, str(block.get("id")), str(block.get("name")), block.get("input"), None))
        elif kind == "tool_result" and role == "user":
            out.append(
                ToolUse(index, str(block.get("tool_use_id")), None, None, _result_content_text(block.get("content")))
            )
    return out


def _tool_use_ids(item: Item) -> list[str]:
    if _role(item) != "assistant":
        return []
    return [str(b.get("id")) for b in _blocks(item) if b.get("type") == "tool_use"]


def _tool_result_ids(item: Item) -> list[str]:
    if _role(item) != "user":
        return []
    return [str(b.get("tool_use_id")) for b in _blocks(item) if b.get("type") == "tool_result"]


def _has_thinking(item: Item) -> bool:
    return _role(item) == "assistant" and any(b.get("type") in _THINKING for b in _blocks(item))


def _starts_turn(item: Item) -> bool:
    """A genuine user message (no tool results) or a system message: where a new round begins."""
    role = _role(item)
    return role == "system" or (role == "user" and not _tool_result_ids(item))


def _result_content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in as_list(content):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "search_result":
            parts.append(str(block.get("title", "")))
            parts.extend(str(b.get("text", "")) for b in as_list(block.get("content")) if isinstance(b, Mapping))
        elif kind == "document":
            parts.append(_document_text(block))
    return join_text(parts)


def _document_text(block: Mapping[str, Any]) -> str:
    source = block.get("source")
    parts = [str(block.get("title") or ""), str(block.get("context") or "")]
    if isinstance(source, Mapping):
        if source.get("type") == "text":
            parts.append(str(source.get("data", "")))
        elif source.get("type") == "content":
            parts.append(_result_content_text(source.get("content")))
    return join_text(parts)


def _is_binary_document(block: Mapping[str, Any]) -> bool:
    source = block.get("source")
    return not (isinstance(source, Mapping) and source.get("type") in ("text", "content"))


def _media_count(blocks: Sequence[Any]) -> int:
    count = 0
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "image" or (kind == "document" and _is_binary_document(block)):
            count += 1
        elif kind == "tool_result":
            count += _media_count(as_list(block.get("content")))
    return count


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return str(block.get("thinking", ""))
    if kind in ("redacted_thinking", "image"):
        return ""  # opaque / counted as an image
    if kind in _CALL_BLOCKS:
        return f"{block.get('name', '')} {compact_json(block.get('input', {}))}"
    if kind in ("tool_result", "mcp_tool_result"):
        return _result_content_text(block.get("content"))
    if kind == "document":
        return _document_text(block)
    if kind == "search_result":
        return _result_content_text([block])
    if kind == "compaction":
        return str(block.get("content") or "")
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        return compact_json(block.get("content"))
    return compact_json(block)


def _transcript_block(block: Mapping[str, Any]) -> str:
    """One block as plain text for the summarizer (which is sent without tools, so no tool blocks)."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in _THINKING:
        return ""
    if kind in _CALL_BLOCKS:
        return f"[tool call {block.get('name', '')} id={block.get('id', '')}] {compact_json(block.get('input', {}))}"
    if kind in ("tool_result", "mcp_tool_result"):
        flag = " (error)" if block.get("is_error") else ""
        return f"[tool result id={block.get('tool_use_id', '')}{flag}]\n{_result_content_text(block.get('content'))}"
    if kind == "image":
        return "[image]"
    if kind == "document":
        return f"[document] {_document_text(block)}".rstrip()
    if kind == "compaction":
        content = block.get("content")
        return f"[summary of the earlier conversation]\n{content}" if content else ""
    return f"[{kind}] {_block_text(block)}".rstrip()


class AnthropicMessagesAdapter(WholeHistory):
    """:class:`~otel_context.formats.base.ChatFormat` for Anthropic Messages."""

    name = "anthropic_messages"
    wire_format = "anthropic_messages"
    automatic_caching = False  # only what cache_control marks is cached
    cache_control_markers = True
    empty_prefill = True  # a final assistant message may be empty (see has_unknown_content)
    message_shape = MessageShape(roles=frozenset({"user", "assistant"}), part_types=KNOWN_BLOCK_TYPES)
    default_for_sdk: str | None = "anthropic"
    provider = providers.ANTHROPIC.name

    # -- body ---------------------------------------------------------------------------------------------

    def items(self, body: Body) -> list[Item]:
        messages = body.get("messages")
        # Entries are returned as they are, malformed ones included, so has_unknown_content sees them.
        return list(messages) if isinstance(messages, (list, tuple)) else []

    def with_items(self, body: Body, items: Sequence[Item]) -> dict[str, Any]:
        return {**body, "messages": list(items)}

    def system_text(self, body: Body) -> str:
        system = body.get("system")
        if isinstance(system, str):
            return system
        return join_text(str(b.get("text", "")) for b in as_list(system) if isinstance(b, Mapping))

    def max_output_tokens(self, body: Body) -> int | None:
        return output_cap(body, _OUTPUT_CAP)

    def with_output_cap(self, body: Body, max_tokens: int) -> dict[str, Any]:
        return with_cap(body, _OUTPUT_CAP, "max_tokens", max_tokens)

    # -- structure ----------------------------------------------------------------------------------------

    def has_unknown_content(self, items: Sequence[Item]) -> str | None:
        last = len(items) - 1
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                return f"messages.{index} is not an object"
            role = item.get("role")
            if role not in _ROLES:
                return f"messages.{index} has unknown role {role!r}"
            content = item.get("content")
            # The API rejects empty content and blank text blocks except in a final assistant message (a
            # prefill): compacted, such a request would be rejected at an index of ours, not the app's.
            may_be_empty = index == last and role == "assistant"
            if isinstance(content, str):
                if not content and not may_be_empty:
                    return f"messages.{index}.content is empty (malformed message)"
                continue
            if not isinstance(content, (list, tuple)):
                return f"messages.{index}.content is neither a string nor a list of blocks"
            if not content and not may_be_empty:
                return f"messages.{index}.content is empty (malformed message)"
            for pos, block in enumerate(content):
                if not isinstance(block, Mapping):
                    return f"messages.{index}.content.{pos} is not an object"
                kind = block.get("type")
                if kind not in KNOWN_BLOCK_TYPES:
                    return f"messages.{index}.content.{pos} has unknown block type {kind!r}"
                problem = malformed_field(block, kind, _BLOCK_FIELDS, f"messages.{index}.content.{pos}")
                if problem:
                    return problem
                if kind == "text" and not block["text"].strip() and not may_be_empty:
                    return f"messages.{index}.content.{pos}.text is blank (malformed 'text')"
        return unsendable_item(items, "messages.{}")

    def round_boundaries(self, items: Sequence[Item]) -> list[int]:
        n = len(items)
        ok = [True] * (n + 1)
        for i in range(1, n):
            prev, cur = items[i - 1], items[i]
            if _tool_result_ids(cur) or _tool_use_ids(prev):
                ok[i] = False  # a tool_use and its results (parallel ones included) stay together
            if _role(prev) == "assistant" and _role(cur) == "assistant":
                ok[i] = False  # the API merges consecutive assistant messages into one turn
        # Thinking tool loops: from the first assistant message with thinking to the end of its turn.
        start = 0
        while start < n:
            end = start + 1
            while end < n and not _starts_turn(items[end]):
                end += 1
            first_thinking = next((k for k in range(start, end) if _has_thinking(items[k])), None)
            if first_thinking is not None and any(_tool_result_ids(items[k]) for k in range(first_thinking, end)):
                for k in range(first_thinking + 1, end):
                    ok[k] = False
            start = end
        return [i for i in range(n + 1) if ok[i]]

    def validate(self, items: Sequence[Item]) -> list[str]:
        problems: list[str] = []
        for i, item in enumerate(items):
            uses = _tool_use_ids(item)
            if uses:
                answered = set(_tool_result_ids(items[i + 1])) if i + 1 < len(items) else set()
                missing = [u for u in uses if u not in answered]
                if missing:
                    problems.append(
                        f"messages.{i}: tool_use ids were found without tool_result blocks immediately after: "
                        + ", ".join(missing)
                    )
            results = _tool_result_ids(item)
            if results:
                offered = set(_tool_use_ids(items[i - 1])) if i > 0 else set()
                orphans = [r for r in results if r not in offered]
                if orphans:
                    problems.append(
                        f"messages.{i}: unexpected tool_use_id found in tool_result blocks "
                        f"(no matching tool_use in the previous message): {', '.join(orphans)}"
                    )
        return problems

    def repair(self, items: Sequence[Item]) -> list[Item]:
        return fixpoint(items, (_drop_orphan_results, _drop_unanswered_uses))

    # -- tool results -------------------------------------------------------------------------------------

    def tool_results(self, items: Sequence[Item]) -> list[ToolResultRef]:
        calls: dict[str, Mapping[str, Any]] = {}
        refs: list[ToolResultRef] = []
        for index, item in enumerate(items):
            for block in _blocks(item):
                kind = block.get("type")
                if kind == "tool_use" and _role(item) == "assistant":
                    calls[str(block.get("id"))] = block
                elif kind == "tool_result" and _role(item) == "user":
                    call_id = str(block.get("tool_use_id"))
                    call = calls.get(call_id)
                    text = _result_content_text(block.get("content"))
                    tool_input = call.get("input") if call is not None else None
                    refs.append(
                        ToolResultRef(
                            item_index=index,
                            call_id=call_id,
                            tool_name=str(call.get("name")) if call is not None else None,
                            tool_input=tool_input if isinstance(tool_input, Mapping) else None,
                            text=text,
                            cleared=text == CLEARED_PLACEHOLDER,
                            image_count=_media_count(as_list(block.get("content"))),
                        )
                    )
        return refs

    def with_tool_results_replaced(self, items: Sequence[Item], replacements: Mapping[str, str]) -> list[Item]:
        out: list[Item] = []
        for item in items:
            if _role(item) != "user" or not any(r in replacements for r in _tool_result_ids(item)):
                out.append(item)
                continue
            blocks = []
            for block in as_list(item.get("content")):
                if (
                    isinstance(block, Mapping)
                    and block.get("type") == "tool_result"
                    and str(block.get("tool_use_id")) in replacements
                ):
                    block = {
                        **block,
                        "content": _replaced_content(block.get("content"), replacements[str(block.get("tool_use_id"))]),
                    }
                blocks.append(block)
            out.append({**item, "content": blocks})
        return out

    # -- text ---------------------------------------------------------------------------------------------

    def is_model_output(self, item: Item) -> bool:
        return _role(item) == "assistant"

    def item_text(self, item: Item) -> str:
        if not isinstance(item, Mapping):
            return compact_json(item)
        content = item.get("content")
        if isinstance(content, str):
            return content
        return join_text(_block_text(b) for b in _blocks(item))

    def image_count(self, item: Item) -> int:
        return _media_count(as_list(item.get("content"))) if isinstance(item, Mapping) else 0

    def user_text_items(self, items: Sequence[Item]) -> list[str]:
        texts: list[str] = []
        for item in items:
            if _role(item) != "user":
                continue
            content = item.get("content")
            if isinstance(content, str):
                text = content
            else:
                text = join_text(str(b.get("text", "")) for b in _blocks(item) if b.get("type") == "text")
            if text:
                texts.append(text)
        return texts

    def item_texts(self, items: Sequence[Item], tools: list[ToolUse] | None = None) -> list[tuple[str, bool, str]]:
        out: list[tuple[str, bool, str]] = []
        for index, item in enumerate(items):
            role = item.get("role", "") if type(item) is dict else None
            if type(role) is str:  # a plain dict with a role (nearly every item): read once here
                content = item.get("content")
                if type(content) is str:
                    out.append((content, role == "assistant", content if role == "user" else ""))
                    continue
                if type(content) is list:
                    texts: list[str] = []
                    said: list[str] = []
                    for block in content:
                        if type(block) is not dict and not isinstance(block, Mapping):  # a dict: no ABC check
                            continue
                        kind = block.get("type")
                        if kind == "text":
                            text = str(block.get("text", ""))
                            if text:
                                said.append(text)
                        elif kind == "tool_result" and type(block.get("content")) is str:  # _block_text's own
                            text = block["content"]
                            if tools is not None and role == "user":
                                tools.append(ToolUse(index, str(block.get("tool_use_id")), None, None, text))
                        elif kind == "tool_use":  # as _block_text writes a call
                            arguments = block.get("input")
                            text = f"{block.get('name', '')} {compact_json(block.get('input', {}))}"
                            if tools is not None and role == "assistant":
                                tools.append(
                                    ToolUse(index, str(block.get("id")), str(block.get("name")), arguments, None)
                                )
                        else:
                            text = _block_text(block)
                            if tools is not None and kind == "tool_result" and role == "user":
                                result = _result_content_text(block.get("content"))
                                tools.append(ToolUse(index, str(block.get("tool_use_id")), None, None, result))
                        if text:
                            texts.append(text)
                    out.append(("\n".join(texts), role == "assistant", "\n".join(said) if role == "user" else ""))
                    continue
            out.append((self.item_text(item), self.is_model_output(item), "\n".join(self.user_text_items((item,)))))
            if tools is not None:
                tools.extend(_tool_uses(index, item))
        return out

    def make_user_item(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def summary_prompt_item(self, body: Body, items: Sequence[Item], prompt: str) -> dict[str, Any]:
        # Anthropic reads its cache only at a breakpoint (or up to 20 blocks before one): the app's newest
        # breakpoint is on the messages kept after the cut, so the prompt gets one, when the app marks its
        # messages and the limit of four per request allows it.
        marks = '"cache_control"'
        if marks not in json.dumps(list(self.items(body)), default=str):
            return self.make_user_item(prompt)
        if json.dumps([body.get("system"), body.get("tools"), list(items)], default=str).count(marks) >= 4:
            return self.make_user_item(prompt)
        return {"role": "user", "content": [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]}

    def make_summary_request(
        self, body: Body, transcript_items: Sequence[Item], prompt: str, max_tokens: int, model: str
    ) -> dict[str, Any]:
        # The API rejects tool_use/tool_result blocks in a request that defines no tools, so the transcript is
        # rendered to plain text. Tool results are folded into the assistant side, next to the calls they
        # answer: the user turns of the transcript are then exactly what the user wrote.
        rendered: list[dict[str, Any]] = []
        for item in transcript_items:
            role = _role(item)
            content = item.get("content")
            if isinstance(content, str):
                said, results = ([], [content]) if role == "assistant" else ([content], [])
            else:
                said, results = [], []
                for block in _blocks(item):
                    text = _transcript_block(block)
                    if role == "assistant" or block.get("type") in ("tool_result", "mcp_tool_result"):
                        results.append(text)
                    else:
                        said.append(text)
            if join_text(results):
                rendered.append({"role": "assistant", "content": join_text(results)})
            if join_text(said):
                prefix = "[system]\n" if role == "system" else ""
                rendered.append({"role": "user", "content": prefix + join_text(said)})
        messages = merge_text_messages(rendered)
        if messages and messages[0]["role"] == "assistant":
            messages.insert(0, {"role": "user", "content": "[Transcript of the conversation so far]"})
        messages.append({"role": "user", "content": prompt})  # its own turn (the API merges adjacent user turns)
        request: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": messages}
        if body.get("system"):
            request["system"] = body["system"]
        return request

    # -- responses (the instrumentation's side) -----------------------------------------------------------

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return sampling_attributes(body, _OUTPUT_CAP)

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        get = field_getter(response)  # one type decision for the five reads
        reason = finish_reason(get("stop_reason"))
        usage = get("usage")
        diagnostics = get("diagnostics")
        return ResponseInfo(
            response_id=get("id"),
            response_model=get("model"),
            finish_reasons=(reason,) if reason else (),
            usage=usage_from_anthropic(usage) if usage is not None else None,
            cache_diagnosis=_diagnosis_of(response, diagnostics),
            price_context=price_context_of(usage) if usage is not None else (),
        )

    def new_accumulator(self, provider: str) -> Accumulator:
        return _MessagesAccumulator()

    def response_text(self, response: Any) -> str:
        return text_parts(_get(response, "content"), ("text",))

    def usage(self, raw: Any, provider: str) -> TokenUsage:
        return usage_from_anthropic(raw)

    def capture_input(self, body: Mapping[str, Any]) -> CapturedInput:
        system = body.get("system")
        instructions = _captured_parts(system) if isinstance(system, (str, list, tuple)) else []
        messages = [
            {"role": _get(m, "role"), "parts": _captured_parts(_get(m, "content"))}
            for m in as_list(body.get("messages"))
        ]
        return messages, instructions

    def capture_output(self, response: Any) -> list[Any]:
        reason = _get(response, "stop_reason")
        message: dict[str, Any] = {"role": "assistant", "parts": _captured_parts(_get(response, "content"))}
        if reason:
            message["finish_reason"] = finish_reason(reason)
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
        body: dict[str, Any] = {"model": model, "messages": list(messages), "max_tokens": max_tokens or 4_096}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = list(tools)
        return body

    def compactor_messages(self, body: Mapping[str, Any], system: str | None) -> list[Any]:
        return list(body.get("messages") or [])

    def sdk_create(self, client: Any) -> Callable[..., Any]:
        return client.messages.create  # type: ignore[no-any-return]

    # -- the provider's cache diagnostics -------------------------------------------------------------------

    def with_cache_comparison(self, body: Mapping[str, Any], previous: str | None) -> dict[str, Any] | None:
        # ``previous_message_id: null`` opts a conversation's first call in (the API's documented first turn).
        if "diagnostics" in body:
            return None  # the app's own, whatever it holds
        return {**body, "diagnostics": {"previous_message_id": previous}}

    def settle_diagnosis(self, body: Mapping[str, Any], read: CacheDiagnosis | None) -> CacheDiagnosis | None:
        # "null when the request did not supply diagnostics, or when it did and no prompt-cache divergence
        # was detected" (the API's reference): with a message to compare, null is a hit; no field at all is
        # an endpoint that does not diagnose (an older API version, a gateway), which says nothing.
        diagnostics = body.get("diagnostics")
        asked = isinstance(diagnostics, Mapping) and isinstance(diagnostics.get("previous_message_id"), str)
        if not asked:
            return None if read is None or read is DIAGNOSTICS_NULL else read
        if read is None:
            return CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN)
        return CacheDiagnosis(semconv.DIAGNOSIS_HIT) if read is DIAGNOSTICS_NULL else read

    def reply_signature(self, response: Mapping[str, Any] | None) -> str:
        if response is None:
            return ""
        streamed = response.get(STREAMED_TEXT)  # a stream's summary (see _MessagesAccumulator)
        blocks = as_list(response.get("content"))
        if isinstance(streamed, str):
            return reply_digest((streamed,), _tool_use_ids_of(blocks))
        return _blocks_digest(blocks)

    def items_reply_signature(self, items: Sequence[Item]) -> str:
        if len(items) != 1 or not isinstance(items[0], Mapping):
            return ""
        content = items[0].get("content")
        if isinstance(content, str):
            return reply_digest((content,), ())
        return _blocks_digest(as_list(content))

    def prompt_layout(self, body: Mapping[str, Any]) -> PromptLayout:
        top = body.get("cache_control")
        marker = isinstance(top, Mapping)
        return PromptLayout(
            system=as_field_list(body.get("system")),
            tools=as_field_list(body.get("tools")),
            items=as_field_list(body.get("messages")),
            leading_system_items=0,
            ttl=top.get("ttl") if isinstance(top, Mapping) else None,
            whole_prompt_marker=marker,
            server_state=False,
        )

    def is_too_long_error(self, status: int | None, error_body: Mapping[str, Any] | None, message: str) -> bool:
        if status == 413:
            return True  # request_too_large: the body itself exceeds the size limit
        kind, code, text = error_fields(error_body)
        return mentions_too_long(text, message, code) or kind == "model_context_window_exceeded"


def _replaced_content(content: Any, text: str) -> Any:
    """New content of a tool_result: ``text``, plus any ``tool_reference`` blocks of the old content, which
    make deferred tools available from there on (dropping them could make later calls of those tools fail)."""
    references = [b for b in as_list(content) if isinstance(b, Mapping) and b.get("type") == "tool_reference"]
    return [{"type": "text", "text": text}, *references] if references else text


def _filter_blocks(item: Item, drop: set[str], kind: str, key: str) -> Item | None:
    """``item`` without the ``kind`` blocks whose ``key`` is in ``drop``; None when nothing meaningful is left.

    An assistant message left with thinking blocks only goes too: the thinking was about the dropped calls,
    and the API strips earlier turns' thinking, which would leave an empty message it rejects.
    """
    kept = [
        b
        for b in as_list(item.get("content"))
        if not (isinstance(b, Mapping) and b.get("type") == kind and str(b.get(key)) in drop)
    ]
    if all(isinstance(b, Mapping) and b.get("type") in _THINKING for b in kept):
        return None
    return {**item, "content": kept}


def _drop_orphan_results(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    changed = False
    for item in items:
        results = _tool_result_ids(item)
        # Against what is kept so far: a dropped message in between must not orphan the results after it.
        offered = set(_tool_use_ids(out[-1])) if out else set()
        orphans = {r for r in results if r not in offered}
        if not orphans:
            out.append(item)
            continue
        changed = True
        new = _filter_blocks(item, orphans, "tool_result", "tool_use_id")
        if new is not None:
            out.append(new)
    return out if changed else items


def _drop_unanswered_uses(items: list[Item]) -> list[Item]:
    out: list[Item] = []
    changed = False
    for i, item in enumerate(items):
        uses = _tool_use_ids(item)
        answered = set(_tool_result_ids(items[i + 1])) if i + 1 < len(items) else set()
        missing = {u for u in uses if u not in answered}
        if not missing:
            out.append(item)
            continue
        changed = True
        new = _filter_blocks(item, missing, "tool_use", "id")
        if new is not None:
            out.append(new)
    return out if changed else items


# --- Anthropic ----------------------------------------------------------------------------------------------


class _AnthropicFields(NamedTuple):
    """The raw Anthropic figures, None where the provider did not report them (needed to merge streams)."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read: int | None
    cache_write: int | None
    write_5m: int | None
    write_1h: int | None
    reasoning: int | None
    iterations: Sequence[Any] | None


_MAX = MAX_TOKEN_COUNT  # a count above it (or below 0) reads as absent (:func:`otel_context.usage.as_count`)


def _anthropic_fields(u: Any) -> _AnthropicFields:
    # This runs on every call: one type decision for all the reads, a count test inline for the ints every
    # response carries, and the optional groups (TTL split, thinking details, iterations) read only when sent.
    get = field_getter(u)
    input_tokens, output_tokens = get("input_tokens"), get("output_tokens")
    cache_read, cache_write = get("cache_read_input_tokens"), get("cache_creation_input_tokens")
    write_5m = write_1h = reasoning = None
    cache_creation = get("cache_creation")
    if cache_creation is not None:
        split = field_getter(cache_creation)
        write_5m = as_count(split("ephemeral_5m_input_tokens"))
        write_1h = as_count(split("ephemeral_1h_input_tokens"))
    cache_write = cache_write if type(cache_write) is int and 0 <= cache_write <= _MAX else as_count(cache_write)
    if cache_write is None and (write_5m is not None or write_1h is not None):
        # Only the TTL breakdown was reported: the total is its sum, not 0.
        cache_write = or_zero(write_5m) + or_zero(write_1h)
    details = get("output_tokens_details")
    if details is not None:
        # Claude reports thinking under output_tokens_details.thinking_tokens (included in output_tokens).
        reasoning = first_count(details, "thinking_tokens", "reasoning_tokens")
    iterations = get("iterations")
    return _AnthropicFields(  # positional: keywords cost a third of this function
        input_tokens if type(input_tokens) is int and 0 <= input_tokens <= _MAX else as_count(input_tokens),
        output_tokens if type(output_tokens) is int and 0 <= output_tokens <= _MAX else as_count(output_tokens),
        cache_read if type(cache_read) is int and 0 <= cache_read <= _MAX else as_count(cache_read),
        cache_write,
        write_5m,
        write_1h,
        reasoning,
        as_sequence(iterations) if iterations is not None else None,
    )


def _compaction_sums(iterations: Sequence[Any] | None) -> tuple[int, int, int]:
    """(count, input incl. cache, output) of the ``compaction`` entries of ``usage.iterations``.

    With server-side compaction the top-level usage counts only the final (``message``) pass; the
    compaction pass (often a large cache write or read) is reported only here.
    """
    count = input_tokens = output_tokens = 0
    for entry in iterations or ():
        if field_getter(entry)("type") != "compaction":
            continue
        count += 1
        input_tokens += (
            or_zero(first_count(entry, "input_tokens"))
            + or_zero(first_count(entry, "cache_read_input_tokens"))
            + or_zero(first_count(entry, "cache_creation_input_tokens"))
        )
        output_tokens += or_zero(first_count(entry, "output_tokens"))
    return count, input_tokens, output_tokens


def _from_anthropic_fields(f: _AnthropicFields) -> TokenUsage:
    cache_read = 0 if f.cache_read is None else f.cache_read
    cache_write = 0 if f.cache_write is None else f.cache_write
    count, compaction_in, compaction_out = _compaction_sums(f.iterations) if f.iterations else (0, 0, 0)
    return TokenUsage(
        input_tokens=(0 if f.input_tokens is None else f.input_tokens) + cache_read + cache_write,
        output_tokens=0 if f.output_tokens is None else f.output_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        cache_write_5m_tokens=0 if f.write_5m is None else f.write_5m,
        cache_write_1h_tokens=0 if f.write_1h is None else f.write_1h,
        reasoning_tokens=0 if f.reasoning is None else f.reasoning,
        compaction_input_tokens=compaction_in,
        compaction_output_tokens=compaction_out,
        reported_cache=f.cache_read is not None or f.cache_write is not None,
        reported_reasoning=f.reasoning is not None,
        compaction_iterations=count,
    )


def usage_from_anthropic(u: Any) -> TokenUsage:
    """Normalize an Anthropic ``usage`` (``Usage``, ``BetaUsage``, ``MessageDeltaUsage`` or a dict).

    ``input_tokens`` becomes ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
    server-side compaction passes (``usage.iterations`` of type ``compaction``) go to the
    ``compaction_*`` fields and are NOT added to the top-level figures, which describe the final pass
    (the context the conversation now has).
    """
    return _from_anthropic_fields(_anthropic_fields(u))


def price_context_of(usage: Any) -> tuple[tuple[str, str], ...]:
    """The rates an Anthropic ``usage`` says applied: ``speed`` (``fast`` mode) and ``service_tier`` (``batch``:
    the Message Batches rates; ``standard`` and ``priority`` bill the list prices)."""
    get = field_getter(usage)  # one type decision; an absent field of an SDK model costs no AttributeError
    return pricing.price_context(get("service_tier"), get("speed"))


def merge_stream_usage(previous: TokenUsage | None, new: Any) -> TokenUsage:
    """Fold the usage of one Anthropic stream event (``message_start`` or ``message_delta``) into ``previous``.

    ``message_delta`` usage is cumulative, not an increment: old streams send only ``output_tokens`` there,
    newer ones repeat ``input_tokens`` and the cache figures, and those can differ from ``message_start``
    (server tools, server-side compaction). So per field the later non-null value wins; ``output_tokens``
    is the last one reported (``message_start`` only carries a placeholder). ``new`` is the raw usage of the
    event (SDK object or dict); ``previous`` is what earlier events gave (None before the first).
    """
    f = _anthropic_fields(new)
    if previous is None:
        return _from_anthropic_fields(f)
    prev_raw_input = previous.input_tokens - previous.cache_read_tokens - previous.cache_write_tokens
    cache_write = f.cache_write if f.cache_write is not None else previous.cache_write_tokens
    write_5m, write_1h = f.write_5m, f.write_1h
    if write_5m is None and write_1h is None:
        if f.cache_write is None or f.cache_write == previous.cache_write_tokens:
            write_5m, write_1h = previous.cache_write_5m_tokens, previous.cache_write_1h_tokens
        else:
            # A new total without a breakdown: the old split no longer describes it.
            write_5m, write_1h = 0, 0
    merged = _AnthropicFields(
        input_tokens=f.input_tokens if f.input_tokens is not None else prev_raw_input,
        output_tokens=f.output_tokens if f.output_tokens is not None else previous.output_tokens,
        cache_read=f.cache_read if f.cache_read is not None else previous.cache_read_tokens,
        cache_write=cache_write,
        write_5m=write_5m,
        write_1h=write_1h,
        reasoning=f.reasoning if f.reasoning is not None else previous.reasoning_tokens,
        iterations=f.iterations,
    )
    result = _from_anthropic_fields(merged)
    reported_cache = previous.reported_cache or f.cache_read is not None or f.cache_write is not None
    reported_reasoning = previous.reported_reasoning or f.reasoning is not None
    if f.iterations is None:  # this event said nothing about iterations: keep what an earlier one said
        return replace(
            result,
            compaction_input_tokens=previous.compaction_input_tokens,
            compaction_output_tokens=previous.compaction_output_tokens,
            compaction_iterations=previous.compaction_iterations,
            reported_cache=reported_cache,
            reported_reasoning=reported_reasoning,
        )
    return replace(result, reported_cache=reported_cache, reported_reasoning=reported_reasoning)


# --- the provider's cache diagnostics --------------------------------------------------------------------------

#: ``cache_miss_reason.type`` values that are not a miss with a reason.
_DIAGNOSIS_STATUS = {
    "previous_message_not_found": semconv.DIAGNOSIS_NOT_FOUND,
    "unavailable": semconv.DIAGNOSIS_UNAVAILABLE,
}


def _diagnosis_of(message: Any, diagnostics: Any) -> CacheDiagnosis | None:
    """What a message's ``diagnostics`` field (already read: ``diagnostics``) says: None when the message has
    no such field, :data:`DIAGNOSTICS_NULL` when it is null, else :func:`diagnosis_from_anthropic`."""
    if diagnostics is not None:
        return diagnosis_from_anthropic(diagnostics)
    return DIAGNOSTICS_NULL if has_field(message, "diagnostics") else None


def diagnosis_from_anthropic(diagnostics: Any) -> CacheDiagnosis:
    """A response's non-null ``diagnostics`` (SDK object or dict) as a :class:`CacheDiagnosis`:
    ``cache_miss_reason`` null is a comparison still pending; a reason's ``type`` is the provider's reason
    (``model_changed``, ``system_changed``, ``tools_changed``, ``messages_changed``, with
    ``cache_missed_input_tokens``), or says the previous message was not found or no diagnosis is available.
    Anything else (no ``cache_miss_reason``, one that is not an object with a ``type``) is ``unknown``."""
    if not (is_mapping(diagnostics) or has_field(diagnostics, "cache_miss_reason")):
        return CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN)
    reason = _get(diagnostics, "cache_miss_reason")
    if reason is None:
        pending = has_field(diagnostics, "cache_miss_reason")
        return CacheDiagnosis(semconv.DIAGNOSIS_PENDING if pending else semconv.DIAGNOSIS_UNKNOWN)
    kind = _get(reason, "type") if is_mapping(reason) or has_field(reason, "type") else None
    if not isinstance(kind, str):
        return CacheDiagnosis(semconv.DIAGNOSIS_UNKNOWN)
    status = _DIAGNOSIS_STATUS.get(kind)
    if status is not None:
        return CacheDiagnosis(status)
    return CacheDiagnosis(
        semconv.DIAGNOSIS_MISS, provider_reason(kind), as_count(_get(reason, "cache_missed_input_tokens"))
    )


#: Statuses a stream's later event may replace, and that replace nothing: a verdict given at ``message_start``
#: (``null``, nothing diverged, included) is never taken back by a later pending or unreadable one.
_PROVISIONAL = frozenset({semconv.DIAGNOSIS_PENDING, semconv.DIAGNOSIS_UNKNOWN})


def _tool_use_ids_of(blocks: Sequence[Any]) -> list[str]:
    return [i for b in blocks if _get(b, "type") == "tool_use" and isinstance(i := _get(b, "id"), str)]


def _blocks_digest(blocks: Sequence[Any]) -> str:
    """:func:`reply_digest` of content blocks (SDK objects or dicts): the text blocks' text, the tool uses' ids."""
    texts = [t for b in blocks if _get(b, "type") == "text" and isinstance(t := _get(b, "text"), str)]
    return reply_digest(texts, _tool_use_ids_of(blocks))


# --- streams ----------------------------------------------------------------------------------------------------

#: The key of a stream's summary that holds its text, when the accumulator collected it (content capture or
#: cache diagnostics on): the blocks of a summary carry their types and tool-use ids only.
STREAMED_TEXT = "streamed_text"


class _MessagesAccumulator(Accumulator):
    __slots__ = ()

    def add(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind == "content_block_delta":  # nearly every event: first, and nothing to do unless capturing
            if self.texts is not None:
                text = _get(_get(event, "delta"), "text")
                if isinstance(text, str):
                    self.texts.append(text)
            return
        info = self.info
        if kind == "message_start":
            message = _get(event, "message")
            info.response_id = _get(message, "id")
            info.response_model = _get(message, "model")
            usage = _get(message, "usage")
            if usage is not None:
                info.usage = merge_stream_usage(None, usage)
                info.price_context = price_context_of(usage)
            info.cache_diagnosis = _diagnosis_of(message, _get(message, "diagnostics"))
            self.summary = {"id": info.response_id, "model": info.response_model, "content": []}
        elif kind == "message_delta":
            reason = finish_reason(_get(_get(event, "delta"), "stop_reason"))
            if reason:
                info.finish_reasons = (reason,)
            usage = _get(event, "usage")
            if usage is not None:
                info.usage = merge_stream_usage(info.usage, usage)
            # A diagnosis pending at message_start may be given with the final delta; a verdict given there is
            # not taken back by a later null or pending one.
            diagnostics = _get(event, "diagnostics")
            if diagnostics is not None:
                later = diagnosis_from_anthropic(diagnostics)
                earlier = info.cache_diagnosis
                if earlier is None or earlier.status in _PROVISIONAL or later.status not in _PROVISIONAL:
                    info.cache_diagnosis = later
        elif kind == "content_block_start" and self.summary is not None:
            block = _get(event, "content_block")
            block_type = _get(block, "type")
            if block_type == "tool_use":
                self.summary["content"].append({"type": block_type, "id": _get(block, "id")})
            else:
                self.summary["content"].append({"type": block_type})
        elif kind == "message_stop" and self.summary is not None and self.texts is not None:
            self.summary[STREAMED_TEXT] = "".join(self.texts)


# --- content capture (GenAI semconv message parts) -----------------------------------------------------------


def _captured_part(block: Any) -> dict[str, Any] | None:
    if isinstance(block, str):
        return {"type": "text", "content": block}
    kind = _get(block, "type")
    if kind == "text":
        return {"type": "text", "content": _get(block, "text") or ""}
    if kind in ("tool_use", "server_tool_use"):
        return {
            "type": "tool_call",
            "id": _get(block, "id"),
            "name": _get(block, "name"),
            "arguments": captured_arguments(_get(block, "input")),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": _get(block, "tool_use_id"),
            "response": captured_text(_get(block, "content")),
        }
    if kind == "thinking":
        return {"type": "reasoning", "content": _get(block, "thinking") or ""}
    if kind == "compaction":
        return {"type": "compaction", "content": _get(block, "content") or captured_text(_get(block, "content"))}
    if kind in ("image", "document"):
        return {"type": "blob", "modality": "image" if kind == "image" else "document"}
    return {"type": str(kind)} if kind else None


def _captured_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [p for b in as_list(content) if (p := _captured_part(b)) is not None]


#: ``POST /v1/messages/count_tokens``: a Messages body; its response (``input_tokens``) goes on no span attribute.
COUNT_TOKENS = PlainEndpoint()
