"""A process forked while another of its threads is inside otel-context gives a child whose calls work.

``os.fork`` copies only the thread that calls it. A lock another thread held at that moment (a conversation
being committed, a token total being added, a span being read by the monitor) is copied held, and no thread
of the child will ever release it. Pre-forking servers whose parent made calls, and ``multiprocessing`` with
the fork start method, make such children. The test holds every lock an LLM call of otel-context takes
(from a thread of the parent, as a call in flight would) while the parent forks; the child then makes real
calls with both SDKs, on the conversations of the parent and on new ones, and must end them all.
"""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import Settings, TokenMonitor, semconv, token_counters
from otel_context.conversation import shared
from otel_context.conversation.state_store import MemoryStateStore, RedisStore
from otel_context.conversation.table import CONVERSATIONS
from otel_context.testing import SimulatedProvider
from tests.compaction.conftest import _fresh_engine
from tests.fork_support import CHILD_DEADLINE, fork, outcome
from tests.instrumentation.instr_support import counter_total, metric_points
from tests.values import attrs_of

__all__ = ["_fresh_engine"]

ANTHROPIC_MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o-mini"
#: Seconds the child may take for its calls before the test calls it hung (it takes well under one).


@pytest.fixture
def provider() -> Iterator[SimulatedProvider]:
    with SimulatedProvider() as sim:
        yield sim


def _calls(base_url: str, histories: dict[str, list[Any]], opener: str) -> None:
    """One call per SDK on each conversation of ``histories`` (extended in place with the answer and a new
    question), then one call per SDK of a new conversation opening with ``opener``."""
    import anthropic
    import openai

    claude = anthropic.Anthropic(api_key="test", base_url=base_url, max_retries=0)
    gpt = openai.OpenAI(api_key="test", base_url=base_url + "/v1", max_retries=0)
    try:
        for sdk, messages in (*histories.items(), ("anthropic", []), ("openai", [])):
            if not messages:
                messages.append({"role": "user", "content": opener})
            if sdk == "anthropic":
                reply = claude.messages.create(model=ANTHROPIC_MODEL, max_tokens=256, messages=messages)
                answer = "".join(getattr(block, "text", "") for block in reply.content)
            else:
                completion = gpt.chat.completions.create(model=OPENAI_MODEL, messages=messages)  # type: ignore[arg-type]
                answer = completion.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": answer})
            messages.append({"role": "user", "content": f"And then? ({len(messages)})"})
    finally:
        claude.close()
        gpt.close()


def _locks_of_a_call(monitor: TokenMonitor, settings: Settings) -> dict[str, tuple[Any, str]]:
    """Every lock a call of otel-context takes, by what it guards: (its owner, the owner's attribute). Private
    names: the test stands in for threads caught in the middle of a call, which only these locks can show."""
    from otel_context.engine import background
    from otel_context.instrumentation import _background
    from otel_context.instrumentation.anthropic import _spec

    locks: dict[str, tuple[Any, str]] = {
        "the conversation table": (CONVERSATIONS, "_lock"),
        "the token totals": (token_counters, "_lock"),
        "the opened shared stores": (shared, "_opened_lock"),
        "the anthropic body check": (_spec()._native, "_lock"),
        "the token monitor": (monitor, "_lock"),
        "the background summaries": (background, "_lock"),
        "the background summaries' threads": (_background, "_lock"),
    }
    for state in CONVERSATIONS.states():
        locks[f"conversation {state.key}"] = (state, "lock")
        locks[f"conversation {state.key}: its summaries"] = (state.memo, "_lock")
        if state.detector is not None:
            locks[f"conversation {state.key}: its cache-break check"] = (state.detector, "_lock")
    opened = shared.store_for(settings)
    if isinstance(opened, RedisStore):
        locks["the Redis store's health"] = (opened, "_health")
    elif isinstance(opened, MemoryStateStore):
        locks["the app's state store in memory"] = (opened, "_cond")
    return locks


