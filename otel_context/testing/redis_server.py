"""A throwaway ``redis-server`` on a free loopback port, for tests and benchmarks of the shared state store.

Why a real server: the store's whole point is how it behaves against Redis (timeouts, a server that went
away, came back, stalled, filled up); a fake would test the fake. The server has no persistence
(``--save '' --appendonly no``), lives in a temporary directory, and is stopped with the object. It can be
stopped and started again on the same port, and paused (``DEBUG SLEEP``), to inject faults.

Needs the ``redis-server`` binary (Debian: ``apt-get install -y redis-server``); :func:`find_binary` says
whether it is there. Driving it uses the ``redis`` package only through plain sockets, so this module
imports nothing optional.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

_T = TypeVar("_T")

INSTALL_HINT = (
    "redis-server is not installed; install Debian's package: `apt-get install -y redis-server` "
    "(.ci/run does, and stops the system service: tests start their own server)"
)


def find_binary() -> str | None:
    """The path of ``redis-server``, or None."""
    return shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


#: A Cluster node also listens on its port + this (the cluster bus).
BUS_OFFSET = 10_000


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port(taken: set[int] | None = None) -> int:
    """A free loopback port whose cluster-bus port (+10000) is free too (and neither in ``taken``)."""
    taken = taken if taken is not None else set()
    for _ in range(1000):
        port = _free_port()
        if port + BUS_OFFSET > 65535:
            port = port % 40_000 + 10_000
        near = {port, port + BUS_OFFSET} & {p + d for p in taken for d in (0, BUS_OFFSET)}
        if not near and _is_free(port) and _is_free(port + BUS_OFFSET):
            taken.add(port)
            return port
    raise RuntimeError("no loopback port with a free cluster-bus port (+10000) found")


def _read_reply(sock: socket.socket, buffer: bytearray) -> Any:
    """One RESP2 reply from ``sock`` (bulk strings as str, arrays as lists, errors as :class:`RedisReplyError`)."""

    def line() -> bytes:
        while b"\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buffer.extend(chunk)
        end = buffer.index(b"\r\n")
        out = bytes(buffer[:end])
        del buffer[: end + 2]
        return out

    head = line()
    kind, rest = head[:1], head[1:].decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise RedisReplyError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        while len(buffer) < size + 2:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buffer.extend(chunk)
        out = bytes(buffer[:size]).decode("utf-8", "replace")
        del buffer[: size + 2]
        return out
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_read_reply(sock, buffer) for _ in range(size)]
    raise ValueError(f"not a RESP reply: {head!r}")


class RedisReplyError(Exception):
    """An error reply of the server."""


class RedisServer:
    """``with RedisServer() as server: server.url`` -> ``redis://127.0.0.1:PORT/0``."""

    def __init__(
        self,
        binary: str | None = None,
        port: int | None = None,
        options: dict[str, str | None] | None = None,
        config: str | None = None,
    ) -> None:
        found = binary or find_binary()
        if found is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.binary = found
        self.port = port or _free_port()
        #: More ``redis-server`` options (``cluster-enabled``, ``replicaof``, ...).
        self.options = dict(options or {})
        #: A configuration file's text, written in the server's directory and given first (Sentinel needs
        #: one it can rewrite).
        self.config = config
        self._dir = tempfile.TemporaryDirectory(prefix="otel-context-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def directory(self) -> str:
        return self._dir.name

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start (again) on the same port and wait until it answers PING."""
        if self._process is not None and self._process.poll() is None:
            return
        options: dict[str, str | None] = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "save": "",
            "appendonly": "no",
            "dir": self._dir.name,
            "daemonize": "no",
            "enable-debug-command": "local",
            "loglevel": "warning",
            **self.options,
        }
        argv = [self.binary]
        if self.config is not None:
            path = os.path.join(self._dir.name, "server.conf")
            if not os.path.exists(path):  # kept across restarts (Sentinel rewrites it)
                with open(path, "w", encoding="utf-8") as file:
                    file.write(self.config)
            argv.append(path)
        for name, value in options.items():  # a None value: a flag (``--sentinel``)
            argv += [f"--{name}"] if value is None else [f"--{name}", value]
        self._process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self._process.returncode} on port {self.port}")
            with contextlib.suppress(OSError):
                if self.command("PING") == "+PONG":
                    return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def stop(self) -> None:
        """Kill the server (no shutdown save: there is no persistence)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def command(self, *args: str, timeout: float = 5.0) -> str:
        """Send one command (RESP) and return the first line of the reply, e.g. ``+OK`` or ``:1``."""
        payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(payload.encode())
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
        return reply.split(b"\r\n", 1)[0].decode()

    def call(self, *args: str | int, timeout: float = 5.0) -> Any:
        """Send one command and return its whole reply (lists, bulk strings as str; raises
        :class:`RedisReplyError` for an error reply)."""
        parts = [str(a).encode() for a in args]
        payload = f"*{len(parts)}\r\n".encode() + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(payload)
            return _read_reply(sock, bytearray())

    def info(self, section: str) -> dict[str, str]:
        """``INFO section`` as a dict."""
        text = self.call("INFO", section) or ""
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))

    def pause(self, seconds: float) -> threading.Thread:
        """Stall the server for ``seconds`` (``DEBUG SLEEP``) from a background thread; join it to wait."""
        thread = threading.Thread(target=self.command, args=("DEBUG", "SLEEP", str(seconds)), daemon=True)
        thread.start()
        time.sleep(0.05)  # the server is asleep once it has read the command
        return thread

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self._dir.cleanup()


