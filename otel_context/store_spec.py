"""The grammar of ``OTEL_CONTEXT_STATE_STORE`` / ``instrument(state_store=...)``, checked without connecting.

A settings concern (validated when the settings are resolved, so a bad value fails at instrument time
with the variable's name); :mod:`otel_context.conversation.state_store` opens what it names.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_SCHEMES = ("memory", "redis", "rediss", "unix")
#: Query options of a store URL that are ours (the rest go to redis-py).
_URL_OPTIONS = {"prefix": str, "ttl_seconds": float, "timeout_ms": float, "max_value_bytes": int}


#: Release only the lease we hold (a lease that expired and was taken by another worker stays theirs).
class StateStoreConfigError(ValueError):
    """The store specification cannot be used; the message says what is allowed."""


def _is_store(value: Any) -> bool:
    """Whether ``value`` is a ready state store (duck-typed: this module sits below the store's own)."""
    return all(callable(getattr(value, name, None)) for name in ("get", "aget", "put", "acquire", "release"))


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without our query options, and those options (validated)."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES[1:]:
        raise StateStoreConfigError(
            f"state store URL scheme {parts.scheme!r} is not supported; use memory, redis://host:port/db, "
            "rediss://user:password@host:port/db or unix:///path/to/socket"
        )
    ours: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        kind = _URL_OPTIONS.get(name)
        if kind is None:
            rest.append((name, value))
            continue
        try:
            ours[name] = kind(value)
        except ValueError:
            raise StateStoreConfigError(f"state store URL option {name}={value!r} is not a {kind.__name__}") from None
    return urlunsplit(parts._replace(query=urlencode(rest))), ours


def validate_spec(spec: Any) -> Any:
    """Check a store specification without connecting: ``memory``, a URL, a client or a store.

    Returns the normalized spec (None for the in-process store). Raises :class:`StateStoreConfigError`
    saying what is allowed, or how to install the Redis extra.
    """
    if spec is None or _is_store(spec):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text in ("", "memory"):
            return None
        if "://" not in text:
            raise StateStoreConfigError(
                "state store is neither 'memory' nor a URL; use memory, redis://host:port/db, "
                "rediss://user:password@host:port/db or unix:///path/to/socket"
            )
        split_url(text)
        if importlib.util.find_spec("redis") is None:
            raise StateStoreConfigError(
                "a Redis state store needs the redis package: pip install 'otel-context[redis]'"
            )
        return text
    if hasattr(spec, "connection_pool") and hasattr(spec, "set"):
        return spec
    raise StateStoreConfigError(
        f"state store must be 'memory', a redis:// URL, a redis.Redis client or a StateStore, not {type(spec).__name__}"
    )


#: Bytes of one key of ``OTEL_CONTEXT_STATE_STORE_KEY``: AES-256.
KEY_BYTES = 32


def parse_keys(raw: Any) -> tuple[bytes, ...] | None:
    """The keys of ``OTEL_CONTEXT_STATE_STORE_KEY`` / ``instrument(state_store_key=...)``: the first encrypts
    what the store is given, every one decrypts (a rotation: put the new key first, keep the old one after
    it until the values it wrote have expired).

    A string is a comma-separated list of keys, each the base64 (standard or URL-safe, padded or not) of 32
    random bytes (``python -c "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"``); from
    code, 32 raw bytes or a list of keys are taken too. None/"" means no encryption. Raises
    :class:`StateStoreConfigError` saying what is wrong, never showing a key.
    """
    if raw is None:
        return None
    parts: list[Any]
    if isinstance(raw, (bytes, bytearray)):
        parts = [bytes(raw)]
    elif isinstance(raw, str):
        if not raw.strip():
            return None
        parts = [p.strip() for p in raw.split(",")]
    elif isinstance(raw, (list, tuple)):
        parts = list(raw)
    else:
        raise StateStoreConfigError(f"the state store key must be a string or bytes, not {type(raw).__name__}")
    keys: list[bytes] = []
    for i, part in enumerate(parts, 1):
        key = _one_key(part, i)
        if key not in keys:
            keys.append(key)
    if not keys:
        return None
    if importlib.util.find_spec("cryptography") is None:
        raise StateStoreConfigError(
            "encrypting the state store needs the cryptography package: pip install 'otel-context[redis]'"
        )
    return tuple(keys)


def _one_key(part: Any, position: int) -> bytes:
    if isinstance(part, (bytes, bytearray)) and len(part) == KEY_BYTES:
        return bytes(part)
    if isinstance(part, (bytes, bytearray)):
        part = bytes(part).decode("ascii", "replace")
    if not isinstance(part, str) or not part.strip():
        raise StateStoreConfigError(f"key {position} of the state store key list is empty")
    text = part.strip().replace("-", "+").replace("_", "/")
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise StateStoreConfigError(
            f"key {position} of the state store key list is not base64 (expected the base64 of {KEY_BYTES} random bytes)"
        ) from None
    if len(key) != KEY_BYTES:
        raise StateStoreConfigError(
            f"key {position} of the state store key list decodes to {len(key)} bytes, not {KEY_BYTES} "
            f"(expected the base64 of {KEY_BYTES} random bytes)"
        )
    return key
