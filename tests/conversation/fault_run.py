"""One conversation served in this process through a shared store while a fault is injected mid-run (the
Cluster and Sentinel fault tests): every turn must succeed, and the time each spends in the store stays
within ``state_store_max_wait_seconds``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import otel_context
from otel_context import Settings
from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import file_content

from .fault_support import MODEL, TimedStore

#: The documented default: every fault is asserted against it.
BOUND = Settings().state_store_max_wait_seconds


@dataclass
class FaultRun:
    """What the turns of one run measured."""

    #: Seconds each turn spent in the store (its reads, lock and waits), in turn order.
    store_seconds: list[float] = field(default_factory=list)
    #: The store's failed operations during the run.
    failures: int = 0
    #: Seconds the fault took to inject (a failover: until the new primary serves).
    fault_seconds: float = 0.0


def run_with_fault(
    sim: SimulatedProvider, url: str, conversation: str, fault: Callable[[], object], turns: int = 30
) -> tuple[FaultRun, TimedStore]:
    """``turns`` turns of ``conversation`` (an explicit id: one known slot), 0.1 s apart, with ``fault()``
    run in a thread from the fifth turn on; asserts every turn got an answer and the run outlasted the
    fault by a few turns. The store is returned open (the caller closes it)."""
    store = TimedStore.from_url(url + "?timeout_ms=50")
    assert isinstance(store, TimedStore)
    assert store.ready(10.0)  # a worker that started before the conversation did
    otel_context.instrument(auto_compact_window=14_000, state_store=store)
    client = sim.anthropic()
    result = FaultRun()
    messages: list[dict[str, object]] = []
    injected = threading.Event()
    injector: threading.Thread | None = None

    def inject() -> None:
        began = time.perf_counter()
        try:
            fault()
        finally:
            result.fault_seconds = time.perf_counter() - began
            injected.set()

    after = 0
    try:
        for turn in range(200):
            if turn == 4:
                injector = threading.Thread(target=inject, daemon=True)
                injector.start()
            messages.append({"role": "user", "content": f"Turn {turn}. " + file_content(f"f{turn}.py", 20)})
            store.spent()
            with otel_context.conversation(conversation):
                response = client.messages.create(model=MODEL, max_tokens=256, messages=messages)
            result.store_seconds.append(store.spent())
            assert response.content, f"turn {turn} got no answer"
            messages.append({"role": "assistant", "content": response.content[0].text})
            store.flush(1.0)
            after += injected.is_set()
            if turn + 1 >= turns and after >= 5:
                break
            time.sleep(0.1)
        assert after >= 5, "the fault did not end within the run"
    finally:
        if injector is not None:
            injector.join(60)
        otel_context.uninstrument()
    result.failures = store.failures
    return result, store


def back_by_itself(store: TimedStore, name: str) -> str:
    """Where ``store`` reads ``name`` from once its back-off after the run's last failure is over: ``store``
    when it came back by itself. A failure in the run's last turns (a slot map still being read, a timeout of
    a loaded machine) leaves the store in its back-off for ``retry_after`` seconds, when it answers from
    this process's state without asking: a read at once would say ``fallback`` of a store that is fine."""
    deadline = time.monotonic() + store.retry_after + 5.0
    source = store.get(name).source
    while source != "store" and time.monotonic() < deadline:
        time.sleep(0.1)
        source = store.get(name).source
    return source
