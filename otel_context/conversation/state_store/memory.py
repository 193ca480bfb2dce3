"""The state store in memory: the default when no shared store is named, and the app's own ``MemoryStateStore()``."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from otel_context.conversation.state_store.base import RETIRE_SECONDS, Lease, Source, StateStore, _Retired
from otel_context.fork_safe import new_condition


class MemoryStateStore(StateStore):
    """The default: a bounded LRU with idle expiry in this process. Nothing to install.

    Values are kept encoded, so that the store in memory has the Redis store's semantics (a caller never
    shares an object with the store, oversized and non-JSON values are refused the same way).
    """

    source: Source = "memory"

    def __init__(
        self,
        *,
        max_entries: int = 4_096,
        idle_seconds: float = 3_600.0,
        clock: Callable[[], float] = time.monotonic,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.max_entries = max(1, max_entries)
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._values: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._locks: dict[str, tuple[str, float]] = {}
        self._cond = new_condition(self, "_cond")

    def __len__(self) -> int:
        return len(self._values)

    def _get_raw(self, name: str) -> bytes | None:
        now = self._clock()
        with self._cond:
            entry = self._values.get(name)
            if entry is None:
                return None
            if now - entry[1] > min(self.idle_seconds, self.ttl_seconds):
                del self._values[name]
                return None
            self._values[name] = (entry[0], now)
            self._values.move_to_end(name)
            return entry[0]

    async def _aget_raw(self, name: str) -> bytes | None:
        return self._get_raw(name)

    def _put_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        now = self._clock()
        with self._cond:
            limit = min(self.idle_seconds, self.ttl_seconds)
            for other in renew:
                kept = self._values.get(other)
                if kept is not None and isinstance(other, _Retired):
                    self._values[other] = (kept[0], min(kept[1], now - max(0.0, limit - RETIRE_SECONDS)))
                elif kept is not None:
                    self._values[other] = (kept[0], now)
                    self._values.move_to_end(other)
            self._values[name] = (payload, now)
            self._values.move_to_end(name)
            while self._values:
                oldest, (_, seen) = next(iter(self._values.items()))
                if len(self._values) > self.max_entries or now - seen > limit:
                    del self._values[oldest]
                else:
                    break
            self._cond.notify_all()
        return True

    async def _aput_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> bool:
        return self._put_raw(name, payload, renew)

    def _put_later_raw(self, name: str, payload: bytes, renew: tuple[str, ...] = ()) -> None:
        self._put_raw(name, payload, renew)

    def _held(self, name: str, now: float) -> bool:
        holder = self._locks.get(name)
        if holder is not None and holder[1] <= now:
            del self._locks[name]
            return False
        return holder is not None

    def _acquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        now = self._clock()
        with self._cond:
            if self._held(lease.name, now):
                return None
            self._locks[lease.name] = (lease.token, now + lease_seconds)
        return lease

    async def _aacquire_raw(self, lease: Lease, lease_seconds: float) -> Lease | None:
        return self._acquire_raw(lease, lease_seconds)

    def _release_raw(self, lease: Lease) -> None:
        with self._cond:
            holder = self._locks.get(lease.name)
            if holder is not None and holder[0] == lease.token:
                del self._locks[lease.name]
            self._cond.notify_all()

    async def _arelease_raw(self, lease: Lease) -> None:
        self._release_raw(lease)

    def _remove_if_raw(self, name: str, field: str, expected: str) -> bool:
        with self._cond:
            entry = self._values.get(name)
            if entry is None:
                return False
            try:
                value = json.loads(entry[0]).get("d")
            except (ValueError, AttributeError, UnicodeDecodeError):
                return False
            if not isinstance(value, dict) or value.get(field) != expected:
                return False
            del self._values[name]
            return True

    async def _aremove_if_raw(self, name: str, field: str, expected: str) -> bool:
        return self._remove_if_raw(name, field, expected)

    def _remove_exact_raw(self, name: str, raw: bytes) -> bool:
        with self._cond:
            entry = self._values.get(name)
            if entry is None or entry[0] != raw:
                return False
            del self._values[name]
            return True

    def _poll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | None, str | None]:
        raw = self._get_raw(name)
        with self._cond:
            if lock_name is None or not self._held(lock_name, self._clock()):
                return raw, None
            return raw, self._locks[lock_name][0]

    async def _apoll_raw(self, name: str, lock_name: str | None) -> tuple[bytes | None, str | None]:
        return self._poll_raw(name, lock_name)

    def _sleep(self, seconds: float) -> None:
        # Woken by a put or a release instead of polling (same process).
        with self._cond:
            self._cond.wait(seconds)
