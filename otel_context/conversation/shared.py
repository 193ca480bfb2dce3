"""A conversation's state in a store many workers share: what is written after a call, and how a worker
that did not serve the previous call takes it up.

Why: consecutive turns of one conversation land on different processes. Each worker keeps its in-process
:class:`~otel_context.conversation.state.ConversationState` (the fast path, exactly as with no store); the
shared value (per conversation, in a :class:`~otel_context.conversation.state_store.StateStore`)
brings it up to date when another worker moved the conversation on since this one last saw it.

What is stored, in parts (JSON, under the store's schema version, sealed when the store has keys): ``state``,
small, written after every call, and one ``memo`` part per summary, written once. A derived-key
conversation's ``state`` is named after its history (:func:`address_of`: its scope, i.e. system prompt,
tools and model, and a chained hash of its items), so a worker reads the state of the conversation it
serves and of no other, however many open alike; an explicit id has one ``state``. A summary's part is
named after its content address (:attr:`~otel_context.conversation.memo.MemoEntry.address`: everything the
summarizer read), and the state names its summaries by length and address: a worker reads a summary only
when its own scope and items hash to that address (:func:`memo_wanted`). What ``state`` holds:

* ``seq`` / ``rev``: a sequence number and the writer's token. A worker whose own state has the same
  revision has nothing to take (the common case of one worker: one ``GET`` and a comparison); a lower
  ``seq`` is an older write still on its way and is ignored.
* ``anchor``: the usage of the last call and what proves a later call continues it, by CONTENT, never
  by object identity: the number of items and a chained hash after the last and the second-to-last item
  (a re-sent last message whose ``cache_control`` marker moved still matches), plus the hash of the last
  item without its markers; with cache diagnostics on, the ids of the responses that answered those items
  with the digest of each reply (``replies``: the provider's response ids, so a store holding them should be
  sealed like one holding the conversations' words). A worker hashes only the items it has not hashed itself (its own snapshot
  keeps the chain), so verifying costs what was appended since it last served the conversation.
* ``memo``: the ``[length, address]`` of each summary of the conversation's memo. A worker that never saw
  the conversation verifies and reuses them, and sends byte-identical summaries (the provider's prompt
  cache keeps hitting whoever answers). Every write of ``state`` renews their expiry.
* ``prepared``: the name of the conversation's background preparations (see
  ``otel_context.engine.fleet``), carried on by every write.
* the breaker's counters, the estimate factor, the window a provider stated for the model, the time the
  last call ended, and the cache-break baseline (an opaque digest of :mod:`otel_context.cache`).

Besides, each response the provider stores (Responses ``previous_response_id`` chains) has a ``link`` part of
its own, named after the response id (hashed by the store): the derived key of its conversation (never an
explicit id), its usage, and its chain's name and turn (:func:`link_value`, :func:`linked`).

Two conversations never share state (docs/conversations.md): memo entries apply only to their own content
and scope; the rest is taken only for an explicit id, or when the anchor's hashes prove that this call's
items continue that very history.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context import process_state, semconv, telemetry
from otel_context.conversation.memo import MemoEntry, entry_address, items_hash
from otel_context.conversation.state import ChainLink, ConversationState, Resolution, Snapshot, _without_markers
from otel_context.conversation.state_store import Loaded, StateStore, open_store
from otel_context.fork_safe import new_lock
from otel_context.settings import Settings
from otel_context.usage import TokenUsage, as_count

__all__ = [
    "MEMO",
    "PREPARED",
    "PREPARED_ID",
    "Published",
    "SharedRecord",
    "Taken",
    "address_of",
    "chain_for",
    "entry_value",
    "extend",
    "memo_part",
    "memo_wanted",
    "prepare_lock",
    "prepared_part",
    "prepared_value",
    "published",
    "renewed",
    "state_part",
    "store_for",
    "summary_lock",
    "take",
    "value_of",
]

#: The store's parts that hold a conversation's summaries, one per summary: ``memo:<its content address>``.
MEMO = "memo"
#: The store's part that holds the summary one worker prepared in the background for the whole fleet.
PREPARED = "prepared"
#: The layout of the ``prepared`` part; a worker that reads another version ignores it.
PREPARED_VERSION = 1
#: The field of the ``prepared`` part that identifies the summary (compared when a worker removes it).
PREPARED_ID = "id"

Item = Mapping[str, Any]

#: A write's token (``rev``): this process's random token, its pid (a fork's child shares the token) and a
#: counter; unique per write without drawing random bytes on every call.
_TOKEN = secrets.token_hex(6)
_WRITES = itertools.count(1)

_opened: dict[int, tuple[Any, tuple[bytes, ...] | None, StateStore | None]] = {}
_opened_lock = new_lock(sys.modules[__name__], "_opened_lock")
# Reset: kept (a reset forgets conversations, not the stores the settings name). A fork's child: inherited (a
# store's connections notice the fork by pid, see connections.py, and its writer starts empty, see writer.py).
process_state.register(__name__, ("_opened",), on_reset=None, in_forked_child=None)


def store_for(settings: Settings) -> StateStore | None:
    """The shared store the settings name, opened once per spec (and keys); None for the in-process default
    (and when the store cannot be opened, e.g. redis-py missing: said once, the process goes on alone).
    With ``state_store_key`` its values are sealed (:mod:`otel_context.conversation.sealing`); a
    :class:`StateStore` given in code is used as it was made (its own ``keys=``)."""
    spec = settings.state_store
    if spec is None:
        return None
    keys = settings.state_store_key
    known = _opened.get(id(spec))
    if known is not None and known[0] is spec and known[1] == keys:
        return known[2]
    with _opened_lock:
        known = _opened.get(id(spec))
        if known is not None and known[0] is spec and known[1] == keys:
            return known[2]
        store: StateStore | None
        try:
            store = open_store(spec, keys=keys) if keys and not isinstance(spec, StateStore) else open_store(spec)
            if keys and not store.sealed:
                # A key was given for a store made without one: never write the users' words in clear.
                telemetry.log_once(
                    "state_store.unsealed",
                    "otel_context: state_store_key is set but the StateStore given does not encrypt (give it "
                    "keys=); the shared store is not used, conversation state stays in each process",
                )
                store = None
        except Exception as exc:
            telemetry.log_once(
                "state_store.open",
                "otel_context: the state store could not be opened (%s); conversation state stays in each process",
                type(exc).__name__,
            )
            store = None
        if len(_opened) >= 16:  # bounded whatever an app does with instrument(): reopening is cheap
            _opened.clear()
        _opened[id(spec)] = (spec, keys, store)  # the spec is kept alive with it, so its id is not reused
        return store


def memo_part(address: str) -> str:
    """The part a summary is stored in: named after its content address (:attr:`MemoEntry.address`)."""
    return f"{MEMO}:{address}"


def state_part(address: str) -> str:
    """The part that holds the state a call of the history named ``address`` left ("": an explicit id's one
    state)."""
    return f"state:{address}" if address else "state"


def summary_lock(address: str) -> str:
    """The lock of a summary of the history named ``address`` (histories that merely open alike do not
    wait for each other)."""
    return f"summary:{address}" if address else "summary"


def prepared_part(address: str) -> str:
    """The part a summary prepared in the background is published in (see :func:`prepare_lock`)."""
    return f"{PREPARED}:{address}" if address else PREPARED


def prepare_lock(address: str) -> str:
    """The lock of a background preparation of the conversation whose preparations are named ``address``
    (the name of the history where its first one was claimed, carried on by its state: ``prepared``)."""
    return f"prepare:{address}" if address else "prepare"


def address_of(key: str, scope: str, chain: Sequence[str], items: Sequence[Item], n: int, bare: str = "") -> str:
    """The name of the history ``items[:n]`` (n >= 1) of the derived key ``key`` under the scope ``scope``
    (system prompt, tools, model: :func:`~otel_context.conversation.memo.scope_of`): a hash of both, of the
    chain up to its second-to-last item and of its last item without ``cache_control`` markers (a re-sent
    last message whose marker moved names the same history). ``chain`` covers at least ``n - 1`` items.
    Two conversations share a name only while everything their model read is the same. ``bare``: the hash of
    the last item without markers, when the caller has it."""
    previous = chain[n - 2] if n > 1 else ""
    bare = bare or hashlib.sha256(_digest(_without_markers(items[n - 1]))).hexdigest()
    named = f"{key}\x1e{scope}\x1e{previous}\x1e{bare}"
    return hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _digest(item: Any) -> bytes:
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode(
        "utf-8", "surrogatepass"
    )


def _extend(chain: Sequence[str], items: Sequence[Item], start: int, stop: int) -> tuple[str, ...]:
    """``chain[:start]`` extended to ``stop`` items: link ``i`` hashes link ``i-1`` and item ``i``."""
    out = list(chain[:start])
    previous = out[-1] if out else ""
    for i in range(len(out), stop):
        previous = hashlib.sha256(previous.encode() + _digest(items[i])).hexdigest()
        out.append(previous)
    return tuple(out)


def extend(known: Sequence[str], items: Sequence[Item], stop: int) -> tuple[str, ...]:
    """The hash chain of ``items[:stop]``, from ``known``, links already computed for ``items``."""
    return _extend(known, items, min(len(known), stop), stop)


def chain_for(resolution: Resolution, items: Sequence[Item]) -> tuple[str, ...]:
    """The hash chain of ``items``, reusing the links of the snapshot the call read for its unchanged part."""
    snapshot = resolution.snapshot
    known = snapshot.chain if snapshot is not None else ()
    return _extend(known, items, min(resolution.unchanged, len(known)), len(items))


@dataclass(eq=False)
class SharedRecord:
    """What one worker knows of a conversation's shared value besides its in-process state: kept per state by
    the store-backed sync (:class:`otel_context.engine.fleet.StoreSync`), so a process without a store keeps
    none of it. Changed under the state's lock."""

    #: The revision of the shared value this state last wrote or read (a sequence number and the writer's
    #: token), to tell when another worker moved it on.
    seq: int = 0
    rev: str = ""
    #: The name under which the fleet prepares this conversation's summaries in the background (the history
    #: where the first preparation was claimed; carried on by each state value).
    prepared: str = ""
    #: The snapshot this state's last write to the store was made for, the scope and the name it was written
    #: under (the next call of the conversation reads that name without hashing).
    written: tuple[Snapshot, str, str] | None = None
    #: The memo entries this state last wrote to the store or took from it (each summary has a part of its
    #: own; None: write them all again at the next commit), and the store's outage count when they were
    #: written (an outage since may have lost a write).
    memo_entries: tuple[MemoEntry, ...] | None = ()
    memo_epoch: int = 0


