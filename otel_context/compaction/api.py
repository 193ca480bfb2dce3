"""The explicit API, for apps that manage their own history (transparent mode needs none of this).

```python
from otel_context import Compactor, should_compact

compactor = Compactor(anthropic.Anthropic())          # or Compactor(my_summarize_function)
if should_compact(messages, model="claude-sonnet-4-6", system=system):
    result = compactor.compact(messages, model="claude-sonnet-4-6", system=system)
    messages = result.messages                                  # a new list; yours is never modified
```

The same cascade as transparent mode (keep-recent policy, pairing invariant, rehydration, hooks, the
``compact`` span with the summarizer's ``chat`` span under it, the retention check), on the caller's list.
A failed compaction returns the original messages with ``compacted=False`` and the reason; it never raises
for a summarizer failure (bad arguments do raise, with a message that says what is wrong).

What a caller need not say (docs/compaction.md, "The explicit API"):

- the wire format: an SDK client speaks its own; otherwise the messages' shape tells it (tool_use blocks,
  tool_calls, Responses items, ...), and a history that fits several formats (plain role/content strings)
  is taken as :data:`DEFAULT_WIRE_FORMAT`;
- the model, with a summarize function: the model only selects the context window, so ``window=`` does
  as well, and with neither the window is unknown (the keep-recent policy alone chooses what is kept);
- the conversation: every call is a conversation of its own (its own breaker, nothing remembered) unless
  it names one (``conversation=``, or an ``otel_context.conversation(id)`` block in force).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from otel_context import formats, semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import cascade
from otel_context.compaction.job import CompactionJob
from otel_context.conversation import ConversationState, current_conversation_id
from otel_context.conversation import conversation as named_conversation
from otel_context.conversation import resolve as resolve_conversation
from otel_context.flow import SummaryRequest, SummaryResult, adrive, aperform_with, drive, in_summarizer, perform_with
from otel_context.formats import DEFAULT_WIRE_FORMAT as DEFAULT_WIRE_FORMAT  # documented here, defined there
from otel_context.formats import (
    OWN_MESSAGE_KEYS,
    WIRE_FORMATS,
    ChatFormat,
    WireFormatAdapter,
    default_for_client,
)
from otel_context.formats.too_long import is_too_long
from otel_context.settings import Settings, resolve
from otel_context.tokens import estimate_fixed, estimate_items

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Share of ``target_tokens`` the summary is asked to stay within (the kept messages get at most 60 % of it,
#: ``summary.KEPT_SHARE``; the rest is for the user's messages kept verbatim and the rehydrated files).
SUMMARY_SHARE = 0.25
#: Share of ``target_tokens`` the user's messages kept verbatim beside the summary may take (what the kept
#: messages and the summary leave; the rehydrated files get what these leave in turn).
USER_MESSAGES_SHARE = 0.15
#: Share of ``target_tokens`` the summary's repair may add (what it lost of the user's sentences and artifacts).
REPAIR_SHARE = 0.1
#: The least output room a summary is asked with under ``target_tokens`` (a summary shorter than this
#: cannot say what the work is, what was done and what is pending).
MIN_TARGET_SUMMARY_TOKENS = 256


@dataclass(frozen=True)
class CompactionResult:
    """The outcome of an explicit compaction. ``messages`` is a new list (the input when nothing changed)."""

    messages: list[Any]
    compacted: bool
    summary: str = ""
    trigger: str = semconv.TRIGGER_MANUAL
    strategy: str = semconv.STRATEGY_SUMMARY
    outcome: str = semconv.OUTCOME_SKIPPED
    input_tokens: int = 0
    output_tokens: int = 0
    summary_tokens: int = 0
    messages_compacted: int = 0
    files_rehydrated: int = 0
    duration_ms: float = 0.0
    error: str | None = None
    skipped_reason: str | None = None
    #: Share of the salient items of what the compaction dropped (paths, error lines, identifiers, numbers
    #: with units, the user's sentences: docs/compaction.md, "What a compaction kept") that ``messages``
    #: still hold, the figure of the span's ``otel_context.compaction.retention``; None when nothing
    #: changed or what was dropped held no such item.
    retention: float | None = None
    #: The salient items ``messages`` no longer hold, by kind (``path``, ``error``, ``identifier``,
    #: ``number``, ``instruction``), oldest first; empty when nothing was lost.
    lost: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: The same figure for the summary as the summarizer wrote it, before the repair put back what it lost
    #: (docs/compaction.md, "The repair"); None when no summary was made.
    retention_before_repair: float | None = None
    #: What the repair restored, by kind (``instruction``, ``error``, ``path``, ``identifier``, ``decision``),
    #: and what it lost that did not fit its budget.
    repaired: Mapping[str, int] = field(default_factory=dict)
    repair_left_out: Mapping[str, int] = field(default_factory=dict)
    #: Empty messages left out of the compaction (and of ``messages`` when it compacted): the provider
    #: refuses a message without content, so one was never a reason to refuse the history.
    empty_messages_dropped: int = 0
    #: The conversation whose breaker and state the call used (None: a conversation of its own).
    conversation: str | None = None


# --- the wire format of a history ------------------------------------------------------------------------


def infer_wire_format(messages: Sequence[Any], client: Any = None) -> str:
    """The wire format of ``messages``: the one their shape fits (among those ``client``, an SDK client,
    speaks), the client's own when several fit, else :data:`DEFAULT_WIRE_FORMAT` (or ``openai_chat`` when
    only the two OpenAI formats fit: :func:`otel_context.formats.preferred_format`); the shapes are the
    formats' own (:func:`otel_context.formats.formats_fitting`). ``ValueError`` when no format fits."""
    speaks = default_for_client(client) if client is not None else None
    start = frozenset(WIRE_FORMATS)
    where = "any wire format"
    if speaks is not None:
        provider = formats.for_format(speaks).provider
        start = frozenset(name for name in WIRE_FORMATS if formats.for_format(name).provider == provider)
        where = f"the wire formats an {provider} client speaks"
    fits = start
    for index, message in enumerate(messages):
        own = formats.formats_fitting(message)
        narrowed = fits & own
        if not narrowed:
            why = f"it fits {', '.join(sorted(own))} only" if own else "its parts belong to different wire formats"
            if fits != start:
                where = "the wire format of the messages before it"
            raise ValueError(
                f"messages[{index}] does not fit {where} ({', '.join(sorted(fits))}): {why}; "
                f"pass wire_format= (one of {', '.join(WIRE_FORMATS)})"
            )
        fits = narrowed
    if len(fits) == 1:
        return next(iter(fits))
    if speaks is not None and speaks in fits:
        return speaks
    return formats.preferred_format(fits)


