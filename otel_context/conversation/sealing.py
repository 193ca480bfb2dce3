"""Encryption at rest of the shared state store's values: AES-256-GCM, one place where bytes go in and out.

Why: the store holds what a conversation needs on another worker, and that includes the users' words (a
summary, the messages kept verbatim beside it, re-read file contents). With ``OTEL_CONTEXT_STATE_STORE_KEY``
set, every value is encrypted and authenticated before it leaves the process, so whoever can read the
store (an operator, a backup, a snapshot of a managed Redis) reads none of it, and a value that was not
written with one of the keys (forged, corrupted, another deployment's, or written in clear) is ignored
like any value that is not ours.

A sealed value is ``OCE1`` + a key id (4 bytes: a hash of the key, never the key) + a random 12-byte nonce
+ the ciphertext and its 16-byte tag. The value's name in the store is the associated data: a value
copied under another name (another conversation's) does not authenticate. Keys rotate: the first key
seals, every key listed opens (by key id, so an old key costs nothing until it is needed).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any, Final

MAGIC: Final = b"OCE1"
_NONCE: Final = 12
_KID: Final = 4


def key_id(key: bytes) -> bytes:
    """A short, one-way name of ``key`` (which key sealed a value; says nothing of the key)."""
    return hashlib.sha256(b"otel-context state store key\x00" + key).digest()[:_KID]


class Sealer:
    """Seals and opens the store's values with AES-256-GCM (``keys``: the first seals, all open)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not keys:
            raise ValueError("a Sealer needs at least one key")
        ciphers: dict[bytes, Any] = {}
        for key in keys:
            ciphers.setdefault(key_id(key), AESGCM(key))
        self._ciphers = ciphers
        self._kid = key_id(keys[0])
        self._seal_with = ciphers[self._kid]
        self._invalid = InvalidTag

    def __repr__(self) -> str:
        return f"Sealer({len(self._ciphers)} keys)"  # never a key

    def seal(self, name: str, payload: bytes) -> bytes:
        """``payload`` encrypted and authenticated, bound to its name in the store."""
        nonce = os.urandom(_NONCE)
        sealed: bytes = self._seal_with.encrypt(nonce, payload, name.encode("utf-8", "surrogatepass"))
        return MAGIC + self._kid + nonce + sealed

    def open(self, name: str, raw: bytes) -> bytes | None:
        """The payload of a value sealed with one of the keys under ``name``; None for anything else."""
        head = len(MAGIC) + _KID
        if len(raw) < head + _NONCE + 16 or raw[: len(MAGIC)] != MAGIC:
            return None
        cipher = self._ciphers.get(bytes(raw[len(MAGIC) : head]))
        if cipher is None:
            return None
        try:
            payload: bytes = cipher.decrypt(
                bytes(raw[head : head + _NONCE]), bytes(raw[head + _NONCE :]), name.encode("utf-8", "surrogatepass")
            )
        except self._invalid:
            return None
        return payload
