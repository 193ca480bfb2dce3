"""Proxies that keep a call's span open while its body is still being read, and end it exactly once.

``request`` returns one of: a parsed model (the span ends at once), an SDK ``Stream``/``AsyncStream``
(``stream=True`` and every stream helper, which wraps that same object), or an ``APIResponse`` /
``LegacyAPIResponse`` (``with_raw_response`` / ``with_streaming_response``). The last two are wrapped
in ``wrapt.ObjectProxy`` subclasses: the app keeps the SDK object's full API (helpers, ``isinstance``,
``.response.headers``) while the proxy sees each event, ``close()``, context exit, errors and garbage
collection. Whichever of those comes first ends the span; usage seen so far is kept.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

import wrapt

from otel_context import telemetry
from otel_context.formats.base import Accumulator

if TYPE_CHECKING:
    from otel_context.settings import Settings

    from ._call import InstrumentedCall


class _SDKTypes(Protocol):
    """What :func:`wrap_result` needs to know of an SDK (``_core.SDKSpec`` provides it)."""

    stream_types: tuple[type, ...]
    response_types: tuple[type, ...]
    httpx_response: type


__all__ = ["AsyncStreamProxy", "SyncStreamProxy", "finish_if_proxy", "wrap_result"]

_RAW_HEADER = "x-stainless-raw-response"


def _raw_mode(options: Any) -> str | None:
    headers = getattr(options, "headers", None)
    if not isinstance(headers, dict):
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == _RAW_HEADER and isinstance(value, str):
            return value
    return None


def wrap_result(spec: _SDKTypes, settings: Settings, call: InstrumentedCall, result: Any, options: Any) -> Any:
    """Hand the SDK's result back, wrapped when its body is still to be read; end the span otherwise."""
    # A stream's text is collected for content capture, and for the reply digest of the cache diagnostics.
    collect = settings.capture_content != "NO_CONTENT" or (settings.cache_diagnostics and call.chat)
    try:
        if isinstance(result, spec.stream_types):
            return make_stream_proxy(call, result, collect)
        if isinstance(result, spec.response_types):
            return _wrap_api_response(spec, collect, call, result, options)
        if isinstance(result, spec.httpx_response):
            call.end_response(result.json())  # type: ignore[attr-defined]
            return result
        call.end_response(result)
    except Exception:
        telemetry.log_once("wrap_result", "otel_context: could not follow a response", exc_info=True)
        call.end(None, None, None)
    return result


def make_stream_proxy(call: InstrumentedCall, stream: Any, collect_text: bool) -> Any:
    acc: Accumulator | None = None
    try:
        acc = call.fmt.new_accumulator(call.provider)
        if acc is not None and collect_text:
            acc.texts = []
    except Exception:
        telemetry.log_once("accumulator", "otel_context: could not follow a stream", exc_info=True)
    if hasattr(type(stream), "__anext__"):
        return AsyncStreamProxy(stream, call, acc)
    return SyncStreamProxy(stream, call, acc)


def finish_if_proxy(stream: Any) -> None:
    """End the span of ``stream`` when it is one of our proxies (stream helpers that close the body directly)."""
    if isinstance(stream, _StreamProxy):
        stream._self_finish(None)


