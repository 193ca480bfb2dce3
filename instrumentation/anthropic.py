"""The anthropic SDK (2.x): one wrapper on ``SyncAPIClient.request`` / ``AsyncAPIClient.request``.

The SDK traces itself (``anthropic.messages.create`` spans) whenever a tracer provider exists. To keep
exactly one span per call, the client's ``_tracer`` property answers ``None`` while one of our spans is
current (and under ``suppress_instrumentation()``); ``Settings.anthropic_native_spans`` /
``OTEL_CONTEXT_ANTHROPIC_NATIVE_SPANS=true`` keeps the SDK's span as a child of ours.
"""

from __future__ import annotations

import functools
from typing import Any

from otel_context import semconv
from otel_context.formats import endpoint_format

from ._core import Endpoint, Interceptor, SDKSpec, native_tracing_allowed
from ._instrumentor import SDKInstrumentor
from ._json_native import JsonNativeMemo

__all__ = ["AnthropicInstrumentor"]

REQUIREMENT = "anthropic >= 2.10, < 3"


class AnthropicSpec(SDKSpec):
    name = "anthropic"
    has_native_spans = True
    stops_at_window = True

    def __init__(self) -> None:
        import anthropic
        import httpx2
        from anthropic._response import BaseAPIResponse
        from anthropic._streaming import AsyncStream, Stream

        self._prepare: Any = None
        self._aprepare: Any = None
        try:
            from anthropic._utils import _prepare

            self._prepare = _prepare.prepare_request_data
            self._aprepare = _prepare.async_prepare_request_data
        except (ImportError, AttributeError):  # older 2.x: the body is already prepared by the resource
            pass
        from anthropic._types import NotGiven, Omit

        #: Compared by exact type (a set lookup per value, for the dozen not-given parameters of every body); a
        #: subclass the SDK might add later fails the native test below and takes the SDK's own preparation.
        self._sentinels: frozenset[type] = frozenset((NotGiven, Omit))
        self._native = JsonNativeMemo()
        self.endpoints = {
            "/v1/messages": Endpoint(semconv.OP_CHAT, endpoint_format("anthropic_messages"), True),
            "/v1/messages/count_tokens": Endpoint(
                semconv.OP_COUNT_TOKENS, endpoint_format("anthropic_count_tokens"), False
            ),
        }
        self.stream_types = (Stream, AsyncStream)
        self.response_types = (BaseAPIResponse,)
        self.status_error = anthropic.APIStatusError
        self.connection_error = anthropic.APIConnectionError
        self._api_error = anthropic.APIError
        self.httpx_response = httpx2.Response

    def provider(self, client: Any, host: str | None) -> str:
        names = " ".join(cls.__name__ for cls in type(client).__mro__)
        if "Bedrock" in names or "AWS" in names:
            return semconv.PROVIDER_AWS_BEDROCK
        if "Vertex" in names or "GoogleCloud" in names:
            return semconv.PROVIDER_GCP_VERTEX
        return semconv.PROVIDER_ANTHROPIC

    def plain_body(self, body: Any) -> Any:
        """``body`` without the SDK's not-given sentinels when everything else is already JSON-native, else None.

        The anthropic SDK hands ``request`` the caller's raw params (sentinels, pydantic blocks, iterators).
        Most bodies are plain dicts and lists: a type walk (of what changed since the previous call, see
        ``_json_native``) is much cheaper than the SDK's deep copy, and the caller's body can then be sent as
        is. Anything else (a pydantic block, a generator) takes the SDK's own preparation, whose copy is then
        what gets sent (a generator can only be read once).
        """
        if type(body) is not dict:
            return None
        sentinels = self._sentinels
        stripped = {k: v for k, v in body.items() if type(v) not in sentinels}
        if not self._native.body_is_native(stripped):
            return None
        return body if len(stripped) == len(body) else stripped

    def prepared_body(self, body: Any) -> Any:
        return self._prepare(body, location="body") if self._prepare is not None else body

    async def aprepared_body(self, body: Any) -> Any:
        return await self._aprepare(body, location="body") if self._aprepare is not None else body

    def error_type(self, exc: BaseException) -> str | None:
        if isinstance(exc, self._api_error):
            kind = getattr(exc, "type", None)
            if isinstance(kind, str) and kind:
                return kind
        return None


@functools.cache
def _spec() -> AnthropicSpec:
    """The one spec per process (it imports the SDK, so only once an instrumentor needs it)."""
    return AnthropicSpec()


class AnthropicInstrumentor(SDKInstrumentor):
    """OpenTelemetry instrumentor for the anthropic SDK (entry point ``otel_context_anthropic``)."""

    requirement = REQUIREMENT

    def _make_spec(self) -> SDKSpec:
        return _spec()

    def _patch(self, interceptor: Interceptor) -> None:
        from anthropic import _base_client

        self._wrap(_base_client.SyncAPIClient, "request", interceptor.sync_request)
        self._wrap(_base_client.AsyncAPIClient, "request", interceptor.async_request)
        native = _base_client.BaseClient.__dict__.get("_tracer")
        if isinstance(native, property) and native.fget is not None:
            fget = native.fget

            def _tracer(client: Any) -> Any:
                return fget(client) if native_tracing_allowed() else None

            self._replace(_base_client.BaseClient, "_tracer", property(_tracer, doc=native.__doc__))
