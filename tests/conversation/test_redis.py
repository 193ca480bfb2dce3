"""The Redis store against a real redis-server: layout, options from the URL, credentials, a given client,
async callers, and the write-behind path."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from otel_context.conversation.state_store import RedisStore, StateStore
from otel_context.testing.redis_server import RedisServer
from tests.loopback import AcceptLoop
from tests.values import keys_of


def test_keys_prefix_hash_tag_and_expiry(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    store = make_store(redis_url)
    assert store.put("anthropic:conversation-of-alice", {"n": 1})
    assert store.put("anthropic:conversation-of-alice", {"n": 1}, part="breaker")
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in keys_of(client))
    assert len(keys) == 2
    assert all(k.startswith("otel_context:{") for k in keys)
    assert not any("alice" in k for k in keys)  # the app's conversation id is not in the store
    tags = {k[k.index("{") : k.index("}") + 1] for k in keys}
    assert len(tags) == 1  # one Cluster slot per conversation
    ttl_ms = client.pttl(keys[0])
    assert 86_390_000 < ttl_ms <= 86_400_000


def test_options_from_the_url(shared_redis: RedisServer, redis_url: str, make_store: Callable[..., StateStore]) -> None:
    store = make_store(redis_url + "?prefix=myapp:&ttl_seconds=60&timeout_ms=20&max_value_bytes=5000")
    assert isinstance(store, RedisStore)
    assert (store.prefix, store.ttl_seconds, store.timeout, store.max_value_bytes) == ("myapp:", 60.0, 0.02, 5000)
    store.put("c", {"n": 1})
    client = redis.Redis.from_url(redis_url)
    (key,) = keys_of(client)
    assert key.startswith(b"myapp:{")
    assert 59_000 < client.pttl(key) <= 60_000


def test_credentials_in_the_url_and_none_in_logs(
    own_redis: RedisServer, make_store: Callable[..., StateStore], caplog: pytest.LogCaptureFixture
) -> None:
    # The ACL user docs/deploying.md recommends: the store's keys, the commands it uses, nothing else.
    commands = ("-@all", "+get", "+set", "+mget", "+pexpire", "+eval", "+del", "+ping")
    assert own_redis.command("ACL", "SETUSER", "worker", "on", ">s3cret-pw", "~otel_context:*", *commands) == "+OK"
    url = f"redis://worker:s3cret-pw@127.0.0.1:{own_redis.port}/0"
    store = make_store(url)
    assert store.put("c", {"n": 1}) and store.get("c").value == {"n": 1}
    assert store.put("c", {"n": 1}, renew=["memo"])  # the engine's write after a call renews its summaries
    lease = store.acquire("c")
    assert lease is not None and lease.exclusive
    store.release(lease)
    assert store.wait_for("c", lambda v: True, timeout=1).value == {"n": 1}
    assert asyncio.run(store.aget("c")).value == {"n": 1}
    relock = store.acquire("c")
    assert relock is not None and relock.exclusive  # the release went through
    wrong = make_store(f"redis://worker:wrong-pw@127.0.0.1:{own_redis.port}/0")
    with caplog.at_level(logging.DEBUG, logger="otel_context"):
        loaded = wrong.get("c")
    assert loaded.source == "fallback"
    assert caplog.records and all("pw" not in r.getMessage() for r in caplog.records)


def test_a_client_given_is_used_as_it_is(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    client = redis.Redis.from_url(redis_url, socket_timeout=0.05)
    store = make_store(client)
    assert isinstance(store, RedisStore)
    assert store.put("c", {"n": 1})
    assert any(k.startswith(b"otel_context:") for k in keys_of(client))

    async def both() -> None:
        assert (await store.aget("c")).value == {"n": 1}
        lease = await store.aacquire("c")
        assert lease is not None and lease.exclusive
        await store.arelease(lease)

    asyncio.run(both())


def test_async_callers_do_not_block_the_loop(own_redis: RedisServer, make_store: Callable[..., StateStore]) -> None:
    # A long timeout, so that a store call blocking the loop would show as a 300 ms gap between ticks.
    store = make_store(own_redis.url, timeout=0.3)
    ticks: list[float] = []

    async def main() -> None:
        await store.aput("c", {"n": 1})
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.005)

        tick_task = asyncio.create_task(ticker())
        sleeper = own_redis.pause(0.8)
        started = time.monotonic()
        loaded = await store.aget("c")
        elapsed = time.monotonic() - started
        done.set()
        await tick_task
        sleeper.join()
        assert loaded.source == "fallback"
        assert 0.25 < elapsed < 0.7  # one (long) timeout

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 10 and max(gaps) < 0.15, gaps  # the loop kept running while the store call waited


def test_a_store_serves_many_event_loops(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    store = make_store(redis_url)
    for n in range(3):  # asyncio.run makes a new loop each time; a client of a closed loop must not be reused
        assert asyncio.run(store.aput("c", {"n": n}))
        assert asyncio.run(store.aget("c")).value == {"n": n}


def test_put_later_never_waits_for_a_stalled_store(
    own_redis: RedisServer, make_store: Callable[..., StateStore]
) -> None:
    store = make_store(own_redis.url)
    assert store.put("c", {"n": 0})
    sleeper = own_redis.pause(0.5)
    started = time.monotonic()
    for n in range(100):
        store.put_later("c", {"n": n})
    assert time.monotonic() - started < 0.05
    sleeper.join()
    time.sleep(store.retry_after if isinstance(store, RedisStore) else 0)
    store.put_later("c", {"n": 100})
    assert store.flush(5)
    assert store.get("c").value == {"n": 100}


EXITING_WRITER = """
import sys
from otel_context.conversation.state_store import open_store

