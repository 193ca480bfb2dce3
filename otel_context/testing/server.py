"""The simulated provider: a real HTTP/1.1 server on loopback that the real SDK clients talk to.

It runs in a daemon thread of the test process (stdlib ``ThreadingHTTPServer``, keep-alive, Nagle off) and
answers the Anthropic and OpenAI endpoints with scripted, deterministic replies, real usage figures, prompt
caching, context-window and tool-pairing errors, and injected faults. Every exchange is recorded.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
import traceback
from collections.abc import Callable, Collection, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .anthropic_api import count_tokens_endpoint, messages_endpoint
from .caching import PromptCache
from .clock import ManualClock
from .errors import DEFAULT_CODE, Flavor, SimError, anthropic_error_body, openai_error_body
from .faults import Fault, FaultQueue
from .ids import anthropic_id, openai_request_id
from .openai_api import (
    chat_completions_endpoint,
    compact_endpoint,
    conversations_endpoint,
    embeddings_endpoint,
    responses_endpoint,
)
from .record import Exchange
from .results import JsonResult, Request, Result, SseEvent
from .scripted import FAITHFUL, SummarizerStyle, summary_pattern
from .state import DIAGNOSIS_ANSWERS, SimState

__all__ = ["SimulatedProvider"]

Endpoint = Callable[[SimState, Request], Result]

_ROUTES: dict[str, tuple[Flavor, Endpoint]] = {
    "/v1/messages": ("anthropic", messages_endpoint),
    "/v1/messages/count_tokens": ("anthropic", count_tokens_endpoint),
    "/v1/chat/completions": ("openai", chat_completions_endpoint),
    "/v1/responses": ("openai", responses_endpoint),
    "/v1/responses/compact": ("openai", compact_endpoint),
    "/v1/conversations": ("openai", conversations_endpoint),
    "/v1/embeddings": ("openai", embeddings_endpoint),
}

_JSON_PARSE_ERROR_OPENAI = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble "
    "figuring out how to fix this, please contact us through our help center at help.openai.com.)"
)
_JSON_PARSE_ERROR_ANTHROPIC = "There was an error parsing the body of your request. Please check that it is valid JSON."


def _reason(status: int) -> str:
    if status == 529:
        return "Overloaded"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _flavor_for(path: str, headers: Mapping[str, str]) -> Flavor:
    if path.startswith("/v1/messages") or "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: listen() backlog. The stdlib's default of 5 made clients fail with connection errors at about 30
    #: simultaneous connections (a burst outruns the single accept loop); load tests of agents open hundreds.
    #: The kernel caps it at net.core.somaxconn (4096 on current Linux).
    request_queue_size = 1024
    block_on_close = False
    allow_reuse_address = True
    sim: SimulatedProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Client disconnects and similar are normal for a test server: never print tracebacks."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "simulated-provider"
    sys_version = ""
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.sim._track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.sim._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default per-request stderr log."""

    def do_POST(self) -> None:
        self.server.sim._handle(self)

    do_GET = do_POST
    do_PUT = do_POST
    do_DELETE = do_POST
    do_PATCH = do_POST
    do_HEAD = do_POST
    do_OPTIONS = do_POST


