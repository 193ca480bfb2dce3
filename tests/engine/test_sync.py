"""What a conversation shares and prepares (:class:`~otel_context.engine.call.CallSync`), through the
engine's public path (``engine.plan`` and the plan's ``on_response``) with the in-process store and real
summaries of a fake summarizer: the plan picks one sync per call from the settings, the in-process one makes
no round trip, and the store-backed one makes exactly the round trips it made before it had a name, and keeps
its per-conversation record (:class:`~otel_context.conversation.shared.SharedRecord`) beside the state, not
on it."""

from __future__ import annotations

import base64
import gc
import os
import time
import weakref
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

from otel_context import engine, semconv
from otel_context.contract import CallRequest
from otel_context.conversation import CONVERSATIONS, shared
from otel_context.conversation.state_store import MemoryStateStore
from otel_context.engine.call import IN_PROCESS, STORE_UNAVAILABLE, CallState, LocalSync
from otel_context.engine.fleet import StoreSync, lease_seconds, record_of, sync_for
from otel_context.flow import Step, StoreRequest, SummaryRequest, SummaryResult, drive, perform_with
from otel_context.settings import Settings, resolve
from otel_context.usage import TokenUsage
from tests.compaction.support import FakeSummarizer, Otel, anthropic_agent

MODEL = "claude-sonnet-4-6"
SMALL = 30_000


def _body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 1024, "system": "You are an agent.", "messages": messages}


def _drive(steps: Generator[Step, Any, Any], send: Callable[[SummaryRequest], SummaryResult]) -> tuple[Any, list[str]]:
    """Run the engine's steps as the instrumentation does, and name each step it yielded (a store request by
    the store's operation)."""
    seen: list[str] = []
    perform = perform_with(send)

    def naming(step: Step) -> Any:
        if isinstance(step, StoreRequest):
            seen.append(step.run.func.__name__ if isinstance(step.run, partial) else "store")
        else:
            seen.append(type(step).__name__)
        return perform(step)

    return drive(steps, naming), seen


class Caller:
    """Plays the instrumentation: a chat span per call, the plan, then ``on_response`` with a usage."""

    def __init__(self, otel: Otel, summarizer: FakeSummarizer) -> None:
        self.tracer = otel.tracer_provider.get_tracer("test")
        self.summarizer = summarizer

    def call(self, body: dict[str, Any], settings: Settings, usage: TokenUsage | None) -> tuple[CallState, list[str]]:
        with self.tracer.start_as_current_span("chat " + MODEL) as span:
            request = CallRequest("anthropic", "anthropic_messages", body, MODEL, settings)
            plan, steps = _drive(engine.plan(span, request), self.summarizer)
            assert isinstance(plan, CallState)
            plan.on_response(span, usage, None)
        return plan, steps


def test_the_plan_picks_the_sync_from_the_settings() -> None:
    assert sync_for(Settings()) is IN_PROCESS
    # A store is named but cannot be used (a key is set for a store made without one): the state stays in
    # this process, and the span says so.
    key = base64.b64encode(os.urandom(32)).decode()
    unusable = resolve({"state_store": MemoryStateStore(), "state_store_key": key}, env={})
    assert sync_for(unusable) is STORE_UNAVAILABLE
    assert IN_PROCESS.source == semconv.STATE_SOURCE_MEMORY
    assert STORE_UNAVAILABLE.source == semconv.STATE_SOURCE_FALLBACK
    # A store: a sync of its own per call, which carries the call's deadline for waits.
    settings = Settings(state_store="memory", state_store_max_wait_seconds=2.0)
    before = time.monotonic()
    one, two = sync_for(settings), sync_for(settings)
    assert isinstance(one, StoreSync) and isinstance(two, StoreSync) and one is not two
    assert one.store is two.store  # the store is opened once
    assert before + 2.0 <= one.deadline <= time.monotonic() + 2.0


