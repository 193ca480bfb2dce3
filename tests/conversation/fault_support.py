"""What the fault tests (``test_fault_waits.py``) and ``benchmarks/faults.py`` share: the conversation that
goes over its blocking limit, the Redis store with its operations timed, and a summarizer that fits.

Each call goes over the blocking limit of its conversation, so it is the call that would wait for a lock
holder's summary (one that still fits goes out unchanged).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from otel_context import Settings
from otel_context.compaction.budget import budget_for
from otel_context.conversation.state_store import RedisStore
from otel_context.formats import for_format
from otel_context.testing import SummarizerStyle
from otel_context.testing.fleet import file_content
from otel_context.tokens import estimate_fixed, estimate_items

MODEL = "claude-sonnet-4-6"
WINDOW = 14_000
#: A summarizer that writes within the room this small window leaves: the faithful stand-in quotes every user
#: message (~5,000 tokens here), cut at its length limit twice, and the compaction would fail.
SUMMARIZER = SummarizerStyle(max_tokens=900)


class TimedStore(RedisStore):
    """The Redis store, adding up per thread the time each of its operations takes (the caller's thread
    runs a sync client's store operations: what the call spends on the store and on other workers)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spent = threading.local()

    def spent(self) -> float:
        """Seconds this thread spent in the store since the last call of :meth:`spent`."""
        seconds: float = getattr(self._spent, "seconds", 0.0)
        self._spent.seconds = 0.0
        return seconds


def _timed(name: str) -> Callable[..., Any]:
    plain = getattr(RedisStore, name)

    def operation(self: TimedStore, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return plain(self, *args, **kwargs)
        finally:
            self._spent.seconds = getattr(self._spent, "seconds", 0.0) + time.perf_counter() - began

    return operation


for _name in ("get", "put", "put_later", "acquire", "release", "remove_if", "wait_for"):
    setattr(TimedStore, _name, _timed(_name))


def over_blocking_limit() -> list[dict[str, Any]]:
    """A history whose estimate is past the blocking limit (the call that would wait for a holder)."""
    budget = budget_for(MODEL, Settings(auto_compact_window=WINDOW), max_output_tokens=256)
    assert budget is not None
    adapter = for_format("anthropic_messages")
    messages: list[dict[str, Any]] = []
    turn = 0
    while True:
        messages += [
            {"role": "user", "content": f"Turn {turn}. " + file_content(f"f{turn}.py", 60)},
            {"role": "assistant", "content": f"Read f{turn}.py."},
        ]
        turn += 1
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 256,
            "messages": [*messages, {"role": "user", "content": "Go on."}],
        }
        if estimate_fixed(adapter, body) + estimate_items(adapter, body["messages"]) >= budget.blocking_limit:
            return list(body["messages"])


#: A worker of its own process that takes the summary locks of the conversations given and holds them while its
#: summaries run (the fault tests kill it mid-summary): argv base_url, store_url, window, model, history file,
#: then the conversations. Prints ``calling`` once its calls are under way.
HOLDER = """
import json, sys, threading
import anthropic
import otel_context

base_url, store_url, window, model, history = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
messages = json.loads(open(history).read())
otel_context.instrument(
    auto_compact_window=window, background_compaction=False, summarizer_timeout_seconds=30, state_store=store_url
)
client = anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0)

def call(conversation):
    with otel_context.conversation(conversation):
        client.messages.create(model=model, max_tokens=256, messages=messages)

for conversation in sys.argv[6:]:
    threading.Thread(target=call, args=(conversation,), daemon=True).start()
print("calling", flush=True)
threading.Event().wait()
"""


def plant_garbage(run: Any, conversations: list[str]) -> None:
    """Values not ours under each conversation's names (garbage bytes, or a future schema), and as the holders
    of its summary and prepare locks. ``run``: the test's or the benchmark's harness (``client``, ``store``,
    ``lock``)."""
    junk, future = b"\x00\xff not ours", json.dumps({"v": 99, "d": {"seq": 10**9, "memo": "x"}}).encode()
    for n, conversation in enumerate(conversations):
        value = junk if n % 2 else future
        for part in ("state", "memo", "prepared"):
            run.client.set(run.store.key(conversation, part), value)
        run.lock(conversation, "summary", value)
        run.lock(conversation, "prepare", value)