class SimulatedProvider:
    """A simulated Anthropic + OpenAI API server for tests and demos (see docs/simulated-provider.md).

    ``windows`` overrides the built-in context-window table (model name or prefix -> tokens);
    ``default_window`` applies to unknown models, which are accepted unless ``strict_models`` is True;
    ``clock`` is a callable returning seconds used for cache TTLs (default: a :class:`ManualClock` at 0, so
    ``sim.clock.advance(301)`` expires a 5-minute entry); ``min_cacheable_tokens`` is the smallest Anthropic
    cacheable prefix; ``latency`` adds seconds of delay to every response; ``summary_latency`` adds seconds
    to every summary request (one whose last message asks for a summary, see :mod:`.scripted`), on top of
    ``latency``: a summarizer slower than the model, as with a real one that writes thousands of tokens.
    ``summarizer`` makes summaries lose things as real ones do (a :class:`SummarizerStyle`: the ``FACT:``
    convention with an output cap or a read of the end only, or a style blind to what a conversation plants,
    keeping the start, the end or a sample of its input, or nothing specific); by default the ``FACT:``
    convention with no cap, which keeps every fact (the library's own tests and the demo).
    """

    def __init__(
        self,
        windows: Mapping[str, int] | None = None,
        default_window: int = 200_000,
        clock: Callable[[], float] | None = None,
        min_cacheable_tokens: int = 1024,
        latency: float = 0.0,
        *,
        summary_latency: float = 0.0,
        summarizer: SummarizerStyle | None = None,
        strict_models: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        for model, tokens in (windows or {}).items():
            if not isinstance(tokens, int) or tokens < 1:
                raise ValueError(f"windows[{model!r}] must be a positive int, got {tokens!r}")
        if default_window < 1:
            raise ValueError(f"default_window must be positive, got {default_window}")
        if min_cacheable_tokens < 0:
            raise ValueError(f"min_cacheable_tokens must be >= 0, got {min_cacheable_tokens}")
        if latency < 0:
            raise ValueError(f"latency must be >= 0 seconds, got {latency}")
        if summary_latency < 0:
            raise ValueError(f"summary_latency must be >= 0 seconds, got {summary_latency}")
        if summarizer is not None and not isinstance(summarizer, SummarizerStyle):
            raise TypeError(f"summarizer must be a SummarizerStyle, got {summarizer!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning seconds, got {clock!r}")
        self.clock: Any = clock if clock is not None else ManualClock()
        self.latency = latency
        self.summary_latency = summary_latency
        self._state = SimState(
            clock=self.clock,
            cache=PromptCache(self.clock, min_cacheable_tokens),
            default_window=default_window,
            strict_models=strict_models,
            overrides=dict(windows or {}),
            summarizer=summarizer or FAITHFUL,
        )
        self._faults = FaultQueue()
        self._exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  #: notified when the last request in flight is recorded
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._in_flight = 0
        self._previous_clock: Callable[[], float] | None = None
        self._detector_clock: Callable[[], float] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> SimulatedProvider:
        """Bind a free loopback port and serve in a daemon thread. Returns self."""
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.sim = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True, name="simulated-provider"
        )
        self._thread.start()
        if self.clock is not time.monotonic:
            # A simulated clock moves the cache-break detector's TTL logic too (see cache.swap_clock).
            from otel_context import cache

            self._detector_clock = self.clock
            self._previous_clock = cache.swap_clock(self.clock)
        return self

    def stop(self) -> None:
        """Stop serving and close every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._previous_clock is not None:
            from otel_context import cache

            if cache.current_clock() is self._detector_clock:  # not swapped again since: put the old one back
                cache.swap_clock(self._previous_clock)
            self._previous_clock = self._detector_clock = None
        with self._lock:
            conns = list(self._connections)
            self._connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> SimulatedProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulated provider is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The Anthropic ``base_url``: ``http://127.0.0.1:<port>``."""
        return f"http://{self._host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The OpenAI ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.base_url}/v1"

    # -- SDK clients -----------------------------------------------------------------------------------------

    def _kw(self, kw: dict[str, Any], sdk: Any, *, is_async: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"api_key": "sim-key", "max_retries": 0}
        out.update(kw)
        if "http_client" not in out:
            # The server is plain HTTP on loopback: skip loading the CA bundle (~50 ms per client).
            factory = sdk.DefaultAsyncHttpxClient if is_async else sdk.DefaultHttpxClient
            out["http_client"] = factory(verify=False)
        return out

    def anthropic(self, **kw: Any) -> Any:
        """A real ``anthropic.Anthropic`` client pointed at this server (api_key="sim-key", max_retries=0).

        Keyword arguments go to the client constructor and override those defaults.
        """
        import anthropic

        return anthropic.Anthropic(base_url=self.base_url, **self._kw(kw, anthropic, is_async=False))

    def async_anthropic(self, **kw: Any) -> Any:
        """A real ``anthropic.AsyncAnthropic`` client pointed at this server."""
        import anthropic

        return anthropic.AsyncAnthropic(base_url=self.base_url, **self._kw(kw, anthropic, is_async=True))

    def openai(self, **kw: Any) -> Any:
        """A real ``openai.OpenAI`` client pointed at this server (api_key="sim-key", max_retries=0)."""
        import openai

        return openai.OpenAI(base_url=self.openai_base_url, **self._kw(kw, openai, is_async=False))

    def async_openai(self, **kw: Any) -> Any:
        """A real ``openai.AsyncOpenAI`` client pointed at this server."""
        import openai

        return openai.AsyncOpenAI(base_url=self.openai_base_url, **self._kw(kw, openai, is_async=True))

    # -- configuration and record ----------------------------------------------------------------------------

    @property
    def summarizer(self) -> SummarizerStyle:
        """How summary replies lose things (:class:`SummarizerStyle`; by default the ``FACT:`` convention with
        no cap); settable while the server runs."""
        return self._state.summarizer

    @summarizer.setter
    def summarizer(self, style: SummarizerStyle) -> None:
        if not isinstance(style, SummarizerStyle):
            raise TypeError(f"summarizer must be a SummarizerStyle, got {style!r}")
        self._state.summarizer = style

    @property
    def diagnoses(self) -> str:
        """How a request for a cache diagnosis is answered: ``answered`` (the default), ``pending``,
        ``ignored``, ``unreadable``, ``bad_counts`` or ``retracted`` (:data:`~.state.DIAGNOSIS_ANSWERS`);
        settable while the server runs."""
        return self._state.diagnoses

    @diagnoses.setter
    def diagnoses(self, answer: str) -> None:
        if answer not in DIAGNOSIS_ANSWERS:
            raise ValueError(f"diagnoses={answer!r}: choose one of {', '.join(DIAGNOSIS_ANSWERS)}")
        self._state.diagnoses = answer

    @property
    def diagnoses_pending(self) -> bool:
        """Whether every cache diagnosis is answered as still pending (``diagnoses == "pending"``)."""
        return self._state.diagnoses == "pending"

    @diagnoses_pending.setter
    def diagnoses_pending(self, pending: bool) -> None:
        self._state.diagnoses = "pending" if pending else "answered"

    @property
    def refuses_compaction(self) -> bool | frozenset[str]:
        """Whether Responses server-side compaction (``context_management``) is refused: ``True``, as an endpoint
        that does not know the field (400 ``unknown_parameter`` for every model); a set of model names (or
        prefixes), as models that do not support it (400 ``unsupported_parameter``); ``False`` (the default),
        every model compacts. Settable while the server runs."""
        return self._state.refuses_compaction

    @refuses_compaction.setter
    def refuses_compaction(self, refused: bool | Collection[str]) -> None:
        if isinstance(refused, str) or not isinstance(refused, (bool, Collection)):
            raise TypeError(f"refuses_compaction must be a bool or a collection of model names, got {refused!r}")
        self._state.refuses_compaction = refused if isinstance(refused, bool) else frozenset(refused)

    def set_window(self, model: str, tokens: int) -> None:
        """Override the context window of ``model`` (exact name, or prefix of model names)."""
        if tokens < 1:
            raise ValueError(f"a context window must be positive, got {tokens}")
        self._state.overrides[model] = tokens

    def window(self, model: str) -> int:
        """The context window the server enforces for ``model``."""
        return self._state.window(model, "anthropic" if model.startswith("claude") else "openai")

    def inject(self, fault: Fault) -> None:
        """Queue a fault for the next matching request(s)."""
        self._faults.add(fault)

    def clear_faults(self) -> None:
        """Drop every queued fault."""
        self._faults.clear()

    @property
    def pending_faults(self) -> int:
        return len(self._faults)

    @property
    def exchanges(self) -> list[Exchange]:
        """Every exchange so far, oldest first (a copy)."""
        with self._lock:
            return list(self._exchanges)

    @property
    def last_exchange(self) -> Exchange:
        with self._lock:
            if not self._exchanges:
                raise LookupError("the simulated provider has not answered any request yet")
            return self._exchanges[-1]

    @property
    def in_flight(self) -> int:
        """Requests being handled now. A request the client gave up on is still handled (and recorded) after
        the client call failed: wait for 0 before clearing the record, or it may land in the next test's."""
        with self._lock:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight (see :attr:`in_flight`), at most ``timeout`` seconds; whether none
        is. Call it before :meth:`clear` between tests, so that a request a client gave up on is not recorded
        in the next test's record."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def clear(self) -> None:
        """Forget the recorded exchanges (the prompt cache is kept)."""
        with self._lock:
            self._exchanges.clear()

    def reset_cache(self) -> None:
        """Forget every prompt-cache entry."""
        self._state.cache.reset()

    def forget_prompt_records(self) -> None:
        """Forget the prompts kept for cache diagnostics (see :meth:`PromptCache.forget_records`)."""
        self._state.cache.forget_records()

    @property
    def min_cacheable_tokens(self) -> int:
        return self._state.cache.min_cacheable_tokens

    @min_cacheable_tokens.setter
    def min_cacheable_tokens(self, value: int) -> None:
        self._state.cache.min_cacheable_tokens = value

    # -- internals -------------------------------------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _handle(self, h: _Handler) -> None:
        with self._lock:
            self._in_flight += 1
        try:
            self._handle_request(h)
        finally:
            with self._idle:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.notify_all()

    def _handle_request(self, h: _Handler) -> None:
        # The absolute form (``POST http://host/v1/messages``) is what a client sends through an HTTP proxy;
        # servers must accept it too (RFC 9112, 3.2.2), so the simulator can stand in for a proxy in tests.
        path = urlsplit(h.path).path if h.path.startswith(("http://", "https://")) else h.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            body_bytes = _read_body(h, headers)
        except _HungUp:  # the client gave up while sending: there is no request, and nobody to answer
            h.close_connection = True
            return
        except (ValueError, OSError):  # a broken chunked body: answer, then drop the unreadable connection
            body_bytes = b"\x00"
            h.close_connection = True
        route = _ROUTES.get(path)
        flavor: Flavor = route[0] if route else _flavor_for(path, headers)
        request_id = anthropic_id("req") if flavor == "anthropic" else openai_request_id()
        body: Any = None
        parse_error = False
        if body_bytes:
            try:
                body = json.loads(body_bytes)
            except ValueError:
                parse_error = True
        req = Request(h.command, path, headers, body, request_id)
        exchange = Exchange(h.command, path, headers, body, 0, None, request_id=request_id)
        fault = self._faults.take(path, lambda: _asks_for_summary(body))
        exchange.fault = fault
        if self.latency:
            time.sleep(self.latency)
        if self.summary_latency and _asks_for_summary(body):
            time.sleep(self.summary_latency)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        is_stream = isinstance(body, Mapping) and body.get("stream") is True
        # status + drop_after_events on a stream: N events, then the provider's in-stream error event
        stream_error = (
            fault is not None and fault.status is not None and fault.drop_after_events is not None and is_stream
        )
        if fault is not None and fault.drop_after_events is not None and fault.status is None and not is_stream:
            exchange.dropped = True
            self._record(exchange)
            _abort(h)
            return
        result: Result
        try:
            if fault is not None and fault.status is not None and not stream_error:
                raise SimError(
                    fault.status,
                    fault.message,
                    error_type=fault.error_type,
                    code=fault.code if fault.code is not None else DEFAULT_CODE,
                    headers=_retry_headers(fault.retry_after) if fault.status in (429, 503, 529) else {},
                )
            if parse_error:
                raise SimError(400, _JSON_PARSE_ERROR_ANTHROPIC if flavor == "anthropic" else _JSON_PARSE_ERROR_OPENAI)
            if route is None:
                if flavor == "anthropic":
                    raise SimError(404, "Not Found", error_type="not_found_error")
                raise SimError(404, f"Invalid URL ({h.command} {path})", code=None, error_type="invalid_request_error")
            if h.command != "POST":
                raise SimError(405, f"Method Not Allowed ({h.command} {path})", error_type="invalid_request_error")
            result = route[1](self._state, req)
        except SimError as err:
            result = _error_result(err, flavor, request_id)
            exchange.error = result.body.get("error", {}).get("message") if isinstance(result.body, dict) else None
        except Exception as exc:  # a bug in the simulator: answer like the provider would, keep the traceback
            result = _error_result(SimError(500), flavor, request_id)
            exchange.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        id_header = "request-id" if flavor == "anthropic" else "x-request-id"
        result.headers[id_header] = request_id
        exchange.usage = result.usage
        if isinstance(result, JsonResult):
            exchange.status = result.status
            exchange.response = result.body
            self._record(exchange)
            _send_json(h, result)
            return
        exchange.status = 200
        exchange.stream = True
        events = result.events
        limit = fault.drop_after_events if fault is not None else None
        if limit is not None:
            events = events[:limit]
        if stream_error and fault is not None and fault.status is not None:
            stream_err = SimError(
                fault.status,
                fault.message,
                error_type=fault.error_type,
                code=fault.code if fault.code is not None else DEFAULT_CODE,
            )
            error_events = _stream_error_events(stream_err, flavor, path, request_id, len(events), body)
            exchange.error = str(error_events[0][1])
            events = [*events, *error_events]
            limit = None
        elif limit is not None:
            exchange.dropped = True
        exchange.response = list(events)
        self._record(exchange)
        _send_stream(h, result.headers, events, flavor, complete=limit is None)


