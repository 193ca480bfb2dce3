"""The registry of module-level tables (:mod:`otel_context.process_state`): ``engine.reset()`` clears what it
cleared before and keeps the rest, a fork's child gets what it got before, and a new module-level table that
does not register fails here.
"""

from __future__ import annotations

import collections
import importlib
import os
import pkgutil
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest

import otel_context
from otel_context import engine, process_state, settings, telemetry, token_counters, usage
from otel_context.compaction import alerts, cascade
from otel_context.contract import CallRequest
from otel_context.conversation import identity, memo, pins, shared
from otel_context.conversation.state_store import writer
from otel_context.conversation.table import CONVERSATIONS
from otel_context.engine import background, economics, pacing, provider_compaction, windows
from otel_context.flow import drive, perform_with
from otel_context.instrumentation import _background, _call
from otel_context.settings import Settings
from tests.fork_support import fork, outcome

MODEL = "claude-sonnet-4-6"
#: Seconds a forked child may take before the test calls it hung.

#: Module-level mutable objects that are constants (filled at import, never changed after): not tables.
CONSTANTS = {
    "otel_context.cache._UNITS",
    "otel_context.cache._CONFIRMS",
    "otel_context.cli.API_KEY_VARS",
    "otel_context.compaction.alerts._AFTERMATH",
    "otel_context.compaction.budget.MODEL_TABLE",
    "otel_context.compaction.cascade.TRIGGER_STRATEGIES",
    "otel_context.compaction.retention.CAPS",
    "otel_context.compaction.viewers._LABELS",
    "otel_context.compaction.viewers._WHAT",
    "otel_context.compaction.retention.REPAIR_CAPS",
    "otel_context.compaction.retention.UNCAPPED",
    "otel_context.compaction.trail.CHECKED_CAPS",
    "otel_context.compaction.trail._DECISION_HINTS",
    "otel_context.compaction.trail._EDITOR_COMMANDS",
    "otel_context.compaction.trail._FIXED_HINTS",
    "otel_context.compaction.trail._KIND_OF_ACTION",
    "otel_context.compaction.trail._KIND_OF_LABEL",
    "otel_context.compaction.trail._LABELS",
    "otel_context.compaction.trail._SECTIONS",
    "otel_context.compaction.trail._WORD_BREAKS",
    "otel_context.engine.preparation.ABANDONED_AS",
    "otel_context.engine.preparation.TRANSITIONS",
    "otel_context.compaction.repair._PROSE_CHARS",
    "otel_context.compaction.repair._DIGITS",
    "otel_context.conversation.state_store.redis_store._CAUSES",
    "otel_context.conversation.state_store.redis_store._CLUSTER_CAUSES",
    "otel_context.evaluation.table._ANSI",
    "otel_context.pricing._FIELDS",
    "otel_context.pricing._PROVIDER_IDS",
    "otel_context.demo.report.KIND_LABELS",
    "otel_context.demo.run.MODELS",
    "otel_context.evaluation.cli.SUMMARIZERS",
    "otel_context.evaluation.cli.SCENARIOS",
    "otel_context.evaluation.cli.API_KEY_VARS",
    "otel_context.evaluation.report._MARK",
    "otel_context.evaluation.runner.DEFAULT_MODELS",
    "otel_context.evaluation.runner.WIRE_FORMATS",
    "otel_context.evaluation.runner.SUMMARIZERS",
    "otel_context.evaluation.scenarios.SCENARIOS",
    "otel_context.formats._FORMATS",
    "otel_context.formats._ENDPOINTS",
    "otel_context.formats._ROLE_FORMATS",
    "otel_context.formats._PART_FORMATS",
    "otel_context.formats._KEY_FORMATS",
    "otel_context.formats._common._FINISH",
    "otel_context.formats.anthropic_messages._BLOCK_FIELDS",
    "otel_context.formats.anthropic_messages._DIAGNOSIS_STATUS",
    "otel_context.formats.openai_chat._PART_FIELDS",
    "otel_context.formats.openai_chat._CALL_FIELDS",
    "otel_context.formats.openai_chat._FUNCTION_FIELDS",
    "otel_context.formats.openai_responses.CALL_OUTPUT_TYPES",
    "otel_context.formats.openai_responses._PART_FIELDS",
    "otel_context.formats.openai_responses._ITEM_FIELDS",
    "otel_context.formats.openai_responses._INCOMPLETE",
    "otel_context.formats.openai_responses._DIAGNOSIS_STATUS",
    "otel_context.sdk_setup._PROTOCOLS",
    "otel_context.sdk_setup._DEFAULT_ENDPOINTS",
    "otel_context.semconv.FINISH_REASON_MAP",
    "otel_context.settings.CAPTURE_BOOLEANS",
    "otel_context.settings.ENV_VARS",
    "otel_context.settings._FIELD_KIND",
    "otel_context.settings._FIELDS",
    "otel_context.settings._DEFAULTS",
    "otel_context.store_spec._URL_OPTIONS",
    "otel_context.testing.anthropic_api.ANTHROPIC_TTLS",
    "otel_context.testing.caching.ANTHROPIC_TTLS",
    "otel_context.testing.caching.OPENAI_SETTING_REASONS",
    "otel_context.testing.errors.ANTHROPIC_TYPES",
    "otel_context.testing.errors.ANTHROPIC_MESSAGES",
    "otel_context.testing.errors.OPENAI_DEFAULTS",
    "otel_context.testing.fleet.ANTHROPIC_TOOLS",
    "otel_context.testing.fleet.OPENAI_TOOLS",
    "otel_context.testing.models.DEFAULT_WINDOWS",
    "otel_context.testing.state.DIAGNOSIS_ANSWERS",
    "otel_context.testing.server.DIAGNOSIS_ANSWERS",
    "otel_context.testing.models.EMBEDDING_DIMENSIONS",
    "otel_context.testing.openai_api.EMBEDDING_DIMENSIONS",
    "otel_context.testing.server._ROUTES",
    "otel_context.testing.state.DEFAULT_WINDOWS",
    "otel_context.testing.trust.ANTHROPIC_TOOLS",
    "otel_context.testing.trust.OPENAI_TOOLS",
    "otel_context.testing.trust.FACTS",
    "otel_context.testing.trust.RESPONSES_TOOLS",
    # The registry itself: its registrations are the code's (made at import), not state.
    "otel_context.process_state._registry",
}
#: Not imported by the scan: importing it instruments this process (its only module-level object is settings).
NOT_IMPORTED = {"otel_context.auto"}
_MUTABLE = (
    dict,
    set,
    list,
    bytearray,
    collections.deque,
    weakref.WeakSet,
    weakref.WeakKeyDictionary,
    weakref.WeakValueDictionary,
)


