"""Deterministic token counting for the simulated provider.

Real tokenizers are proprietary (Anthropic) or heavy (tiktoken); tests need a rule they can compute
themselves, so the simulated provider uses one documented, stable rule everywhere:

* ``count_tokens(text)``: every run of up to 4 word characters (``\\w``) is one token, every other
  non-whitespace character is one token, whitespace is free. ``"Hello, world!"`` is 6 tokens
  (``Hell`` ``o`` ``,`` ``worl`` ``d`` ``!``, see :func:`pieces`). About one token per 4 characters of
  English, like the real tokenizers.
* A request is a sequence of *blocks* (tools, system, each content block of each message); the input tokens
  the server reports are the sum of the blocks' tokens plus :data:`MESSAGE_OVERHEAD` per message
  (:func:`count_request_tokens`). Prompt caching and the context-window check use the same blocks, so a
  test can compute any figure the server reports.

Block texts (what is counted):

* text / input_text / output_text: the text; thinking: the thinking text; redacted_thinking: its data.
* tool_use / function_call: the tool name followed by the canonical JSON of the input (the arguments string
  for OpenAI).
* tool_result / tool message / function_call_output: the text of its content.
* image / document / file / input_image / input_file: a fixed :data:`IMAGE_TOKENS` tokens.
* tool definitions: name, description and the canonical JSON of the schema.
* any other block: its canonical JSON (``sort_keys``, compact separators) without ``cache_control``.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD",
    "Block",
    "WireFormat",
    "canonical_json",
    "count_request_tokens",
    "count_tokens",
    "pieces",
    "request_blocks",
]

WireFormat = Literal["anthropic_messages", "openai_chat", "openai_responses"]

_PIECE = re.compile(r"\w{1,4}|[^\w\s]")

IMAGE_TOKENS = 85
"""Tokens charged for each image/document/file block, whatever its size (the bytes are not tokenized)."""

MESSAGE_OVERHEAD = 3
"""Tokens charged per message (role marker), like the real chat formats do."""

COMPACTION_PREFIX = "simcompact:"
"""Prefix of the simulated ``encrypted_content`` of a Responses ``compaction`` item (base64 of the text)."""


_CACHE_MIN_CHARS = 256  # shorter texts are cheaper to count than to look up


@functools.lru_cache(maxsize=1024)
def _pieces_long(text: str) -> tuple[str, ...]:
    return tuple(_PIECE.findall(text))


@functools.lru_cache(maxsize=16384)
def _count_long(text: str) -> int:
    return _PIECE.subn("", text)[1]


def pieces(text: str) -> Sequence[str]:
    """Split ``text`` into the simulated tokens (see the module docstring)."""
    if len(text) >= _CACHE_MIN_CHARS:
        return _pieces_long(text)  # conversations resend the same history every turn
    return _PIECE.findall(text)


def count_tokens(text: str) -> int:
    """Deterministic token count of ``text``: what the simulated provider charges for it."""
    if len(text) >= _CACHE_MIN_CHARS:
        return _count_long(text)
    return len(_PIECE.findall(text))


def canonical_json(value: Any) -> str:
    """The canonical JSON used for counting and cache keys (sorted keys, compact)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Block:
    """One countable, cacheable unit of a request.

    ``key`` identifies the block byte-for-byte (role and position context included) for prefix caching;
    ``text`` is what is tokenized; ``tokens`` includes the per-message overhead on a message's first block.
    """

    key: str
    text: str
    tokens: int
    role: str = ""
    cache_control: Mapping[str, Any] | None = None
    fixed: bool = False  # image-like: ``tokens`` not derived from ``text``
    extra: int = 0  # overhead tokens included in ``tokens``
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def token_pieces(self) -> list[str]:
        """The simulated token stream of this block (used for OpenAI's token-granular prefix caching)."""
        head = [f"<{self.role}>"] * self.extra
        if self.fixed:
            return head + [f"<img:{self.key[-16:]}>"] * (self.tokens - self.extra)
        head.extend(pieces(self.text))
        return head