class _StreamProxy(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """Shared part of the sync and async stream proxies."""

    def __init__(self, wrapped: Any, call: InstrumentedCall, acc: Accumulator | None) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_acc = acc
        #: Where each chunk goes (the accumulator), set by the first chunk: one call per chunk on the hot
        #: path. (Not a bound method of the proxy: that would be a reference cycle, and an abandoned stream
        #: would then end its span only when the garbage collector runs, not when it is dropped.)
        self._self_add: Callable[[Any], None] | None = None

    def _self_started(self) -> Callable[[Any], None]:
        """The first chunk: time to first chunk, then the sink for every chunk."""
        self._self_call.first_chunk = time.perf_counter()
        acc = self._self_acc
        self._self_add = acc.add if acc is not None else _ignore
        return self._self_add

    def _self_failed(self) -> None:
        telemetry.log_once("stream_event", "otel_context: could not read a stream event", exc_info=True)

    def _self_finish(self, error: BaseException | None) -> None:
        """End the call with what the stream gave. Only an ``Exception`` is a failure: a stream stopped by
        ``KeyboardInterrupt``, ``SystemExit`` or a cancelled task ends as one the app stopped reading."""
        call = self._self_call
        if not call.ended:
            call.end_stream(self._self_acc, error if isinstance(error, Exception) else None)

    def __del__(self) -> None:
        # An abandoned stream: end the span with what was seen (not an error: the app chose to stop).
        with contextlib.suppress(Exception):
            self._self_finish(None)

    def __reduce_ex__(self, protocol: Any) -> Any:  # pragma: no cover - proxies are not picklable
        raise TypeError("stream proxies cannot be pickled")


# The per-chunk code of the two proxies below (``__next__``, and the generators their ``__iter__`` /
# ``__aiter__`` return, which ``for`` loops use) is written out twice on purpose: sharing it through a helper
# adds a call per chunk (about 45 ns measured on our 2-core machine, against the ~0.15 µs a streamed
# Anthropic chunk costs us), on the path that runs once per token batch.


class SyncStreamProxy(_StreamProxy):
    def __iter__(self) -> Any:
        # A ``for`` loop (the app's, or a stream helper's over this raw stream) resumes a generator per
        # chunk instead of calling the Python-level ``__next__`` below: ~110 ns a chunk against ~300.
        return _sync_chunks(self, self.__wrapped__)

    def __next__(self) -> Any:
        try:
            item = self.__wrapped__.__next__()
        except StopIteration:
            self._self_finish(None)
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        add = self._self_add
        try:
            (add if add is not None else self._self_started())(item)
        except Exception:
            self._self_failed()
        return item

    def __enter__(self) -> Any:
        self.__wrapped__.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            self._self_finish(None)

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_finish(None)


class AsyncStreamProxy(_StreamProxy):
    def __aiter__(self) -> Any:
        # As for sync streams: an async generator resumed per chunk, not a coroutine made per chunk.
        return _async_chunks(self, self.__wrapped__)

    async def __anext__(self) -> Any:
        try:
            item = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_finish(None)
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        add = self._self_add
        try:
            (add if add is not None else self._self_started())(item)
        except Exception:
            self._self_failed()
        return item

    async def __aenter__(self) -> Any:
        await self.__wrapped__.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            self._self_finish(None)

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_finish(None)

    async def aclose(self) -> None:
        inner = getattr(self.__wrapped__, "aclose", None) or self.__wrapped__.close
        try:
            await inner()
        finally:
            self._self_finish(None)


def _sync_chunks(proxy: SyncStreamProxy, stream: Any) -> Iterator[Any]:
    """Iterate ``stream`` for ``proxy``: each chunk to its accumulator, the span ended at the stream's end or
    error. An app that stops iterating (the generator is closed) leaves the span open: it may iterate the
    stream again, and ``close()``, context exit or garbage collection of the proxy end it, as for ``next``."""
    add = proxy._self_add
    try:
        for item in stream:
            if add is None:
                add = proxy._self_add or proxy._self_started()
            try:
                add(item)
            except Exception:
                proxy._self_failed()
            yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        proxy._self_finish(exc)
        raise
    proxy._self_finish(None)


async def _async_chunks(proxy: AsyncStreamProxy, stream: Any) -> AsyncIterator[Any]:
    """:func:`_sync_chunks` for async streams."""
    add = proxy._self_add
    try:
        async for item in stream:
            if add is None:
                add = proxy._self_add or proxy._self_started()
            try:
                add(item)
            except Exception:
                proxy._self_failed()
            yield item
    except GeneratorExit:
        raise
    except BaseException as exc:
        proxy._self_finish(exc)
        raise
    proxy._self_finish(None)


# --- with_raw_response / with_streaming_response ----------------------------------------------------------


def _wrap_api_response(spec: _SDKTypes, collect: bool, call: InstrumentedCall, response: Any, options: Any) -> Any:
    if not call.stream and _raw_mode(options) != "stream":
        # with_raw_response on a plain call: the body is already read.
        try:
            data = response.http_response.json()
        except Exception:
            data = None
        if data is not None:
            call.end_response(data)
        else:
            call.end(None, None, None)
        return response
    stream_types = spec.stream_types
    if inspect.iscoroutinefunction(type(response).parse):
        return AsyncAPIResponseProxy(response, call, stream_types, collect)
    return SyncAPIResponseProxy(response, call, stream_types, collect)


class _APIResponseProxy(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    def __init__(self, wrapped: Any, call: InstrumentedCall, stream_types: tuple[type, ...], collect: bool) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_stream_types = stream_types
        self._self_collect = collect
        self._self_parsed: tuple[Any, Any] | None = None

    def _self_on_parsed(self, result: Any) -> Any:
        parsed = self._self_parsed
        if parsed is not None and parsed[0] is result:
            return parsed[1]
        call = self._self_call
        out = result
        try:
            if isinstance(result, self._self_stream_types):
                out = make_stream_proxy(call, result, self._self_collect)
            elif not call.ended:
                call.end_response(result)
        except Exception:
            telemetry.log_once("raw_parse", "otel_context: could not follow a raw response", exc_info=True)
        self._self_parsed = (result, out)
        return out

    def _self_on_json(self, data: Any) -> None:
        call = self._self_call
        if not call.ended and not call.stream and isinstance(data, dict):
            call.end_response(data)

    def _self_finish(self) -> None:
        call = self._self_call
        if call.ended:
            return
        parsed = self._self_parsed
        if parsed is not None and isinstance(parsed[1], _StreamProxy):
            parsed[1]._self_finish(None)
            return
        data = None
        if not call.stream:
            try:
                data = json.loads(self.__wrapped__.http_response.content)
            except Exception:
                data = None
        if isinstance(data, dict):
            call.end_response(data)
        else:
            call.end(None, None, None)

    def __del__(self) -> None:
        parsed = self._self_parsed
        if parsed is not None and isinstance(parsed[1], _StreamProxy):
            return  # the stream handed out owns the span now (and ends it when it is closed or collected)
        with contextlib.suppress(Exception):
            self._self_finish()


class SyncAPIResponseProxy(_APIResponseProxy):
    def parse(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_on_parsed(self.__wrapped__.parse(*args, **kwargs))

    def json(self) -> Any:
        data = self.__wrapped__.json()
        self._self_on_json(data)
        return data

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_finish()


class AsyncAPIResponseProxy(_APIResponseProxy):
    async def parse(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_on_parsed(await self.__wrapped__.parse(*args, **kwargs))

    async def json(self) -> Any:
        data = await self.__wrapped__.json()
        self._self_on_json(data)
        return data

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            self._self_finish()


def _ignore(item: Any) -> None:
    """The chunk sink of a stream whose format has no accumulator."""
