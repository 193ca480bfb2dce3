"""Locks that a fork's child gets back free.

``os.fork`` copies only the thread that calls it. A lock another thread held at that moment (a conversation
being committed, a token total being added) is copied held, and no thread of the child will ever release it:
the child's first LLM call that takes it would wait forever. Pre-forking servers whose parent made calls, and
``multiprocessing`` with the fork start method, make such children. So every lock an LLM call takes is made by
:func:`new_lock`, and a fork's child finds a new, free one in its place before any of its own code runs.

What such a lock guarded may have been left halfway by the thread that held it. The child goes on with it as
it is: it is this process's bookkeeping of its own conversations (a snapshot, a total, a least-recently-used
order), and a conversation's state is only ever used for a call whose own history proves it belongs to it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from otel_context import process_state

__all__ = ["new_condition", "new_lock"]

T = TypeVar("T")

#: id(owner) -> (a weak reference to the owner, {attribute: how to make what it holds}). Keyed by id, not by
#: the owner: an owner need not be hashable; its entry goes when it does.
_owners: dict[int, tuple[weakref.ref[Any], dict[str, Callable[[], Any]]]] = {}


def new_lock(owner: Any, attribute: str) -> threading.Lock:
    """A lock for ``owner.<attribute>`` (an object, or a module for a global): store it there. A fork's child
    finds a new lock at that attribute."""
    return _renewed(owner, attribute, threading.Lock)


def new_condition(owner: Any, attribute: str) -> threading.Condition:
    """:func:`new_lock` for a condition variable."""
    return _renewed(owner, attribute, threading.Condition)


def _renewed(owner: Any, attribute: str, make: Callable[[], T]) -> T:
    key = id(owner)
    known = _owners.get(key)
    if known is None or known[0]() is not owner:
        known = _owners[key] = (weakref.ref(owner, partial(_forget, key)), {})
    known[1][attribute] = make
    return make()


def _forget(key: int, _: weakref.ref[Any]) -> None:
    _owners.pop(key, None)


def _after_fork_in_child() -> None:
    for ref, attributes in list(_owners.values()):
        owner = ref()
        if owner is not None:
            for attribute, make in attributes.items():
                setattr(owner, attribute, make())


# Reset: kept (a lock is not state: a reset keeps the objects that own them). A fork's child: every lock is
# new and free, before anything else of the child runs (the first registration: every module that makes a
# lock imports this one first).
process_state.register(__name__, ("_owners",), on_reset=None, in_forked_child=_after_fork_in_child)
