"""The Redis store's own connections for the two commands of every call (see :class:`_Connections`)."""

from __future__ import annotations

import os
from functools import partial
from typing import Any


class _Connections:
    """Connections of the store's own for its two commands of every call: the ``GET`` before the request
    and the writer's ``SET`` after it.

    Why not redis-py's pool: it checks every connection it hands out for unread data (a non-blocking read:
    two ``settimeout`` calls, a ``recv`` and an exception per command), about a third of a ``GET`` on
    loopback. A connection of ours can never hold unread data: one that failed in any way (a timeout in the
    middle of a reply included) is closed before it goes back, and reconnects when next used. What the
    pool's check also finds, a connection the server closed while it was idle (a restart), shows here as a
    connection error of a reused connection: the idle ones are dropped and the commands (a ``GET``, a
    ``SET``, ``PEXPIRE``s: all idempotent) sent once more on a new connection.
    """

    def __init__(self, pool: Any, connection_error: type[Exception]) -> None:
        self._make = partial(pool.connection_class, **pool.connection_kwargs)
        self._connection_error = connection_error
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def run(self, *commands: tuple[Any, ...]) -> list[Any]:
        """The replies of ``commands``, sent in one write (raises what redis-py raises)."""
        if self._pid != os.getpid():  # a fork's child: the parent's sockets are not ours
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()  # atomic: no lock
        except IndexError:
            return self._send(self._make(), commands)
        try:
            return self._send(conn, commands)
        except self._connection_error:
            stale, self._idle = self._idle, []
            for old in stale:
                old.disconnect()
            return self._send(self._make(), commands)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()

    def _send(self, conn: Any, commands: tuple[tuple[Any, ...], ...]) -> list[Any]:
        try:
            if len(commands) == 1:
                conn.send_command(*commands[0])
            else:
                conn.send_packed_command(conn.pack_commands(commands))
            replies = [conn.read_response() for _ in commands]
        except BaseException:
            conn.disconnect()
            raise
        self._idle.append(conn)
        return replies