@dataclass(frozen=True)
class Taken:
    """What a call takes from the shared value: its resolution (with a snapshot rebuilt from the anchor when
    that proves more of the history than this worker knew), where the state came from, and the parts the
    engine applies itself (the learned window, the cache-break baseline) when they are this history's."""

    resolution: Resolution
    source: str
    window: tuple[str, str, int] | None = None
    cache: Mapping[str, Any] | None = None


def _newer(value: Mapping[str, Any], record: SharedRecord) -> bool:
    seq = value["seq"]
    return bool(seq > record.seq or (seq == record.seq and value["rev"] != record.rev))


def _entries(raw: Any) -> list[MemoEntry]:
    return [
        MemoEntry(
            int(e["len"]),
            str(e["hash"]),
            tuple(e["head"]),
            str(e.get("summary", "")),
            summary_head=_count(e.get("summary_head")),
            scope=str(e.get("scope", "")),
        )
        for e in raw
        if isinstance(e, dict) and isinstance(e.get("head"), list) and all(isinstance(h, dict) for h in e["head"])
    ]


def _count(value: Any) -> int:
    """A stored count (0 when absent or not a count: an entry written before the field existed)."""
    count = as_count(value)
    return count if count is not None and count >= 0 else 0


def entry_value(entry: MemoEntry) -> dict[str, Any]:
    """A memo entry as stored: what any worker needs to verify the prefix it covers, and its JSON head."""
    return {
        "len": entry.prefix_len,
        "hash": entry.prefix_hash,
        "scope": entry.scope,
        "head": list(entry.replacement),
        "summary": entry.summary,
        "summary_head": entry.summary_head,
    }