def _stream_error_events(
    err: SimError, flavor: Flavor, path: str, request_id: str, sequence: int, body: Any
) -> list[SseEvent]:
    """The error a provider sends inside an already-started stream."""
    if flavor == "anthropic":
        _, payload = anthropic_error_body(err, request_id)
        return [("error", payload)]
    _, payload = openai_error_body(err)
    error = payload["error"]
    if path.endswith("/responses"):
        return [
            (
                "error",
                {
                    "type": "error",
                    "code": error["code"] or error["type"],
                    "message": error["message"],
                    "param": error["param"],
                    "sequence_number": sequence,
                },
            )
        ]
    return [(None, payload)]


def _retry_headers(seconds: float | None) -> dict[str, str]:
    """``retry-after`` (whole seconds) and, for a positive delay, the SDKs' precise ``retry-after-ms``."""
    if seconds is None:
        return {}
    headers = {"retry-after": str(math.ceil(seconds))}
    if seconds > 0:
        headers["retry-after-ms"] = f"{seconds * 1000:g}"
    return headers


class _HungUp(Exception):
    """The connection closed before the whole body arrived (the client gave up while sending it)."""


def _read_exactly(h: _Handler, n: int) -> bytes:
    data = h.rfile.read(n)
    if len(data) < n:
        raise _HungUp
    return data


