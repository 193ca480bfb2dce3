"""When a background summary is due and what it aims at: the policy of background compaction.

Why apart from :mod:`otel_context.engine.background`: that module keeps a summary's life (running, ready,
applied, dropped…), this one only decides, from figures, when to start one and where to cut, so either can
change without the other. Nothing here holds a lock on a summary or makes a span.

A conversation's summary starts once its estimate passes the start point (``background_start_pct`` of the
auto threshold, 80 % by default), or earlier when, at the pace the conversation grows and as long as
summaries by that model take, it would land after the history reached the blocking limit (a call would then
wait for it). It is aimed so that the context it leaves when applied at the threshold is about what an inline
compaction there would leave.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from otel_context import process_state
from otel_context.compaction.budget import Budget
from otel_context.compaction.summary import choose_cut, deepen_cut, rehydrate_most
from otel_context.engine.call import CallState
from otel_context.fork_safe import new_lock
from otel_context.settings import summary_model_for
from otel_context.tokens import estimate_item

#: A conversation's pace (how fast its estimate grows) is measured over its last calls.
PACE_CALLS = 16
#: Margin on the growth projected while a summary runs (turns differ in size and duration).
SAFETY = 1.0
#: Weight of the newest measured summary duration in the moving average.
DURATION_WEIGHT = 0.5
#: Summary models whose durations are remembered.
MAX_MODELS = 64
#: Below 1/WATCH_FRACTION of the threshold a call is not looked at for background compaction.
WATCH_FRACTION = 4


@dataclass
class Pace:
    """How fast one conversation's estimate grows: (seconds, tokens) between its last calls. Kept by the
    caller (with the conversation's other background figures, under its lock)."""

    last: tuple[float, int] | None = None
    steps: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=PACE_CALLS))

    def observe(self, now: float, estimate: int) -> None:
        """One sample: how much the estimate grew since the previous call, in how long (a compaction in
        between shrinks it: that interval says nothing about the pace and is skipped)."""
        if self.last is not None:
            seconds, grown = now - self.last[0], estimate - self.last[1]
            if seconds > 0 and grown >= 0:
                self.steps.append((seconds, grown))
        self.last = (now, estimate)


#: How the policy reads a conversation's pace: (seconds, tokens) between its last calls, asked for only
#: when a decision needs them (the caller copies them under its own lock).
Steps = Callable[[], Sequence[tuple[float, int]]]

#: Guards :data:`_durations`.
_lock = new_lock(sys.modules[__name__], "_lock")
#: Seconds a background summary took, per summary model (a moving average).
_durations: dict[str, float] = {}


def start_point(budget: Budget, pct: float) -> int:
    """The estimate at which a conversation's summary starts in the background."""
    return max(1, int(budget.auto_threshold * pct / 100))


def watching(call: CallState, budget: Budget) -> bool:
    """Whether a call below the threshold concerns background compaction at all: from a quarter of the
    threshold on (its pace is measured from there; a summary never starts below half of it). The calls of a
    conversation far below skip the pace sample and its lock."""
    return call.estimated_tokens >= budget.auto_threshold // WATCH_FRACTION


def due(call: CallState, budget: Budget, steps: Steps, held: bool = False) -> bool:
    """Whether to start now: past the start point, or (earlier) when the summary, at the pace ``steps`` say
    this conversation grows and as long as summaries take, would land after the history reached the blocking
    limit (a call would then wait for it). Never below half the threshold: it would summarize too little.
    ``held``: the conversation's last summaries were discarded (a back-off): the start point alone is not
    enough, only a summary that would otherwise land after the blocking limit starts."""
    estimate = call.estimated_tokens
    if not held and estimate >= start_point(budget, call.request.settings.background_start_pct):
        return True
    if estimate < budget.auto_threshold // 2:
        return False
    growth = projected_growth(call, steps)
    return growth is not None and estimate + growth >= budget.blocking_limit


def projected_growth(call: CallState, steps: Steps) -> int | None:
    """How much the estimate grows while a summary runs (with a margin); None until the pace is known.

    The summary's duration is the one measured for this summary model (the last background summaries);
    before the first one is measured, the start point alone decides (a guess would start too early on apps
    that pause between turns, and a summary started early covers less)."""
    with _lock:
        seconds = _durations.get(summary_model(call))
    if seconds is None:
        return None
    pace = steps()
    if len(pace) < 2:
        return None
    elapsed = sum(s for s, _ in pace)
    grown = sum(g for _, g in pace)
    if elapsed <= 0:
        return None
    return int(grown / elapsed * seconds * SAFETY)


@dataclass(frozen=True)
class Aim:
    """What a background summary covers: its cut, the growth (item tokens) expected until the threshold,
    and the most tokens of files it may restore."""

    cut: int
    growth: int
    rehydrate_room: int


def aim(call: CallState, budget: Budget, steps: Steps) -> Aim | None:
    """Aim the prepared summary so that the context it leaves when applied at the threshold is about what an
    inline compaction there would leave. Else that context is larger, and the next compaction comes sooner
    (more summaries, more tokens billed). None: nothing to summarize yet.

    Applied at the threshold, the summary is followed by everything after its cut: the items kept now and
    the turns appended since. An inline compaction at the threshold would keep about what the keep-recent
    policy keeps now, so the cut moves later (by round boundaries, keeping at least the newest round) until
    the items kept now plus the expected growth are no more than that. When they are still more, the excess
    comes off the files restored after the summary: the turns kept verbatim hold the newest reads already.
    """
    adapter, items = call.adapter, call.sent_items
    min_index = len(call.entry.replacement) if call.entry is not None else 0
    inline = choose_cut(adapter, items, call.request.settings.keep_recent_messages, min_index)
    if inline is None:
        return None
    inline = deepen_cut(adapter, call.body, items, inline, budget.auto_threshold)
    # Until the threshold at least; until the summary lands when that is later (a known pace and duration).
    growth = max(budget.auto_threshold - call.estimated_tokens, projected_growth(call, steps) or 0, 0)
    growth = int(growth / max(call.state.estimate_factor, 1.0))
    # from_index[i]: the tokens of the items from i on (one pass, not a sum per boundary tried).
    from_index = list(accumulate((estimate_item(adapter, item) for item in reversed(items)), initial=0))[::-1]
    inline_kept = from_index[inline]
    later = [b for b in adapter.round_boundaries(items) if inline <= b < len(items)]
    cut = next((b for b in later if from_index[b] + growth <= inline_kept), later[-1] if later else inline)
    excess = max(0, from_index[cut] + growth - inline_kept)
    room = max(0, rehydrate_most(call.request.settings, budget.window) - excess)
    return Aim(cut, growth, room)


def summary_model(call: CallState) -> str:
    """The model that writes this call's summaries (their durations are remembered per model)."""
    return summary_model_for(call.request.settings, call.adapter.provider, call.model)


def learn(model: str, seconds: float) -> None:
    """Remember how long a summary by ``model`` took (a moving average of the last few)."""
    with _lock:
        previous = _durations.get(model)
        _durations[model] = seconds if previous is None else previous + DURATION_WEIGHT * (seconds - previous)
        while len(_durations) > MAX_MODELS:
            del _durations[next(iter(_durations))]


def forget_durations() -> None:
    """What was learned of the summary models' durations is forgotten (``engine.reset()``)."""
    with _lock:
        _durations.clear()


# Reset: the durations forgotten. A fork's child keeps them (the same summary models).
process_state.register(__name__, ("_durations",), on_reset=forget_durations, in_forked_child=None)
