"""Is a request body made of JSON-native values only? Checked where it changed, not over the whole history.

The anthropic SDK hands its ``request`` method the caller's own params: usually plain dicts and lists, but an
agent loop that appends ``response.content`` puts the SDK's pydantic blocks in there, and iterators are
allowed too. The engine needs a JSON-shaped body, so an unusual body goes through the SDK's own preparation
(a deep copy); a plain one is used as it is. Walking every message of a long history on every call to find
out costs time proportional to the history (about half a millisecond at 1,000 messages), so
:class:`JsonNativeMemo` remembers, per list, the objects it already found native: a resent history is
walked only from the previous call's last element on (apps re-send that one edited, e.g. to move a
``cache_control`` marker). The list heads that were seen are compared by identity, at C speed.

What it does not see: an element that was checked, is still the same object, and was then changed in place to
hold a non-native value. The body then reaches the engine with that value inside, which the engine reports
as content it does not understand (the request is sent unchanged either way: the SDK still prepares it).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any

from otel_context.fork_safe import new_lock

__all__ = ["JsonNativeMemo", "is_json_native"]

_SCALARS = (str, int, float, bool, type(None))
_SCALAR_SET = frozenset(_SCALARS)


def is_json_native(value: Any) -> bool:
    """Whether ``value`` is made of dicts, lists and JSON scalars only (iterative: deep histories are fine)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            extend(item.values())
        elif kind is list:
            extend(item)
        elif kind not in _SCALAR_SET:
            return False
    return True


class JsonNativeMemo:
    """:func:`is_json_native` for request bodies, remembering the list elements already checked.

    One entry per list head (its first element's identity, which the entry keeps alive so the id cannot be
    reused), least recently used dropped past ``max_entries``: memory is bounded by the number of live
    conversations, one reference per element.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._lists: OrderedDict[int, tuple[Any, list[Any]]] = OrderedDict()
        self._lock = new_lock(self, "_lock")

    #: Lists up to this long are walked directly: remembering them would cost more than the walk.
    short_list = 32

    def body_is_native(self, body: dict[str, Any]) -> bool:
        for value in body.values():
            kind = type(value)
            if kind in _SCALAR_SET:  # the model, the output cap, flags: no walk
                continue
            if kind is list and len(value) > self.short_list:
                if not self._list_is_native(value):
                    return False
            elif not is_json_native(value):
                return False
        return True

    def _list_is_native(self, items: list[Any]) -> bool:
        head = items[0]
        key = id(head)
        with self._lock:
            entry = self._lists.get(key)
        start = 0
        if entry is not None and entry[0] is head:
            seen = entry[1]
            common = min(len(seen), len(items)) - 1
            if common > 0 and all(map(operator.is_, items[:common], seen[:common])):
                start = common
        if not is_json_native(items[start:] if start else items):
            return False
        with self._lock:
            self._lists[key] = (head, items[:])
            self._lists.move_to_end(key)
            while len(self._lists) > self.max_entries:
                self._lists.popitem(last=False)
        return True

    def clear(self) -> None:
        with self._lock:
            self._lists.clear()
