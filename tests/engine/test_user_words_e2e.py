"""Issue 31, items 2 and 3, end to end: what the user said survives every compaction.

A 200-turn coding-agent conversation (``otel_context.testing.trust``) on a 30,000-token window, through the
real SDK clients against the simulated provider with a lossy summarizer: one that keeps only 2,000 tokens, or
one that reads only the end of its input. Over five compactions or more: the user's turn-2 constraint and its
later reversal reach the model after every compaction, never the constraint alone; the user's own messages go
out verbatim, as messages of their own, before the summary (the first ones and the newest within the
budget, with one line saying how many were left out); the user's mid-conversation facts reach the model
after at least 90 % of the compactions that follow them; from the second compaction on, the summarizer
updates the previous summary with only the span dropped since.

The matrix (2 SDKs x 2 summarizers x inline/background) is covered pairwise, four runs: every pair of values
of two dimensions is run once (each run takes a few seconds; all eight would double the suite's time for
no pair that is not already covered); a fifth runs the OpenAI Responses API.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from otel_context import semconv
from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, SUMMARY_MESSAGE_HEADER, summary_of_message
from otel_context.settings import resolve
from otel_context.testing import SimulatedProvider, SummarizerStyle, trust
from tests.compaction.support import Otel
from tests.values import attrs_of

WINDOW = 30_000
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o", "openai-responses": "gpt-4o"}
BOUNDED = SummarizerStyle(max_tokens=2_000)
END_FAVOURING = SummarizerStyle(reads_last_tokens=6_000)


def _messages(body: Any) -> list[dict[str, Any]]:
    return trust._messages(body)


def _text(message: dict[str, Any]) -> str:
    return trust._text(message.get("content"))


def _compacted_requests(exchanges: list[Any]) -> list[dict[str, Any]]:
    """The first request of the app after each compaction (its summary message is new)."""
    out: list[dict[str, Any]] = []
    previous = None
    for exchange in exchanges:
        body = exchange.body
        if not isinstance(body, dict) or trust._is_summarizer(body):
            continue
        summary = next((_text(m) for m in _messages(body) if _text(m).startswith(SUMMARY_MESSAGE_HEADER)), None)
        if summary is not None and summary != previous:
            previous = summary
            out.append(body)
    return out


def _first_attempts(exchanges: list[Any]) -> list[int]:
    """Indexes of each compaction's first summarizer request: a retry (after a summary cut at its length
    limit) follows its first attempt directly and goes out the plain way."""
    return [
        i
        for i, e in enumerate(exchanges)
        if isinstance(e.body, dict) and trust._is_summarizer(e.body) and not trust._is_summarizer(exchanges[i - 1].body)
    ]


def _check_verbatim(body: dict[str, Any]) -> tuple[int, int]:
    """The head of a compacted request: the user's messages, verbatim and in order (the first ones and the
    newest ones of what the conversation said before them), then the summary message, whose note says how
    many were left out. Returns how many were kept and how many left out."""
    messages = _messages(body)
    at = next(i for i, m in enumerate(messages) if _text(m).startswith(SUMMARY_MESSAGE_HEADER))
    kept = [_text(m) for m in messages[:at]]
    assert all(m.get("role") == "user" and isinstance(m.get("content"), str) for m in messages[:at])
    said = [trust.user_message(t) for t in range(trust._turn_of(messages) + 1)]
    assert kept and kept[0] == said[0] and kept[1] == said[1]  # the task and the turn-2 constraint
    note = re.search(r"the first (\d+) and the newest (\d+); the (\d+) in between are left out", _text(messages[at]))
    omitted = 0
    if note is None:
        assert kept == said[: len(kept)]  # every one of them, byte for byte
    else:
        first, newest, omitted = (int(g) for g in note.groups())
        assert first + newest == len(kept)
        start = kept[first]
        index = said.index(start)
        assert kept == [*said[:first], *said[index : index + newest]]
        assert index - first == omitted
    return len(kept), omitted


PAIRWISE = [
    ("anthropic", BOUNDED, False),
    ("anthropic", END_FAVOURING, True),
    ("openai", BOUNDED, True),
    ("openai", END_FAVOURING, False),
    ("openai-responses", END_FAVOURING, True),  # the Responses API too (input items, resent whole)
]


@pytest.mark.parametrize(
    ("sdk", "style", "background"),
    PAIRWISE,
    ids=[f"{s}-{'bounded' if st is BOUNDED else 'end'}-{'bg' if b else 'inline'}" for s, st, b in PAIRWISE],
)
def test_the_users_words_survive_every_compaction(
    otel: Otel, instrumented: Any, sdk: str, style: SummarizerStyle, background: bool
) -> None:
    instrumented(auto_compact_window=WINDOW, background_compaction=background)
    with SimulatedProvider(summarizer=style) as sim:
        client = sim.anthropic() if sdk == "anthropic" else sim.openai()
        trust.run(client, sdk, MODELS[sdk], turns=200)
        sim.wait_idle(10)
        exchanges = sim.exchanges
    audit = trust.audit(exchanges)
    compactions = audit.compactions
    assert len(compactions) >= 5, compactions
    for c in compactions:
        assert c.constraint, c
        if c.reversal_said:
            assert c.reversal, c  # never the constraint alone once it was reversed
    assert any(c.reversal_said for c in compactions)
    assert audit.fact_rate >= 0.9, compactions
    assert sum(c.facts_said for c in compactions) >= 10

    requests = _compacted_requests(exchanges)
    assert len(requests) == len(compactions)
    heads = [_check_verbatim(body) for body in requests]
    kept = [n for n, _ in heads]
    assert heads[0][1] == 0 and heads[-1][1] > 0  # all of them while they fit the budget, then within it

    # Anchored: from the second compaction on, the summarizer updates the previous summary.
    # The first summarizer request of each compaction (a summary cut at its length limit is asked once more).
    summarizer = [exchanges[i].body for i in _first_attempts(exchanges)]
    assert len(summarizer) >= len(compactions)
    for body, previous in zip(summarizer[1:], requests, strict=False):
        prompt = _text(_messages(body)[-1])
        anchor = summary_of_message(
            next(_text(m) for m in _messages(previous) if _text(m).startswith(SUMMARY_MESSAGE_HEADER))
        )
        assert anchor is not None and f"<previous_summary>\n{anchor}\n</previous_summary>" in prompt
        assert "the later one holds" in prompt and "verbatim beside your summary" in prompt
    first_prompt = _text(_messages(summarizer[0])[-1])
    assert "<previous_summary>" not in first_prompt and NO_TOOLS_PREAMBLE in first_prompt

    # A background summary's span ends when it is ready; the ones a call applied are linked from its chat span
    # (one ready when the run ended is never applied).
    linked = {link.context.span_id for span in otel.exporter.get_finished_spans() for link in span.links}
    spans = [
        s
        for s in otel.compact_spans()
        if attrs_of(s).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS
        and (attrs_of(s).get(semconv.COMPACTION_MODE) != semconv.MODE_BACKGROUND or s.context.span_id in linked)
    ]
    assert sorted(attrs_of(s)[semconv.COMPACTION_USER_MESSAGES_KEPT] for s in spans) == sorted(kept)


def test_the_summarizer_gets_the_span_up_to_the_cut_not_the_kept_turns(otel: Otel, instrumented: Any) -> None:
    """The cache-sharing summarizer request is the app's request up to the cut (its cached prefix), then the
    prompt: the turns kept after the cut are not in it (a summarizer that favours the end of its input would
    summarize them instead of what they replace). Without the work trail: at this window and the app's
    ``max_tokens`` of 1,024 the shared request leaves the summary ~1,100 tokens, and the trail's tokens in the
    previous head would leave it less than its 1,024, so the second summary would go the plain way (as it does
    whenever the window leaves no room beside the shared request)."""
    instrumented(auto_compact_window=WINDOW, background_compaction=False, trail_budget=0)
    with SimulatedProvider() as sim:
        trust.run(sim.anthropic(), "anthropic", MODELS["anthropic"], turns=90)
        exchanges = sim.exchanges
    indexes = _first_attempts(exchanges)
    assert len(indexes) >= 2
    for i in indexes:
        summary_request = _messages(exchanges[i].body)[:-1]
        app_request = _messages(exchanges[i - 1].body)  # the call that crossed the threshold (as it was sent)
        assert len(summary_request) < len(app_request) - 1
        assert [_text(m) for m in summary_request] == [_text(m) for m in app_request[: len(summary_request)]]
        newest = trust.user_message(trust._turn_of(app_request))  # kept after the cut
        assert newest in [_text(m) for m in app_request] and newest not in [_text(m) for m in summary_request]
    # The prompt carries a cache breakpoint, so the summarizer reads the conversation from the cache.
    reads = [int((exchanges[i].usage or {}).get("cache_read_input_tokens") or 0) for i in indexes]
    assert all(r > 10_000 for r in reads), reads


def test_the_budget_is_a_setting(otel: Otel, instrumented: Any) -> None:
    assert resolve(env={}).user_messages_budget == 20_000
    assert resolve(env={"OTEL_CONTEXT_USER_MESSAGES_BUDGET": "0"}).user_messages_budget == 0
    instrumented(auto_compact_window=WINDOW, background_compaction=False, user_messages_budget=0)
    with SimulatedProvider() as sim:
        trust.run(sim.openai(), "openai", MODELS["openai"], turns=60)
        requests = _compacted_requests(sim.exchanges)
    assert requests
    for body in requests:
        messages = _messages(body)
        assert _text(messages[0]).startswith(SUMMARY_MESSAGE_HEADER)  # no user message kept before it
    spans = [s for s in otel.compact_spans() if attrs_of(s).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS]
    assert spans and all(attrs_of(s)[semconv.COMPACTION_USER_MESSAGES_KEPT] == 0 for s in spans)


def test_an_app_that_keeps_the_compacted_history_gets_anchored_summaries(otel: Otel) -> None:
    """The explicit API: an app that compacts its own history and keeps the result sends our summary message
    back. The next compaction recognizes it: it is the anchor (never one of the user's messages, never kept
    twice), and the user's messages before it stay verbatim."""
    from otel_context import Compactor

    history = [{"role": "user", "content": trust.TASK}, {"role": "assistant", "content": "On it."}]
    history += [{"role": "user", "content": trust.CONSTRAINT}, {"role": "assistant", "content": "Rust it is."}]
    for turn in range(2, 14):
        history += [
            {"role": "user", "content": f"Step {turn}.\nFACT: step {turn} done."},
            {"role": "assistant", "content": "Done. " + "details " * 200},
        ]
    with SimulatedProvider() as sim:
        compactor = Compactor(sim.anthropic())
        first = compactor.compact(history, model=MODELS["anthropic"])
        assert first.compacted
        # The app also keeps the summary it was given, as a message of its own.
        messages = [
            *first.messages,
            {"role": "user", "content": first.summary},
            {"role": "assistant", "content": "Ok."},
        ]
        for turn in range(14, 24):
            messages += [
                {"role": "user", "content": f"Step {turn}.\nFACT: step {turn} done."},
                {"role": "assistant", "content": "Done. " + "details " * 200},
            ]
        second = compactor.compact(messages, model=MODELS["anthropic"])
        assert second.compacted
        prompts = [_text(_messages(e.body)[-1]) for e in sim.exchanges]
    assert "<previous_summary>" not in prompts[0]
    assert f"<previous_summary>\n{first.summary}\n</previous_summary>" in prompts[1]
    texts = [_text(m) for m in second.messages]
    assert sum(1 for t in texts if t.startswith(SUMMARY_MESSAGE_HEADER)) == 1
    at = next(i for i, t in enumerate(texts) if t.startswith(SUMMARY_MESSAGE_HEADER))
    assert texts[:2] == [trust.TASK, trust.CONSTRAINT] and texts[at - 1].startswith("Step ")
    assert all(not t.startswith(SUMMARY_MESSAGE_HEADER) and t != first.summary for t in texts[:at])


