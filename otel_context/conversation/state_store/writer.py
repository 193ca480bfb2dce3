"""The background thread that writes a store's ``put_later`` values, and what happens to it at exit and fork."""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from otel_context import process_state
from otel_context.fork_safe import new_condition

#: At the interpreter's normal exit, how long the ``put_later`` values still queued may hold the exit up.
EXIT_FLUSH_SECONDS: Final = 1.0
#: One value a writer writes: its name, its bytes, and the names whose expiry its write renews.
Write = tuple[str, bytes, tuple[str, ...]]


class _Writer:
    """One daemon thread that writes ``put_later`` values, newest per key (a burst coalesces), in batches: what
    is queued when the thread is free goes out in one round trip (up to :attr:`BATCH` values, in order).

    A daemon thread dies with the interpreter wherever it is, so what is still queued at a normal exit is
    written first (at most :data:`EXIT_FLUSH_SECONDS`): a worker stopped by a deployment right after its last
    call does not lose that conversation's last state (the next worker would take an older one). Batches are
    what make that deadline hold under load: one round trip per value, 2,000 values queued at exit took more
    than the second on a loaded 2-core machine, and the rest were lost with the thread.

    A fork's child starts with an empty queue and no thread: what was queued at the fork is the parent's to
    write (the child writing it too could overwrite a newer value the parent wrote since), and the child's exit
    does not wait for it.
    """

    MAX_PENDING = 10_000
    #: Most values written in one round trip (a few hundred KB at most of the usual small values).
    BATCH = 256

    def __init__(self, write: Callable[[Sequence[Write]], bool]) -> None:
        self._write = write
        self._cond = new_condition(self, "_cond")
        self._start_empty()
        _writers.add(self)

    def _start_empty(self) -> None:
        self._pending: OrderedDict[str, tuple[bytes, tuple[str, ...]]] = OrderedDict()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, name: str, payload: bytes, renew: tuple[str, ...]) -> None:
        with self._cond:
            self._pending[name] = (payload, renew)
            self._pending.move_to_end(name)
            while len(self._pending) > self.MAX_PENDING:
                self._pending.popitem(last=False)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="otel-context-state-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch: list[Write] = []
                while self._pending and len(batch) < self.BATCH:
                    name, (payload, renew) = self._pending.popitem(last=False)
                    batch.append((name, payload, renew))
                self._busy = True
            try:
                self._write(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


#: Every writer of this process, for the exit's flush and a fork's child (see :class:`_Writer`).
_writers: weakref.WeakSet[_Writer] = weakref.WeakSet()


def _flush_at_exit() -> None:
    """The interpreter exits normally: write what every writer still has queued, within one deadline."""
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    for writer in list(_writers):
        writer.flush(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    """A fork's child: every writer starts empty, with no thread (see :class:`_Writer`; its lock is renewed
    by :mod:`otel_context.fork_safe`)."""
    for writer in list(_writers):
        writer._start_empty()


atexit.register(_flush_at_exit)
# Reset: kept (a writer belongs to an open store, which a reset keeps). A fork's child: every writer empty.
process_state.register(__name__, ("_writers",), on_reset=None, in_forked_child=_after_fork_in_child)