def _content_text(content: Any) -> str:
    """Text of a tool_result / tool message content (a string or a list of blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for item in content:
            if isinstance(item, Mapping):
                for k in ("text", "refusal", "output"):
                    value = item.get(k)
                    if isinstance(value, str):
                        parts.append(value)
                        break
            elif isinstance(item, str):
                parts.append(item)
        return "\n".join(parts)
    return canonical_json(content)


def decode_compaction(encrypted: Any) -> str:
    """Text carried by a simulated Responses ``compaction`` item (empty when it is not ours)."""
    if isinstance(encrypted, str) and encrypted.startswith(COMPACTION_PREFIX):
        try:
            return base64.b64decode(encrypted[len(COMPACTION_PREFIX) :]).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return ""
    return ""


_IMAGE_TYPES = frozenset({"image", "document", "file", "input_image", "input_file", "image_url", "input_audio"})


def block_text(block: Any) -> tuple[str, bool]:
    """(text to tokenize, is_fixed_size) for one content block of any of the three wire formats."""
    if isinstance(block, str):
        return block, False
    if not isinstance(block, Mapping):
        return canonical_json(block), False
    btype = block.get("type")
    if btype in ("text", "input_text", "output_text"):
        return str(block.get("text", "")), False
    if btype == "refusal":
        return str(block.get("refusal", "")), False
    if btype == "thinking":
        return str(block.get("thinking", "")), False
    if btype == "redacted_thinking":
        return str(block.get("data", "")), False
    if btype in ("tool_use", "server_tool_use"):
        return f"{block.get('name', '')} {canonical_json(block.get('input', {}))}", False
    if btype == "function_call":
        return f"{block.get('name', '')} {block.get('arguments', '')}", False
    if btype in ("tool_result", "function_call_output"):
        return _content_text(block.get("content", block.get("output"))), False
    if btype == "compaction":
        return decode_compaction(block.get("encrypted_content")), False
    if btype in _IMAGE_TYPES:
        return canonical_json(block), True
    stripped = {k: v for k, v in block.items() if k != "cache_control"}
    return canonical_json(stripped), False


def _make(role: str, key_obj: Any, block: Any, extra: int, cache_control: Any = None) -> Block:
    text, fixed = block_text(block)
    tokens = (IMAGE_TOKENS if fixed else count_tokens(text)) + extra
    cc = cache_control if isinstance(cache_control, Mapping) else None
    return Block(
        key=f"{role}|{canonical_json(key_obj)}",
        text=text,
        tokens=tokens,
        role=role,
        cache_control=cc,
        fixed=fixed,
        extra=extra,
    )


def _strip_cc(block: Any) -> Any:
    if isinstance(block, Mapping) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _tool_text(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool definition as a text block (name, description, schema) for counting."""
    fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    assert isinstance(fn, Mapping)
    schema = fn.get("input_schema", fn.get("parameters", {}))
    text = f"{fn.get('name', tool.get('type', ''))} {fn.get('description', '') or ''} {canonical_json(schema)}"
    return {"type": "text", "text": text}