def test_in_process_a_compaction_makes_no_round_trip(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    settings = Settings(auto_compact_window=SMALL)
    plan, steps = caller.call(_body(anthropic_agent(12, 8000)), settings, TokenUsage(input_tokens=12_000))
    assert plan.sync is IN_PROCESS
    assert summarizer.calls == 1  # the summary step ran as it is (LocalSync.once)
    assert steps == ["SummaryRequest"]
    assert plan.attributes[semconv.STATE_SOURCE] == semconv.STATE_SOURCE_MEMORY


def test_in_process_background_preparation_claims_without_a_lock(otel: Otel, summarizer: FakeSummarizer) -> None:
    caller = Caller(otel, summarizer)
    settings = Settings(auto_compact_window=SMALL)
    plan, _ = caller.call(_body(anthropic_agent(2)), settings, None)
    sync = plan.sync
    assert isinstance(sync, LocalSync)
    claim, steps = _drive(sync.claim(plan), summarizer)
    assert steps == []  # nothing to ask anyone
    assert claim.prepare and claim.lease is None and claim.ready is None and claim.stale is None
    assert _drive(sync.read_prepared(plan), summarizer) == ((None, None), [])
    assert _drive(sync.preparing(plan), summarizer) == (False, [])


def test_with_a_store_one_read_before_and_one_write_after_each_call(otel: Otel, summarizer: FakeSummarizer) -> None:
    store = MemoryStateStore()
    settings = Settings(state_store=store, auto_compact_window=SMALL)
    caller = Caller(otel, summarizer)
    history = [*anthropic_agent(2), {"role": "user", "content": "next?"}]
    first, steps = caller.call(_body(history), settings, TokenUsage(input_tokens=1000, output_tokens=20))
    assert isinstance(first.sync, StoreSync)
    assert steps == ["get"]  # the state of this history: one read
    assert first.attributes[semconv.STATE_SOURCE] == store.source  # where the read's answer came from
    assert store.flush(5)
    record = record_of(first.state)
    assert record.seq == 1 and record.rev  # the revision this worker wrote
    written = record.written
    assert written is not None and written[0] is first.state.snapshot  # the next call reads it by name

    history = [*history, {"role": "assistant", "content": "done."}, {"role": "user", "content": "and then?"}]
    second, steps = caller.call(_body(history), settings, TokenUsage(input_tokens=1100, output_tokens=20))
    assert steps == ["get"]
    assert isinstance(second.sync, StoreSync) and second.sync is not first.sync
    assert second.sync.address == written[2]  # read under the name this worker wrote, without hashing
    assert second.state is first.state and record_of(second.state) is record
    assert record.seq == 2  # its own write taken for nothing new; the commit moved it on


def test_with_a_store_a_crossing_takes_the_lock_and_writes_before_letting_go(
    otel: Otel, summarizer: FakeSummarizer
) -> None:
    store = MemoryStateStore()
    settings = Settings(state_store=store, auto_compact_window=SMALL)
    plan, steps = Caller(otel, summarizer).call(
        _body(anthropic_agent(12, 8000)), settings, TokenUsage(input_tokens=12_000)
    )
    assert summarizer.calls == 1
    # The read; the lock, and the state read again under it (another worker may have summarized meanwhile);
    # the summary; its memo part and the state, written before the lock is let go.
    assert steps == ["get", "acquire", "get", "SummaryRequest", "put", "put", "release"]
    assert isinstance(plan.sync, StoreSync)
    assert store.get(plan.state.key, shared.summary_lock(plan.sync.address)).value is None  # let go


def test_with_a_store_one_worker_claims_the_preparation(otel: Otel, summarizer: FakeSummarizer) -> None:
    store = MemoryStateStore()
    settings = Settings(state_store=store, auto_compact_window=SMALL)
    plan, _ = Caller(otel, summarizer).call(_body(anthropic_agent(2)), settings, TokenUsage(input_tokens=900))
    mine = plan.sync
    assert isinstance(mine, StoreSync)
    claim, steps = _drive(mine.claim(plan), summarizer)
    assert steps == ["acquire", "get"]  # the prepare lock, then whether a summary is published already
    assert claim.prepare and claim.lease is not None and claim.ready is None and claim.stale is None
    assert record_of(plan.state).prepared == mine.address  # the fleet finds its preparations by this name

    # Another call of the conversation (another worker's, as far as the store can tell) finds it taken.
    theirs = StoreSync(store, time.monotonic() + 1.0)
    busy, steps = _drive(theirs.claim(plan), summarizer)
    assert steps == ["acquire"]
    assert not busy.prepare and busy.lease is None and busy.busy_for == lease_seconds(settings)
    assert _drive(theirs.preparing(plan), summarizer) == (True, ["acquire"])

    assert _drive(mine.release(claim.lease), summarizer) == (None, ["release"])
    assert _drive(theirs.preparing(plan), summarizer) == (False, ["acquire", "release"])


def test_a_state_without_a_store_has_no_shared_record(otel: Otel, summarizer: FakeSummarizer) -> None:
    plan, _ = Caller(otel, summarizer).call(_body(anthropic_agent(2)), Settings(), None)
    assert not hasattr(plan.state, "shared_seq")
    assert not any(name.startswith("shared") for name in vars(plan.state))


def test_the_shared_record_goes_with_its_state(otel: Otel, summarizer: FakeSummarizer) -> None:
    settings = Settings(state_store=MemoryStateStore())
    plan, _ = Caller(otel, summarizer).call(_body(anthropic_agent(2)), settings, TokenUsage(input_tokens=900))
    state = weakref.ref(plan.state)
    record = weakref.ref(record_of(plan.state))
    del plan
    CONVERSATIONS.clear()
    gc.collect()
    assert state() is None and record() is None  # the table holds neither alive
