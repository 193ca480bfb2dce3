"""The life of a background summary: every transition of its one phase, every refused one, and what the
effects add up to over any sequence of events (the end-to-end paths are in test_background_e2e.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_context.engine.preparation import Effect, Event, Lifecycle, Phase

P, E, X = Phase, Event, Effect

#: Written out here, not read from the module: what each event does in each phase.
LEGAL = {
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

EVERY_PAIR = list(itertools.product(Phase, Event))


@pytest.mark.parametrize(("phase", "event"), [pair for pair in EVERY_PAIR if pair in LEGAL])
def test_each_transition_moves_the_phase_and_names_its_effect(phase: Phase, event: Event) -> None:
    life = Lifecycle(phase)
    effect = life.step(event)
    assert (life.phase, effect) == LEGAL[(phase, event)]


@pytest.mark.parametrize(("phase", "event"), [pair for pair in EVERY_PAIR if pair not in LEGAL])
def test_each_illegal_transition_is_refused_and_changes_nothing(phase: Phase, event: Event) -> None:
    life = Lifecycle(phase)
    assert life.step(event) is None
    assert life.phase is phase


@pytest.mark.parametrize("phase", list(Phase))
def test_closing_the_flow_abandons_only_a_summary_whose_flow_runs(phase: Phase) -> None:
    life = Lifecycle(phase)
    life.abandon()
    expected = {P.RUNNING: P.ABANDONED, P.PUBLISHING: P.CUT_SHORT, P.DROPPED: P.DISCARDED}
    assert life.phase is expected.get(phase, phase)


def test_a_new_summary_runs_and_every_phase_is_reached_from_there() -> None:
    assert Lifecycle().phase is P.RUNNING
    reached, frontier = {P.RUNNING}, [P.RUNNING]
    while frontier:
        phase = frontier.pop()
        nexts = [LEGAL[(phase, e)][0] for e in Event if (phase, e) in LEGAL]
        if phase in (P.RUNNING, P.PUBLISHING, P.DROPPED):
            life = Lifecycle(phase)
            life.abandon()
            nexts.append(life.phase)
        for nxt in nexts:
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    assert reached == set(Phase)


@given(st.lists(st.sampled_from([*Event, "abandon"]), max_size=12))
def test_whatever_happens_a_summary_is_sent_once_and_its_span_ends_once(events: list[Event | str]) -> None:
    """Any order of events, as calls, the worker, the forget listener, reset and exit may bring them: the
    summary is sent at most once, its span ends at most once, a discard is reported only of a summary whose
    span ended as success and that was not sent, and nothing follows the end."""
    life = Lifecycle()
    effects: list[Effect] = []
    for event in events:
        if event == "abandon":
            life.abandon()
            continue
        assert isinstance(event, Event)
        before = life.phase
        effect = life.step(event)
        if before in (P.APPLIED, P.PUBLISHED, P.DISCARDED):
            assert effect is None and life.phase is before
        if effect is not None:
            effects.append(effect)
    ends = [e for e in effects if e in (X.END_SUCCESS, X.END_DISCARDED, X.END_AT_EXIT)]
    assert len(ends) <= 1
    assert effects.count(X.SEND) <= 1
    assert effects.count(X.REPORT_DISCARDED) <= 1
    if X.REPORT_DISCARDED in effects:
        assert ends == [X.END_SUCCESS] and X.SEND not in effects