def _wait(what: str, check: Callable[[], _T | None], timeout: float, every: float = 0.05) -> _T:
    """``check()``'s first truthy answer within ``timeout`` seconds (its errors count as "not yet")."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, RedisReplyError, ValueError):
            answer = check()
            if answer:
                return answer
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{what} did not happen within {timeout}s")
        time.sleep(every)


_Group = TypeVar("_Group", bound="_ServerGroup")


class _ServerGroup:
    """Several servers started together: a ``with`` block starts them all and stops every one it started
    (also when starting one of them failed)."""

    def start(self, timeout: float = 30.0) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _members(self) -> list[RedisServer]:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: _Group) -> _Group:
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for server in self._members():
            server.__exit__(None, None, None)


class RedisClusterServers(_ServerGroup):
    """A real Redis Cluster on loopback: ``primaries`` primaries with ``replicas`` replicas each (3 + 3 by
    default), every node a :class:`RedisServer` whose port and cluster-bus port (+10000) are free.

    ``node_timeout_ms`` is the nodes' ``cluster-node-timeout``: a primary that stops answering for that
    long is failed over to its replica (short here, so the tests' failovers take about a second). Faults:
    :meth:`kill` (and :meth:`restart`: the node comes back as a replica), :meth:`fail_over` (a replica
    promoted by hand), :meth:`migrate_slot` (a resharding of one slot, keys included).
    """

    def __init__(
        self, binary: str | None = None, primaries: int = 3, replicas: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        taken: set[int] = set()
        options: dict[str, str | None] = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": str(node_timeout_ms),
            "cluster-replica-validity-factor": "0",  # a replica may always take over (tests kill at will)
        }
        self.nodes = [RedisServer(binary, free_cluster_port(taken), options) for _ in range(primaries * (1 + replicas))]
        self._primaries, self._replicas = primaries, replicas

    @property
    def url(self) -> str:
        """The URL of the first node: how a user names a cluster (any node of it)."""
        return self.nodes[0].url

    def start(self, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.start()
        first = self.nodes[0]
        per = 16384 // self._primaries
        for i, node in enumerate(self.nodes[: self._primaries]):
            last = 16383 if i == self._primaries - 1 else (i + 1) * per - 1
            node.call("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        for node in self.nodes[1:]:
            first.call("CLUSTER", "MEET", "127.0.0.1", node.port)
        _wait("the nodes meeting", lambda: all(self._known(n) == len(self.nodes) for n in self.nodes), timeout)
        ids = [node.call("CLUSTER", "MYID") for node in self.nodes]
        for j, node in enumerate(self.nodes[self._primaries :]):
            node.call("CLUSTER", "REPLICATE", ids[j % self._primaries])
        self.wait_healthy(timeout)

    def _known(self, node: RedisServer) -> int:
        return len([line for line in (node.call("CLUSTER", "NODES") or "").splitlines() if line.strip()])

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every running node says the cluster is ok and every replica's link to its primary is up."""

        def healthy() -> bool:
            for node in self.nodes:
                if not node.running:
                    continue
                if "cluster_state:ok" not in node.call("CLUSTER", "INFO"):
                    return False
                replication = node.info("replication")
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
            return True

        _wait("a healthy cluster", healthy, timeout)

    def _slots(self) -> list[Any]:
        node = next(n for n in self.nodes if n.running)
        return list(node.call("CLUSTER", "SLOTS"))

    def primary_of_slot(self, slot: int) -> RedisServer:
        """The node serving ``slot`` now (as a running node sees it)."""
        for start, end, primary, *_ in self._slots():
            if start <= slot <= end:
                return self._node(int(primary[1]))
        raise LookupError(f"slot {slot} is not served")

    def replicas_of(self, primary: RedisServer) -> list[RedisServer]:
        found = []
        for _start, _end, first, *others in self._slots():
            if int(first[1]) == primary.port:
                found = [self._node(int(other[1])) for other in others]
        return found

    def primaries(self) -> list[RedisServer]:
        return sorted({self._node(int(entry[2][1])) for entry in self._slots()}, key=lambda n: n.port)

    def _node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def kill(self, node: RedisServer, promoted_within: float = 15.0) -> RedisServer:
        """Kill ``node`` (a primary); return its replica once the cluster promoted it and is ok again."""
        replicas = self.replicas_of(node)
        node.stop()
        if not replicas:
            return node

        def promoted() -> RedisServer | None:
            found = next((r for r in replicas if r.info("replication").get("role") == "master"), None)
            return found if found is not None and self._ok_without(node) else None

        return _wait("the replica's promotion", promoted, promoted_within)

    def _ok_without(self, gone: RedisServer) -> bool:
        return all("cluster_state:ok" in n.call("CLUSTER", "INFO") for n in self.nodes if n.running and n is not gone)

    def restart(self, node: RedisServer, timeout: float = 30.0) -> None:
        """Start a killed node again (it rejoins, as a replica of the one that took over)."""
        node.start()
        self.wait_healthy(timeout)

    def fail_over(self, replica: RedisServer, timeout: float = 15.0) -> None:
        """Promote ``replica`` by hand (``CLUSTER FAILOVER``: its primary hands over, no write is lost)."""
        replica.call("CLUSTER", "FAILOVER")
        _wait("the manual failover", lambda: replica.info("replication").get("role") == "master", timeout)
        self.wait_healthy(timeout)

    def migrate_slot(self, slot: int, target: RedisServer, pause_between_keys: float = 0.0) -> None:
        """Move ``slot`` and its keys to the primary ``target`` as ``redis-cli --cluster reshard`` does:
        importing/migrating, ``MIGRATE`` key by key (clients get ``ASK`` meanwhile), then the new owner."""
        source = self.primary_of_slot(slot)
        if source is target:
            return
        source_id, target_id = source.call("CLUSTER", "MYID"), target.call("CLUSTER", "MYID")
        target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while True:
            keys = source.call("CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not keys:
                break
            for key in keys:
                source.call("MIGRATE", "127.0.0.1", target.port, key, 0, 5000)
                time.sleep(pause_between_keys)
        others = [n for n in self.primaries() if n not in (source, target)]
        for node in (target, source, *others):  # replicas learn it from their primaries
            node.call("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.wait_healthy()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def _members(self) -> list[RedisServer]:
        return list(self.nodes)


class RedisSentinelServers(_ServerGroup):
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority) on loopback, the
    service named ``service``. ``down_after_ms`` is how long the primary may not answer before the
    Sentinels fail it over (short here: a failover takes a second or two)."""

    def __init__(
        self,
        binary: str | None = None,
        service: str = "otel-context",
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 500,
    ) -> None:
        self.service = service
        self.primary = RedisServer(binary)
        self.replicas = [
            RedisServer(binary, options={"replicaof": f"127.0.0.1 {self.primary.port}"}) for _ in range(replicas)
        ]
        quorum = sentinels // 2 + 1
        self.sentinels = []
        for _ in range(sentinels):
            port = _free_port()
            config = (
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {service} 127.0.0.1 {self.primary.port} {quorum}\n"
                f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
                f"sentinel failover-timeout {service} 3000\n"
                f"sentinel parallel-syncs {service} 1\n"
            )
            self.sentinels.append(RedisServer(binary, port, {"sentinel": None}, config=config))

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def current_primary(self) -> RedisServer:
        """The data server the Sentinels name as primary now."""
        answers = [s.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service) for s in self.sentinels if s.running]
        port = int(next(a for a in answers if a)[1])
        return next(server for server in self.servers if server.port == port)

    def start(self, timeout: float = 30.0) -> None:
        for server in self.servers:
            server.start()
        _wait(
            "the replicas' sync",
            lambda: all(r.info("replication").get("master_link_status") == "up" for r in self.replicas),
            timeout,
        )
        for sentinel in self.sentinels:
            sentinel.start()
        self._wait_settled(self.primary, timeout)

    def _wait_settled(self, primary: RedisServer, timeout: float) -> None:
        """Until every Sentinel names ``primary`` and knows its replicas and the other Sentinels."""

        def settled() -> bool:
            for sentinel in self.sentinels:
                (answer,) = [sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)]
                if not answer or int(answer[1]) != primary.port:
                    return False
                fields = sentinel.call("SENTINEL", "MASTER", self.service)
                info = dict(zip(fields[::2], fields[1::2], strict=False))
                if (
                    int(info.get("num-slaves", 0)) < len(self.replicas)
                    or int(info.get("num-other-sentinels", 0)) < len(self.sentinels) - 1
                ):
                    return False
            return primary.info("replication").get("role") == "master"

        _wait("the Sentinels agreeing on the primary", settled, timeout)

    def fail_over(self, timeout: float = 20.0) -> RedisServer:
        """``SENTINEL FAILOVER``: a replica is promoted (the old primary becomes its replica); the new one."""
        old = self.current_primary()
        self.sentinels[0].call("SENTINEL", "FAILOVER", self.service)
        return self._promoted_after(old, timeout)

    def _promoted_after(self, old: RedisServer, timeout: float) -> RedisServer:
        def promoted() -> RedisServer | None:
            now = self.current_primary()
            return now if now is not old and now.info("replication").get("role") == "master" else None

        return _wait("the failover", promoted, timeout)

    def kill_primary(self, timeout: float = 20.0) -> RedisServer:
        """Kill the primary; the replica the Sentinels promoted, once they name it."""
        old = self.current_primary()
        old.stop()
        return self._promoted_after(old, timeout)

    def _members(self) -> list[RedisServer]:
        return [*self.sentinels, *self.servers]
