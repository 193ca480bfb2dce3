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
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from types import TracebackType

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


class RedisServer:
    """``with RedisServer() as server: server.url`` -> ``redis://127.0.0.1:PORT/0``."""

    def __init__(self, binary: str | None = None, port: int | None = None) -> None:
        found = binary or find_binary()
        if found is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.binary = found
        self.port = port or _free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="otel-context-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        """Start (again) on the same port and wait until it answers PING."""
        if self._process is not None and self._process.poll() is None:
            return
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "save": "",
            "appendonly": "no",
            "dir": self._dir.name,
            "daemonize": "no",
            "enable-debug-command": "local",
            "loglevel": "warning",
        }
        argv = [self.binary] + [part for name, value in options.items() for part in (f"--{name}", value)]
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
