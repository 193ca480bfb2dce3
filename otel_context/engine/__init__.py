"""The context engine: what to send for each chat call, and what to learn from its response.

The instrumentation asks :func:`plan` (the contract is :mod:`otel_context.contract`); the engine answers
with a plan whose body may be compacted, and whose hooks compact reactively on a too-long rejection and
learn from the response. The engine is sans I/O (:mod:`otel_context.flow`): it yields when it needs the
summarizer, so one implementation serves sync and async clients.

- :mod:`~otel_context.engine.planner`: the plan of one call (conversation, memo, estimate, after the response);
- :mod:`~otel_context.engine.call`: one call's state and how a compaction's result is adopted;
- :mod:`~otel_context.engine.auto`: the threshold-triggered cascade (microcompact, then the summary);
- :mod:`~otel_context.engine.reactive`: the retry after "prompt is too long";
- :mod:`~otel_context.engine.provider_compaction`: compaction the provider did, seen in a response;
- :mod:`~otel_context.engine.windows`: the window of a call's model (and the windows providers told us), its budget.

What a compaction is (the cascade, the summary, microcompact) lives in :mod:`otel_context.compaction`;
what is remembered per conversation in :mod:`otel_context.conversation`.
"""

from __future__ import annotations

from otel_context import process_state
from otel_context.engine import background, windows  # noqa: F401  (their tables register for reset at import)
from otel_context.engine.planner import EnginePlan, plan
from otel_context.engine.provider_compaction import observe_provider_compaction

__all__ = ["EnginePlan", "observe_provider_compaction", "plan", "reset"]


def reset() -> None:
    """Forget every conversation, background summary and learned window (tests, and apps that want a clean
    slate): every table registered in :mod:`otel_context.process_state` as cleared on reset."""
    process_state.reset()