def _verify(
    anchor: Mapping[str, Any], resolution: Resolution, items: Sequence[Item], known: Sequence[str]
) -> tuple[int, tuple[str, ...]]:
    """How many leading ``items`` the anchor's hashes prove equal to the last call's items, and their chain
    (``known``: links of ``items`` already hashed, if any)."""
    n = int(anchor["n"])
    if n <= 0 or n > len(items):
        return 0, ()
    snapshot = resolution.snapshot
    if len(known) < n:
        mine = snapshot.chain[: resolution.unchanged] if snapshot is not None else ()
        known = mine if len(mine) > len(known) else known
    chain = _extend(known, items, min(len(known), n), n)
    if chain[n - 1] == anchor["chain"]:
        return n, chain
    if n > 1 and chain[n - 2] == anchor["prev"]:
        bare = hashlib.sha256(_digest(_without_markers(items[n - 1]))).hexdigest()
        if resolution.state.explicit or bare == anchor["bare"]:
            return n - 1, chain[: n - 1]
    return 0, ()


def memo_wanted(
    state: ConversationState, record: SharedRecord, loaded: Loaded, items: Sequence[Item], scope: Callable[[], str]
) -> str:
    """The part to read for the summary the shared value ``loaded`` names that applies to ``items`` (of the
    scope ``scope()``) and that ``state`` (whose shared revision ``record`` holds) does not hold ("" for none:
    the common appended turn). A summary is read only when its content address is this call's own (the hash
    of its scope and of its own items up to the summary's cut): a worker never reads the summary of another
    conversation."""
    value = loaded.value
    if value is None:
        return ""
    try:
        refs = value.get("memo")
        if not isinstance(refs, list) or not refs or not _newer(value, record):
            return ""
        held = {e.address for e in state.memo.entries}
        for n, address in sorted(((int(r[0]), str(r[1])) for r in refs), reverse=True):
            if address in held:
                return ""  # the longest summary of this history that this worker can use: it holds it
            if 0 < n <= len(items) and entry_address(scope(), items_hash(items[:n])) == address:
                return memo_part(address)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        pass  # not of our shape: take() says so
    return ""


