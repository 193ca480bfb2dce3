"""Realistic identifiers (msg_..., toolu_..., chatcmpl-..., resp_..., call_..., request ids)."""

from __future__ import annotations

import os
import secrets
import string

__all__ = ["anthropic_id", "b62", "hex_id", "openai_request_id"]

_B62 = string.ascii_letters + string.digits
_TRANSLATE = bytes.maketrans(bytes(range(256)), bytes(ord(_B62[i % 62]) for i in range(256)))


def b62(n: int) -> str:
    """``n`` random base62 characters (fast: one ``urandom`` call and a byte translation)."""
    return os.urandom(n).translate(_TRANSLATE).decode("ascii")


def anthropic_id(prefix: str) -> str:
    """An Anthropic-style id: ``msg_01`` + 22 base62 characters (``toolu_01...``, ``req_011C...``)."""
    if prefix == "req":
        return "req_011C" + b62(20)
    return f"{prefix}_01" + b62(22)


def hex_id(prefix: str, nbytes: int = 24, sep: str = "_") -> str:
    """An OpenAI-style hex id such as ``resp_<48 hex>``."""
    return f"{prefix}{sep}{secrets.token_hex(nbytes)}"


def openai_request_id() -> str:
    """An OpenAI ``x-request-id``: ``req_`` + 32 hex characters."""
    return "req_" + secrets.token_hex(16)
