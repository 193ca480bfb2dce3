"""Prompt caching with the providers' semantics, on the simulated provider's injectable clock.

Anthropic (explicit breakpoints):

* A block carrying ``cache_control`` is a breakpoint; blocks are ordered tools -> system -> messages and a
  cache entry is the byte-identical prefix up to and including the breakpoint (the ``cache_control`` marker
  itself is not part of the content, and entries are per model). At most 4 breakpoints per request.
* A breakpoint whose prefix is shorter than ``min_cacheable_tokens`` is neither read nor written.
* Lookup: each breakpoint reads the longest live entry among its own position and the 19 block positions
  before it (the 20-block lookback); the furthest hit over all breakpoints is the cache read.
* Every cacheable breakpoint after the read point writes its prefix (``cache_creation_input_tokens`` is the
  prefix of the last written breakpoint minus the read); the segment ending at a ``"ttl": "1h"`` breakpoint
  is reported under ``ephemeral_1h_input_tokens``, the rest under ``ephemeral_5m_input_tokens``.
* TTL is 300 s (``"5m"``) or 3600 s (``"1h"``); a hit refreshes the entry's TTL. Expired entries miss.
* ``input_tokens`` = total - read - creation.

OpenAI (automatic):

* Prompts of at least 1,024 tokens are cached automatically in 128-token steps (1024, 1152, ...), per model,
  on the exact token prefix (see :meth:`tokens.Block.token_pieces`). ``cached_tokens`` is the longest live
  cached prefix; every step of the prompt is (re)written with a 300 s TTL (``prompt_cache_retention="24h"``:
  86,400 s) that a hit refreshes. ``prompt_tokens`` / ``input_tokens`` include the cached tokens.

Cache diagnostics (both providers name why a request could not reuse the prompt of an earlier response):
each answered request's :class:`PromptRecord` is kept under its response id (Anthropic: only requests that
opted in with ``diagnostics``, as the API records them), and :func:`anthropic_diagnosis` /
:func:`openai_diagnosis` compare a request with the record it names: the first divergence in the provider's
order (model, then the prompt-affecting settings, tools, system or instructions, then the messages or input
items, where anything but an append diverges), and the tokens the earlier request had left in the cache
beyond the common prefix (``cache_missed_input_tokens`` / ``cache_missed_tokens``).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import SimError
from .tokens import Block

__all__ = ["AnthropicCacheResult", "PromptCache", "PromptRecord", "anthropic_diagnosis", "openai_diagnosis"]

ANTHROPIC_TTLS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
OPENAI_TTL = 300.0
OPENAI_EXTENDED_TTL = 86_400.0
#: Prompt records kept for diagnostics (the oldest go first).
MAX_RECORDS = 4096


@dataclass(frozen=True)
class AnthropicCacheResult:
    """How the input tokens of one Anthropic request split between cache reads, writes and uncached input."""

    total: int
    input_tokens: int
    cache_read: int
    cache_creation: int
    ephemeral_5m: int
    ephemeral_1h: int


class PromptCache:
    """The cache of both providers (separate key spaces), thread-safe, with TTLs on ``clock``."""

    def __init__(self, clock: Callable[[], float], min_cacheable_tokens: int = 1024) -> None:
        self._clock = clock
        self.min_cacheable_tokens = min_cacheable_tokens
        self._entries: dict[bytes, tuple[float, float]] = {}  # key -> (expires_at, ttl)
        self._records: OrderedDict[str, PromptRecord] = OrderedDict()  # response id -> its request's prompt
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forget every entry (as an eviction would: the prompts kept for diagnostics stay, the provider still
        knows what each response's request was)."""
        with self._lock:
            self._entries.clear()

    def forget_records(self) -> None:
        """Forget the prompts kept for diagnostics (up to :data:`MAX_RECORDS` whole prompts: hundreds of MB in a
        long run of long conversations); a later request that names one gets the diagnosis of an unknown id."""
        with self._lock:
            self._records.clear()

    def remember(self, response_id: str, record: PromptRecord) -> None:
        """Keep the prompt of the request ``response_id`` answered, for a later request's diagnosis."""
        with self._lock:
            self._records[response_id] = record
            while len(self._records) > MAX_RECORDS:
                self._records.popitem(last=False)

    def record(self, response_id: str) -> PromptRecord | None:
        """The prompt of the request ``response_id`` answered; None for an id never seen (or forgotten)."""
        with self._lock:
            return self._records.get(response_id)

    def __len__(self) -> int:
        now = self._clock()
        return sum(1 for exp, _ in self._entries.values() if exp > now)

    def _live(self, key: bytes, now: float) -> tuple[float, float] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[key]
            return None
        return entry

    # -- Anthropic -------------------------------------------------------------------------------------------

    def anthropic(self, model: str, blocks: Sequence[Block]) -> AnthropicCacheResult:
        """Apply Anthropic caching to a request's blocks and return the usage split."""
        total = sum(b.tokens for b in blocks)
        breakpoints = [i for i, b in enumerate(blocks) if b.cache_control is not None]
        if not breakpoints:
            return AnthropicCacheResult(total, total, 0, 0, 0, 0)
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise SimError(
                400,
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(breakpoints)}.",
            )
        ttls: dict[int, float] = {}
        for i in breakpoints:
            cc = blocks[i].cache_control or {}
            if cc.get("type", "ephemeral") != "ephemeral":
                raise SimError(400, f"cache_control.type: Input should be 'ephemeral' (got {cc.get('type')!r})")
            ttl_name = cc.get("ttl", "5m")
            if ttl_name not in ANTHROPIC_TTLS:
                raise SimError(400, f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl_name!r})")
            ttls[i] = ANTHROPIC_TTLS[ttl_name]
        last = breakpoints[-1]
        cum: list[int] = []
        keys: list[bytes] = []
        running = 0
        h = hashlib.sha256(b"anthropic\x00" + model.encode())
        for b in blocks[: last + 1]:
            running += b.tokens
            cum.append(running)
            h.update(b.key.encode())
            h.update(b"\x1e")
            keys.append(h.copy().digest())
        now = self._clock()
        minimum = self.min_cacheable_tokens
        with self._lock:
            read_pos = -1
            for p in breakpoints:
                if cum[p] < minimum:
                    continue
                for j in range(p, max(-1, p - LOOKBACK_BLOCKS), -1):
                    if cum[j] < minimum:
                        break
                    entry = self._live(keys[j], now)
                    if entry is not None:
                        self._entries[keys[j]] = (now + entry[1], entry[1])  # a hit refreshes the TTL
                        read_pos = max(read_pos, j)
                        break
            read = cum[read_pos] if read_pos >= 0 else 0
            e5 = e1 = 0
            prev = read
            for p in breakpoints:
                if p <= read_pos or cum[p] < minimum:
                    continue
                ttl = ttls[p]
                self._entries[keys[p]] = (now + ttl, ttl)
                segment = cum[p] - prev
                prev = cum[p]
                if ttl >= 3600:
                    e1 += segment
                else:
                    e5 += segment
        creation = e5 + e1
        return AnthropicCacheResult(total, total - read - creation, read, creation, e5, e1)

    # -- OpenAI ----------------------------------------------------------------------------------------------

    def openai(self, model: str, blocks: Sequence[Block], retention: str | None = None) -> int:
        """Apply OpenAI automatic prefix caching; returns the cached tokens of this request."""
        total = sum(b.tokens for b in blocks)
        if total < OPENAI_MIN_TOKENS:
            return 0
        ttl = OPENAI_EXTENDED_TTL if retention == "24h" else OPENAI_TTL
        h = hashlib.sha256(b"openai\x00" + model.encode())
        flat: list[str] = []
        for b in blocks:
            flat.extend(b.token_pieces())
        steps: list[tuple[int, bytes]] = []
        start = 0
        for mark in range(OPENAI_MIN_TOKENS, len(flat) + 1, OPENAI_STEP):
            h.update("\x1f".join(flat[start:mark]).encode())
            h.update(b"\x1f")
            steps.append((mark, h.copy().digest()))
            start = mark
        now = self._clock()
        cached = 0
        with self._lock:
            for length, key in steps:
                entry = self._live(key, now)
                if entry is not None:
                    cached = length
                self._entries[key] = (now + max(ttl, entry[1] if entry else 0.0), max(ttl, entry[1] if entry else 0.0))
        return cached


