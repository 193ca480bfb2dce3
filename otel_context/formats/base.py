"""What a wire format module provides, as protocols.

One module per wire format holds everything the package knows about that format (``anthropic_messages``,
``openai_chat``, ``openai_responses``), in one class implementing :class:`ChatFormat`:

- :class:`EndpointFormat`: what the instrumentation reads from a call (request attributes, response facts,
  the stream accumulator, response text, content-capture parts). The non-chat endpoints of a format's API
  (count_tokens, responses.compact, embeddings) implement only this part, in the module of their format.
- :class:`WireFormatAdapter`: what the compactor needs to read and rewrite request bodies.
- the rest of :class:`ChatFormat`: usage parsing, the bodies the ``Compactor`` API builds, the SDK method a
  summary request goes through, and the part of the prompt-cache fingerprint that depends on the format.

:func:`otel_context.formats.for_format` returns the right one. Everything reads plain JSON-shaped bodies
(the ``json_data`` the SDK is about to send) and, on the response side, SDK objects and JSON dicts alike
(:func:`otel_context.usage.get_field`); no SDK import. Nothing here mutates its input; every "with_..."
function returns a new body/list sharing untouched items with the old one.

Vocabulary:
- *item*: one element of the conversation list (Anthropic ``messages[i]``, OpenAI chat ``messages[i]``
  excluding leading system/developer messages, Responses ``input[i]``).
- *round boundary*: an index ``i`` such that cutting the list into ``items[:i]`` and ``items[i:]`` splits
  no tool call from its result, no parallel-call batch, and no thinking turn; ``0`` and ``len(items)`` are
  always boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from otel_context.usage import CacheDiagnosis, TokenUsage, get_field

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


class ToolUse(NamedTuple):
    """A tool call or a tool result, as :meth:`WireFormatAdapter.item_texts` meets them on its walk of a span
    (the work trail reads them: which tool did what to which file, which command printed what). A call and
    its result share ``call_id``."""

    item_index: int  #: the index of the item that holds it, in the list walked
    call_id: str  #: tool_use id / tool_call_id / call_id
    name: str | None  #: a call's tool name (None for a result)
    #: A call's arguments: a mapping (Anthropic's ``input``; a custom tool's ``{"input": ...}``) or the JSON
    #: string OpenAI sends; None for a result.
    arguments: Any
    result: str | None  #: a result's text (images and documents left out); None for a call


class WireFormatAdapter(Protocol):
    """Read and rewrite request bodies of one wire format."""

    name: str  #: "anthropic_messages" | "openai_chat" | "openai_responses"
    #: The provider whose API this format is (``otel_context.providers``: its models, and the summary model
    #: named for it); ``gen_ai.provider.name`` of an explicit ``Compactor`` call in this format.
    provider: str

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

    def stores_response(self, body: Body) -> bool:
        """Whether the provider keeps this request's response for later requests to continue (Responses,
        unless ``store`` is false)."""
        ...

    def continued_response(self, body: Body) -> str | None:
        """The id of the provider-stored response this request continues (Responses ``previous_response_id``),
        else None: such a call belongs to the conversation of that response, whatever its own items say."""
        ...

    def continued_conversation(self, body: Body) -> str | None:
        """The id of the provider-stored conversation this request continues (Responses ``conversation``),
        else None: like :meth:`continued_response`, such a call belongs to that conversation's, and its history
        is the last response the conversation stored plus this call's input."""
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

    def is_model_output(self, item: Item) -> bool:
        """Whether the model wrote ``item`` (an assistant message; Responses: also its reasoning and calls).

        The estimate counts the previous call's reply, once the app appended it, by the output tokens the
        provider reported for it, not a second time by its characters."""
        ...

    def image_count(self, item: Item) -> int:
        """Images/documents in one item (each counts a fixed number of tokens)."""
        ...

    def user_text_items(self, items: Sequence[Item]) -> list[str]:
        """The text of every genuine user message (not tool results), oldest first."""
        ...

    def item_texts(self, items: Sequence[Item], tools: list[ToolUse] | None = None) -> list[tuple[str, bool, str]]:
        """For each item, ``(item_text, is_model_output, its user text or "")``: what :meth:`item_text`,
        :meth:`is_model_output` and :meth:`user_text_items` say of it, in one pass (the retention check reads
        every item of a long span, and three walks of each cost more than the scans of its text). With
        ``tools``, the same pass appends to it every tool call and tool result it meets, in order
        (:class:`ToolUse`: what :meth:`tool_results` pairs, for the work trail)."""
        ...

    def make_user_item(self, text: str) -> dict[str, Any]:
        """A plain user message in this format."""
        ...

    def summary_prompt_item(self, body: Body, items: Sequence[Item], prompt: str) -> dict[str, Any]:
        """The summary prompt as the last user turn of a cache-sharing summary request (the call's own
        request up to the cut, ``items``, then this): a plain user message, or what the format needs for the
        provider to read the prefix from its cache (Anthropic: a breakpoint on it)."""
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

    def is_too_long_error(self, status: int | None, error_body: Mapping[str, Any] | None, message: str) -> bool:
        """Whether an API error says the request exceeded the context window.

        ``error_body`` may be the whole error JSON or the inner ``error`` object (the OpenAI SDK's
        ``APIStatusError.body``). Anthropic: 413, "prompt is too long", "exceed context limit",
        ``model_context_window_exceeded``; OpenAI: code ``context_length_exceeded`` or its messages.
        """
        ...

    # -- the provider's own compaction of a history it holds (Responses ``context_management``) ---------------

    def context_managed_by_app(self, body: Body) -> str | None:
        """Why the app's own settings manage the context at the provider (a server-side compaction it asked for,
        a truncation it allows, a compaction it triggers), or None: those settings win, and are never added to."""
        ...

    def with_provider_compaction(self, body: Body, threshold: int) -> dict[str, Any] | None:
        """A copy of ``body`` asking the provider to compact the history it holds once the context passes
        ``threshold`` tokens; None when the format has no such field."""
        ...

    def refuses_provider_compaction(
        self, status: int | None, error_body: Mapping[str, Any] | None, message: str
    ) -> bool:
        """Whether an API error refuses the field :meth:`with_provider_compaction` added (the endpoint does not
        know it, or the model does not support it); ``error_body`` as for :meth:`is_too_long_error`."""
        ...

    def max_output_tokens(self, body: Body) -> int | None:
        """The call's own output cap (max_tokens / max_completion_tokens / max_output_tokens)."""
        ...

    def with_output_cap(self, body: Body, max_tokens: int) -> dict[str, Any]:
        """A copy of ``body`` whose output cap is ``max_tokens``, under the spelling the body already uses."""
        ...


