"""Loading the recorded provider exchanges in ``tests/data/cassettes`` (VCR YAML).

The cassettes come from five projects' test suites and were recorded in several formats (see their
SOURCES.md): gzip ``!!binary`` bodies (once an SSE body), header-less recordings whose content type must be
inferred, pydantic-ai's ``parsed_body`` (JSON stored as YAML) and verbatim SSE strings. This module turns each
into one :class:`Interaction` with the decoded body bytes a server would send, so the replay server and the
shape tests do not each re-learn those quirks.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

#: The recorded exchanges, carried by the repository (their origins and licences: ``SOURCES.md`` there).
CASSETTE_ROOT = Path(__file__).resolve().parents[1] / "data" / "cassettes"


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: its ``event:`` name (None when absent) and its decoded ``data:`` JSON."""

    event: str | None
    data: Any


@dataclass(frozen=True)
class Interaction:
    """One recorded request and the response to it, decoded."""

    method: str
    path: str  # e.g. "/messages", "/chat/completions": without "/v1" and without the query
    query: str
    request_headers: dict[str, str]  # lower-case names
    request_body: Any  # parsed JSON (None when there was none)
    status: int
    headers: dict[str, str]  # lower-case names, without content-encoding / length (the body is decoded)
    body: bytes  # exactly what the replay server sends
    is_sse: bool

    @property
    def provider(self) -> str:
        return "anthropic" if self.path.startswith("/messages") else "openai"

    @property
    def beta(self) -> bool:
        """Recorded through the Anthropic beta namespace (``?beta=true``)."""
        return "beta=true" in self.query

    @property
    def json(self) -> Any:
        """The decoded JSON body of a non-stream response."""
        return json.loads(self.body)

    @property
    def events(self) -> list[SseEvent]:
        """The SSE events of a streamed response (``[DONE]`` and comments dropped)."""
        return parse_sse(self.body)


@dataclass(frozen=True)
class Cassette:
    name: str  # path relative to CASSETTE_ROOT
    interactions: tuple[Interaction, ...] = field(default_factory=tuple)


def parse_sse(body: bytes) -> list[SseEvent]:
    """Split an SSE body into events; tolerant of CRLF and of the trailing spaces some recordings carry."""
    events: list[SseEvent] = []
    text = body.decode("utf-8").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        name: str | None = None
        data_lines: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data_lines.append(line[len("data:") :].strip())
        if not data_lines:
            continue
        data = "\n".join(data_lines)
        if data == "[DONE]":
            continue
        events.append(SseEvent(name, json.loads(data)))
    return events


def _single(headers: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (headers or {}).items():
        out[key.lower()] = str(value[0] if isinstance(value, list) else value)
    return out


def _body_bytes(raw: Any) -> bytes:
    if raw is None:
        return b""
    if isinstance(raw, bytes):
        return raw
    return str(raw).encode("utf-8")


def _request_body(request: dict[str, Any]) -> Any:
    if "parsed_body" in request:
        return request["parsed_body"]
    raw = request.get("body")
    if isinstance(raw, dict):
        raw = raw.get("string")
    data = _body_bytes(raw)
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data) if data.strip() else None


def _interaction(entry: dict[str, Any]) -> Interaction:
    request, response = entry["request"], entry["response"]
    url = urlsplit(request["uri"])
    path = url.path[3:] if url.path.startswith("/v1/") else url.path
    headers = _single(response.get("headers"))
    if "parsed_body" in response:
        body = json.dumps(response["parsed_body"]).encode("utf-8")
    else:
        raw = response.get("body")
        body = _body_bytes(raw.get("string") if isinstance(raw, dict) else raw)
        if headers.get("content-encoding") == "gzip" or body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
    for hop in ("content-encoding", "content-length", "transfer-encoding", "connection"):
        headers.pop(hop, None)
    content_type = headers.get("content-type", "")
    is_sse = "text/event-stream" in content_type or body.lstrip().startswith((b"event:", b"data:"))
    if "content-type" not in headers:  # openinference recordings strip every header
        headers["content-type"] = "text/event-stream; charset=utf-8" if is_sse else "application/json"
    return Interaction(
        method=request["method"].upper(),
        path=path,
        query=url.query,
        request_headers=_single(request.get("headers")),
        request_body=_request_body(request),
        status=int(response["status"]["code"]),
        headers=headers,
        body=body,
        is_sse=is_sse,
    )


@cache
def load(name: str) -> Cassette:
    """One cassette by its path under :data:`CASSETTE_ROOT`."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the big cassettes load 10x faster
    document = yaml.load((CASSETTE_ROOT / name).read_text(encoding="utf-8"), Loader=loader)
    return Cassette(name, tuple(_interaction(entry) for entry in document["interactions"]))


@cache
def all_names() -> tuple[str, ...]:
    """Every cassette, sorted (the 59 of SOURCES.md)."""
    return tuple(sorted(str(p.relative_to(CASSETTE_ROOT)) for p in CASSETTE_ROOT.rglob("*.yaml")))


def short_id(name: str) -> str:
    """A readable pytest id: the file name without the folders and ``.yaml``."""
    return Path(name).stem