# -- cache diagnostics -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptRecord:
    """What a request put in front of the cache, for comparing a later request with it."""

    model: str
    #: The block keys (role and content, markers aside) and token counts, in prompt order.
    keys: tuple[str, ...]
    tokens: tuple[int, ...]
    #: The tokens the request left in the cache: its reads and writes (Anthropic), its whole prompt once
    #: cacheable (OpenAI).
    cached: int
    #: Prompt-affecting settings besides the blocks, by name (compared in this order).
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, model: str, blocks: Sequence[Block], cached: int, settings: Mapping[str, Any]) -> PromptRecord:
        return cls(
            model,
            tuple(b.key for b in blocks),
            tuple(b.tokens for b in blocks),
            cached,
            tuple((name, repr(value)) for name, value in settings.items()),
        )

    def section(self, *roles: str) -> tuple[str, ...]:
        return tuple(k for k in self.keys if k.split("|", 1)[0] in roles)

    def common_prefix_tokens(self, other: PromptRecord) -> int:
        total = 0
        for mine, theirs, tokens in zip(self.keys, other.keys, self.tokens, strict=False):
            if mine != theirs:
                break
            total += tokens
        return total

    def missed(self, current: PromptRecord) -> int:
        """What this (earlier) request left in the cache that ``current`` could not reuse."""
        common = 0 if current.model != self.model else self.common_prefix_tokens(current)
        return max(0, self.cached - common)