def _wire_format(messages: Sequence[Any], client: Any, wire_format: str | None) -> str:
    if wire_format is not None:
        if wire_format not in WIRE_FORMATS:
            raise ValueError(f"wire_format={wire_format!r} is not supported; use one of {', '.join(WIRE_FORMATS)}")
        return wire_format
    return infer_wire_format(messages, client)


def _check_messages(messages: Any) -> Sequence[Any]:
    """The caller's messages, when they are a list of messages (a clear error otherwise)."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise TypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    return messages


# --- empty messages --------------------------------------------------------------------------------------

#: Part types whose only content is their text.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def _is_empty(message: Any) -> bool:
    """A user or assistant message with no content at all (``""``, ``[]``, ``None`` without tool calls, or
    only blank text parts): every provider refuses it, and it says nothing a summary could keep."""
    if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
        return False
    if message.get("type", "message") != "message" or any(key in message for key in OWN_MESSAGE_KEYS):
        return False
    if "content" not in message:
        return False  # malformed, not empty: the format's check says so
    content = message["content"]
    if content is None or isinstance(content, str):
        return not (content or "").strip()
    if not isinstance(content, (list, tuple)):
        return False
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS:
            return False
        text = part.get("text")
        if not isinstance(text, str) or text.strip():
            return False
    return True


def _without_empty(messages: Sequence[Any], adapter: ChatFormat) -> list[Any]:
    """``messages`` (a new list) without their empty messages; the last assistant message stays in a format
    whose API takes an empty one as a prefill (``ChatFormat.empty_prefill``: Anthropic)."""
    last = len(messages) - 1
    kept = []
    for index, message in enumerate(messages):
        prefill = adapter.empty_prefill and index == last
        if _is_empty(message) and not (prefill and message.get("role") == "assistant"):
            continue
        kept.append(message)
    return kept


def _sdk_summarizer(client: Any, adapter: ChatFormat) -> Callable[[SummaryRequest], Any]:
    """Send summary requests through an SDK client (its chat span becomes a child of ``compact``)."""

    def result_of(response: Any) -> SummaryResult:
        data = response.model_dump() if hasattr(response, "model_dump") else dict(response)
        usage = adapter.usage(data.get("usage") or {}, adapter.provider)
        reasons = adapter.response_info(data, adapter.provider).finish_reasons
        return SummaryResult(text=adapter.response_text(data), usage=usage, finish_reasons=reasons)

    def create(body: Mapping[str, Any]) -> Any:
        return adapter.sdk_create(client)(**body)

    def failed(exc: BaseException) -> SummaryResult:

        return SummaryResult(error=exc, too_long=is_too_long(adapter, exc))

    async def finish_async(pending: Any) -> SummaryResult:
        # The guard is set here, where the SDK's request runs (when awaited): an answer never awaited (a sync
        # compact() that meets an async client) leaves the caller's context as it found it.
        token = in_summarizer.set(True)
        try:
            return result_of(await pending)
        except Exception as exc:
            return failed(exc)
        finally:
            in_summarizer.reset(token)

    def send(req: SummaryRequest) -> Any:
        """A SummaryResult for sync clients; an awaitable of one for async clients (their create is async)."""
        token = in_summarizer.set(True)
        try:
            pending = create(req.body)
        except Exception as exc:
            in_summarizer.reset(token)
            return failed(exc)
        in_summarizer.reset(token)
        if inspect.isawaitable(pending):
            return finish_async(pending)
        try:
            return result_of(pending)
        except Exception as exc:
            return failed(exc)

    return send


#: Why a sync ``compact`` refuses an async summarizer (said before any request goes out).
_USE_ACOMPACT = "this Compactor has an async client or function: use `await compactor.acompact(...)`"


def _reraise(error: BaseException | None) -> bool:
    """``compact``'s ``stopped``: an error of its summarizer step (only an async answer to the sync call: every
    other failure is a failed :class:`SummaryResult`) is the caller's mistake, raised to the caller as it
    is, the compaction not resumed; thrown into the steps, the cascade would report it as a failed one."""
    if error is not None:
        raise error
    return False


class MicrocompactOptions(TypedDict, total=False):
    """The options of :meth:`Compactor.microcompact` (keyword arguments); :class:`CompactOptions` has them all."""

    #: The model the conversation runs on: it selects the context window. Required with an SDK client (it
    #: also names the summarizer's model); a summarize function, or ``window=``, needs none.
    model: str | None
    #: ``anthropic_messages``, ``openai_chat`` or ``openai_responses``; inferred from an SDK client, else
    #: from the messages' shape (:func:`infer_wire_format`).
    wire_format: str | None
    #: The system prompt (Anthropic) or instructions the conversation is sent with.
    system: str | None
    #: The tool definitions the conversation is sent with (they count in the window).
    tools: Sequence[Any] | None
    #: The output cap the conversation's calls use (it counts in the window).
    max_tokens: int | None
    #: ``manual`` (default: the app asked and reads the outcome; a failure does not count on the
    #: conversation's breaker, a summary that succeeds closes it) or ``auto`` (the app's own automatic
    #: compaction: counted on the breaker, skipped while it is open).
    trigger: str
    #: The context window to assume instead of the model's.
    window: int | None
    #: The conversation whose breaker and state this call shares (an id of yours, or the
    #: ``gen_ai.conversation.id`` of its spans). None: the ``otel_context.conversation(id)`` block in force,
    #: else a conversation of this call's own.
    conversation: str | None


class CompactOptions(MicrocompactOptions, total=False):
    """The options of :meth:`Compactor.compact` and :meth:`Compactor.acompact` (keyword arguments)."""

    #: Extra instructions for the summarizer.
    instructions: str | None
    #: The size the compacted conversation (system prompt, tools and messages) should stay under, in
    #: otel-context's estimate (the one ``should_compact`` compares; ``output_tokens`` is the provider's count
    #: when the summarizer's reply measured it). The cut moves towards the end until the kept messages take
    #: at most 60 % of it, the summary is asked for at most a quarter of it (its output cap, and the prompt
    #: says so; a reply cut at that cap is asked again with twice the room), the user's messages kept
    #: verbatim take at most 15 % of it, the repair adds at most 10 % of it, and files are rehydrated only into what is left. A target, not a guarantee: the newest round is always kept whole. Default: the
    #: window's threshold, and the summary's room is the window's reserve.
    target_tokens: int | None
    #: Texts kept verbatim beside the summary, never summarized (besides the conversation's own pins,
    #: ``otel_context.pin``): placed before the user's messages as ``[Pinned] ...``, within half of the
    #: user-message budget, and carried by every later compaction of the history this returns.
    pinned: Sequence[str] | None


_MICRO_KEYS = MicrocompactOptions.__required_keys__ | MicrocompactOptions.__optional_keys__
_COMPACT_KEYS = CompactOptions.__required_keys__ | CompactOptions.__optional_keys__


def _pinned(value: Any) -> tuple[str, ...]:
    """The ``pinned=`` option as a tuple of texts (a clear error for anything else)."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"pinned must be a list of strings, got {type(value).__name__}")
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        raise ValueError(f"pinned texts must be non-empty strings, got {bad[0]!r}")
    return tuple(v.strip() for v in value)


