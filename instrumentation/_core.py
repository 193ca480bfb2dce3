"""The one choke point per SDK: a wrapper around the base client's ``request`` method.

Every surface of both SDKs (create, parse, the ``stream()`` helpers, ``with_raw_response``,
``with_streaming_response``, beta namespaces, Azure/Bedrock/Vertex clients) funnels into
``SyncAPIClient.request`` / ``AsyncAPIClient.request`` with the request options (method, url, JSON body)
and the stream class. An endpoint table keyed by URL path says which calls become spans, their
operation and their wire format; everything else passes straight through.

The user's call comes first: every piece of telemetry or engine work runs inside ``try`` blocks that log
once and carry on, and the SDK call itself is made exactly as the app asked (or with the engine's new
body, on a copy of the options).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanKind

from otel_context import engine, semconv, telemetry
from otel_context.contract import CallPlan, CallRequest
from otel_context.flow import (
    BackgroundStart,
    BackgroundWait,
    Sleep,
    Step,
    Stopped,
    StoreRequest,
    SummaryRequest,
    SummaryResult,
    adrive,
    aperform_plain,
    drive,
    in_summarizer,
    perform_plain,
)
from otel_context.formats import for_format
from otel_context.formats.base import EndpointFormat
from otel_context.formats.too_long import is_too_long
from otel_context.settings import Settings

from . import _background
from ._call import InstrumentedCall, register_error_type
from ._content import Capture
from ._streams import wrap_result
from ._summarizer import SummarizerAllowance

__all__ = ["ClientInfo", "Endpoint", "InstrumentedCall", "Interceptor", "SDKSpec", "native_tracing_allowed"]

#: Set while one of our spans is current and the SDK's own span must not be made. A context variable of its
#: own, set and reset around the call like the span's OpenTelemetry context: putting it in that context
#: cost a copy of the context on every call and a lookup in it whenever the SDK asks.
_native_off: contextvars.ContextVar[bool] = contextvars.ContextVar("otel_context_native_spans_off", default=False)


def native_tracing_allowed() -> bool:
    """False while an instrumented call runs (so anthropic's native span is skipped) or when suppressed."""
    return not _native_off.get() and is_instrumentation_enabled()


@dataclass(frozen=True)
class Endpoint:
    """One row of the endpoint table."""

    operation: str  #: gen_ai.operation.name
    fmt: EndpointFormat
    chat: bool  #: whether the context engine plans this call


@dataclass(frozen=True)
class ClientInfo:
    """Who a client talks to (provider name, server address and port): span and metric attributes."""

    provider: str
    address: str | None
    port: int | None
    #: ``host:port`` ("" when the client names no host): the engine remembers per server what it refused.
    server: str = ""


class _NeverRaised(Exception):
    """Default of :attr:`SDKSpec.connection_error`: an SDK that does not name one retries no connection error."""


class SDKSpec:
    """What the generic interceptor needs to know about one SDK; ``anthropic.py`` / ``openai.py`` fill it."""

    name: str = ""
    endpoints: Mapping[str, Endpoint] = {}
    stream_types: tuple[type, ...] = ()
    response_types: tuple[type, ...] = ()
    status_error: type[BaseException] = Exception
    #: The SDK's connection error (timeouts included): a summarizer request failing with it may be retried.
    connection_error: type[BaseException] = _NeverRaised
    httpx_response: type = object
    #: Whether our span should keep the SDK's own span off (anthropic).
    has_native_spans: bool = False
    #: Whether a response can stop with ``model_context_window_exceeded`` (anthropic): only then is it read
    #: for that stop reason (reading an absent attribute of an OpenAI response costs ~1.7 µs a call).
    stops_at_window: bool = False

    def provider(self, client: Any, host: str | None) -> str:
        raise NotImplementedError

    def plain_body(self, body: Any) -> Any:
        """The JSON-shaped body the SDK would send, when that is known without the SDK's own preparation (no
        I/O, no copy of the history; may be ``body`` itself); None when only :meth:`prepared_body` can tell.
        Asked on every call, inline: only the rare body that needs preparing costs the flow a step."""
        return body

    def prepared_body(self, body: Any) -> Any:
        """The SDK's own preparation of ``body`` (drops sentinels, lists iterators): a copy, which must then be
        sent instead of ``body`` (preparing may have consumed an iterator the app passed)."""
        return body

    async def aprepared_body(self, body: Any) -> Any:
        return self.prepared_body(body)

    def error_type(self, exc: BaseException) -> str | None:
        """The API's own error type/code, when the provider returned one."""
        return None


class _Send(NamedTuple):
    """Send the app's call with these options (the SDK's result)."""

    options: Any


class _SendRaw(NamedTuple):
    """Send a summary request through the client, unparsed (an ``httpx.Response``)."""

    options: Any


class _Prepare(NamedTuple):
    """The SDK's own preparation of a body (``SDKSpec.prepared_body`` / ``aprepared_body``)."""

    body: Any


#: What the flow of a call asks its driver for: the call's own SDK I/O (the three above), or one of the engine's
#: steps as the engine yielded it, a summary request excepted (the flow sends that itself, as a ``_SendRaw``
#: with the summarizer's allowance: :meth:`Interceptor._summarize`). ``Interceptor._perform`` does each.
_CallStep = _Send | _SendRaw | _Prepare | StoreRequest | BackgroundStart | BackgroundWait | Sleep
T = TypeVar("T")


class _Begun:
    """What ``Interceptor.begin`` hands back to the wrapper: the call, the parsed arguments, the context token."""

    __slots__ = ("call", "cast_to", "endpoint", "native_off", "options", "rest", "token")

    def __init__(
        self,
        call: InstrumentedCall,
        endpoint: Endpoint,
        cast_to: Any,
        options: Any,
        rest: dict[str, Any],
        token: Any,
        native_off: contextvars.Token[bool] | None,
    ):
        self.call = call
        self.endpoint = endpoint
        self.cast_to = cast_to
        self.options = options
        self.rest = rest
        self.token = token  #: the OpenTelemetry context attached for the call
        self.native_off = native_off  #: set when the SDK's native span is kept off for the call

    def detach(self) -> None:
        """Undo what :meth:`Interceptor.begin` made current, when the wrapper returns."""
        if self.native_off is not None:
            _native_off.reset(self.native_off)
        otel_context.detach(self.token)


class Interceptor:
    """The wrapt wrappers for one SDK's ``request`` (sync and async) and everything they share."""

    def __init__(self, spec: SDKSpec, settings: Settings) -> None:
        self.spec = spec
        self.settings = settings
        self._clients: weakref.WeakKeyDictionary[Any, tuple[Any, ClientInfo]] = weakref.WeakKeyDictionary()
        register_error_type(spec.error_type)
        self._wrap_result = wrap_result
        self.proposed_names = semconv.CONVENTIONS_PROPOSED in settings.conventions
        self.legacy_names = semconv.CONVENTIONS_LEGACY in settings.conventions

    # -- call set-up ----------------------------------------------------------------------------------------

    def client_info(self, client: Any) -> ClientInfo:
        """Worked out once per client while its ``base_url`` stays the same object: the provider test walks
        the client's class names and host, which would otherwise run on every call."""
        base = getattr(client, "base_url", None)
        try:
            entry = self._clients.get(client)
        except TypeError:  # not weak-referenceable
            entry = None
        if entry is not None and entry[0] is base:
            return entry[1]
        host = getattr(base, "host", None) or None
        port = getattr(base, "port", None)
        if port is None and host is not None:
            port = 443 if getattr(base, "scheme", "https") == "https" else 80
        info = ClientInfo(self.spec.provider(client, host), host, port, f"{host}:{port}" if host else "")
        with contextlib.suppress(TypeError):
            self._clients[client] = (base, info)
        return info

    def begin(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Begun | None:
        """Start the span for an instrumented endpoint; None for calls we leave alone."""
        if not is_instrumentation_enabled():
            return None
        if len(args) >= 2 and "cast_to" not in kwargs and "options" not in kwargs:
            cast_to, options, rest = args[0], args[1], kwargs  # how both SDKs call it: nothing to copy
        else:
            rest = dict(kwargs)
            if len(args) >= 2:
                cast_to, options = args[0], args[1]
            else:
                cast_to = args[0] if args else rest.pop("cast_to")
                options = rest.pop("options")
            rest.pop("cast_to", None)
            rest.pop("options", None)
        endpoint = self.spec.endpoints.get(options.url)
        if endpoint is None or (options.method != "post" and options.method.lower() != "post"):
            return None
        body = options.json_data
        if type(body) is not dict and not isinstance(body, Mapping):
            return None
        model = body.get("model")
        model = model if isinstance(model, str) else None
        stream = bool(rest.get("stream", False))
        client_info = self.client_info(client)
        operation = endpoint.operation
        attrs: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: operation,
            semconv.GEN_AI_PROVIDER_NAME: client_info.provider,
        }
        if model is not None:
            attrs[semconv.GEN_AI_REQUEST_MODEL] = model
        if client_info.address is not None:
            attrs[semconv.SERVER_ADDRESS] = client_info.address
        metric_attrs = dict(attrs)
        if client_info.port is not None:
            attrs[semconv.SERVER_PORT] = client_info.port
        if endpoint.chat:
            attrs[semconv.GEN_AI_REQUEST_STREAM] = stream
        attrs.update(endpoint.fmt.request_attributes(body))
        name = f"{operation} {model}" if model else operation
        span = telemetry.get().tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        if not span.is_recording():
            telemetry.not_recording(span)  # no tracer provider set up: said once
        ctx = trace.set_span_in_context(span)
        call = InstrumentedCall(span, endpoint.fmt, endpoint.chat, metric_attrs, client_info.provider, stream, ctx)
        if self.proposed_names:
            call.proposed = True
        if self.legacy_names:
            call.legacy = True
        call.server = client_info.server
        token = otel_context.attach(ctx)
        native_off = (
            _native_off.set(True) if self.spec.has_native_spans and not self.settings.anthropic_native_spans else None
        )
        return _Begun(call, endpoint, cast_to, options, rest, token, native_off)

    def _call_request(self, begun: _Begun, body: Any) -> CallRequest:
        """What the engine is told about the call: ``body`` as the SDK would send it, the app's own headers."""
        model = body.get("model") if type(body) is dict or isinstance(body, Mapping) else None
        raw_headers = getattr(begun.options, "headers", None)
        headers = (
            {key.lower(): value for key, value in _app_headers(raw_headers).items()}
            if type(raw_headers) is dict or isinstance(raw_headers, Mapping)
            else {}
        )
        call = begun.call
        return CallRequest(  # positional (one is made per call): provider, format, body, model, settings, headers
            call.provider,
            begun.endpoint.fmt.wire_format or "",
            body,
            model if isinstance(model, str) else None,
            self.settings,
            headers,
            True,  # background: the plan's drivers below run background summaries (._background)
            call.context,
            call.server,
        )

    def _capture_request(self, begun: _Begun, body: Any) -> None:
        mode = self.settings.capture_content
        if mode != "NO_CONTENT" and begun.call.span.is_recording():
            try:
                begun.call.capture = Capture(
                    mode, self.settings.capture_max_chars, begun.endpoint.fmt.wire_format, body
                )
            except Exception:
                telemetry.log_once("capture", "otel_context: content capture failed", exc_info=True)

    def _apply_plan(self, begun: _Begun, plan: CallPlan, plain: Any, prepared: bool) -> None:
        """Send the engine's body when it changed the request, or the SDK-prepared copy that must replace the
        app's; otherwise the options stay the app's own (no copy: the SDK drops its sentinels itself)."""
        begun.call.plan = plan  # its attributes go on the span with the response's, in one write (InstrumentedCall.end)
        if plan.body is not plain:
            begun.options = begun.options.model_copy(update={"json_data": plan.body})
        elif prepared and plain is not begun.options.json_data:
            begun.options = begun.options.model_copy(update={"json_data": plain})

    def _summary_options(self, options: Any, body: Mapping[str, Any]) -> Any:
        """The summarizer's request: the app's call options (the headers the app set; retries and
        timeout are the summarizer's own, see :class:`._summarizer.SummarizerAllowance`) with
        the engine's body, never streamed, and without the app's post parser (``parse()`` helpers set one),
        which would otherwise be applied to the summary's raw HTTP response."""
        clean = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        kept = _app_headers(options.headers) if isinstance(options.headers, Mapping) else {}
        return options.model_copy(
            update={"json_data": clean, "headers": kept, "post_parser": _NOT_GIVEN_PARSER(options)}
        )

    def _summary_result(self, response: Any, fmt: EndpointFormat, provider: str) -> SummaryResult:
        data = response.json()
        info = fmt.response_info(data, provider)
        return SummaryResult(
            text=fmt.response_text(data),
            usage=info.usage,
            finish_reasons=info.finish_reasons,
            price_context=info.price_context,
        )

    def _summary_error(self, exc: BaseException, wire_format: str | None) -> SummaryResult:
        too_long = wire_format is not None and self._is_rejection(exc) and is_too_long(for_format(wire_format), exc)
        return SummaryResult(error=exc, too_long=too_long)

    def _is_rejection(self, exc: BaseException) -> bool:
        """An error the provider answered with (the plan then decides, with the one too-long classifier,
        whether it says the request was too long); not a connection or client-side error."""
        return isinstance(exc, self.spec.status_error)

    # -- the call, written once -----------------------------------------------------------------------------
    #
    # The flow of an instrumented call is a generator that yields the I/O it needs (a :data:`_CallStep`) and
    # is sent the result, like the engine (``otel_context.flow``), by the same drivers (``flow.drive`` in
    # :meth:`sync_request`, ``flow.adrive`` in :meth:`async_request`), so the sync and async clients share
    # every decision. It costs about a microsecond per call (measured: 0.6 µs for a flow of two steps over
    # calling the same two functions directly), against ~170 µs of instrumentation overall; the per-chunk path
    # does not use it.

    def _call(self, begun: _Begun) -> Generator[_CallStep, Any, Any]:
        call = begun.call
        if begun.endpoint.chat and not in_summarizer.get():
            yield from self._plan(begun)
        else:
            if begun.endpoint.chat:  # the summarizer's own call (the recursion guard is set): not the app's
                _mark_summarizer(call)
            _background.track(call)  # a background summary's request: its span is ended at exit if in flight
            if self.settings.capture_content != "NO_CONTENT":
                self._capture_request(begun, begun.options.json_data)
        call.sent = time.perf_counter()
        try:
            result = yield _Send(begun.options)
        except Exception as exc:
            result = yield from self._retry(begun, exc)
        except BaseException as exc:
            call.end(None, None, exc)
            raise
        if call.plan is not None and self.spec.stops_at_window and _window_exceeded(result):
            result = yield from self._retry_window(begun, result)
        return self._wrap_result(self.spec, self.settings, call, result, begun.options)

    def _plan(self, begun: _Begun) -> Generator[_CallStep, Any, None]:
        try:
            body = self.spec.plain_body(begun.options.json_data)
            prepared = body is None
            if prepared:
                body = yield _Prepare(begun.options.json_data)
            request = self._call_request(begun, body)
            steps = engine.plan(begun.call.span, request)
            try:
                first = next(steps)
            except StopIteration as done:  # most plans need no summary and no store: no relay to set up
                plan = done.value
            else:
                plan = yield from self._with_summarizer(begun, steps, first)
            self._apply_plan(begun, plan, body, prepared)
            if self.settings.capture_content != "NO_CONTENT":
                self._capture_request(begun, plan.body)  # what is sent, as plain JSON (no SDK sentinels)
        except Exception:
            telemetry.log_once(
                "plan", "otel_context: the context engine failed; sending the call unchanged", exc_info=True
            )

    def _with_summarizer(
        self, begun: _Begun, steps: Generator[Step, Any, T], first: Step | None = None
    ) -> Generator[_CallStep, Any, T]:
        """Run engine steps, sending each summary request through the client the driver sends with (the app's
        own inline; for a background summary, a sibling with connections of its own, see ._summary_client;
        :meth:`_summarize`: one allowance (retries, time) for all the summarizer calls of these steps) and handing every
        other step to the driver as it is (:meth:`_perform`: a store request blocks a sync client's thread and
        is awaited by an async client). ``first``: the step the caller already took from ``steps``, if any."""
        allowance: SummarizerAllowance | None = None  # made by the first summary request (most plans make none)
        try:
            step = next(steps) if first is None else first
            while True:
                if isinstance(step, SummaryRequest):
                    if allowance is None:
                        allowance = SummarizerAllowance(self.settings)
                    reply = yield from self._summarize(begun, allowance, step)
                else:
                    reply = yield step
                step = steps.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            # A flow given up midway (a background summary abandoned by uninstrument()) ends the engine's
            # steps now, so their compact span ends as discarded; finished steps ignore this.
            steps.close()

    def _summarize(
        self, begun: _Begun, allowance: SummarizerAllowance, request: SummaryRequest
    ) -> Generator[_CallStep, Any, SummaryResult]:
        """One summary request, with the recursion guard set (the summarizer's call is a child ``chat`` span
        and is never planned) and the summarizer's own retries and time budget."""
        fmt = begun.endpoint.fmt
        token = in_summarizer.set(True)
        try:
            attempt = 0
            while True:
                try:
                    sent = allowance.options(self._summary_options(begun.options, request.body))
                    response = yield _SendRaw(sent)
                    return self._summary_result(response, fmt, begun.call.provider)
                except Exception as exc:
                    wait = allowance.retry_wait(exc, attempt, self.spec.status_error, self.spec.connection_error)
                    if wait is None:
                        return self._summary_error(exc, fmt.wire_format)
                yield Sleep(wait)
                attempt += 1
        finally:
            in_summarizer.reset(token)

    def _compacted_body(self, begun: _Begun, error: BaseException) -> Generator[_CallStep, Any, Any]:
        """The body the engine would retry with after ``error`` (None: no retry); never raises."""
        call = begun.call
        assert call.plan is not None
        try:
            return (yield from self._with_summarizer(begun, call.plan.on_too_long(call.span, error)))
        except Exception:
            telemetry.log_once("on_too_long", "otel_context: reactive compaction failed", exc_info=True)
            return None

    def _retry(self, begun: _Begun, exc: Exception) -> Generator[_CallStep, Any, Any]:
        """After a failed call: compact and resend once when the provider said too long; else re-raise."""
        call = begun.call
        retry_body = None
        if call.plan is not None and self._is_rejection(exc):
            retry_body = yield from self._compacted_body(begun, exc)
        if retry_body is None:
            call.end(None, None, exc)
            raise exc
        try:
            begun.options = begun.options.model_copy(update={"json_data": retry_body})
            return (yield _Send(begun.options))
        except Exception as again:
            if call.plan is not None and call.plan.resend_error_stands:
                call.end(None, None, again)  # the resend was the app's own request: its error is the app's
                raise again from None
        # The retry failed too: the ORIGINAL error is what the app sees.
        call.end(None, None, exc)
        raise exc

    def _retry_window(self, begun: _Begun, result: Any) -> Generator[_CallStep, Any, Any]:
        """Anthropic stopped with ``model_context_window_exceeded``: compact and resend once; the first
        answer stands when that fails."""
        body = yield from self._compacted_body(begun, ContextWindowExceeded())
        if body is None:
            return result
        try:
            retry_options = begun.options.model_copy(update={"json_data": body})
            retried = yield _Send(retry_options)
        except Exception:
            return result  # the first answer stands
        begun.options = retry_options
        return retried

    # -- the two drivers ------------------------------------------------------------------------------------

    def sync_request(
        self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        begun = self._begin(instance, args, kwargs)
        if begun is None:
            return wrapped(*args, **kwargs)
        try:
            return drive(self._call(begun), lambda step: self._perform(step, begun, wrapped, instance))
        finally:
            begun.detach()

    async def async_request(
        self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        begun = self._begin(instance, args, kwargs)
        if begun is None:
            return await wrapped(*args, **kwargs)
        try:
            return await adrive(self._call(begun), lambda step: self._aperform(step, begun, wrapped, instance))
        finally:
            begun.detach()

    def _begin(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Begun | None:
        try:
            return self.begin(instance, args, kwargs)
        except Exception:
            telemetry.log_once("begin", "otel_context: could not start a span", exc_info=True)
            return None

    def _perform(self, step: _CallStep, begun: _Begun, wrapped: Callable[..., Any], instance: Any) -> Any:
        """Do one step of I/O for the flow, synchronously."""
        if isinstance(step, _Send):
            return wrapped(begun.cast_to, step.options, **begun.rest)
        if isinstance(step, _Prepare):
            return self.spec.prepared_body(step.body)
        if isinstance(step, _SendRaw):
            return instance.request(self.spec.httpx_response, step.options)
        if isinstance(step, BackgroundStart):

            def drive_summary(summary: _background.Flow, stopped: Stopped, client: Any) -> Any:
                perform = functools.partial(self._perform, begun=begun, wrapped=wrapped, instance=client)
                return drive(summary, perform, stopped)

            _background.start_thread(self._with_summarizer(begun, step.steps), drive_summary, instance)
            return None
        return perform_plain(step)

    async def _aperform(self, step: _CallStep, begun: _Begun, wrapped: Callable[..., Any], instance: Any) -> Any:
        """Do one step of I/O for the flow, on the event loop."""
        if isinstance(step, _Send):
            return await wrapped(begun.cast_to, step.options, **begun.rest)
        if isinstance(step, _Prepare):
            return await self.spec.aprepared_body(step.body)
        if isinstance(step, _SendRaw):
            return await instance.request(self.spec.httpx_response, step.options)
        if isinstance(step, BackgroundStart):

            async def adrive_summary(summary: _background.Flow, stopped: Stopped, client: Any) -> Any:
                perform = functools.partial(self._aperform, begun=begun, wrapped=wrapped, instance=client)
                return await adrive(summary, perform, stopped)

            _background.start_task(self._with_summarizer(begun, step.steps), adrive_summary, instance)
            return None
        return await aperform_plain(step)


class ContextWindowExceeded(Exception):
    """Handed to ``plan.on_too_long`` when Anthropic stopped with ``model_context_window_exceeded``."""

    def __init__(self) -> None:
        super().__init__("model_context_window_exceeded")


def _window_exceeded(result: Any) -> bool:
    return getattr(result, "stop_reason", None) == "model_context_window_exceeded"


def _mark_summarizer(call: InstrumentedCall) -> None:
    """``otel_context.call.purpose = compaction`` on the summarizer's own call: its span and its metric series
    (duration, the token counters), so that what compaction costs shows apart from the app's own calls. Only
    here, on the path the recursion guard already takes: the app's calls carry nothing more and pay nothing."""
    call.metric_attrs[semconv.CALL_PURPOSE] = semconv.PURPOSE_COMPACTION
    call.span.set_attribute(semconv.CALL_PURPOSE, semconv.PURPOSE_COMPACTION)


def _app_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """The string headers that belong to the call (e.g. ``anthropic-beta``): the SDK's own ``x-stainless-*``
    headers (raw-response mode, retry count) and ``____*`` control headers (cast-to override) are left out,
    as they must not steer the engine's fingerprint nor the summarizer's request."""
    return {
        key: value
        for key, value in headers.items()
        if isinstance(value, str) and not key.lower().startswith(("x-stainless", "____"))
    }


def _NOT_GIVEN_PARSER(options: Any) -> Any:
    """The options' own "no post parser" value (the SDK's NotGiven sentinel), so a summary is not parsed."""
    field = type(options).model_fields.get("post_parser")
    return field.default if field is not None else None
