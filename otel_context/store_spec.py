"""The grammar of ``OTEL_CONTEXT_STATE_STORE`` / ``instrument(state_store=...)``, checked without connecting.

A settings concern (validated when the settings are resolved, so a bad value fails at instrument time
with the variable's name); :mod:`otel_context.conversation.state_store` opens what it names.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

_SCHEMES = ("memory", "redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
_ALLOWED = (
    "use memory, redis://host:port/db (one server, or any node of a Redis Cluster), "
    "rediss://user:password@host:port/db, redis+sentinel://host:port[,host:port]/service_name[/db] "
    "or unix:///path/to/socket"
)
#: Sentinel's own port, when a Sentinel's address has none.
SENTINEL_PORT = 26379
#: Query options of a Sentinel URL that are for the Sentinels themselves (the rest of ours as for any URL).
_SENTINEL_AUTH = ("sentinel_username", "sentinel_password")
#: redis-py options a Sentinel URL may carry for the primary (TLS files and checks).
_SENTINEL_PRIMARY_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
#: Query options of a store URL that are ours (the rest go to redis-py).
_URL_OPTIONS = {"prefix": str, "ttl_seconds": float, "timeout_ms": float, "max_value_bytes": int}


#: Release only the lease we hold (a lease that expired and was taken by another worker stays theirs).
class StateStoreConfigError(ValueError):
    """The store specification cannot be used; the message says what is allowed."""


def _is_store(value: Any) -> bool:
    """Whether ``value`` is a ready state store (duck-typed: this module sits below the store's own)."""
    return all(callable(getattr(value, name, None)) for name in ("get", "aget", "put", "acquire", "release"))


def safe_address(url: str) -> str:
    """``scheme://host:port/db`` of a store URL, never its credentials nor its options (log lines, and
    ``otel-context settings``)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    if parts.scheme.endswith("+sentinel"):
        target = parse_sentinel_url(url)
        hosts = ",".join(f"{host}:{port}" for host, port in target.sentinels)
        return f"{parts.scheme}://{hosts}/{target.service}/{target.db}"
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


def split_url(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without our query options, and those options (validated)."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES[1:]:
        raise StateStoreConfigError(f"state store URL scheme {parts.scheme!r} is not supported; {_ALLOWED}")
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
            raise StateStoreConfigError(f"state store is neither 'memory' nor a URL; {_ALLOWED}")
        bare, _ = split_url(text)
        if bare.split("://", 1)[0].endswith("+sentinel"):
            parse_sentinel_url(bare)
        if importlib.util.find_spec("redis") is None:
            raise StateStoreConfigError(
                "a Redis state store needs the redis package: pip install 'otel-context[redis]'"
            )
        return text
    if (hasattr(spec, "connection_pool") or hasattr(spec, "nodes_manager")) and hasattr(spec, "set"):
        return spec  # a redis.Redis, or a redis.cluster.RedisCluster (it has no pool of its own)
    raise StateStoreConfigError(
        "state store must be 'memory', a redis:// URL, a redis.Redis or redis.cluster.RedisCluster client or a "
        f"StateStore, not {type(spec).__name__}"
    )


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names: the Sentinels, the service (the primary's name in Sentinel's
    configuration), the db, and how the primary and the Sentinels are reached."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    tls: bool = False
    #: username/password of the primary (the URL's credentials).
    auth: dict[str, str] = field(default_factory=dict)
    #: username/password of the Sentinels (``sentinel_username`` / ``sentinel_password`` query options).
    sentinel_auth: dict[str, str] = field(default_factory=dict)
    #: redis-py TLS options for the primary (``ssl_ca_certs=...``).
    options: dict[str, str] = field(default_factory=dict)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``redis+sentinel://[user:password@]host[:port][,host[:port]...]/service_name[/db][?options]``
    (``rediss+sentinel://`` for TLS): the form of the ``redis-sentinel-url`` package and of Lettuce, with
    Sentinel's port 26379 by default. The URL's credentials are the primary's; the Sentinels' own, when they
    ask for some, are the ``sentinel_username`` / ``sentinel_password`` options. Raises
    :class:`StateStoreConfigError` saying what is wrong (never showing a password)."""
    parts = urlsplit(url)
    form = "redis+sentinel://host:port[,host:port]/service_name[/db]"
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        item = item.strip()
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        if not host:
            raise StateStoreConfigError(f"a Sentinel URL names no Sentinel host; use {form}")
        try:
            number = int(port) if port else SENTINEL_PORT
        except ValueError:
            raise StateStoreConfigError(f"a Sentinel port {port!r} is not a number; use {form}") from None
        sentinels.append((host, number))
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise StateStoreConfigError(f"a Sentinel URL names the service after its hosts; use {form}")
    try:
        db = int(path[1]) if len(path) == 2 else 0
    except ValueError:
        raise StateStoreConfigError(f"a Sentinel URL's db {path[1]!r} is not a number; use {form}") from None
    auth: dict[str, str] = {}
    if userinfo:
        user, has_password, password = userinfo.partition(":")
        if user:
            auth["username"] = unquote(user)
        if has_password:
            auth["password"] = unquote(password)
    sentinel_auth: dict[str, str] = {}
    options: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _SENTINEL_AUTH:
            sentinel_auth[name.removeprefix("sentinel_")] = value
        elif name in _SENTINEL_PRIMARY_OPTIONS:
            options[name] = value
        else:
            allowed = ", ".join((*_URL_OPTIONS, *_SENTINEL_AUTH, *_SENTINEL_PRIMARY_OPTIONS))
            raise StateStoreConfigError(f"a Sentinel URL does not take the option {name!r}; it takes {allowed}")
    return SentinelTarget(
        tuple(sentinels), path[0], db, parts.scheme.startswith("rediss"), auth, sentinel_auth, options
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
