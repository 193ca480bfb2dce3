"""The Redis store's own connections (see :class:`_Connections`: to one server, or to the primary that
Sentinel names), and their routing over the primaries of a Redis Cluster (see :class:`_ClusterConnections`)."""

from __future__ import annotations

import os
from binascii import crc_hqx
from collections.abc import Sequence
from functools import lru_cache, partial
from typing import Any, Final

#: Hash slots of a Redis Cluster.
SLOTS: Final = 16384


class _Connections:
    """Connections of the store's own to one server, for its commands (the ``GET`` before the request and
    the writer's ``SET`` after it on every call; the lock, the release, the wait's ``MGET``).

    Why not redis-py's pool: it checks every connection it hands out for unread data (a non-blocking read:
    two ``settimeout`` calls, a ``recv`` and an exception per command), about a third of a ``GET`` on
    loopback. A connection of ours can never hold unread data: one that failed in any way (a timeout in the
    middle of a reply included) is closed before it goes back, and reconnects when next used. What the
    pool's check also finds, a connection the server closed while it was idle (a restart), shows here as a
    connection error of a reused connection: the idle ones are dropped and the commands (a ``GET``, a
    ``SET``, ``PEXPIRE``s: all idempotent) sent once more on a new connection.

    Behind Sentinel the connections are the Sentinel pool's kind: each asks the Sentinels for the primary
    when it connects, and turns a demoted primary's ``READONLY`` reply into a connection error, so after a
    failover the commands go once more, to the primary the Sentinels name then.
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
            return self._send(self._make(), commands, fresh=True)
        try:
            return self._send(conn, commands)
        except self._connection_error:
            stale, self._idle = self._idle, []
            for old in stale:
                old.disconnect()
            return self._send(self._make(), commands, fresh=True)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()

    def _send(self, conn: Any, commands: tuple[tuple[Any, ...], ...], fresh: bool = False) -> list[Any]:
        try:
            if fresh:
                # As the pool does: a Sentinel connection finds the primary in its connect(), which sending
                # on a connection without a socket does not call (it connects to its own host and port).
                conn.connect()
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


@lru_cache(maxsize=4096)
def slot_of(name: str) -> int:
    """The Cluster hash slot of the key ``name`` (its ``{...}`` tag's: every key of a conversation has one)."""
    key = name.encode("utf-8", "surrogatepass")
    start = key.find(b"{")
    if start > -1:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return crc_hqx(key, 0) % SLOTS


def key_of(command: tuple[Any, ...]) -> str:
    """The key a command of ours names: second (``GET k``, ``SET k v``), or after the script and the key
    count of ``EVAL script 1 k ...`` (routed by the script's text, it would reach the wrong node and come
    back as ``MOVED``, a redirect and a new connection on every release)."""
    return str(command[3] if command[0] in ("EVAL", "EVALSHA") else command[1])


class _ClusterConnections:
    """Our connections to each primary of a Redis Cluster, routed by the slot map of redis-py's cluster
    client (``cluster``), which also follows the redirects.

    Why not the cluster client for every command: on ``CLUSTERDOWN`` it sleeps 0.25 s before it raises (the
    whole wait bound of a call, during every failover), and it checks each connection it hands out as the
    plain pool does (see :class:`_Connections`). Here a command goes to the primary of its key's slot on a
    connection of ours; a redirect (``MOVED`` after a failover or a resharding, ``ASK`` while a slot is
    migrating) is sent again through the cluster client, which follows it and updates the slot map (the
    next command goes to the right node at once); after any other failure the slot map is read again
    before the next command (the store tries again after its back-off).
    """

    def __init__(self, cluster: Any, errors: Any) -> None:
        self._cluster = cluster
        self._errors = errors
        self._redirects = (errors.MovedError, errors.AskError)
        #: Failures after which the slot map is read again: a node gone, a slot not served (a failover).
        self._topology_changed = (
            errors.ConnectionError,
            errors.TimeoutError,
            errors.ClusterError,
            errors.TryAgainError,
            errors.RedisClusterException,
        )
        self._nodes: dict[str, _Connections] = {}
        self._stale = False

    def run(self, *commands: tuple[Any, ...]) -> list[Any]:
        """The replies of ``commands`` (each names one key: see :func:`key_of`), those of one node sent in one
        write."""
        try:
            if self._stale:
                self._cluster.nodes_manager.initialize()
                self._stale = False
            try:
                return self._routed(commands)
            except self._errors.AuthenticationError:
                raise
            except self._errors.ConnectionError:
                # A node refused or dropped us: its replica may have taken over already. Read the slot map
                # and try once more (a node that does not answer at all, a timeout, is not tried twice).
                self._cluster.nodes_manager.initialize()
                return self._routed(commands)
        except self._topology_changed:
            self._stale = True
            raise

    def _routed(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        groups: dict[str, tuple[Any, list[int]]] = {}
        manager = self._cluster.nodes_manager
        for i, command in enumerate(commands):
            node = manager.get_node_from_slot(slot_of(key_of(command)))
            groups.setdefault(node.name, (node, []))[1].append(i)
        if len(groups) == 1:  # the common case: one conversation's commands
            node, _ = next(iter(groups.values()))
            return self._run_on(node, commands)
        replies: list[Any] = [None] * len(commands)
        for node, indexes in groups.values():
            for i, reply in zip(indexes, self._run_on(node, [commands[i] for i in indexes]), strict=True):
                replies[i] = reply
        return replies

    def _run_on(self, node: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        conns = self._nodes.get(node.name)
        if conns is None:
            pool = self._cluster.get_redis_connection(node).connection_pool
            conns = self._nodes.setdefault(node.name, _Connections(pool, self._errors.ConnectionError))
        try:
            return conns.run(*commands)
        except self._redirects:
            # The cluster client follows the redirect (and, for MOVED, updates the slot map).
            return [self._cluster.execute_command(*command) for command in commands]

    def close(self) -> None:
        for conns in self._nodes.values():
            conns.close()
        self._cluster.close()