class WholeHistory:
    """The part of :class:`WireFormatAdapter` of a format whose every request carries its whole history
    (Anthropic Messages, OpenAI Chat Completions): the provider keeps nothing a request continues, nothing of it
    the provider could compact, no setting of the app's that manages it there."""

    def server_state_reason(self, body: Body) -> str | None:
        return None

    def stores_response(self, body: Body) -> bool:
        return False

    def continued_response(self, body: Body) -> str | None:
        return None

    def continued_conversation(self, body: Body) -> str | None:
        return None

    def context_managed_by_app(self, body: Body) -> str | None:
        return None

    def with_provider_compaction(self, body: Body, threshold: int) -> dict[str, Any] | None:
        return None

    def refuses_provider_compaction(
        self, status: int | None, error_body: Mapping[str, Any] | None, message: str
    ) -> bool:
        return False


# --- the instrumentation's side: one call's telemetry ---------------------------------------------------------


@dataclass
class ResponseInfo:
    """The facts of one response that go on the span (all optional: old or odd responses lack fields)."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    usage: TokenUsage | None = None
    #: The provider's own diagnosis of the prompt cache as read from the response (None when it carries no
    #: diagnosis field; settled against the request by ``ChatFormat.settle_diagnosis``).
    cache_diagnosis: CacheDiagnosis | None = None
    #: The rates the response says applied (:func:`otel_context.pricing.price_context`: OpenAI's service tier,
    #: Anthropic's speed and batch); empty for the standard rates.
    price_context: tuple[tuple[str, str], ...] = ()


class Accumulator:
    """Folds stream events into a :class:`ResponseInfo`; keeps what was seen when the consumer stops early.

    ``add`` runs once per streamed chunk: implementations keep it to a few field reads.
    """

    __slots__ = ("info", "summary", "texts")

    def __init__(self) -> None:
        self.info = ResponseInfo()
        #: Output text deltas, collected only when content capture is on.
        self.texts: list[str] | None = None
        #: A small JSON-shaped summary of the streamed response for the engine (id, model, usage, blocks).
        self.summary: dict[str, Any] | None = None

    def add(self, event: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


#: Content capture in the GenAI semconv message-parts shape: ``(messages, system instructions)``.
CapturedInput = tuple[list[Any], list[Any]]


class EndpointFormat(Protocol):
    """What the instrumentation reads from one endpoint's calls (chat or not); never raises on odd shapes
    beyond what the interceptor's guards absorb."""

    @property
    def wire_format(self) -> str | None:
        """The chat wire format name the engine plans with; None for endpoints the engine leaves alone."""
        ...

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Span attributes of the request (max tokens, temperature, top_p)."""
        ...

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        """Id, model, finish reasons and usage of a complete response (SDK object or JSON dict)."""
        ...

    def new_accumulator(self, provider: str) -> Accumulator | None:
        """A fresh stream accumulator (None: the endpoint does not stream)."""
        ...

    def response_text(self, response: Any) -> str:
        """The text the model wrote in a complete response: the summarizer's result and what a stream's text
        deltas add up to (thinking, refusals and tool calls are not text)."""
        ...

    def capture_input(self, body: Mapping[str, Any]) -> CapturedInput | None:
        """The request's messages and system instructions as message parts (None: nothing is captured)."""
        ...

    def capture_output(self, response: Any) -> list[Any] | None:
        """The response's messages as message parts (None: nothing is captured)."""
        ...