def _first_setting_change(previous: PromptRecord, current: PromptRecord) -> str | None:
    mine = dict(previous.settings)
    for name, value in current.settings:
        if mine.get(name) != value:
            return name
    return None


def _appended(previous: Sequence[str], current: Sequence[str]) -> bool:
    return len(current) >= len(previous) and tuple(current[: len(previous)]) == tuple(previous)


def anthropic_diagnosis(previous: PromptRecord | None, current: PromptRecord) -> dict[str, Any] | None:
    """The ``cache_miss_reason`` of ``current`` against ``previous`` (None: nothing diverged)."""
    if previous is None:
        return {"type": "previous_message_not_found"}
    messages = ("user", "assistant")
    if previous.model != current.model:
        reason = "model_changed"
    elif previous.section("tools") != current.section("tools"):
        reason = "tools_changed"
    elif previous.section("system") != current.section("system"):
        reason = "system_changed"
    elif not _appended(previous.section(*messages), current.section(*messages)):
        reason = "messages_changed"
    elif _first_setting_change(previous, current) is not None:
        return {"type": "unavailable"}  # thinking, tool_choice: the API cannot say
    else:
        return None
    return {"type": reason, "cache_missed_input_tokens": previous.missed(current)}


#: OpenAI's reason for each prompt-affecting setting the simulated Responses endpoint records.
OPENAI_SETTING_REASONS = {
    "prompt_cache_key": "prompt_cache_key_changed",
    "text_format": "text_format_changed",
    "reasoning_effort": "reasoning_effort_changed",
    "verbosity": "verbosity_changed",
    "service_tier": "service_tier_changed",
}


def openai_diagnosis(previous: PromptRecord | None, current: PromptRecord) -> dict[str, Any]:
    """The ``prompt_cache_diagnostics`` of ``current`` against ``previous``."""
    if previous is None:
        return {"type": "comparison_response_not_found"}
    changed = _first_setting_change(previous, current)
    if previous.model != current.model:
        reason = "model_changed"
    elif changed == "prompt_cache_key":
        reason = OPENAI_SETTING_REASONS[changed]
    elif previous.section("tools") != current.section("tools"):
        reason = "tools_changed"
    elif changed is not None:
        reason = OPENAI_SETTING_REASONS.get(changed, "input_changed")
    elif not _appended(
        [k for k in previous.keys if not k.startswith("tools|")],
        [k for k in current.keys if not k.startswith("tools|")],
    ):
        compacted = any('"type":"compaction"' in k for k in current.keys if k not in previous.keys)
        reason = "context_compacted" if compacted else "input_changed"
    else:
        return {"type": "cache_hit"}
    return {
        "type": "cache_miss",
        "reason": reason,
        "cache_missed_tokens": previous.missed(current),
        "comparison_reusable_tokens": previous.common_prefix_tokens(current) if previous.model == current.model else 0,
    }
