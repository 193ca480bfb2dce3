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

import asyncio
import contextlib
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanKind

from otel_context import engine, semconv, telemetry
from otel_context.contract import CallPlan, CallRequest
from otel_context.flow import SummaryRequest, SummaryResult, adrive, drive, in_summarizer
from otel_context.formats import for_format
from otel_context.formats.too_long import is_too_long
from otel_context.settings import Settings

from ._background import route_async, route_sync
from ._call import Call, register_error_type
from ._content import Capture
from ._formats import WireFormatHandler
from ._summarizer import SummarizerBudget

__all__ = ["NATIVE_OFF_KEY", "Call", "ClientInfo", "Endpoint", "Interceptor", "SDKSpec", "native_tracing_allowed"]

#: Context key set while one of our spans is current and the SDK's own span must not be made.
NATIVE_OFF_KEY = otel_context.create_key("otel_context.native_spans_off")


def native_tracing_allowed() -> bool:
    """False while an instrumented call runs (so anthropic's native span is skipped) or when suppressed."""
    return not otel_context.get_value(NATIVE_OFF_KEY) and is_instrumentation_enabled()


@dataclass(frozen=True)
class Endpoint:
    """One row of the endpoint table."""

    operation: str  #: gen_ai.operation.name
    fmt: WireFormatHandler
    chat: bool  #: whether the context engine plans this call


@dataclass(frozen=True)
class ClientInfo:
    """Who a client talks to (provider name, server address and port): span and metric attributes."""

    provider: str
    address: str | None
    port: int | None


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

    def provider(self, client: Any, host: str | None) -> str:
        raise NotImplementedError

    def plain_body(self, body: Any) -> tuple[Any, bool]:
        """The JSON-shaped body the SDK would send (drops sentinels, lists iterators; may be ``body`` itself),
        and whether it is the SDK's own prepared copy, which must then be sent instead of ``body`` (preparing
        may have consumed an iterator the app passed)."""
        return body, False

    async def aplain_body(self, body: Any) -> tuple[Any, bool]:
        return self.plain_body(body)

    def error_type(self, exc: BaseException) -> str | None:
        """The API's own error type/code, when the provider returned one."""
        return None


class _Begun:
    """What ``Interceptor.begin`` hands back to the wrapper: the call, the parsed arguments, the context token."""

    __slots__ = ("call", "cast_to", "endpoint", "options", "rest", "token")

    def __init__(self, call: Call, endpoint: Endpoint, cast_to: Any, options: Any, rest: dict[str, Any], token: Any):
        self.call = call
        self.endpoint = endpoint
        self.cast_to = cast_to
        self.options = options
        self.rest = rest
        self.token = token


