"""The pytest plugin as a user's project sees it, and the server under concurrent clients."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .helpers import CLAUDE, GPT


def test_fixtures_work_in_a_strict_asyncio_project(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.asyncio
            async def test_async(async_openai_client, simulated_provider):
                r = await async_openai_client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "x"}]
                )
                assert r.choices[0].message.content.startswith("Simulated reply")
                assert simulated_provider.last_exchange.path == "/v1/chat/completions"

            def test_sync(anthropic_client):
                m = anthropic_client.messages.create(
                    model="claude-opus-4-6", max_tokens=5, messages=[{"role": "user", "content": "x"}]
                )
                assert m.usage.output_tokens == 5
            """
        )
    )
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\nfilterwarnings = error\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_concurrent_clients(sim: Any) -> None:
    anthropic_client = sim.anthropic()
    openai_client = sim.openai()

    def call(i: int) -> str:
        if i % 2:
            return str(
                anthropic_client.messages.create(
                    model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": f"q{i}"}]
                ).id
            )
        with openai_client.chat.completions.stream(
            model=GPT, messages=[{"role": "user", "content": f"q{i}"}]
        ) as stream:
            return str(stream.get_final_completion().id)

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            ids = list(pool.map(call, range(40)))
    finally:
        anthropic_client.close()
        openai_client.close()
    assert len(set(ids)) == 40
    assert len(sim.exchanges) == 40
    assert all(x.status == 200 for x in sim.exchanges)


def test_two_hundred_simultaneous_connections(sim: Any) -> None:
    """200 real SDK clients, each on its own connection, released at once: every call is served.

    The stdlib server's listen backlog of 5 failed a third of them with ``APIConnectionError``. The server's
    latency keeps every connection open at the same time; the barrier makes the connects one burst.
    """
    sim.latency = 0.3
    clients = 200
    barrier = threading.Barrier(clients, timeout=60)

    def call(i: int) -> str:
        client = sim.anthropic(timeout=60) if i % 2 else sim.openai(timeout=60)
        try:
            barrier.wait()
            if i % 2:
                return str(
                    client.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "q"}]).id
                )
            return str(client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": "q"}]).id)
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=clients) as pool:
        ids = list(pool.map(call, range(clients)))
    assert len(set(ids)) == clients
    assert len(sim.exchanges) == clients