store = open_store(sys.argv[1])
for n in range(int(sys.argv[2])):
    store.put_later(f"c{n}", {"n": n})
print("queued", flush=True)
"""


class _SlowLink:
    """A loopback TCP relay to a redis-server that delays what the client sends by ``delay`` seconds per
    write: a store one network hop away, whose every round trip costs at least that."""

    def __init__(self, port: int, delay: float) -> None:
        self.port, self.delay = port, delay
        self._loop = AcceptLoop(self._relay)
        self.url = f"redis://127.0.0.1:{self._loop.port}/0"

    def _relay(self, client: socket.socket) -> None:
        server = socket.create_connection(("127.0.0.1", self.port))
        threading.Thread(target=self._pipe, args=(client, server, self.delay), daemon=True).start()
        threading.Thread(target=self._pipe, args=(server, client, 0.0), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket, delay: float) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                time.sleep(delay)
                target.sendall(chunk)
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._loop.close()


@pytest.mark.parametrize("delay_ms", [0, 1], ids=["loopback", "1ms-away"])
def test_values_queued_by_put_later_are_written_before_the_interpreter_exits(
    shared_redis: RedisServer, redis_url: str, make_store: Callable[..., StateStore], tmp_path: Path, delay_ms: int
) -> None:
    """A worker that exits normally right after its last calls (a deployment stops it) writes what it queued:
    the writer is a daemon thread, which the interpreter would otherwise stop wherever it was. Run as a
    worker runs: a process of its own, here with 2,000 values queued at once.

    Within the exit's deadline (1 s) whatever each round trip costs: with one round trip per value, a store
    1 ms away (or a loaded machine: 2,000 round trips took over a second on a busy 2-core box) lost what
    did not fit; the writer sends what is queued in batches."""
    count = 2_000
    script = tmp_path / "writer.py"
    script.write_text(EXITING_WRITER)
    link = _SlowLink(shared_redis.port, delay_ms / 1000) if delay_ms else None
    try:
        proc = subprocess.run(
            [sys.executable, str(script), link.url if link else redis_url, str(count)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        if link is not None:
            link.close()
    assert proc.returncode == 0 and "queued" in proc.stdout, proc.stderr
    store = make_store(redis_url)
    assert [store.get(f"c{n}").value for n in range(count)] == [{"n": n} for n in range(count)]


def test_a_forked_child_neither_writes_nor_waits_for_what_its_parent_queued(
    own_redis: RedisServer, make_store: Callable[..., StateStore]
) -> None:
    """Values queued at a fork are the parent's to write. The child writing them too (its first write of its own
    used to start a writer on the inherited queue) put back a value older than one the parent wrote since; and
    the child's exit would wait for a queue no thread of its own drains."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    store = make_store(own_redis.url + "?timeout_ms=3000")
    sleeper = own_redis.pause(0.5)  # the parent's writes stay queued over the fork
    store.put_later("busy", {"n": 0})
    store.put_later("c", {"n": 1})
    go_read, go_write = os.pipe()
    answer_read, answer_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            empty = store.flush(0)  # nothing of the parent's to wait for
            os.read(go_read, 1)  # the parent has written a newer value of "c" meanwhile
            store.put_later("child", {"n": 2})
            written = store.flush(10)  # a loaded machine: its own write ends, however slowly
            os.write(answer_write, b"1" if empty and written else b"E" if not empty else b"W")
        finally:
            os._exit(0)
    try:
        sleeper.join()
        store.put_later("c", {"n": 3})
        assert store.flush(5)
        os.write(go_write, b"1")
        os.waitpid(pid, 0)
        answer = os.read(answer_read, 1)
    finally:
        for fd in (go_read, go_write, answer_read, answer_write):
            os.close(fd)
    assert answer == b"1"  # E: the child found the parent's queue (it would write it too); W: its own write did not end
    assert store.get("child").value == {"n": 2}
    assert store.get("c").value == {"n": 3}  # not the {"n": 1} queued before the fork


def test_two_workers_one_conversation(redis_url: str, make_store: Callable[..., StateStore]) -> None:
    """What a second worker reads is what the first wrote, to the byte (the memo's replacement)."""
    first, second = make_store(redis_url), make_store(redis_url)
    replacement = [{"role": "user", "content": [{"type": "text", "text": "Summary: ☃ \u2028 \ud83d\ude00"}]}]
    first.put("k", {"replacement": replacement})
    assert second.get("k").value == {"replacement": replacement}