class Interceptor:
    """The wrapt wrappers for one SDK's ``request`` (sync and async) and everything they share."""

    def __init__(self, spec: SDKSpec, settings: Settings) -> None:
        self.spec = spec
        self.settings = settings
        self._clients: weakref.WeakKeyDictionary[Any, tuple[Any, ClientInfo]] = weakref.WeakKeyDictionary()
        register_error_type(spec.error_type)
        from ._streams import wrap_result  # late: _streams imports this module

        self._wrap_result = wrap_result

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
        info = ClientInfo(self.spec.provider(client, host), host, port)
        with contextlib.suppress(TypeError):
            self._clients[client] = (base, info)
        return info

    def begin(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Begun | None:
        """Start the span for an instrumented endpoint; None for calls we leave alone."""
        if not is_instrumentation_enabled():
            return None
        rest = dict(kwargs)
        if len(args) >= 2:
            cast_to, options = args[0], args[1]
        else:
            cast_to = args[0] if args else rest.pop("cast_to")
            options = rest.pop("options")
        rest.pop("cast_to", None)
        rest.pop("options", None)
        endpoint = self.spec.endpoints.get(options.url)
        if endpoint is None or options.method.lower() != "post":
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
        call = Call(span, endpoint.fmt, endpoint.chat, metric_attrs, client_info.provider, stream)
        ctx = trace.set_span_in_context(span)
        if self.spec.has_native_spans and not self.settings.anthropic_native_spans:
            ctx = otel_context.set_value(NATIVE_OFF_KEY, True, ctx)
        token = otel_context.attach(ctx)
        return _Begun(call, endpoint, cast_to, options, rest, token)

    def _call_request(self, begun: _Begun, body: Any) -> CallRequest:
        """What the engine is told about the call: ``body`` as the SDK would send it, the app's own headers."""
        model = body.get("model") if type(body) is dict or isinstance(body, Mapping) else None
        raw_headers = getattr(begun.options, "headers", None)
        headers = (
            {key.lower(): value for key, value in _app_headers(raw_headers).items()}
            if type(raw_headers) is dict or isinstance(raw_headers, Mapping)
            else {}
        )
        fmt = begun.endpoint.fmt
        return CallRequest(
            provider=begun.call.provider,
            wire_format=fmt.wire_format,  # type: ignore[arg-type]
            body=body,
            model=model if isinstance(model, str) else None,
            settings=self.settings,
            headers=headers,
            background=True,  # the plan's drivers below run background summaries (._background)
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
        begun.call.plan = plan  # its attributes go on the span with the response's, in one write (Call.end)
        if plan.body is not plain:
            begun.options = begun.options.model_copy(update={"json_data": plan.body})
        elif prepared and plain is not begun.options.json_data:
            begun.options = begun.options.model_copy(update={"json_data": plain})

    def _summary_options(self, options: Any, body: Mapping[str, Any]) -> Any:
        """The summarizer's request: the app's call options (same client, headers the app set; retries and
        timeout are the summarizer's own, see :class:`._summarizer.SummarizerBudget`) with
        the engine's body, never streamed, and without the app's post parser (``parse()`` helpers set one),
        which would otherwise be applied to the summary's raw HTTP response."""
        clean = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        kept = _app_headers(options.headers) if isinstance(options.headers, Mapping) else {}
        return options.model_copy(
            update={"json_data": clean, "headers": kept, "post_parser": _NOT_GIVEN_PARSER(options)}
        )

    def _summary_result(self, response: Any, fmt: WireFormatHandler, provider: str) -> SummaryResult:
        data = response.json()
        info = fmt.response_info(data, provider)
        return SummaryResult(text=fmt.response_text(data), usage=info.usage)

    def _summary_error(self, exc: BaseException, wire_format: str | None) -> SummaryResult:
        too_long = wire_format is not None and self._is_rejection(exc) and is_too_long(for_format(wire_format), exc)
        return SummaryResult(error=exc, too_long=too_long)

    def _is_rejection(self, exc: BaseException) -> bool:
        """An error the provider answered with (the plan then decides, with the one too-long classifier,
        whether it says the request was too long); not a connection or client-side error."""
        return isinstance(exc, self.spec.status_error)

    # -- sync ---------------------------------------------------------------------------------------------------

    def sync_request(
        self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            begun = self.begin(instance, args, kwargs)
        except Exception:
            telemetry.log_once("begin", "otel_context: could not start a span", exc_info=True)
            begun = None
        if begun is None:
            return wrapped(*args, **kwargs)
        call = begun.call
        try:
            if begun.endpoint.chat and not in_summarizer.get():
                self._plan_sync(begun, instance)
            elif self.settings.capture_content != "NO_CONTENT":
                self._capture_request(begun, begun.options.json_data)
            call.sent = time.perf_counter()
            try:
                result = wrapped(begun.cast_to, begun.options, **begun.rest)
            except Exception as exc:
                result = self._retry_sync(begun, instance, wrapped, exc)
            except BaseException as exc:
                call.end(None, None, exc)
                raise
            if call.plan is not None and _window_exceeded(result):
                result = self._retry_window_sync(begun, instance, wrapped, result)
            return self._wrap_result(self, call, result, begun.options)
        finally:
            otel_context.detach(begun.token)

    def _plan_sync(self, begun: _Begun, instance: Any) -> None:
        try:
            body, prepared = self.spec.plain_body(begun.options.json_data)
            request = self._call_request(begun, body)
            send = route_sync(self._sync_sender(begun, instance), lambda: self._sync_sender(begun, instance))
            plan = drive(engine.plan(begun.call.span, request), send)
            self._apply_plan(begun, plan, body, prepared)
            self._capture_request(begun, plan.body)  # what is sent, as plain JSON (no SDK sentinels)
        except Exception:
            telemetry.log_once(
                "plan", "otel_context: the context engine failed; sending the call unchanged", exc_info=True
            )

    def _sync_sender(self, begun: _Begun, instance: Any) -> Callable[[SummaryRequest], SummaryResult]:
        fmt, provider, options = begun.endpoint.fmt, begun.call.provider, begun.options
        spec = self.spec

        budget = SummarizerBudget(self.settings)

        def send(request: SummaryRequest) -> SummaryResult:
            token = in_summarizer.set(True)
            try:
                attempt = 0
                while True:
                    try:
                        sent = budget.options(self._summary_options(options, request.body))
                        response = instance.request(spec.httpx_response, sent)
                        return self._summary_result(response, fmt, provider)
                    except Exception as exc:
                        wait = budget.retry_wait(exc, attempt, spec.status_error, spec.connection_error)
                        if wait is None:
                            return self._summary_error(exc, fmt.wire_format)
                    time.sleep(wait)
                    attempt += 1
            finally:
                in_summarizer.reset(token)

        return send

    def _compacted_body_sync(self, begun: _Begun, instance: Any, error: BaseException) -> Any:
        """The body the engine would retry with after ``error`` (None: no retry); never raises."""
        call = begun.call
        assert call.plan is not None
        try:
            return drive(call.plan.on_too_long(call.span, error), self._sync_sender(begun, instance))
        except Exception:
            telemetry.log_once("on_too_long", "otel_context: reactive compaction failed", exc_info=True)
            return None

    def _retry_sync(self, begun: _Begun, instance: Any, wrapped: Callable[..., Any], exc: Exception) -> Any:
        call = begun.call
        retry_body = None
        if call.plan is not None and self._is_rejection(exc):
            retry_body = self._compacted_body_sync(begun, instance, exc)
        if retry_body is None:
            call.end(None, None, exc)
            raise exc
        try:
            begun.options = begun.options.model_copy(update={"json_data": retry_body})
            return wrapped(begun.cast_to, begun.options, **begun.rest)
        except Exception:
            pass  # the retry failed too: the ORIGINAL error is what the app sees
        call.end(None, None, exc)
        raise exc

    def _retry_window_sync(self, begun: _Begun, instance: Any, wrapped: Callable[..., Any], result: Any) -> Any:
        """Anthropic answered ``stop_reason=model_context_window_exceeded``: let the engine compact, resend once."""
        body = self._compacted_body_sync(begun, instance, ContextWindowExceeded())
        if body is None:
            return result
        try:
            retry_options = begun.options.model_copy(update={"json_data": body})
            retried = wrapped(begun.cast_to, retry_options, **begun.rest)
        except Exception:
            return result  # the first answer stands
        begun.options = retry_options
        return retried

    # -- async --------------------------------------------------------------------------------------------------

    async def async_request(
        self, wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        try:
            begun = self.begin(instance, args, kwargs)
        except Exception:
            telemetry.log_once("begin", "otel_context: could not start a span", exc_info=True)
            begun = None
        if begun is None:
            return await wrapped(*args, **kwargs)
        call = begun.call
        try:
            if begun.endpoint.chat and not in_summarizer.get():
                await self._plan_async(begun, instance)
            elif self.settings.capture_content != "NO_CONTENT":
                self._capture_request(begun, begun.options.json_data)
            call.sent = time.perf_counter()
            try:
                result = await wrapped(begun.cast_to, begun.options, **begun.rest)
            except Exception as exc:
                result = await self._retry_async(begun, instance, wrapped, exc)
            except BaseException as exc:
                call.end(None, None, exc)
                raise
            if call.plan is not None and _window_exceeded(result):
                result = await self._retry_window_async(begun, instance, wrapped, result)
            return self._wrap_result(self, call, result, begun.options)
        finally:
            otel_context.detach(begun.token)

    async def _plan_async(self, begun: _Begun, instance: Any) -> None:
        try:
            body, prepared = await self.spec.aplain_body(begun.options.json_data)
            request = self._call_request(begun, body)
            send = route_async(self._async_sender(begun, instance), lambda: self._async_sender(begun, instance))
            plan = await adrive(engine.plan(begun.call.span, request), send)
            self._apply_plan(begun, plan, body, prepared)
            self._capture_request(begun, plan.body)  # what is sent, as plain JSON (no SDK sentinels)
        except Exception:
            telemetry.log_once(
                "plan", "otel_context: the context engine failed; sending the call unchanged", exc_info=True
            )

    def _async_sender(self, begun: _Begun, instance: Any) -> Callable[[SummaryRequest], Any]:
        fmt, provider, options = begun.endpoint.fmt, begun.call.provider, begun.options
        spec = self.spec

        budget = SummarizerBudget(self.settings)

        async def send(request: SummaryRequest) -> SummaryResult:
            token = in_summarizer.set(True)
            try:
                attempt = 0
                while True:
                    try:
                        sent = budget.options(self._summary_options(options, request.body))
                        response = await instance.request(spec.httpx_response, sent)
                        return self._summary_result(response, fmt, provider)
                    except Exception as exc:
                        wait = budget.retry_wait(exc, attempt, spec.status_error, spec.connection_error)
                        if wait is None:
                            return self._summary_error(exc, fmt.wire_format)
                    await asyncio.sleep(wait)
                    attempt += 1
            finally:
                in_summarizer.reset(token)

        return send

    async def _compacted_body_async(self, begun: _Begun, instance: Any, error: BaseException) -> Any:
        """The body the engine would retry with after ``error`` (None: no retry); never raises."""
        call = begun.call
        assert call.plan is not None
        try:
            return await adrive(call.plan.on_too_long(call.span, error), self._async_sender(begun, instance))
        except Exception:
            telemetry.log_once("on_too_long", "otel_context: reactive compaction failed", exc_info=True)
            return None

    async def _retry_async(self, begun: _Begun, instance: Any, wrapped: Callable[..., Any], exc: Exception) -> Any:
        call = begun.call
        retry_body = None
        if call.plan is not None and self._is_rejection(exc):
            retry_body = await self._compacted_body_async(begun, instance, exc)
        if retry_body is None:
            call.end(None, None, exc)
            raise exc
        try:
            begun.options = begun.options.model_copy(update={"json_data": retry_body})
            return await wrapped(begun.cast_to, begun.options, **begun.rest)
        except Exception:
            pass  # the retry failed too: the ORIGINAL error is what the app sees
        call.end(None, None, exc)
        raise exc

    async def _retry_window_async(self, begun: _Begun, instance: Any, wrapped: Callable[..., Any], result: Any) -> Any:
        body = await self._compacted_body_async(begun, instance, ContextWindowExceeded())
        if body is None:
            return result
        try:
            retry_options = begun.options.model_copy(update={"json_data": body})
            retried = await wrapped(begun.cast_to, retry_options, **begun.rest)
        except Exception:
            return result
        begun.options = retry_options
        return retried


class ContextWindowExceeded(Exception):
    """Handed to ``plan.on_too_long`` when Anthropic stopped with ``model_context_window_exceeded``."""

    def __init__(self) -> None:
        super().__init__("model_context_window_exceeded")


def _window_exceeded(result: Any) -> bool:
    return getattr(result, "stop_reason", None) == "model_context_window_exceeded"


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
