"""A loopback HTTP server that answers the real SDK clients with recorded responses.

Why not a mocking library: the point of the cassette tests is that the REAL SDK code path runs (its HTTP
client ``httpx2``, its SSE decoder, its response parsing, its error mapping) and the instrumentation sees
exactly what it would see in production. So the recorded bytes go over a real socket.

Matching follows SOURCES.md: method + path only (the ``/v1`` prefix and the query are ignored, request bodies
are not matched); several recorded interactions for the same path are answered in recording order. A request
with nothing left to answer gets a 599 with a JSON body naming the miss, and is listed in :attr:`misses`, so a
test can assert that it made exactly the recorded calls.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .cassette import Interaction

#: Status used for "no recorded interaction left": not a code any provider sends, so it cannot be mistaken.
MISS_STATUS = 599


@dataclass(frozen=True)
class ReceivedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any


def _key(method: str, raw_path: str) -> tuple[str, str, str]:
    url = urlsplit(raw_path)
    path = url.path[3:] if url.path.startswith("/v1/") else url.path
    return method.upper(), path, url.query


class ReplayServer:
    """Serve ``interactions`` on ``127.0.0.1:<free port>``; use as a context manager or start()/stop()."""

    def __init__(self, interactions: Iterable[Interaction]) -> None:
        self._queues: dict[tuple[str, str], deque[Interaction]] = {}
        for interaction in interactions:
            self._queues.setdefault((interaction.method, interaction.path), deque()).append(interaction)
        self._lock = threading.Lock()
        self.received: list[ReceivedRequest] = []
        self.misses: list[ReceivedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """For ``anthropic.Anthropic(base_url=...)``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_base_url(self) -> str:
        """For ``openai.OpenAI(base_url=...)`` (the SDK appends paths without ``/v1``)."""
        return self.base_url + "/v1"

    @property
    def remaining(self) -> int:
        """Recorded interactions not answered yet."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def start(self) -> ReplayServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="cassette-replay", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- serving -----------------------------------------------------------------------------------------------

    def _next(self, request: ReceivedRequest) -> Interaction | None:
        with self._lock:
            self.received.append(request)
            queue = self._queues.get((request.method, request.path))
            if not queue:
                self.misses.append(request)
                return None
            return queue.popleft()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the real APIs
            disable_nagle_algorithm = True  # one small write per SSE event: Nagle + delayed ACK = 40 ms each

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the per-request stderr line."""

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                method, path, query = _key(self.command, self.path)
                request = ReceivedRequest(method, path, query, {k.lower(): v for k, v in self.headers.items()}, body)
                interaction = server._next(request)
                if interaction is None:
                    payload = json.dumps({"error": {"type": "no_recorded_interaction", "path": path}}).encode()
                    self.send_response(MISS_STATUS)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(interaction.status)
                for name, value in interaction.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(interaction.body)))
                self.end_headers()
                if interaction.is_sse:
                    # One write per event (byte-exact slices), so the client sees a stream arrive, not a blob.
                    body, start = interaction.body, 0
                    while start < len(body):
                        end = body.find(b"\n\n", start)
                        end = len(body) if end < 0 else end + 2
                        self.wfile.write(body[start:end])
                        self.wfile.flush()
                        start = end
                else:
                    self.wfile.write(interaction.body)
                self.wfile.flush()

            do_POST = _serve
            do_GET = _serve
            do_DELETE = _serve

        return Handler