def _read_body(h: _Handler, headers: Mapping[str, str]) -> bytes:
    length = headers.get("content-length")
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            return b""
        return _read_exactly(h, n) if n > 0 else b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            line = h.rfile.readline(65537)
            if not line:
                raise _HungUp
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                break
            parts.append(_read_exactly(h, size))
            h.rfile.readline(65537)
        return b"".join(parts)
    return b""


def _error_result(err: SimError, flavor: Flavor, request_id: str) -> JsonResult:
    if flavor == "anthropic":
        status, body = anthropic_error_body(err, request_id)
    else:
        status, body = openai_error_body(err)
    headers = dict(err.headers)
    return JsonResult(body, status=status, headers=headers)


def _head(status: int, headers: Mapping[str, str], extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}\r\n", extra]
    for k, v in headers.items():
        lines.append(f"{k}: {v}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def _send_json(h: _Handler, result: JsonResult) -> None:
    payload = json.dumps(result.body, separators=(",", ":"), ensure_ascii=False).encode()
    head = _head(
        result.status,
        result.headers,
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n",
    )
    if h.command == "HEAD":
        payload = b""  # the headers (content-length included) describe the body a GET/POST would get
    try:
        h.wfile.write(head + payload)
    except OSError:
        h.close_connection = True


def _frame(event: SseEvent, flavor: Flavor, chat: bool) -> bytes:
    name, data = event
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    raw = f"data: {text}\n\n" if name is None else f"event: {name}\ndata: {text}\n\n"
    payload = raw.encode()
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _send_stream(
    h: _Handler, headers: Mapping[str, str], events: list[SseEvent], flavor: Flavor, *, complete: bool
) -> None:
    head = _head(
        200,
        headers,
        "content-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n",
    )
    try:
        h.wfile.write(head)
        for event in events:
            h.wfile.write(_frame(event, flavor, False))
        if complete:
            h.wfile.write(b"0\r\n\r\n")
        else:
            _abort(h)
    except OSError:
        h.close_connection = True


def _abort(h: _Handler) -> None:
    """Close the connection abruptly (a dropped connection)."""
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.wfile.flush()
    with contextlib.suppress(OSError):
        h.connection.shutdown(socket.SHUT_RDWR)


def _asks_for_summary(body: Any) -> bool:
    """Whether a request's last message asks for a summary (how the scripted model recognises one)."""
    if not isinstance(body, Mapping):
        return False
    items = body.get("messages") or body.get("input")
    if not isinstance(items, list) or not items:
        return False
    return summary_pattern().search(json.dumps(items[-1], default=str)) is not None