def _tables_of(module: Any) -> Iterator[tuple[str, Any]]:
    """The module-level objects of ``module`` that can hold state: mutable containers, and objects that can be
    cleared (a store, a limiter)."""
    for name, value in vars(module).items():
        if name.startswith("__") or isinstance(value, type) or callable(value):
            continue
        if isinstance(value, _MUTABLE) or callable(getattr(value, "clear", None)):
            yield name, value


def _registered_objects() -> dict[int, str]:
    """id -> "module.name" of every registered table that is an object (not a plain number)."""
    found: dict[int, str] = {}
    for registration in process_state.registered():
        module = importlib.import_module(registration.module)
        for name in registration.names:
            assert hasattr(module, name), f"{registration.module} registers {name}, which it does not have"
            found[id(getattr(module, name))] = f"{registration.module}.{name}"
    return found


def test_every_module_level_table_is_registered() -> None:
    names = [m.name for m in pkgutil.walk_packages(otel_context.__path__, "otel_context.")]
    modules = [importlib.import_module(name) for name in names if name not in NOT_IMPORTED]
    registered = _registered_objects()
    unregistered = sorted(
        f"{module.__name__}.{name}"
        for module in modules
        for name, value in _tables_of(module)
        if id(value) not in registered and f"{module.__name__}.{name}" not in CONSTANTS
    )
    assert unregistered == [], (
        "module-level tables without a registration in otel_context.process_state (say what engine.reset() "
        "and a fork's child do with them), or constants missing from CONSTANTS"
    )
    stale = sorted(c for c in CONSTANTS if c.rsplit(".", 1)[0] in names and not _exists(c))
    assert stale == []


def _exists(qualified: str) -> bool:
    module, name = qualified.rsplit(".", 1)
    return hasattr(importlib.import_module(module), name)


def test_each_module_registers_once() -> None:
    modules = [(r.module, r.names) for r in process_state.registered()]
    assert len(modules) == len(set(modules))


def test_the_registrations_that_reset_and_fork_act_on() -> None:
    """What each event did before the registry, as the registry now says it."""
    resets = {(r.module, r.names): r.on_reset for r in process_state.registered() if r.on_reset is not None}
    assert resets == {
        ("otel_context.conversation.table", ("CONVERSATIONS",)): CONVERSATIONS.clear,
        ("otel_context.engine.windows", ("_learned_windows",)): windows._learned_windows.clear,
        ("otel_context.engine.pacing", ("_durations",)): pacing.forget_durations,
        ("otel_context.engine.economics", ("_ledgers",)): economics.forget_all,
        ("otel_context.engine.background", ("_records", "_running")): background.discard_all,
        ("otel_context.conversation.pins", ("_pins", "_unpinned")): pins._clear,
        ("otel_context.settings", ("_rejected_summary_models",)): settings._rejected_summary_models.clear,
        ("otel_context.engine.provider_compaction", ("_refused",)): provider_compaction._refused.clear,
    }
    forks = {r.module: r.in_forked_child for r in process_state.registered() if r.in_forked_child is not None}
    assert forks == {
        "otel_context.fork_safe": otel_context.fork_safe._after_fork_in_child,
        "otel_context.conversation.state_store.writer": writer._after_fork_in_child,
        "otel_context.engine.background": background.forget_all,
        "otel_context.instrumentation._background": _background._after_fork_in_child,
    }
    order = [r.module for r in process_state.registered()]
    assert order.index("otel_context.fork_safe") < min(order.index(m) for m in forks if m != "otel_context.fork_safe")
    # Reset walks down the layers: the background summaries are dropped, their leases given back, before the
    # store forgets their conversations (and tells background compaction of each).
    assert order.index("otel_context.engine.background") > order.index("otel_context.conversation.table")