def take(
    resolution: Resolution,
    record: SharedRecord,
    loaded: Loaded,
    items: Sequence[Item],
    memo: Loaded | None = None,
    known: Sequence[str] = (),
    *,
    linked: bool = False,
) -> Taken:
    """Bring ``resolution``'s state (and its shared ``record``) up to date with the shared value ``loaded``
    and, when :func:`memo_wanted` asked for it, the summary it names (never raises). ``known``: links of the
    hash chain of ``items`` the caller already computed. ``linked``: ``loaded`` was read under the name of the
    stored response the call continues (its chain, named after a hash of the chain's first response id, and its
    place in it): it is this conversation's, as an explicit id's value is, although the call's items (its new
    input only) prove nothing."""
    value = loaded.value
    if value is None:
        return Taken(resolution, loaded.source)
    try:
        return _take(resolution, record, value, loaded.source, items, memo, known, linked)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        telemetry.get().instruments.state_store_errors.add(
            1, {semconv.STATE_STORE_OPERATION: "get", semconv.ERROR_TYPE: "garbage"}
        )
        telemetry.log_once(
            "state_store.shape", "otel_context: a shared conversation state is not of our shape; ignored"
        )
        return Taken(resolution, semconv.STATE_SOURCE_FALLBACK)


def _take_memo(state: ConversationState, memo: Loaded | None) -> None:
    """Merge the summary read from its part (:func:`memo_wanted`; the memo applies it only to a call whose
    scope and items it was made for)."""
    got = memo.value if memo is not None else None
    if got is None:
        return  # gone (expired, a lost write): this call summarizes as a single process would
    entries = _entries([got])
    if not entries or entries[0].prefix_len <= 0:
        telemetry.get().instruments.state_store_errors.add(
            1, {semconv.STATE_STORE_OPERATION: "get", semconv.ERROR_TYPE: "garbage"}
        )
        telemetry.log_once(
            "state_store.memo_shape", "otel_context: a shared conversation summary is not of our shape; ignored"
        )
        return
    state.memo.merge(entries)


