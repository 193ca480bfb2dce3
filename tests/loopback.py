"""A loopback listener served by a thread of its own, for the tests' stand-ins (a collector that never answers,
a slow relay to redis-server).

Its thread ends before its socket closes. A thread left in ``accept()`` on a closed listener went on
accepting on the socket's number once the next listener a test opened got it (a simulated provider's): it
took a connection meant for that one, whose client saw "Server disconnected", and the provider's own
``accept()`` waited for ever (both threads were seen in ``accept4`` on the one descriptor).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class AcceptLoop:
    """Hands every connection made to ``port`` to ``handle`` (on the loop's thread) until :meth:`close`."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # looks at the stop flag between waits
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(handle,), daemon=True)
        self._thread.start()

    def _run(self, handle: Callable[[socket.socket], None]) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            handle(conn)

    def close(self) -> None:
        """Stop accepting, wait for the thread, then close the listener."""
        self._stop.set()
        self._thread.join()
        self._listener.close()
