"""What the compactor needs to know about one wire format, as a protocol.

One module per wire format implements it (``anthropic_messages``, ``openai_chat``, ``openai_responses``);
:func:`otel_context.formats.for_format` returns the right one. Everything works on plain JSON-shaped
bodies (the ``json_data`` the SDK is about to send): no SDK import. Nothing here mutates its input;
every "with_..." function returns a new body/list sharing untouched items with the old one.

Vocabulary:
- *item*: one element of the conversation list (Anthropic ``messages[i]``, OpenAI chat ``messages[i]``
  excluding leading system/developer messages, Responses ``input[i]``).
- *round boundary*: an index ``i`` such that cutting the list into ``items[:i]`` and ``items[i:]`` splits
  no tool call from its result, no parallel-call batch, and no thinking turn; ``0`` and ``len(items)`` are
  always boundaries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Item = Mapping[str, Any]
Body = Mapping[str, Any]

#: What microcompact puts in place of an old tool result's content (the wording Claude Code's users already know).
CLEARED_PLACEHOLDER = "[Old tool result content cleared]"


@dataclass(frozen=True)
class ToolResultRef:
    """A tool result inside the conversation, for microcompact and rehydration."""

    item_index: int  #: index of the item holding the result
    call_id: str  #: tool_use id / tool_call_id / call_id
    tool_name: str | None  #: name of the tool that produced it (from the matching call), if known
    tool_input: Mapping[str, Any] | None  #: the call's arguments (parsed JSON), if known
    text: str  #: the result's text content (images/documents excluded)
    cleared: bool  #: already replaced by the cleared placeholder
    image_count: int = 0  #: images/documents inside the result (replacing its content drops them)


class WireFormatAdapter(Protocol):
    """Read and rewrite request bodies of one wire format."""

    name: str  #: "anthropic_messages" | "openai_chat" | "openai_responses"

    def items(self, body: Body) -> list[Item]:
        """The conversation items (see module doc); a new list, items shared.

        Entries are returned as they are, malformed ones included: call :meth:`has_unknown_content` first;
        the other methods expect items that passed it.
        """
        ...

    def with_items(self, body: Body, items: Sequence[Item]) -> dict[str, Any]:
        """A shallow copy of ``body`` whose conversation is ``items`` (system/instructions kept)."""
        ...

    def system_text(self, body: Body) -> str:
        """The system prompt / instructions as plain text ('' when none)."""
        ...

    def has_unknown_content(self, items: Sequence[Item]) -> str | None:
        """A reason string when the items contain something the compactor does not understand."""
        ...

    def server_state_reason(self, body: Body) -> str | None:
        """A reason string when the body continues a conversation stored at the provider.

        Responses ``previous_response_id`` / ``conversation``: the items are only the tail of a history the
        compactor cannot see, so results may legitimately answer calls it never saw; such a body is sent
        unchanged (and :meth:`validate` must not be trusted on its items). ``None`` for self-contained bodies.
        """
        ...

    def round_boundaries(self, items: Sequence[Item]) -> list[int]:
        """Every safe cut index, ascending, including 0 and len(items).

        For a valid history both ``items[:i]`` and ``items[i:]`` pass :meth:`validate`. Never inside: a call
        and its result(s) (a parallel batch is one unit), consecutive assistant messages (Anthropic merges
        them), or a thinking/reasoning tool loop (from its first thinking/reasoning item to the next genuine
        user message). A boundary may put an assistant message first on the right: the summary user message
        goes in front of it.
        """
        ...

    def validate(self, items: Sequence[Item]) -> list[str]:
        """Pairing problems the provider would reject with a 400 (empty list: valid), one message each,
        worded like the provider's and naming the item index.

        Anthropic: a ``tool_result`` whose id is not a ``tool_use`` of the message right before; a ``tool_use``
        not answered in the very next message (also when it is the last message). OpenAI chat: a ``tool``
        message not answering the ``tool_calls`` before its run of tool messages; ``tool_calls`` without a
        response. Responses: an output whose ``call_id`` has no earlier call (unless an ``item_reference``
        precedes it); a call without output; a ``reasoning`` item not followed by the item it produced.
        """
        ...

    def repair(self, items: Sequence[Item]) -> list[Item]:
        """Drop orphaned results and unanswered calls so that :meth:`validate` passes; last line of defence.

        Only removes: blocks/calls/items that break pairing, and the messages that removal leaves empty (an
        Anthropic assistant message left with thinking only counts as empty). Never merges or reorders.
        A valid list comes back equal (and untouched items are the same objects).
        """
        ...

    def tool_results(self, items: Sequence[Item]) -> list[ToolResultRef]:
        """Every client tool result, oldest first (Anthropic ``tool_result``, chat ``tool`` messages,
        Responses ``function_call_output`` / ``custom_tool_call_output``); server-tool results are not listed."""
        ...

    def with_tool_results_replaced(self, items: Sequence[Item], replacements: Mapping[str, str]) -> list[Item]:
        """Items with the content of the tool results named by call id replaced by the given text.

        The whole content becomes that string (images inside the result go too); the result's other keys
        (``is_error``, ``cache_control`` ...) stay. Items without a replaced result are shared, not copied.
        """
        ...

    def item_text(self, item: Item) -> str:
        """All text of one item (for estimates and for the summarizer's transcript)."""
        ...

    def image_count(self, item: Item) -> int:
        """Images/documents in one item (each counts a fixed number of tokens)."""
        ...

    def user_text_items(self, items: Sequence[Item]) -> list[str]:
        """The text of every genuine user message (not tool results), oldest first."""
        ...

    def make_user_item(self, text: str) -> dict[str, Any]:
        """A plain user message in this format."""
        ...

    def make_summary_request(
        self, body: Body, transcript_items: Sequence[Item], prompt: str, max_tokens: int, model: str
    ) -> dict[str, Any]:
        """The summarizer's request: no tools, ``transcript_items`` then ``prompt`` as the last user turn.

        Tool calls and results are rendered as text (a request without tools may not carry tool blocks),
        thinking/reasoning is left out, roles are kept; the system prompt/instructions are kept; Responses
        ``compaction`` items are kept verbatim. ``max_tokens`` goes in the format's output-cap field.
        """
        ...

    def response_text(self, response: Mapping[str, Any]) -> str:
        """The text of a (non-streamed) response of this format."""
        ...

    def is_too_long_error(self, status: int | None, error_body: Mapping[str, Any] | None, message: str) -> bool:
        """Whether an API error says the request exceeded the context window.

        ``error_body`` may be the whole error JSON or the inner ``error`` object (the OpenAI SDK's
        ``APIStatusError.body``). Anthropic: 413, "prompt is too long", "exceed context limit",
        ``model_context_window_exceeded``; OpenAI: code ``context_length_exceeded`` or its messages.
        """
        ...

    def max_output_tokens(self, body: Body) -> int | None:
        """The call's own output cap (max_tokens / max_completion_tokens / max_output_tokens)."""
        ...