def _take(
    resolution: Resolution,
    record: SharedRecord,
    value: Mapping[str, Any],
    source: str,
    items: Sequence[Item],
    memo: Loaded | None,
    known: Sequence[str],
    linked: bool,
) -> Taken:
    state = resolution.state
    if not _newer(value, record):
        return Taken(resolution, source)
    anchor = value["anchor"]
    unchanged, chain = _verify(anchor, resolution, items, known) if anchor else (0, ())
    if memo is not None:
        _take_memo(state, memo)
    # A first call's one message, resent with its cache marker moved (apps that mark the newest message): the
    # history goes on, proven by that message's own content (as the in-process conversation table takes it).
    reopened = (
        not unchanged
        and bool(anchor)
        and int(anchor["n"]) == 1
        and bool(items)
        and hashlib.sha256(_digest(_without_markers(items[0]))).hexdigest() == anchor["bare"]
    )
    refs = value["memo"] or ()
    named = {str(ref[1]) for ref in refs}
    if any(e.address not in named for e in state.memo.entries):
        record.memo_entries = None  # the store does not name what this worker holds: write it back
    record.seq, record.rev = int(value["seq"]), str(value["rev"])
    if not (state.explicit or linked or unchanged or reopened):
        return Taken(resolution, source)  # another history of this name: only a summary verified as ours applies
    prepared = value.get("prepared")
    if isinstance(prepared, str) and prepared:
        record.prepared = prepared
    failures, thrashing = (int(x) for x in value["breaker"])
    with state.lock:
        was_open = state.breaker.open
        state.breaker.consecutive_failures, state.breaker.consecutive_thrashing = failures, thrashing
        state.estimate_factor = max(state.estimate_factor, float(value["factor"]))
    if state.breaker.open != was_open:
        if not was_open:
            state.breaker_model = str(value.get("breaker_model") or "")
        telemetry.get().instruments.breakers_open.add(
            1 if state.breaker.open else -1, {semconv.GEN_AI_REQUEST_MODEL: state.breaker_model or ""}
        )
    if anchor:
        state.last_call_ended = time.monotonic() - max(0.0, time.time() - float(anchor["ended"]))
    if unchanged > resolution.unchanged or (reopened and resolution.snapshot is None):
        found = anchor.get("entry")
        entry = next((e for e in state.memo.entries if e.address == found), None) if found else None
        usage = TokenUsage(input_tokens=int(anchor["input"]), output_tokens=int(anchor["output"]))
        n = int(anchor["n"])
        snapshot = Snapshot(
            items[:n], usage if usage.input_tokens > 0 else None, entry, int(anchor["tokens"]), chain, _replies(anchor)
        )
        resolution = Resolution(state, snapshot, unchanged)
    window = value.get("window")
    return Taken(
        resolution,
        source,
        (str(window[0]), str(window[1]), int(window[2])) if window else None,
        value.get("cache") if unchanged or reopened or linked else None,
    )