@pytest.mark.parametrize("store_kind", ["memory", "redis", "store object"])
def test_a_child_forked_while_other_threads_hold_our_locks_makes_its_calls(
    provider: SimulatedProvider, store_kind: str, request: pytest.FixtureRequest
) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    store: dict[str, Any] = {}
    if store_kind == "redis":
        store["state_store"] = request.getfixturevalue("redis_url")
    elif store_kind == "store object":
        store["state_store"] = MemoryStateStore()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    monitor = TokenMonitor(stream=None).attach(tracer_provider)
    reader = InMemoryMetricReader()
    settings = otel_context.instrument(
        tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        capture_content="NO_CONTENT",
        **store,
    )
    try:
        histories: dict[str, list[dict[str, Any]]] = {"anthropic": [], "openai": []}
        _calls(provider.base_url, histories, "Hello from the parent")
        histories = {"anthropic": histories["anthropic"][:1], "openai": histories["openai"][:1]}
        _calls(provider.base_url, histories, "Hello again from the parent")
        locks = _locks_of_a_call(monitor, settings)
        assert len(locks) == 7 + 4 * 3 + (store_kind != "memory")  # four conversations with three locks each
        held, release = threading.Event(), threading.Event()

        def a_call_in_flight() -> None:
            held_here = [getattr(owner, attribute) for owner, attribute in locks.values()]
            for lock in held_here:
                lock.acquire()
            held.set()
            release.wait()
            for lock in held_here:
                lock.release()

        holder = threading.Thread(target=a_call_in_flight, daemon=True)
        holder.start()
        assert held.wait(10)
        turns_at_fork = len(monitor.lines)

        def in_the_child() -> dict[str, Any]:  # the locks still held, its calls, then its spans
            still_held = [name for name, (owner, attribute) in locks.items() if _locked(getattr(owner, attribute))]
            exporter.clear()
            _calls(provider.base_url, histories, "Hello from the child")
            ended = [
                (span.name, (span.attributes or {}).get(semconv.GEN_AI_CONVERSATION_ID))
                for span in exporter.get_finished_spans()
            ]
            return {"held": still_held, "spans": ended, "turns": len(monitor.lines)}

        pid, answer = fork(in_the_child)
        release.set()
        holder.join(10)
        status, child = outcome(pid, answer)
    finally:
        otel_context.uninstrument()
    assert os.WIFEXITED(status), (
        f"the child did not end its calls within {CHILD_DEADLINE} s: a lock it inherited held ({sorted(locks)})"
    )
    assert "raised" not in child, child["raised"]
    assert child["held"] == []
    names = [name for name, _ in child["spans"]]
    assert sorted(names) == sorted([f"chat {ANTHROPIC_MODEL}", f"chat {OPENAI_MODEL}"] * 2)
    assert all(conversation for _, conversation in child["spans"])
    assert child["turns"] == turns_at_fork + 4  # the monitor saw them too


def test_a_worker_that_sets_up_telemetry_after_the_fork_reports_only_its_own_calls(
    provider: SimulatedProvider,
) -> None:
    """What docs/deploying.md advises for a parent that makes calls: each worker sets up OpenTelemetry and
    instruments again after the fork (gunicorn's ``post_fork``). Its token counters then count from there, not
    from the totals its parent had summed when it forked, and its histograms hold only its own calls."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    otel_context.instrument(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(), capture_content="NO_CONTENT"
    )
    try:
        _calls(provider.base_url, {}, "Hello from the parent")  # the parent's totals: non-zero at the fork

        def in_the_child() -> dict[str, Any]:  # set up as a post_fork hook would
            exporter = InMemorySpanExporter()
            tracer_provider = TracerProvider()
            tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
            reader = InMemoryMetricReader()
            otel_context.instrument(
                tracer_provider=tracer_provider,
                meter_provider=MeterProvider(metric_readers=[reader]),
                capture_content="NO_CONTENT",
            )
            _calls(provider.base_url, {}, "Hello from the child")
            spans = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
            return {
                "spans": len(spans),
                "span_input": sum(int((attrs_of(s) or {})[semconv.GEN_AI_USAGE_INPUT_TOKENS]) for s in spans),
                "counted_input": counter_total(reader, semconv.METRIC_USAGE_INPUT_TOKENS),
                "durations": sum(p.count for p in metric_points(reader, semconv.METRIC_INFERENCE_DURATION)),
            }

        status, child = outcome(*fork(in_the_child))
    finally:
        otel_context.uninstrument()
    assert os.WIFEXITED(status)
    assert "raised" not in child, child["raised"]
    assert child["spans"] == 2 and child["durations"] == 2
    assert child["span_input"] > 0
    assert child["counted_input"] == child["span_input"]


def _locked(lock: Any) -> bool:
    """Whether a lock or a condition's lock is held (a condition has no ``locked()`` of its own)."""
    if isinstance(lock, threading.Condition):
        if not lock.acquire(blocking=False):
            return True
        lock.release()
        return False
    return bool(lock.locked())


_SYNCHRONIZATION = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}


def test_every_lock_of_the_package_is_made_fork_safe() -> None:
    """A lock made with ``threading`` directly would be inherited held again (the test above only holds the
    locks it knows): each one is made by ``otel_context.fork_safe``."""
    root = Path(otel_context.__file__).resolve().parent
    found = []
    # os.walk follows the symbolic link the source tree makes of otel_context/instrumentation; rglob does not.
    paths = [Path(folder, name) for folder, _, names in os.walk(root, followlinks=True) for name in names]
    for path in sorted(p for p in paths if p.suffix == ".py"):
        relative = "otel_context/" + path.relative_to(root).as_posix()  # not resolved: the link's own path
        if relative.startswith(("otel_context/testing/", "otel_context/fork_safe.py")):
            continue  # the simulated provider's servers are not on an app's call path; fork_safe makes them
        found += [
            f"{relative}:{node.lineno}: threading.{node.func.attr}()"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "threading"
            and node.func.attr in _SYNCHRONIZATION
        ]
    assert found == []