class PlainEndpoint:
    """:class:`EndpointFormat` of an endpoint whose calls carry nothing we read but the id and model."""

    wire_format: str | None = None

    def request_attributes(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def response_info(self, response: Any, provider: str) -> ResponseInfo:
        return ResponseInfo(response_id=get_field(response, "id"), response_model=get_field(response, "model"))

    def new_accumulator(self, provider: str) -> Accumulator | None:
        return None

    def response_text(self, response: Any) -> str:
        return ""

    def capture_input(self, body: Mapping[str, Any]) -> CapturedInput | None:
        return None

    def capture_output(self, response: Any) -> list[Any] | None:
        return None


# --- the cache fingerprint's format-specific part -------------------------------------------------------------


class PromptLayout(NamedTuple):
    """Where a request puts what the provider's prompt cache keys on (``otel_context.cache`` reads it;
    it never imports the formats, the engine hands it the format)."""

    #: The system prompt's blocks (Anthropic ``system``, Responses ``instructions``; [] for chat).
    system: list[Any]
    #: The tool definitions, in order.
    tools: list[Any]
    #: The conversation items (chat: every message, its leading system/developer messages included).
    items: list[Any]
    #: Leading items that are the system prompt (OpenAI chat's system/developer messages).
    leading_system_items: int
    #: The lifetime the request asks for at the top level, as sent ("5m", "1h"), or None.
    ttl: Any
    #: The request carries a top-level marker that caches the whole prompt (Anthropic's ``cache_control``):
    #: its TTL is the default when it names none.
    whole_prompt_marker: bool
    #: The items continue a conversation stored at the provider (Responses ``previous_response_id``).
    server_state: bool


@dataclass(frozen=True)
class MessageShape:
    """What tells one format's messages from the other formats' by their shape alone: the explicit API reads
    a history's format from it when no SDK client says which (:func:`otel_context.formats.formats_fitting`).
    A message fits a format unless one of these rules out that format."""

    #: The roles its messages may have, of those that tell formats apart (a role no format lists here says
    #: nothing: OpenAI chat's legacy ``function`` role is not listed).
    roles: frozenset[str]
    #: The content part (block) types its messages may carry (a type no format lists says nothing).
    part_types: frozenset[str]
    #: Message keys only this format has (OpenAI chat's tool calls and results); a message with one is
    #: this format's, and never empty.
    own_keys: frozenset[str] = frozenset()
    #: A message's content may be null (OpenAI chat: an assistant message that only calls tools).
    null_content: bool = False
    #: Its items other than messages carry a ``type`` (Responses: ``function_call``, ``reasoning``, ...):
    #: an item whose type is not ``message`` is this format's, whatever else it holds.
    typed_items: bool = False


class ChatFormat(EndpointFormat, WireFormatAdapter, Protocol):
    """Everything about one chat wire format (one module each; see the module doc)."""

    @property
    def wire_format(self) -> str:
        """A chat format's name (its :attr:`name`)."""
        ...

    #: The provider caches prompt prefixes without being asked (OpenAI): everything sent counts as cached
    #: once long enough, and no cache writes are reported.
    automatic_caching: bool
    #: The provider caches only the prefixes a request marks with ``cache_control`` blocks on its tools,
    #: system blocks and message blocks (Anthropic): ``otel_context.place_cache_breakpoints`` writes them.
    cache_control_markers: bool
    #: A final assistant message may be empty: the API takes it as a prefill (Anthropic), so the explicit
    #: API keeps it when it leaves out the other empty messages.
    empty_prefill: bool
    #: The SDK (top-level package of the client class) whose clients speak this format by default, if any.
    default_for_sdk: str | None
    #: How its messages differ from the other formats' (see :class:`MessageShape`).
    message_shape: MessageShape

    def usage(self, raw: Any, provider: str) -> TokenUsage:
        """The response's ``usage`` (SDK object or dict) normalized; ``provider`` picks a compatible API's
        spelling (DeepSeek speaks OpenAI chat with its own cache fields)."""
        ...

    def prompt_layout(self, body: Mapping[str, Any]) -> PromptLayout:
        """What the prompt-cache fingerprint of ``body`` needs from this format."""
        ...

    def compactor_body(
        self,
        messages: Sequence[Any],
        model: str,
        system: str | None,
        tools: Sequence[Any] | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        """A request body around a ``Compactor`` caller's messages (for the adapter to work on)."""
        ...

    def compactor_messages(self, body: Mapping[str, Any], system: str | None) -> list[Any]:
        """The caller's messages back out of a body :meth:`compactor_body` built with the same ``system``."""
        ...

    def sdk_create(self, client: Any) -> Callable[..., Any]:
        """The create method of ``client`` (an SDK client) that sends a request body of this format."""
        ...

    # -- the provider's cache diagnostics (Anthropic ``diagnostics``, OpenAI ``prompt_cache_options``) -------

    def with_cache_comparison(self, body: Mapping[str, Any], previous: str | None) -> dict[str, Any] | None:
        """A copy of ``body`` that asks the provider to compare its prompt with the response ``previous`` (None:
        opt in without one, where the API allows it); None when the format has no such field, when the app set
        it itself (never overwritten), or when there is nothing to compare with."""
        ...

    def settle_diagnosis(self, body: Mapping[str, Any], read: CacheDiagnosis | None) -> CacheDiagnosis | None:
        """The diagnosis of a call whose request was ``body`` and whose response read as ``read`` (None: the
        response carried no diagnosis field; :data:`~otel_context.usage.DIAGNOSTICS_NULL`: a null one). A
        request that asked and got no readable answer is ``unknown``, never a hit or pending: it must not count
        on the agreement figures as a verdict."""
        ...

    def reply_signature(self, response: Mapping[str, Any] | None) -> str:
        """A digest of what a response said (its text and tool-call ids) that :meth:`items_reply_signature`
        reproduces from the next request's copy of that reply; "" when it cannot be told."""
        ...

    def items_reply_signature(self, items: Sequence[Item]) -> str:
        """:meth:`reply_signature` of the model's reply as the app sent it back (its items, in order)."""
        ...
