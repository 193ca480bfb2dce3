"""An instrumented SDK call keeps the recursion headroom the plain call has.

Why: the wrapper runs the SDK's ``request`` a few frames deeper than the plain call does (the driver, the
flow, its retry step: :data:`FRAMES`), and the SDK serializes the body recursively. With a body nested
near the interpreter's recursion limit (JSON ~980 deep under the default limit of 1000), those frames
turned a plain call that works (openai), or fails with the SDK's own error (anthropic's
``APIConnectionError``), into a ``RecursionError`` of the instrumented call.

So while any SDK is instrumented, the limit is :data:`FRAMES` higher than the app set it: the SDK's request
runs with the headroom it has without us. It is raised once (however many SDKs are instrumented) and put
back when the last one is uninstrumented, unless the app set a limit of its own meanwhile (then the app's
stays). Why not per call: a per-call raise and restore costs each call a stack walk and a lock, and a
body's depth is not known before the SDK serializes it.
"""

from __future__ import annotations

import sys

from otel_context.fork_safe import new_lock

#: Frames the wrapper adds between the SDK's ``post`` and its ``request`` on the deepest path (the sync
#: driver with the retry step: ``sync_request``, ``flow.drive``, ``flow._advance``, ``_call``, ``_retry``,
#: ``_call``, ``flow.drive``, the perform lambda, ``_perform``), and the wrapt wrapper's call.
FRAMES = 10

_lock = new_lock(sys.modules[__name__], "_lock")
_holders = 0
_raised: tuple[int, int] | None = None  # (the limit before, the limit set here)


def reserve() -> None:
    """An SDK is instrumented: the first one raises the limit by :data:`FRAMES`."""
    global _holders, _raised
    with _lock:
        _holders += 1
        if _holders == 1:
            before = sys.getrecursionlimit()
            _raised = (before, before + FRAMES)
            sys.setrecursionlimit(before + FRAMES)


def give_back() -> None:
    """An SDK is uninstrumented: the last one puts the limit back (unless the app changed it since)."""
    global _holders, _raised
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _raised is not None:
            before, raised = _raised
            if sys.getrecursionlimit() == raised:
                sys.setrecursionlimit(before)
            _raised = None
