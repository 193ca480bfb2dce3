"""The openai SDK (3.x): one wrapper on ``SyncAPIClient.request`` / ``AsyncAPIClient.request``.

Plus one small hook per stream helper: ``ChatCompletionStream.close()`` and ``ResponseStream.close()``
close the HTTP response directly instead of the SDK stream they wrap, so without the hook a helper
closed early would keep its span open until garbage collection.
"""

from __future__ import annotations

import functools
from typing import Any

from otel_context import semconv
from otel_context.formats import endpoint_format
from otel_context.usage import is_deepseek

from ._core import Endpoint, Interceptor, SDKSpec
from ._instrumentor import SDKInstrumentor
from ._streams import finish_if_proxy

__all__ = ["OpenAIInstrumentor"]

REQUIREMENT = "openai >= 3.50, < 4"


class OpenAISpec(SDKSpec):
    name = "openai"

    def __init__(self) -> None:
        import httpx2
        import openai
        from openai._legacy_response import LegacyAPIResponse
        from openai._response import BaseAPIResponse
        from openai._streaming import AsyncStream, Stream

        try:
            from openai.lib.azure import BaseAzureClient

            self._azure: tuple[type, ...] = (BaseAzureClient,)
        except ImportError:
            self._azure = ()
        self.endpoints = {
            "/chat/completions": Endpoint(semconv.OP_CHAT, endpoint_format("openai_chat"), True),
            "/responses": Endpoint(semconv.OP_CHAT, endpoint_format("openai_responses"), True),
            "/responses/compact": Endpoint(semconv.OP_COMPACT, endpoint_format("openai_compact"), False),
            "/embeddings": Endpoint(semconv.OP_EMBEDDINGS, endpoint_format("openai_embeddings"), False),
        }
        self.stream_types = (Stream, AsyncStream)
        self.response_types = (BaseAPIResponse, LegacyAPIResponse)
        self.status_error = openai.APIStatusError
        self.connection_error = openai.APIConnectionError
        self._api_error = openai.APIError
        self.httpx_response = httpx2.Response

    def provider(self, client: Any, host: str | None) -> str:
        if isinstance(client, self._azure) or (host or "").endswith((".openai.azure.com", ".services.ai.azure.com")):
            return semconv.PROVIDER_AZURE_OPENAI
        if is_deepseek(getattr(client, "base_url", None)):
            return semconv.PROVIDER_DEEPSEEK
        return semconv.PROVIDER_OPENAI

    def error_type(self, exc: BaseException) -> str | None:
        if isinstance(exc, self._api_error):
            for kind in (getattr(exc, "code", None), getattr(exc, "type", None)):
                if isinstance(kind, str) and kind:
                    return kind
        return None


@functools.cache
def _spec() -> OpenAISpec:
    """The one spec per process (it imports the SDK, so only once an instrumentor needs it)."""
    return OpenAISpec()


def _sync_close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        finish_if_proxy(getattr(instance, "_raw_stream", None))


async def _async_close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        finish_if_proxy(getattr(instance, "_raw_stream", None))


class OpenAIInstrumentor(SDKInstrumentor):
    """OpenTelemetry instrumentor for the openai SDK (entry point ``otel_context_openai``)."""

    requirement = REQUIREMENT

    def _make_spec(self) -> SDKSpec:
        return _spec()

    def _patch(self, interceptor: Interceptor) -> None:
        from openai import _base_client

        self._wrap(_base_client.SyncAPIClient, "request", interceptor.sync_request)
        self._wrap(_base_client.AsyncAPIClient, "request", interceptor.async_request)
        helpers: list[tuple[str, str, bool]] = [
            ("openai.lib.streaming.chat._completions", "ChatCompletionStream", False),
            ("openai.lib.streaming.chat._completions", "AsyncChatCompletionStream", True),
            ("openai.lib.streaming.responses._responses", "ResponseStream", False),
            ("openai.lib.streaming.responses._responses", "AsyncResponseStream", True),
        ]
        import importlib

        for module_name, class_name, is_async in helpers:
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue
            if "close" in cls.__dict__:
                self._wrap(cls, "close", _async_close if is_async else _sync_close)