def _replies(anchor: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The anchor's ``replies`` (:attr:`Snapshot.replies`); pairs not of two strings are left out."""
    got = anchor.get("replies")
    if not isinstance(got, list):
        return ()
    return tuple(
        (pair[0], pair[1])
        for pair in got
        if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and isinstance(pair[1], str)
    )


def _memo_of(state: ConversationState, record: SharedRecord, failures: int) -> list[MemoEntry]:
    """The summaries to write with this commit, each to its own part: those the store may not hold yet
    (none when this state's summaries are those it wrote or took last, compared by identity: the memo
    replaces its tuple of entries whole when it changes; all of them after a store failure since, which
    may have lost a write)."""
    entries = state.memo.entries
    written = record.memo_entries
    same_epoch = failures == record.memo_epoch
    if entries is written and same_epoch:
        return []
    stored = {e.address for e in written} if written is not None and same_epoch else set()
    record.memo_entries, record.memo_epoch = entries, failures
    return [e for e in entries if e.address not in stored]


def value_of(
    state: ConversationState,
    record: SharedRecord,
    snapshot: Snapshot,
    *,
    window: tuple[str, str, int] | None,
    cache: Mapping[str, Any] | None,
    failures: int = 0,
) -> tuple[dict[str, Any], list[MemoEntry]]:
    """The shared value after a call that left ``snapshot`` (its ``chain`` covers its items), and the
    summaries to write before it (each to :func:`memo_part` of its address; the value names them by
    length and address); it moves ``record``'s revision on, so this worker does not take its own write
    back. ``failures``: the store's :attr:`~otel_context.conversation.state_store.StateStore.failures`
    count."""
    items, chain = snapshot.items, snapshot.chain
    n = len(items)
    usage = snapshot.usage
    anchor = (
        {
            "n": n,
            "chain": chain[n - 1],
            "prev": chain[n - 2] if n > 1 else "",
            "bare": hashlib.sha256(_digest(_without_markers(items[n - 1]))).hexdigest(),
            "input": usage.input_tokens if usage is not None else 0,
            "output": usage.output_tokens if usage is not None else 0,
            "tokens": snapshot.tokens,
            "entry": snapshot.entry.address if snapshot.entry is not None else None,
            "ended": time.time(),
            # Only with cache diagnostics on: the responses that answered these items, for the next call's
            # comparison on whichever worker (sealed with the rest when the store has keys).
            **({"replies": [list(r) for r in snapshot.replies]} if snapshot.replies else {}),
        }
        if n and len(chain) == n
        else None
    )
    with state.lock:
        memo = _memo_of(state, record, failures)
        record.seq += 1
        record.rev = f"{_TOKEN}.{os.getpid():x}.{next(_WRITES):x}"
        breaker = [state.breaker.consecutive_failures, state.breaker.consecutive_thrashing]
        entries = state.memo.entries
        return {
            "seq": record.seq,
            "rev": record.rev,
            "anchor": anchor,
            "memo": [[e.prefix_len, e.address] for e in entries] or None,
            "prepared": record.prepared or None,
            "breaker": breaker,
            "breaker_model": state.breaker_model,
            "factor": state.estimate_factor,
            "window": list(window) if window else None,
            "cache": cache,
        }, memo


def renewed(value: Mapping[str, Any]) -> tuple[str, ...]:
    """The parts whose expiry a write of the state ``value`` renews: the summaries it names."""
    refs = value.get("memo") or ()
    return tuple(memo_part(str(ref[1])) for ref in refs)


@dataclass(frozen=True)
class Published:
    """A summary one worker prepared in the background and published for the fleet: the memo entry it
    makes (verified by any worker against its own items' content hash), its ``compact`` span's context
    (trace id, span id, flags), which the call that applies it links to, and its identity (a content hash
    of the entry: a worker that drops it removes that very summary, not one published since)."""

    entry: MemoEntry
    link: tuple[int, int, int] | None
    ident: str = ""


def _ident(entry: MemoEntry) -> str:
    return hashlib.sha256(_digest(entry_value(entry))).hexdigest()[:32]


def link_value(link: ChainLink) -> dict[str, Any]:
    """The ``link`` part of a stored response (its name, not its value, carries the response id, hashed)."""
    return {
        "key": link.key,
        "input": link.input_tokens,
        "output": link.output_tokens,
        "chain": link.chain,
        "turn": link.turn,
    }


def linked(loaded: Loaded, response_id: str) -> ChainLink | None:
    """The link a ``link`` part holds (read from the store: no state of this process); None when absent or
    not of our shape."""
    value = loaded.value
    if value is None:
        return None
    key, chain = value.get("key"), value.get("chain")
    tokens_in, tokens_out, turn = (as_count(value.get(n)) for n in ("input", "output", "turn"))
    if not isinstance(key, str) or not isinstance(chain, str) or tokens_in is None or tokens_out is None:
        return None
    if tokens_in < 0 or tokens_out < 0 or turn is None or turn < 1:
        return None
    return ChainLink(response_id, key, None, tokens_in, tokens_out, chain, turn)


def prepared_value(entry: MemoEntry, link: tuple[int, int, int] | None) -> dict[str, Any]:
    """The ``prepared`` part for a summary prepared in the background (see :class:`Published`)."""
    return {
        "v": PREPARED_VERSION,
        "entry": entry_value(entry),
        "link": list(link) if link else None,
        PREPARED_ID: _ident(entry),
    }


def published(loaded: Loaded) -> Published | None:
    """The summary a ``prepared`` part holds; None when absent, of another version or not of our shape."""
    value = loaded.value
    if value is None or value.get("v") != PREPARED_VERSION:
        return None
    try:
        entries = _entries([value["entry"]])
        link = value.get("link")
        span = (int(link[0]), int(link[1]), int(link[2])) if isinstance(link, list) and len(link) == 3 else None
    except (KeyError, TypeError, ValueError, AttributeError):
        entries = []
    if not entries or entries[0].prefix_len <= 0:
        telemetry.log_once(
            "state_store.prepared_shape", "otel_context: a shared prepared summary is not of our shape; ignored"
        )
        return None
    ident = value.get(PREPARED_ID)
    return Published(entries[0], span, ident if isinstance(ident, str) else "")