def _anthropic_blocks(body: Mapping[str, Any]) -> list[Block]:
    blocks: list[Block] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping):
            blocks.append(_make("tools", _strip_cc(tool), _tool_text(tool), 0, tool.get("cache_control")))
    system = body.get("system")
    if isinstance(system, str) and system:
        blocks.append(_make("system", {"type": "text", "text": system}, system, 0))
    elif isinstance(system, list):
        for sb in system:
            if isinstance(sb, Mapping):
                blocks.append(_make("system", _strip_cc(sb), sb, 0, sb.get("cache_control")))
    for msg in body.get("messages") or []:
        if not isinstance(msg, Mapping):
            continue
        role = str(msg.get("role", ""))
        content = msg.get("content")
        items: Iterable[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else (content or [])
        first = True
        for item in items:
            cc = item.get("cache_control") if isinstance(item, Mapping) else None
            blocks.append(_make(role, _strip_cc(item), item, MESSAGE_OVERHEAD if first else 0, cc))
            first = False
        if first:  # empty content still costs the role marker
            blocks.append(_make(role, {"type": "text", "text": ""}, "", MESSAGE_OVERHEAD))
    return blocks


def _chat_message_blocks(msg: Mapping[str, Any], role: str) -> list[Block]:
    out: list[Block] = []
    content = msg.get("content")
    items: list[Any]
    if content is None:
        items = []
    elif isinstance(content, str):
        items = [{"type": "text", "text": content}]
    else:
        items = list(content) if isinstance(content, list) else [content]
    if role == "tool":
        items = [{"type": "tool_result", "content": content, "tool_call_id": msg.get("tool_call_id")}]
    for call in msg.get("tool_calls") or []:
        if isinstance(call, Mapping):
            fn = call.get("function") if isinstance(call.get("function"), Mapping) else {}
            assert isinstance(fn, Mapping)
            items.append({"type": "function_call", "name": fn.get("name", ""), "arguments": fn.get("arguments", "")})
    if not items:
        items = [{"type": "text", "text": ""}]
    for i, item in enumerate(items):
        out.append(_make(role, item, item, MESSAGE_OVERHEAD if i == 0 else 0))
    return out


def _openai_chat_blocks(body: Mapping[str, Any]) -> list[Block]:
    blocks: list[Block] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping):
            blocks.append(_make("tools", tool, _tool_text(tool), 0))
    for msg in body.get("messages") or []:
        if isinstance(msg, Mapping):
            blocks.extend(_chat_message_blocks(msg, str(msg.get("role", ""))))
    return blocks


def responses_items(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Responses ``input`` as a list of items (a string input becomes one user message)."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if isinstance(raw, list):
        return [item for item in raw if isinstance(item, Mapping)]
    return []


def _openai_responses_blocks(body: Mapping[str, Any], items: Sequence[Mapping[str, Any]] | None = None) -> list[Block]:
    blocks: list[Block] = []
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping):
            blocks.append(_make("tools", tool, _tool_text(tool), 0))
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        blocks.append(_make("developer", {"type": "text", "text": instructions}, instructions, MESSAGE_OVERHEAD))
    for item in items if items is not None else responses_items(body):
        itype = item.get("type", "message")
        if itype == "message" or ("role" in item and itype not in ("function_call", "function_call_output")):
            role = str(item.get("role", "user"))
            content = item.get("content")
            parts: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            if not parts:
                parts = [{"type": "text", "text": ""}]
            for i, part in enumerate(parts):
                blocks.append(_make(role, part, part, MESSAGE_OVERHEAD if i == 0 else 0))
        else:
            role = "tool" if itype == "function_call_output" else "assistant"
            blocks.append(_make(role, item, item, MESSAGE_OVERHEAD))
    return blocks


def request_blocks(
    body: Mapping[str, Any], wire_format: WireFormat, *, items: Sequence[Mapping[str, Any]] | None = None
) -> list[Block]:
    """The request as ordered blocks (tools, system/instructions, messages), each with its token count."""
    if wire_format == "anthropic_messages":
        return _anthropic_blocks(body)
    if wire_format == "openai_chat":
        return _openai_chat_blocks(body)
    if wire_format == "openai_responses":
        return _openai_responses_blocks(body, items)
    raise ValueError(
        f"unknown wire_format {wire_format!r}; expected anthropic_messages, openai_chat or openai_responses"
    )


def count_request_tokens(body: Mapping[str, Any], wire_format: WireFormat) -> int:
    """The input tokens the simulated provider reports for ``body`` (cache reads and writes included).

    For ``openai_responses`` only the request's own ``input`` is counted (a ``previous_response_id``
    chain is resolved by the server, which then counts the stored items too).
    """
    return sum(b.tokens for b in request_blocks(body, wire_format))
