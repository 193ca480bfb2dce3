"""One instrumented call: its span, timing and plan, ended exactly once with the response's facts.

``InstrumentedCall.end`` is the single place where a call's outcome becomes span attributes, the plan's
``on_response``, and metrics. It never raises: the user's call comes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

from otel_context import engine, pricing, process_state, semconv, telemetry, token_counters
from otel_context.contract import CallPlan
from otel_context.formats.base import Accumulator, EndpointFormat, ResponseInfo

from ._content import Capture

__all__ = ["InstrumentedCall", "ModelView", "register_error_type"]


def _qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    # SDK exceptions are defined in private modules but exported at the top level.
    top = module.split(".", 1)[0]
    return f"{top}.{cls.__qualname__}" if module.startswith(top + "._") else f"{module}.{cls.__qualname__}"


_ABSENT = object()


class ModelView(Mapping[str, Any]):
    """A read-only JSON-shaped view of an SDK (pydantic) response: nothing is dumped or copied.

    The engine reads a few keys of every response (``content``/``output`` block types, ``context_management``);
    a full ``model_dump`` per call would cost more than the rest of the instrumentation. Keys are the fields
    the provider actually sent (``exclude_unset`` semantics) plus extras; nested models are views too, and
    lists become lists of views. ``model_dump()`` gives a real dict when one is needed.
    """

    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def _keys(self) -> list[str]:
        obj = self._obj
        keys = [k for k in obj.__dict__ if k in obj.__pydantic_fields_set__]
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra:
            keys.extend(k for k in extra if k not in keys)
        return keys

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        # Mapping.get would go through a raised KeyError for every absent key: the engine asks for several.
        obj = self._obj
        if key in obj.__pydantic_fields_set__ and key in obj.__dict__:
            return _view(obj.__dict__[key])
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra and key in extra:
            return _view(extra[key])
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def model_dump(self) -> dict[str, Any]:
        dumped = self._obj.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped if isinstance(dumped, dict) else {}


def _is_model(value: Any) -> bool:
    return hasattr(value, "__pydantic_fields_set__") and hasattr(value, "__dict__")


def _view(value: Any) -> Any:
    if type(value) in (str, int, float, bool) or value is None:
        return value
    if type(value) is list:
        return [_view(v) for v in value]
    if type(value) is dict:
        return {k: _view(v) for k, v in value.items()}
    if _is_model(value):
        return ModelView(value)
    return value


def _as_json(obj: Any) -> Mapping[str, Any] | None:
    if obj is None or type(obj) is dict:
        return obj
    if _is_model(obj):  # the SDK's response (asked first: the Mapping test of a model is an ABC check)
        return ModelView(obj)
    return obj if isinstance(obj, Mapping) else None


class InstrumentedCall:
    """One instrumented SDK call: its span, timing and plan; ends exactly once."""

    __slots__ = (
        "capture",
        "chat",
        "context",
        "ended",
        "first_chunk",
        "fmt",
        "legacy",
        "metric_attrs",
        "plan",
        "proposed",
        "provider",
        "sent",
        "server",
        "span",
        "start",
        "stream",
    )

    def __init__(
        self,
        span: Span,
        fmt: EndpointFormat,
        chat: bool,
        metric_attrs: dict[str, Any],
        provider: str,
        stream: bool,
        context: Context | None = None,
    ) -> None:
        self.span = span
        #: The context the call's span is current in: its metrics are recorded in it, so their exemplars
        #: point at this span also when a stream ends in the app's own context (after the call returned).
        self.context = context
        self.fmt = fmt
        self.chat = chat
        self.metric_attrs = metric_attrs
        self.provider = provider
        #: ``host:port`` of the server the call goes to ("" when unknown), for the engine (``CallRequest.server``).
        self.server = ""
        self.stream = stream
        self.start = time.perf_counter()
        #: When the request went out (after planning): time to first chunk is measured from here.
        self.sent = self.start
        self.first_chunk: float | None = None
        self.plan: CallPlan | None = None
        self.capture: Capture | None = None
        self.ended = False
        #: Whether the GenAI conventions' proposed cost names go on the span too (OTEL_CONTEXT_CONVENTIONS).
        self.proposed = False
        #: Whether the older names go on the span too (OTEL_CONTEXT_CONVENTIONS=legacy).
        self.legacy = False

    # -- ending -------------------------------------------------------------------------------------------

    def end_response(self, response: Any) -> None:
        """A complete (non-streamed) response: an SDK object or a JSON dict."""
        if self.ended:
            return
        try:
            info = self.fmt.response_info(response, self.provider)
        except Exception:
            telemetry.log_once("response_info", "otel_context: could not read a response", exc_info=True)
            info = None
        if self.capture is not None:
            self.capture.set_response(response)
        self.end(info, _as_json(response), None)

    def end_stream(self, acc: Accumulator | None, error: BaseException | None) -> None:
        if self.ended:
            return
        response: Mapping[str, Any] | None = None
        info = None
        if acc is not None:
            info = acc.info
            final = getattr(acc, "final", None)
            response = _as_json(final) if final is not None else acc.summary
            if self.capture is not None:
                self.capture.set_stream(acc, final)
        self.end(info, response, error)

    def end(self, info: ResponseInfo | None, response: Mapping[str, Any] | None, error: BaseException | None) -> None:
        """Set the response attributes, tell the plan, record metrics and end the span. Never raises."""
        if self.ended:
            return
        self.ended = True
        span = self.span
        try:
            ended_at = time.perf_counter()
            attrs: dict[str, Any] = {}
            metric_attrs = self.metric_attrs
            usage = info.usage if info is not None else None
            if info is not None:
                if info.response_id:
                    attrs[semconv.GEN_AI_RESPONSE_ID] = info.response_id
                if info.response_model:
                    attrs[semconv.GEN_AI_RESPONSE_MODEL] = info.response_model
                    metric_attrs[semconv.GEN_AI_RESPONSE_MODEL] = info.response_model
                if info.finish_reasons:
                    attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = info.finish_reasons
            if usage is not None:
                attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = usage.input_tokens
                if self.fmt.wire_format is not None or usage.output_tokens:
                    attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.output_tokens
                if usage.reported_cache or usage.cache_read_tokens or usage.cache_write_tokens:
                    attrs[semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cache_read_tokens
                    attrs[semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] = usage.cache_write_tokens
                    if self.legacy:
                        attrs[semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = usage.cache_write_tokens
                if usage.reported_reasoning:
                    attrs[semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens
                if self.chat:
                    attrs[semconv.CACHE_HIT_RATIO] = usage.hit_ratio
            cost = self._cost(info, usage, attrs) if usage is not None else None
            spent = cost.amount if cost is not None else 0.0
            saving = 0.0
            ttfc = self.first_chunk - self.sent if self.first_chunk is not None else None
            if ttfc is not None:
                attrs[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
            # Only an Exception is a failure: CancelledError, GeneratorExit, KeyboardInterrupt leave status unset.
            if isinstance(error, Exception):
                error_type = _error_type_of(error)
                attrs[semconv.ERROR_TYPE] = error_type
                metric_attrs[semconv.ERROR_TYPE] = error_type
            elif self.plan is not None:
                try:
                    if info is not None:
                        self.plan.on_response(span, usage, response, info.response_id, info.cache_diagnosis)
                    else:
                        self.plan.on_response(span, usage, response)
                except Exception:
                    telemetry.log_once("plan.on_response", "otel_context: the context engine failed", exc_info=True)
                if spent:
                    try:
                        facts = self.plan.on_cost(spent)
                        if facts is not None:
                            attrs[semconv.CONVERSATION_COST] = facts.conversation
                            if facts.compaction_saving:
                                saving = facts.compaction_saving
                                attrs[semconv.COST_COMPACTION_SAVING] = saving
                    except Exception:
                        telemetry.log_once("plan.on_cost", "otel_context: the conversation's spend", exc_info=True)
            elif error is None and metric_attrs.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_COMPACT:
                self._observe_server_compaction(usage, response)
            if span.is_recording():
                if self.plan is not None and self.plan.attributes:
                    # One attribute write per call: the SDK's per-call cost (lock, limits) is paid once. The
                    # plan's dict is this call's own: the response's attributes go in after (and win).
                    self.plan.attributes.update(attrs)
                    attrs = self.plan.attributes
                span.set_attributes(attrs)
                if isinstance(error, Exception):
                    span.set_status(Status(StatusCode.ERROR, _short(error)))
                if self.capture is not None:
                    try:
                        self.capture.finish(span)
                    except Exception:
                        telemetry.log_once("capture.finish", "otel_context: content capture failed", exc_info=True)
            self._record_metrics(ended_at - self.start, ttfc, usage, cost, saving)
        except Exception:
            telemetry.log_once("call.end", "otel_context: failed to record a call", exc_info=True)
        finally:
            try:
                span.end()
            except Exception:
                telemetry.log_once("span.end", "otel_context: failed to end a span", exc_info=True)

    def _cost(self, info: ResponseInfo | None, usage: Any, attrs: dict[str, Any]) -> pricing.Cost | None:
        """The call's cost, also on ``attrs`` (docs/telemetry.md, "Cost"); None when its model has no known
        price (nothing is set: never a guessed price) or the operation is free (``count_tokens``). The model is
        the one the response names (a dated snapshot), else the one the request asked for."""
        attributes = self.metric_attrs
        if attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_COUNT_TOKENS:
            return None
        context = info.price_context if info is not None else ()
        requested = attributes.get(semconv.GEN_AI_REQUEST_MODEL)
        responded = info.response_model if info is not None else None
        found = pricing.rates(self.provider, responded or requested, context)
        if found is None and responded and requested and responded != requested:
            found = pricing.rates(self.provider, requested, context)
        if found is None:
            return None
        cost = pricing.cost_at(found, usage)
        attrs[semconv.COST_AMOUNT] = cost.amount
        attrs[semconv.COST_CURRENCY] = pricing.CURRENCY
        attrs[semconv.COST_SOURCE] = cost.source
        parts = (
            (semconv.COST_INPUT, cost.input),
            (semconv.COST_CACHE_READ, cost.cache_read),
            (semconv.COST_CACHE_WRITE, cost.cache_write),
            (semconv.COST_CACHE_WRITE_1H, cost.cache_write_1h),
            (semconv.COST_OUTPUT, cost.output),
            (semconv.COST_REASONING, cost.reasoning),
        )
        for name, part in parts:
            if part:  # a part that is 0 is absent
                attrs[name] = part
        if self.proposed:
            attrs[semconv.GEN_AI_USAGE_COST_AMOUNT] = cost.amount
            attrs[semconv.GEN_AI_USAGE_COST_CURRENCY] = pricing.CURRENCY
            attrs[semconv.GEN_AI_USAGE_COST_SOURCE] = cost.source
        return cost

    def _observe_server_compaction(self, usage: Any, response: Mapping[str, Any] | None) -> None:
        """OpenAI ``responses.compact``: the provider compacted on request; report it like any compaction."""
        try:
            model = self.metric_attrs.get(semconv.GEN_AI_REQUEST_MODEL) or ""
            engine.observe_provider_compaction(self.span, self.provider, str(model), usage, response, force=True)
        except Exception:
            telemetry.log_once(
                "compact.observe", "otel_context: could not report a server-side compaction", exc_info=True
            )

    def _record_metrics(
        self, duration: float, ttfc: float | None, usage: Any, cost: pricing.Cost | None, saving: float
    ) -> None:
        instruments = telemetry.get().instruments
        attrs = self.metric_attrs
        context = self.context
        instruments.inference_duration.record(duration, attrs, context=context)
        if ttfc is not None:
            instruments.time_to_first_chunk.record(ttfc, attrs, context=context)
        if usage is not None:
            token_counters.add(
                attrs,
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                cost.amount if cost is not None else 0.0,
                cost.cache_write if cost is not None else 0.0,
                saving,
            )
        if instruments.legacy_operation_duration is not None:
            instruments.legacy_operation_duration.record(duration, attrs, context=context)
        if instruments.legacy_token_usage is not None and usage is not None:
            instruments.legacy_token_usage.record(
                usage.input_tokens, {**attrs, semconv.GEN_AI_TOKEN_TYPE: semconv.TOKEN_TYPE_INPUT}, context=context
            )
            instruments.legacy_token_usage.record(
                usage.output_tokens, {**attrs, semconv.GEN_AI_TOKEN_TYPE: semconv.TOKEN_TYPE_OUTPUT}, context=context
            )


_error_type_hooks: list[Callable[[BaseException], str | None]] = []
# Reset and a fork's child: kept (the SDK modules' readers, added at their import: code, not state).
process_state.register(__name__, ("_error_type_hooks",), on_reset=None, in_forked_child=None)


def _error_type_of(error: BaseException) -> str:
    for hook in _error_type_hooks:
        found = hook(error)
        if found:
            return found
    return _qualified_name(error)


def _short(error: BaseException) -> str:
    text = str(error)
    return text if len(text) <= 300 else text[:300] + "..."


def register_error_type(hook: Callable[[BaseException], str | None]) -> None:
    """Add an SDK's "API error type" reader (first non-empty answer wins; else the qualified class name)."""
    if hook not in _error_type_hooks:
        _error_type_hooks.append(hook)
