"""``pre_compact`` / ``post_compact`` hooks: the app's say in what a compaction keeps.

Why: the top complaint about compaction is lost instructions. The app knows what must survive (a
project rule file, a plan, a ticket id): ``pre_compact`` may add must-keep instructions to the
summarizer's prompt or veto the compaction; ``post_compact`` may add messages after the summary (e.g.
re-inject the rule file). Hooks are app code: an exception in one is logged once and ignored, it never
breaks the call.

Settings carry them (code only): ``Settings(pre_compact=fn, post_compact=fn)``.

- ``pre_compact(event: PreCompactEvent)`` returns ``None`` (go on), ``False`` or ``PreCompactDecision(veto=True)``
  (skip this compaction), a string or ``PreCompactDecision(instructions=...)`` (extra instructions).
- ``post_compact(event: PostCompactEvent)`` returns ``None`` or a sequence of extra messages, each either a
  string (becomes a user message) or a message already in the call's wire format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context import telemetry


@dataclass(frozen=True)
class PreCompactEvent:
    """What a ``pre_compact`` hook sees. ``messages`` is the history about to be summarized (read only)."""

    trigger: str  #: auto | manual | reactive
    wire_format: str
    model: str | None
    conversation_id: str | None
    messages: Sequence[Mapping[str, Any]]
    estimated_tokens: int


@dataclass(frozen=True)
class PreCompactDecision:
    """A ``pre_compact`` answer: veto the compaction, or add instructions for the summarizer."""

    veto: bool = False
    instructions: str | None = None


@dataclass(frozen=True)
class PostCompactEvent:
    """What a ``post_compact`` hook sees after a successful summary."""

    trigger: str
    wire_format: str
    model: str | None
    conversation_id: str | None
    summary: str
    messages: Sequence[Mapping[str, Any]]  #: the new history (summary message first)


def run_pre_compact(hook: Callable[..., Any] | None, event: PreCompactEvent) -> PreCompactDecision:
    """Call the hook and normalize its answer; a failing hook is logged once and means "go on"."""
    if hook is None:
        return PreCompactDecision()
    try:
        answer = hook(event)
    except Exception:
        telemetry.log_once("hooks.pre_compact", "otel_context: the pre_compact hook raised; ignored", exc_info=True)
        return PreCompactDecision()
    if answer is None or answer is True:
        return PreCompactDecision()
    if answer is False:
        return PreCompactDecision(veto=True)
    if isinstance(answer, PreCompactDecision):
        return answer
    if isinstance(answer, str):
        return PreCompactDecision(instructions=answer)
    telemetry.log_once(
        "hooks.pre_compact.type",
        "otel_context: pre_compact returned %r; expected None, False, a string or PreCompactDecision",
        type(answer).__name__,
    )
    return PreCompactDecision()


def run_post_compact(hook: Callable[..., Any] | None, event: PostCompactEvent) -> list[str | Mapping[str, Any]]:
    """Call the hook; its extra messages (strings or wire-format messages). Failures: logged once, none."""
    if hook is None:
        return []
    try:
        answer = hook(event)
    except Exception:
        telemetry.log_once("hooks.post_compact", "otel_context: the post_compact hook raised; ignored", exc_info=True)
        return []
    if answer is None:
        return []
    if isinstance(answer, (str, Mapping)):
        answer = [answer]
    extra: list[str | Mapping[str, Any]] = []
    for message in answer:
        if isinstance(message, (str, Mapping)):
            extra.append(message)
        else:
            telemetry.log_once(
                "hooks.post_compact.type",
                "otel_context: post_compact returned a %r message; expected a string or a mapping",
                type(message).__name__,
            )
    return extra
