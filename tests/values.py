"""What a test reads back, as plain values for its assertions.

OpenTelemetry types every attribute value as the union of all attribute types (and a span's or an event's
attributes as possibly ``None``), and the SDKs type an API error's body as ``object``: a test comparing one
with a number or indexing into it would need a cast at each read. A test knows what was written:
:func:`attrs_of` gives the attributes of a span, an event or a plan as a ``dict[str, Any]`` (empty when
there are none), :func:`body_of` the JSON body of an SDK's API error (and fails when it is not an object),
:func:`keys_of` the keys a redis client holds, as the bytes they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class HasAttributes(Protocol):
    @property
    def attributes(self) -> Mapping[str, object] | None: ...


class HasBody(Protocol):
    @property
    def body(self) -> object: ...


def attrs_of(holder: HasAttributes) -> dict[str, Any]:
    return dict(holder.attributes or {})


def body_of(error: HasBody) -> dict[str, Any]:
    body = error.body
    assert isinstance(body, dict), body
    return body


def keys_of(client: Any, pattern: str = "*") -> list[bytes]:
    """The keys of a redis client made without ``decode_responses``: bytes (redis-py annotates each key as
    ``bytes | str``, whatever the client's options)."""
    keys = list(client.keys(pattern))
    assert all(isinstance(key, bytes) for key in keys), keys
    return keys
