"""An OTLP/HTTP trace receiver on loopback for the tests: what a real exporter sends, decoded.

A test that runs an app (or the demo) in a subprocess with the OTLP exporter points it at ``Collector().url``
and reads ``collector.spans`` (protobuf ``Span`` messages) afterwards; :func:`span_attributes` reads one's
attributes as plain values. The collectors that are not there: :func:`closed_port` (nothing listens) and
:func:`silent_collector` (accepts and never answers).
"""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.loopback import AcceptLoop


class Collector:
    """An OTLP/HTTP trace receiver on loopback: the spans of every export request, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    data = gzip.decompress(data)
                request = ExportTraceServiceRequest.FromString(data)
                with collector.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            collector.spans.extend(scope.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def span_attributes(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = getattr(value, kind) if kind is not None else None
    return out


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def silent_collector() -> Iterator[str]:
    """The URL of a collector that accepts connections and never answers (a hung proxy, a stopped container's
    port still forwarded)."""
    accepted: list[socket.socket] = []
    loop = AcceptLoop(accepted.append)
    try:
        yield f"http://127.0.0.1:{loop.port}"
    finally:
        loop.close()
        for conn in accepted:
            conn.close()
