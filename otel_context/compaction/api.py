"""The explicit API, for apps that manage their own history (transparent mode needs none of this).

```python
from otel_context import Compactor, should_compact

compactor = Compactor(anthropic.Anthropic())          # or Compactor(my_summarize_function)
if should_compact(messages, model="claude-sonnet-4-6", system=system):
    result = compactor.compact(messages, model="claude-sonnet-4-6", system=system)
    messages = result.messages                                  # a new list; yours is never modified
```

The same cascade as transparent mode (keep-recent policy, pairing invariant, rehydration, hooks, the
``compact`` span with the summarizer's ``chat`` span under it), on the caller's list. A failed compaction
returns the original messages with ``compacted=False`` and the reason; it never raises for a summarizer
failure (bad arguments do raise, with a message that says what is wrong).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from otel_context import formats, semconv
from otel_context.compaction import budget as budget_mod
from otel_context.compaction import cascade
from otel_context.conversation import resolve as resolve_conversation
from otel_context.flow import SummaryRequest, SummaryResult, adrive, aperform_with, drive, in_summarizer, perform_with
from otel_context.formats import WIRE_FORMATS, ChatFormat, WireFormatAdapter, default_for_client
from otel_context.formats.too_long import is_too_long
from otel_context.settings import Settings, resolve
from otel_context.tokens import estimate_fixed, estimate_items

if TYPE_CHECKING:
    from typing_extensions import Required, Unpack


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


def _infer_format(client: Any, wire_format: str | None) -> str:
    if wire_format is not None:
        if wire_format not in WIRE_FORMATS:
            raise ValueError(f"wire_format={wire_format!r} is not supported; use one of {', '.join(WIRE_FORMATS)}")
        return wire_format
    inferred = default_for_client(client)
    if inferred is None:
        raise ValueError(
            "wire_format is required when the client is not an anthropic or openai SDK client; "
            f"use one of {', '.join(WIRE_FORMATS)}"
        )
    return inferred


def _check_messages(messages: Any) -> Sequence[Any]:
    """The caller's messages, when they are a list of messages (a clear error otherwise)."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise TypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    return messages


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


class CompactOptions(TypedDict, total=False):
    """The options of :meth:`Compactor.compact` and :meth:`Compactor.acompact` (keyword arguments)."""

    #: The model the conversation runs on (required): it selects the summarizer and the context window.
    model: Required[str]
    #: ``anthropic_messages``, ``openai_chat`` or ``openai_responses``; inferred from an SDK client.
    wire_format: str | None
    #: The system prompt (Anthropic) or instructions the conversation is sent with.
    system: str | None
    #: The tool definitions the conversation is sent with (they count in the window).
    tools: Sequence[Any] | None
    #: The output cap the conversation's calls use (it counts in the window).
    max_tokens: int | None
    #: ``manual`` (default: closes an open breaker on success) or ``auto``.
    trigger: str
    #: The context window to assume instead of the model's.
    window: int | None
    #: Extra instructions for the summarizer.
    instructions: str | None