def _a_call() -> None:
    """One planned and answered call: a conversation in the store, its key and budget cached."""
    from opentelemetry.sdk.trace import TracerProvider

    from otel_context.usage import TokenUsage

    body = {
        "model": MODEL,
        "max_tokens": 1024,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    request = CallRequest("anthropic", "anthropic_messages", body, MODEL, Settings(auto_compact_window=30_000))
    span = TracerProvider().get_tracer("test").start_span("chat")
    plan = drive(engine.plan(span, request), perform_with(cast(Any, None)))
    plan.on_response(span, TokenUsage(input_tokens=50, output_tokens=5), None)
    span.end()


def test_reset_clears_what_it_cleared_before_and_keeps_the_rest() -> None:
    engine.reset()
    _a_call()
    windows.learn_window("anthropic", MODEL, 100_000)
    pacing._durations["a-summary-model"] = 3.0
    settings.reject_summary_model("anthropic", "claude-nonexistent-9")
    telemetry.log_once("test.process_state", "otel_context: a test line")
    settings._warned.add("test.process_state")
    memo.scope_of("You are terse.", None, MODEL)
    with background._lock:
        background._record(CONVERSATIONS.states()[0])
    kept = {
        "telemetry._logged": set(telemetry._logged),
        "settings._warned": set(settings._warned),
        "cascade._precreated": set(cascade._precreated),
        "windows._budgets": dict(windows._budgets),
        "identity._derived": dict(identity._derived),
        "memo._scopes": dict(memo._scopes),
        "shared._opened": dict(shared._opened),
        "token_counters._series": dict(token_counters._series),
        "usage._KINDS": dict(usage._KINDS),
        "alerts._limiter": dict(alerts._limiter._keys),
        "_call._error_type_hooks": list(_call._error_type_hooks),
    }
    assert CONVERSATIONS.states() and windows._learned_windows and windows._budgets and identity._derived

    engine.reset()

    assert CONVERSATIONS.states() == []
    assert windows._learned_windows == {}
    assert pacing._durations == {} and len(background._records) == 0
    assert settings._rejected_summary_models == set()  # the setting is tried again
    assert {
        "telemetry._logged": telemetry._logged,
        "settings._warned": settings._warned,
        "cascade._precreated": cascade._precreated,
        "windows._budgets": windows._budgets,
        "identity._derived": identity._derived,
        "memo._scopes": memo._scopes,
        "shared._opened": shared._opened,
        "token_counters._series": token_counters._series,
        "usage._KINDS": usage._KINDS,
        "alerts._limiter": dict(alerts._limiter._keys),
        "_call._error_type_hooks": _call._error_type_hooks,
    } == kept
    settings._warned.discard("test.process_state")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_gets_what_it_got_before() -> None:
    engine.reset()
    _a_call()
    windows.learn_window("anthropic", MODEL, 100_000)
    parent_keys = sorted(state.key for state in CONVERSATIONS.states())
    marker = cast(Any, object())
    background._running.add(marker)
    _background._runs.add(marker)
    _background._kept.append(marker)
    # A writer in the middle of a write, with more queued: the child's must start empty, without a thread.
    writing, go_on = threading.Event(), threading.Event()

    def slow_write(batch: Sequence[Any]) -> bool:
        writing.set()
        go_on.wait(10)
        return True

    busy = writer._Writer(slow_write)
    busy.submit("first", b"1", ())
    assert writing.wait(10)
    busy.submit("second", b"2", ())
    with background._lock:
        background._record(CONVERSATIONS.states()[0])
    token_counters._lock.acquire()  # held by this thread at the fork: the child's must be free

    def child() -> dict[str, Any]:
        return {
            "lock free": not token_counters._lock.locked(),
            "keys": sorted(state.key for state in CONVERSATIONS.states()),
            "learned": windows._learned_windows.get(("anthropic", MODEL)),
            "running": len(background._running),
            "records": len(background._records),
            "runs": len(_background._runs) + len(_background._kept),
            "writer": [len(busy._pending), busy._busy, busy._thread is None],
        }

    try:
        report = outcome(*fork(child))[1]
    finally:
        token_counters._lock.release()
        go_on.set()
        background._running.discard(marker)
        _background._runs.discard(marker)
        _background._kept.remove(marker)
    assert "raised" not in report, report["raised"]
    assert report == {
        "lock free": True,
        "keys": parent_keys,  # the child goes on with its parent's conversations
        "learned": 100_000,
        "running": 0,  # the parent's summaries are forgotten
        "records": 0,  # and so are its records of the conversations it goes on with
        "runs": 0,
        "writer": [0, False, True],
    }
    assert busy.flush(10)
