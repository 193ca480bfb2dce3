"""Conversation state that many workers share: one small interface, an in-process and a Redis store.

Why: consecutive turns of one conversation land on different processes of a fleet. When each process keeps
its own state, each one summarizes on its own (N workers pay N summaries, and the model sees a different
summary of its own past depending on who answered, which also breaks the provider's prompt cache). A store
that every worker reads and writes makes the fleet behave like one process.

The interface (:class:`StateStore`) stores one JSON-able dict per ``(conversation key, part)``, with:

* ``get`` / ``aget`` -> :class:`Loaded` (the value or None, and where it came from: ``memory``, ``store``
  or ``fallback``), ``put`` / ``aput`` and ``put_later`` (written by a background thread, so the caller
  never waits for the store after its response); a write may ``renew`` the expiry of other parts of the
  same conversation in the same round trip, so a part written rarely (the summaries) lives as long as the
  part written on every call;
* a lock with a lease (``SET NX PX``): ``acquire`` / ``release``, so that one worker summarizes a
  threshold crossing while the others ``wait_for`` its result, a bounded time. A lock whose holder is
  unknown (a value that is not one of our tokens) is not waited for, and one a waiter of this process
  already waited out is not waited for again (its holder is slow or gone: see :meth:`StateStore.wait_for`).

The store is never on the app's failure path. A failed operation (server down, slow, full, or a value that
is not ours) returns the fallback answer (``Loaded(None, "fallback")``, ``False``, a non-exclusive lease),
counts ``otel_context.state_store.errors``, logs one warning per outage (never a value, a key or a
password), and skips the store for a short back-off before trying it again. Timeouts are tens of
milliseconds and redis-py's retries are off, so a stalled server costs a call at most one timeout.

Every value carries a schema version (a worker that reads a version it does not know ignores it), values
above a size cap are not stored (said once), keys have a prefix (default ``otel_context:``) and an expiry
(default a day), and every key of one conversation shares one Redis Cluster hash slot (``{...}`` tag).
Keys are hashes of the conversation key, so an app's explicit conversation ids do not show in the store.

One module per concept: :mod:`~.base` (the interface, :class:`Loaded`, :class:`Lease`, key names),
:mod:`~.memory` (:class:`MemoryStateStore`), :mod:`~.redis_store` (:class:`RedisStore`), :mod:`~.connections`
(the Redis store's own connections, routed by slot on a Cluster), :mod:`~.clients` (the redis-py
clients for one server, a Cluster, Sentinel) and :mod:`~.writer` (the thread that writes ``put_later`` values). Every
public name of the single module this package was stays importable from here (the constants too, re-exported
as ``NAME as NAME`` outside ``__all__``, as they were).
"""

from __future__ import annotations

from typing import Any

from otel_context.conversation.state_store.base import (
    DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS,
)
from otel_context.conversation.state_store.base import (
    DEFAULT_MAX_VALUE_BYTES as DEFAULT_MAX_VALUE_BYTES,
)
from otel_context.conversation.state_store.base import (
    DEFAULT_PREFIX as DEFAULT_PREFIX,
)
from otel_context.conversation.state_store.base import (
    DEFAULT_TTL_SECONDS as DEFAULT_TTL_SECONDS,
)
from otel_context.conversation.state_store.base import (
    GIVEN_UP_LOCKS as GIVEN_UP_LOCKS,
)
from otel_context.conversation.state_store.base import (
    POLL_SECONDS as POLL_SECONDS,
)
from otel_context.conversation.state_store.base import (
    RETIRE_SECONDS as RETIRE_SECONDS,
)
from otel_context.conversation.state_store.base import (
    SCHEMA_VERSION,
    Lease,
    Loaded,
    StateStore,
)
from otel_context.conversation.state_store.base import (
    WARN_INTERVAL_SECONDS as WARN_INTERVAL_SECONDS,
)
from otel_context.conversation.state_store.base import (
    Predicate as Predicate,
)
from otel_context.conversation.state_store.base import (
    Source as Source,
)
from otel_context.conversation.state_store.memory import MemoryStateStore
from otel_context.conversation.state_store.redis_store import (
    DEFAULT_RETRY_AFTER_SECONDS as DEFAULT_RETRY_AFTER_SECONDS,
)
from otel_context.conversation.state_store.redis_store import (
    DEFAULT_TIMEOUT_SECONDS as DEFAULT_TIMEOUT_SECONDS,
)
from otel_context.conversation.state_store.redis_store import (
    RedisStore,
)
from otel_context.conversation.state_store.writer import EXIT_FLUSH_SECONDS as EXIT_FLUSH_SECONDS
from otel_context.store_spec import StateStoreConfigError, validate_spec

#: The name :class:`MemoryStateStore` had before issue 40 (``InProcessStore``): still importable from here, as
#: every public name of the former module is, outside ``__all__``.
InProcessStore = MemoryStateStore

__all__ = [
    "SCHEMA_VERSION",
    "Lease",
    "Loaded",
    "MemoryStateStore",
    "RedisStore",
    "StateStore",
    "StateStoreConfigError",
    "open_store",
    "validate_spec",
]


def open_store(spec: Any = None, **options: Any) -> StateStore:
    """The store ``spec`` names (see :func:`validate_spec`), with ``options`` for the store's constructor."""
    spec = validate_spec(spec)
    if spec is None:
        return MemoryStateStore(**options)
    if isinstance(spec, StateStore):
        return spec
    if isinstance(spec, str):
        return RedisStore.from_url(spec, **options)
    return RedisStore(spec, **options)