class Compactor:
    """Compacts a history on request. ``client``: an anthropic/openai SDK client, or a function
    ``summarize(request_body) -> str | SummaryResult`` (sync or async) that answers the summary request."""

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

    def _is_async(self) -> bool:
        if self._is_function():
            call = type(self.client).__call__ if not inspect.isroutine(self.client) else self.client
            return inspect.iscoroutinefunction(self.client) or inspect.iscoroutinefunction(call)
        return type(self.client).__name__.startswith("Async")

    def _is_function(self) -> bool:
        return callable(self.client) and not hasattr(self.client, "messages") and not hasattr(self.client, "chat")

    def _summarizer(self, adapter: WireFormatAdapter) -> Callable[[SummaryRequest], Any]:
        if self._is_function():
            return cascade.summarizer_function(self.client)
        return _sdk_summarizer(self.client, formats.for_format(adapter.name))

    def _prepare(self, messages: Sequence[Any], options: CompactOptions) -> cascade.CompactionJob | CompactionResult:
        """The job to run, or the result when there is nothing to run (disabled, or a history left alone)."""
        unknown = sorted(set(options) - set(CompactOptions.__annotations__))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; use {', '.join(CompactOptions.__annotations__)}")
        model = options.get("model", "")
        wire_format = options.get("wire_format")
        system, tools, max_tokens = options.get("system"), options.get("tools"), options.get("max_tokens")
        trigger = options.get("trigger", semconv.TRIGGER_MANUAL)
        window, instructions = options.get("window"), options.get("instructions")
        if trigger not in (semconv.TRIGGER_MANUAL, semconv.TRIGGER_AUTO):
            raise ValueError(f"trigger={trigger!r}; use 'manual' or 'auto'")
        if not model:
            raise ValueError("model is required (it selects the summarizer and the context window)")
        fmt = _infer_format(None if self._is_function() else self.client, wire_format)

        adapter = formats.for_format(fmt)
        body = adapter.compactor_body(_check_messages(messages), model, system, tools, max_tokens)
        items = adapter.items(body)
        skip = CompactionResult(messages=list(messages), compacted=False, trigger=trigger)
        if self.settings.disable_compact or self.settings.compaction == "off":
            return dataclasses.replace(skip, skipped_reason="compaction is disabled by settings")
        reason = cascade.not_understood_reason(adapter, body, items)
        if reason:
            return dataclasses.replace(skip, skipped_reason=reason)
        provider = adapter.provider
        state = resolve_conversation(adapter, provider, items, self.settings).state
        budget = budget_mod.budget_for(model, self.settings, max_output_tokens=max_tokens, window=window)
        estimated = estimate_fixed(adapter, body) + estimate_items(adapter, items)
        cascade.precreate_counters(provider, model)
        return cascade.CompactionJob(
            adapter=adapter,
            body=body,
            items=items,
            settings=self.settings,
            provider=provider,
            model=model,
            trigger=trigger,
            budget=budget,
            estimated_tokens=estimated,
            conversation_id=state.key,
            state=state,
            instructions=instructions,
        )

    @staticmethod
    def _result(
        job: cascade.CompactionJob, out: cascade.CompactionOutcome, messages: Sequence[Any], system: str | None
    ) -> CompactionResult:
        new_messages = list(messages)
        if out.changed and out.items is not None:
            fmt = formats.for_format(job.adapter.name)
            new_messages = fmt.compactor_messages(job.adapter.with_items(job.body, out.items), system)
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
            skipped_reason=out.skipped_reason,
        )

    def compact(self, messages: Sequence[Any], **options: Unpack[CompactOptions]) -> CompactionResult:
        """Summarize all but the recent messages of ``messages``; see :class:`CompactionResult`."""
        job = self._prepare(messages, options)
        if isinstance(job, CompactionResult):
            return job
        if self._is_async():
            raise TypeError(_USE_ACOMPACT)
        send = self._summarizer(job.adapter)

        def send_sync(req: SummaryRequest) -> SummaryResult:
            answer = send(req)
            if inspect.isawaitable(answer):
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
                raise TypeError(_USE_ACOMPACT)
            assert isinstance(answer, SummaryResult)
            return answer

        out = drive(cascade.run_summary(job), perform_with(send_sync), _reraise)
        assert out is not None  # _reraise never stops the steps: it raises
        return self._result(job, out, messages, options.get("system"))

    async def acompact(self, messages: Sequence[Any], **options: Unpack[CompactOptions]) -> CompactionResult:
        """:meth:`compact` for async clients and async summarize functions (sync ones work too)."""
        job = self._prepare(messages, options)
        if isinstance(job, CompactionResult):
            return job
        send = self._summarizer(job.adapter)

        async def send_any(req: SummaryRequest) -> SummaryResult:
            answer = send(req)
            if inspect.isawaitable(answer):
                answer = await answer
            assert isinstance(answer, SummaryResult)
            return answer

        out = await adrive(cascade.run_summary(job), aperform_with(send_any))
        return self._result(job, out, messages, options.get("system"))


def should_compact(
    messages: Sequence[Any],
    *,
    model: str,
    wire_format: str = "anthropic_messages",
    system: str | None = None,
    tools: Sequence[Any] | None = None,
    max_tokens: int | None = None,
    settings: Settings | None = None,
    window: int | None = None,
) -> bool:
    """Whether ``messages`` have reached the auto-compaction threshold of ``model`` (estimate only).

    False when the window is unknown (unknown model and no override), or compaction is off/observe or
    disabled by a kill switch: the same rules the transparent mode follows.
    """
    settings = settings if settings is not None else resolve()
    if settings.compaction != "auto" or settings.disable_compact or settings.disable_auto_compact:
        return False
    wire_format = _infer_format(None, wire_format)
    budget = budget_mod.budget_for(model, settings, max_output_tokens=max_tokens, window=window)
    if budget is None:
        return False
    adapter = formats.for_format(wire_format)
    body = adapter.compactor_body(_check_messages(messages), model, system, tools, max_tokens)
    estimated = estimate_fixed(adapter, body) + estimate_items(adapter, adapter.items(body))
    return estimated >= budget.auto_threshold