PIN = "Safety rule: never run migrations against the production database without a backup taken first."


@pytest.mark.parametrize(("sdk", "background"), [("anthropic", False), ("openai", True)])
def test_a_pinned_text_goes_out_verbatim_beside_every_later_summary(
    otel: Otel, instrumented: Any, sdk: str, background: bool
) -> None:
    """``otel_context.pin`` inside the conversation's block: every compacted request carries it, verbatim, as a
    user message of its own before the summary, whatever the summarizer keeps (here: nothing)."""
    import otel_context

    instrumented(
        auto_compact_window=WINDOW,
        background_compaction=background,
        summarizer=lambda body: "<summary>We made progress.</summary>",
    )
    with SimulatedProvider() as sim, otel_context.conversation("pinned-session"):
        otel_context.pin(PIN)
        client = sim.anthropic() if sdk == "anthropic" else sim.openai()
        trust.run(client, sdk, MODELS[sdk], turns=90)
        sim.wait_idle(10)
        exchanges = sim.exchanges
    requests = _compacted_requests(exchanges)
    assert len(requests) >= 2
    for body in requests:
        messages = _messages(body)
        at = next(i for i, m in enumerate(messages) if _text(m).startswith(SUMMARY_MESSAGE_HEADER))
        pinned = [i for i, m in enumerate(messages) if _text(m) == f"[Pinned] {PIN}"]
        assert len(pinned) == 1 and pinned[0] < at and messages[pinned[0]]["role"] == "user"
    spans = [s for s in otel.compact_spans() if attrs_of(s).get(semconv.COMPACTION_OUTCOME) == semconv.OUTCOME_SUCCESS]
    assert spans and all(attrs_of(s)[semconv.COMPACTION_PINNED_KEPT] == 1 for s in spans)


def test_pinning_needs_a_named_conversation_and_unpin_stops_carrying_it() -> None:
    import otel_context

    with pytest.raises(ValueError, match="needs a conversation to pin to"):
        otel_context.pin("keep this")
    with pytest.raises(ValueError, match="non-empty string"):
        otel_context.pin("   ", conversation="c")
    otel_context.pin("keep this", conversation="c")
    otel_context.pin("keep this", conversation="c")  # once
    from otel_context.conversation import pins

    assert pins.pinned("c") == ("keep this",)
    otel_context.unpin("keep this", conversation="c")
    assert pins.pinned("c") == () and "keep this" in pins.unpinned("c")
