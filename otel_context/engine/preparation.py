"""The life of one summary prepared in the background, as one state and a table of its transitions.

Why a table: a background summary is reached from six places (the call that starts it, the worker thread or
loop task that makes it, the calls that apply or drop it, the process store's forget listener, reset and the
interpreter's exit), several of them at once. Each asks for one :class:`Event`; :meth:`Lifecycle.step` moves
the one :class:`Phase` by :data:`TRANSITIONS` and returns the :class:`Effect` the caller then carries out
(end the ``compact`` span, report a discard, send the summary), or None when the event does not apply in
that phase (another call applied or dropped it first): nothing changes and nothing is to be done. The
caller takes its lock around :meth:`Lifecycle.step` (once per transition) and carries the effect out after.

What the phases mean (:mod:`otel_context.engine.background` keeps the summary itself):

- ``RUNNING``: the summarizer is at work; its ``compact`` span is open.
- ``PUBLISHING``: made, its span ended ``success``, and being stored for the fleet (a shared store).
- ``READY``: made, its span ended ``success``: this worker applies it at the threshold.
- ``FAILED``: landed with nothing to apply (the summary failed, or its pairing with the kept part needed a
  repair); the threshold compacts inline, and no new summary starts in the background until then.
- ``DROPPED``: dropped while running; its span ends ``discarded`` when it lands.
- ``EXITED``: the interpreter exits while it runs; its span was ended ``discarded`` then.
- ``ABANDONED``: its flow was closed midway (``uninstrument()``, a client the app closed); it never lands,
  and a later call lets its prepare lock go and prepares again.
- ``CUT_SHORT``: made (its span ended ``success``), then its flow was closed while it was being published:
  never applied; a later call lets its prepare lock go, reports it discarded and prepares again.
- ``APPLIED``, ``PUBLISHED`` (the fleet's now), ``DISCARDED``: the end.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Phase(enum.Enum):
    RUNNING = "running"
    PUBLISHING = "publishing"
    READY = "ready"
    FAILED = "failed"
    DROPPED = "dropped"
    EXITED = "exited"
    ABANDONED = "abandoned"
    CUT_SHORT = "cut_short"
    APPLIED = "applied"
    PUBLISHED = "published"
    DISCARDED = "discarded"


class Event(enum.Enum):
    #: The summary succeeded and makes a memo entry; ``publish``: this worker holds the fleet's prepare lock.
    MADE = "made"
    MADE_TO_PUBLISH = "made_to_publish"
    #: The summary succeeded but cannot be replayed (its pairing repair touched the kept part).
    UNUSABLE = "unusable"
    #: The summary failed (the cascade ended its span as ``failure`` and counted it on the breaker).
    FAILED = "failed"
    #: The store took the published summary; or it did not (it stays this worker's own).
    STORED = "stored"
    NOT_STORED = "not_stored"
    #: A call sends it.
    APPLY = "apply"
    #: It can never be applied (forgotten, stale, reset, a call that stopped waiting for it).
    DROP = "drop"
    #: The interpreter exits.
    EXIT = "exit"


class Effect(enum.Enum):
    #: Nothing to carry out.
    NONE = "none"
    #: End the ``compact`` span as ``success`` (the metrics and the breaker count it).
    END_SUCCESS = "end_success"
    #: End the ``compact`` span as ``discarded`` (counted, not on the breaker).
    END_DISCARDED = "end_discarded"
    #: End the ``compact`` span as ``discarded`` now, with no metric: the exporters shut down next.
    END_AT_EXIT = "end_at_exit"
    #: Its span ended ``success`` already: report the drop as a ``discarded`` compaction of its own.
    REPORT_DISCARDED = "report_discarded"
    #: Send it on the call that asked.
    SEND = "send"


P, E, X = Phase, Event, Effect

#: (phase, event) -> (next phase, effect). A pair not listed is refused: nothing changes.
TRANSITIONS: dict[tuple[Phase, Event], tuple[Phase, Effect]] = {
    (P.RUNNING, E.MADE): (P.READY, X.END_SUCCESS),
    (P.RUNNING, E.MADE_TO_PUBLISH): (P.PUBLISHING, X.END_SUCCESS),
    (P.RUNNING, E.UNUSABLE): (P.FAILED, X.END_DISCARDED),
    (P.RUNNING, E.FAILED): (P.FAILED, X.NONE),
    (P.RUNNING, E.DROP): (P.DROPPED, X.NONE),
    (P.RUNNING, E.EXIT): (P.EXITED, X.END_AT_EXIT),
    (P.DROPPED, E.MADE): (P.DISCARDED, X.END_DISCARDED),
    (P.DROPPED, E.MADE_TO_PUBLISH): (P.DISCARDED, X.END_DISCARDED),
    (P.DROPPED, E.UNUSABLE): (P.DISCARDED, X.END_DISCARDED),
    (P.DROPPED, E.FAILED): (P.DISCARDED, X.NONE),
    (P.DROPPED, E.EXIT): (P.EXITED, X.END_AT_EXIT),
    (P.EXITED, E.MADE): (P.DISCARDED, X.NONE),
    (P.EXITED, E.MADE_TO_PUBLISH): (P.DISCARDED, X.NONE),
    (P.EXITED, E.UNUSABLE): (P.DISCARDED, X.NONE),
    (P.EXITED, E.FAILED): (P.DISCARDED, X.NONE),
    (P.PUBLISHING, E.STORED): (P.PUBLISHED, X.NONE),
    (P.PUBLISHING, E.NOT_STORED): (P.READY, X.NONE),
    (P.PUBLISHING, E.DROP): (P.DISCARDED, X.REPORT_DISCARDED),
    (P.READY, E.APPLY): (P.APPLIED, X.SEND),
    (P.READY, E.DROP): (P.DISCARDED, X.REPORT_DISCARDED),
    (P.FAILED, E.DROP): (P.DISCARDED, X.NONE),
    (P.ABANDONED, E.DROP): (P.DISCARDED, X.NONE),
    (P.CUT_SHORT, E.DROP): (P.DISCARDED, X.REPORT_DISCARDED),
}

#: Phases that leave the conversation's record: nothing more of it is for this conversation's calls.
GONE = frozenset({P.DROPPED, P.APPLIED, P.PUBLISHED, P.DISCARDED})
#: Phases whose flow has not ended: a call at the blocking limit waits for it.
IN_FLIGHT = frozenset({P.RUNNING, P.PUBLISHING})
#: Closing the flow midway: the phase it leaves for (see :meth:`Lifecycle.abandon`).
ABANDONED_AS = {P.RUNNING: P.ABANDONED, P.PUBLISHING: P.CUT_SHORT, P.DROPPED: P.DISCARDED}
#: Phases whose flow was closed midway: the next call that finds one lets its prepare lock go, drops it and
#: prepares again.
GIVEN_UP = frozenset({P.ABANDONED, P.CUT_SHORT})


@dataclass(eq=False)
class Lifecycle:
    """One background summary's phase. :meth:`step` is called with the caller's lock held."""

    phase: Phase = Phase.RUNNING

    def step(self, event: Event) -> Effect | None:
        """Move by ``event``; the effect to carry out, or None when the event does not apply now."""
        moved = TRANSITIONS.get((self.phase, event))
        if moved is None:
            return None
        self.phase, effect = moved
        return effect

    def abandon(self) -> None:
        """The flow was closed midway. Taken without the lock, as one store: this runs as the generator's
        finaliser, maybe on a thread that holds the lock. A transition racing it can only be a drop or the
        interpreter's exit (the flow is gone, so nothing lands), and either order leaves the summary out of
        use: a dropped one is out of its record already, an abandoned one is dropped by the next call that
        finds it, and at exit nothing follows."""
        self.phase = ABANDONED_AS.get(self.phase, self.phase)