@dataclass
class _OutputCap:
    """The summary's output cap under ``target_tokens``: each summary request is capped at ``tokens``; a reply
    stopped by that cap doubles it for the request that follows (the summary is asked again once)."""

    tokens: int
    #: The ``target_tokens`` it serves.
    target: int

    def apply(self, adapter: WireFormatAdapter, request: SummaryRequest) -> SummaryRequest:
        asked = adapter.max_output_tokens(request.body)
        if asked is not None and asked <= self.tokens:
            return request
        return SummaryRequest(adapter.with_output_cap(request.body, self.tokens))

    def prompt_line(self) -> str:
        """What the summarizer is told of its room (the cap alone would cut a summary that did not know)."""
        return (
            f"Keep the summary under about {self.tokens:,} tokens (about {self.tokens * 3 // 4:,} words): "
            f"the compacted conversation must fit in {self.target:,} tokens."
        )

    def saw(self, result: SummaryResult) -> SummaryResult:
        if any(semconv.FINISH_REASON_MAP.get(r, r) == "length" for r in result.finish_reasons):
            self.tokens *= 2
        return result


def _summary_cap(target: int | None) -> _OutputCap | None:
    """The summary's output cap under ``target_tokens`` (None: no target, the window's reserve applies)."""
    if target is None:
        return None
    share = max(MIN_TARGET_SUMMARY_TOKENS, int(target * SUMMARY_SHARE))
    return _OutputCap(min(budget_mod.SUMMARY_RESERVE_TOKENS, share), target)


@dataclass(frozen=True)
class _Run:
    """A compaction to run, and what its result reports beside the cascade's figures."""

    job: CompactionJob
    cap: _OutputCap | None
    empty_dropped: int
    conversation: str | None


def _positive(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive number of tokens, got {value!r}")
    return value


class Compactor:
    """Compacts a history on request. ``client``: an anthropic/openai SDK client, or a function
    ``summarize(request_body) -> str | SummaryResult`` (sync or async) that answers the summary request
    (the body is a request in the history's wire format: its messages hold the transcript and the prompt,
    its ``max_tokens`` / ``max_output_tokens`` the room the summary has)."""

    def __init__(self, client: Any = None, settings: Settings | None = None) -> None:
        # The client comes first: ``Compactor(client)`` is the call people write. Settings passed where the
        # client goes (the order of the first release) would be summarized with: say so instead.
        if isinstance(client, Settings):
            raise TypeError("Compactor(client, settings=...): the first argument is the client; pass settings=...")
        if settings is not None and not isinstance(settings, Settings):
            raise TypeError(f"settings must be otel_context.Settings, not {type(settings).__name__}")
        self.settings = settings if settings is not None else resolve()
        if client is None:
            client = self.settings.summarizer
        if client is None:
            raise ValueError(
                "Compactor needs a client to summarize with: Compactor(anthropic.Anthropic()), "
                "Compactor(openai.OpenAI()) or Compactor(my_summarize_function)"
            )
        self.client = client
        # The client given here answers this Compactor's summary requests (Settings.summarizer is the
        # transparent mode's): the cascade asks it through the driver, sync or async.
        self._job_settings = (
            dataclasses.replace(self.settings, summarizer=None)
            if self.settings.summarizer is not None
            else self.settings
        )

    def _settings_for(self, target: int | None) -> Settings:
        """The settings of one job: under a target, the user's messages kept verbatim get their share of it."""
        settings = self._job_settings
        if target is None:
            return settings
        share = int(target * USER_MESSAGES_SHARE)
        repair = int(target * REPAIR_SHARE)
        return dataclasses.replace(
            settings,
            user_messages_budget=min(share, settings.user_messages_budget),
            repair_budget=min(repair, settings.repair_budget),
        )

    def _is_async(self) -> bool:
        if self._is_function():
            call = type(self.client).__call__ if not inspect.isroutine(self.client) else self.client
            return inspect.iscoroutinefunction(self.client) or inspect.iscoroutinefunction(call)
        return type(self.client).__name__.startswith("Async")

    def _is_function(self) -> bool:
        return callable(self.client) and not hasattr(self.client, "messages") and not hasattr(self.client, "chat")

    def _summarizer(self, run: _Run) -> Callable[[SummaryRequest], Any]:
        """How a summary request is answered: the function or the SDK client, capped under a target."""
        adapter = run.job.adapter
        send = (
            cascade.summarizer_function(self.client)
            if self._is_function()
            else _sdk_summarizer(self.client, formats.for_format(adapter.name))
        )
        cap = run.cap
        if cap is None:
            return send

        def capped(request: SummaryRequest) -> Any:
            answer = send(cap.apply(adapter, request))
            if inspect.isawaitable(answer):

                async def seen() -> SummaryResult:
                    return cap.saw(await answer)

                return seen()
            return cap.saw(answer)

        return capped

    def _state(self, name: str | None, adapter: ChatFormat, items: Sequence[Any]) -> ConversationState:
        """The state of the conversation ``name`` (resolved as an explicit id), or one of this call's own."""
        if name is None:
            # Nothing shared with any other call: two unrelated histories that open with the same message
            # (a derived key) must not count on one breaker.
            return ConversationState("", explicit=False)
        with named_conversation(name):  # raises for an id that is not a non-empty string
            return resolve_conversation(adapter, adapter.provider, items, self.settings).state

    def _prepare(self, messages: Sequence[Any], options: Mapping[str, Any], strategy: str) -> _Run | CompactionResult:
        """The compaction to run, or the result when there is nothing to run (disabled, a history left
        alone, an open breaker)."""
        allowed = _COMPACT_KEYS if strategy == semconv.STRATEGY_SUMMARY else _MICRO_KEYS
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; use {', '.join(sorted(allowed))}")
        messages = _check_messages(messages)
        model = options.get("model") or ""
        system, tools = options.get("system"), options.get("tools")
        max_tokens = options.get("max_tokens")
        trigger = options.get("trigger", semconv.TRIGGER_MANUAL)
        window = _positive("window", options.get("window"))
        target = _positive("target_tokens", options.get("target_tokens"))
        instructions = options.get("instructions")
        if trigger not in (semconv.TRIGGER_MANUAL, semconv.TRIGGER_AUTO):
            raise ValueError(f"trigger={trigger!r}; use 'manual' or 'auto'")
        if not isinstance(model, str):
            raise TypeError(f"model must be a model name, got {type(model).__name__}")
        sdk = not self._is_function()
        if not model and sdk and strategy == semconv.STRATEGY_SUMMARY:
            raise ValueError(
                "model is required with an SDK client: the summary is asked of it (or of "
                "OTEL_CONTEXT_SUMMARY_MODEL) and it selects the context window"
            )
        fmt = _wire_format(messages, self.client if sdk else None, options.get("wire_format"))
        adapter = formats.for_format(fmt)
        sent = _without_empty(messages, adapter)
        body = adapter.compactor_body(sent, model, system, tools, max_tokens)
        items = adapter.items(body)
        skip = CompactionResult(messages=list(messages), compacted=False, trigger=trigger, strategy=strategy)
        if self.settings.disable_compact or self.settings.compaction == "off":
            return dataclasses.replace(skip, skipped_reason="compaction is disabled by settings")
        reason = cascade.not_understood_reason(adapter, body, items)
        if reason:
            return dataclasses.replace(skip, skipped_reason=reason)
        fixed = estimate_fixed(adapter, body)
        if target is not None and target <= fixed:
            raise ValueError(
                f"target_tokens={target} leaves nothing for the messages: the system prompt and tools alone "
                f"take ~{fixed} tokens"
            )
        name = options.get("conversation")
        if name is None:
            name = current_conversation_id()
        state = self._state(name, adapter, items)
        provider = adapter.provider
        # The breaker stands for a summarizer that keeps failing: the rule-based layer asks nothing of it.
        if trigger == semconv.TRIGGER_AUTO and state.breaker.open and strategy == semconv.STRATEGY_SUMMARY:
            cascade.count_skipped(trigger, provider, model)
            return dataclasses.replace(
                skip,
                conversation=name,
                skipped_reason=(
                    "the conversation's circuit breaker is open (its automatic compactions kept failing); "
                    "a manual compaction (trigger='manual') still runs, and closes it when it succeeds"
                ),
            )
        budget = None
        if model or window is not None or self.settings.auto_compact_window is not None:
            budget = budget_mod.budget_for(model or None, self.settings, max_output_tokens=max_tokens, window=window)
        cap = _summary_cap(target)
        if cap is not None:
            instructions = "\n".join(x for x in (instructions, cap.prompt_line()) if x)
        estimated = fixed + estimate_items(adapter, items)
        cascade.precreate_counters(provider, model)
        job = CompactionJob(
            adapter=adapter,
            body=body,
            items=items,
            settings=self._settings_for(target),
            provider=provider,
            model=model,
            trigger=trigger,
            budget=budget,
            estimated_tokens=estimated,
            conversation_id=state.key or None,
            state=state,
            instructions=instructions,
            target_tokens=target,
            pinned=_pinned(options.get("pinned")),
        )
        return _Run(job=job, cap=cap, empty_dropped=len(messages) - len(sent), conversation=name)

    @staticmethod
    def _result(
        run: _Run, out: cascade.CompactionOutcome, messages: Sequence[Any], system: str | None
    ) -> CompactionResult:
        job = run.job
        new_messages = list(messages)
        if out.changed and out.items is not None:
            fmt = formats.for_format(job.adapter.name)
            new_messages = fmt.compactor_messages(job.adapter.with_items(job.body, out.items), system)
        lost: dict[str, tuple[str, ...]] = {}
        retention = out.retention if out.changed else None
        for kind, text in retention.lost if retention is not None else ():
            lost[kind] = (*lost.get(kind, ()), text)
        skipped = out.skipped_reason
        if skipped is None and out.outcome == semconv.OUTCOME_SKIPPED and out.strategy == semconv.STRATEGY_MICROCOMPACT:
            skipped = "microcompact found nothing to clear (no old tool result large enough to be worth it)"
        return CompactionResult(
            messages=new_messages,
            compacted=out.changed,
            summary=out.summary,
            trigger=job.trigger,
            strategy=out.strategy,
            outcome=out.outcome,
            input_tokens=out.input_tokens,
            output_tokens=out.output_tokens if out.changed else out.input_tokens,
            summary_tokens=out.summary_tokens,
            messages_compacted=out.messages_compacted,
            files_rehydrated=out.files_rehydrated,
            duration_ms=out.duration_ms,
            error=out.error_message if out.outcome == semconv.OUTCOME_FAILURE else None,
            skipped_reason=skipped,
            retention=retention.retention if retention is not None else None,
            lost=lost,
            retention_before_repair=out.repair.before.retention if out.changed and out.repair is not None else None,
            repaired=dict(out.repair.restored) if out.changed and out.repair is not None else {},
            repair_left_out=dict(out.repair.left_out) if out.changed and out.repair is not None else {},
            empty_messages_dropped=run.empty_dropped,
            conversation=run.conversation,
        )

    def compact(self, messages: Sequence[Any], **options: Unpack[CompactOptions]) -> CompactionResult:
        """Summarize all but the recent messages of ``messages``; see :class:`CompactionResult`."""
        run = self._prepare(messages, options, semconv.STRATEGY_SUMMARY)
        if isinstance(run, CompactionResult):
            return run
        if self._is_async():
            raise TypeError(_USE_ACOMPACT)
        send = self._summarizer(run)

        def send_sync(req: SummaryRequest) -> SummaryResult:
            answer = send(req)
            if inspect.isawaitable(answer):
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise TypeError(_USE_ACOMPACT)
            assert isinstance(answer, SummaryResult)
            return answer

        out = drive(cascade.run_summary(run.job), perform_with(send_sync), _reraise)
        assert out is not None  # _reraise never stops the steps: it raises
        return self._result(run, out, messages, options.get("system"))

    async def acompact(self, messages: Sequence[Any], **options: Unpack[CompactOptions]) -> CompactionResult:
        """:meth:`compact` for async clients and async summarize functions (sync ones work too)."""
        run = self._prepare(messages, options, semconv.STRATEGY_SUMMARY)
        if isinstance(run, CompactionResult):
            return run
        send = self._summarizer(run)

        async def send_any(req: SummaryRequest) -> SummaryResult:
            answer = send(req)
            if inspect.isawaitable(answer):
                answer = await answer
            assert isinstance(answer, SummaryResult)
            return answer

        out = await adrive(cascade.run_summary(run.job), aperform_with(send_any))
        return self._result(run, out, messages, options.get("system"))

    def microcompact(self, messages: Sequence[Any], **options: Unpack[MicrocompactOptions]) -> CompactionResult:
        """The rule-based layer alone (no LLM call, so no ``acompact`` twin: it never waits): old tool
        results cleared to a placeholder and single oversized ones cut, by the ``microcompact_*`` settings
        (scaled to the window when one is known), with its ``compact`` span and retention check. It runs
        when asked even where the transparent mode's ``microcompact`` setting is off."""
        run = self._prepare(messages, options, semconv.STRATEGY_MICROCOMPACT)
        if isinstance(run, CompactionResult):
            return run
        out = cascade.run_microcompact(run.job)
        return self._result(run, out, messages, options.get("system"))


def should_compact(
    messages: Sequence[Any],
    *,
    model: str | None = None,
    wire_format: str | None = None,
    system: str | None = None,
    tools: Sequence[Any] | None = None,
    max_tokens: int | None = None,
    settings: Settings | None = None,
    window: int | None = None,
) -> bool:
    """Whether ``messages`` have reached the auto-compaction threshold of their window (estimate only).

    The window is ``window``'s, else ``model``'s; the wire format is inferred from the messages' shape when
    not given. False when the window is unknown (no model, unknown model, no override), or compaction is
    off/observe or disabled by a kill switch: the same rules the transparent mode follows.
    """
    settings = settings if settings is not None else resolve()
    if settings.compaction != "auto" or settings.disable_compact or settings.disable_auto_compact:
        return False
    messages = _check_messages(messages)
    window = _positive("window", window)
    if not model and window is None and settings.auto_compact_window is None:
        return False
    budget = budget_mod.budget_for(model or None, settings, max_output_tokens=max_tokens, window=window)
    if budget is None:
        return False
    fmt = _wire_format(messages, None, wire_format)
    adapter = formats.for_format(fmt)
    body = adapter.compactor_body(_without_empty(messages, adapter), model or "", system, tools, max_tokens)
    estimated = estimate_fixed(adapter, body) + estimate_items(adapter, adapter.items(body))
    return estimated >= budget.auto_threshold
