"""The simulated summarizers of ``otel-context eval`` are blind to what the scenarios plant: a planted fact and
a line of filler of the same shape are kept or dropped alike, whatever their words say; and the scenarios
plant nothing a summarizer could recognise (no ``FACT:`` line, no marker)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pytest

from otel_context.compaction.prompt import NO_TOOLS_PREAMBLE, build_prompt
from otel_context.evaluation.runner import DEFAULT_WINDOW, SUMMARIZERS
from otel_context.evaluation.scenarios import SCENARIOS, get_scenario
from otel_context.evaluation.script import Fact, ScriptedTurn
from otel_context.testing import SummarizerStyle, count_tokens, summarize
from otel_context.testing.scripted import UNHELPFUL_SUMMARY, Turn

BILLING = get_scenario("billing")
STYLES = sorted(SUMMARIZERS)
ANCHOR = "The user fixes invoice rounding. The gateway client was read. Tests pass for the ledger."


#: Long enough a summary (4,000 tokens) that each style keeps some of the 60-turn cut's facts.
WINDOW = 64_000


def _style(name: str, window: int = WINDOW) -> SummarizerStyle:
    return SummarizerStyle(**SUMMARIZERS[name](window)[1])


def _turns(script: Sequence[ScriptedTurn], text_of: Callable[[str], str] = lambda t: t) -> list[Turn]:
    """A summarizer's view of ``script``: every message as text (``text_of`` rewrites each), then the
    compactor's real prompt, anchored on a previous summary and quoting a user message to cover."""
    turns: list[Turn] = []
    for turn in script:
        turns.append(Turn("user", text_of(turn.user)))
        if turn.tool is not None:
            turns.append(Turn("assistant", ""))
            turns.append(Turn("user", text_of(turn.tool.result), tool_result=True, results=1))
        turns.append(Turn("assistant", text_of(turn.reply)))
    prompt = build_prompt(anchor=ANCHOR, to_cover=[text_of(_cover(script))])
    return [*turns, Turn("user", prompt)]


def _cover(script: Sequence[ScriptedTurn]) -> str:
    """The user's message the prompt quotes: the one that changes the retry limit (a planted fact)."""
    return next(t.user for t in script if "retry-limit-now" in t.planted)


def _body(summary: str) -> str:
    return summary.split("<summary>\n", 1)[1].rsplit("\n</summary>", 1)[0]


def _disguise(text: str) -> str:
    """The same shape in other words: every letter shifted by one, every digit too (token for token)."""
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + 1) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + 1) % 26 + 65))
        elif ch.isdigit():
            out.append(str((int(ch) + 1) % 10))
        else:
            out.append(ch)
    return "".join(out)


def _shape(text: str) -> str:
    return re.sub(r"[A-Za-z]", "x", re.sub(r"[0-9]", "0", text))


def _rewrite(facts: Sequence[Fact], how: Callable[[str], str]) -> Callable[[str], str]:
    def text_of(text: str) -> str:
        for fact in facts:
            text = text.replace(fact.text, how(fact.text))
        return text

    return text_of


@pytest.mark.parametrize("name", STYLES)
def test_a_style_keeps_a_planted_fact_exactly_as_it_keeps_filler_of_the_same_shape(name: str) -> None:
    """Disguise every planted fact as filler (other letters, the same shape): the summary has the same shape,
    so the style chose what to keep by position and length alone, never by what a line says."""
    script = BILLING.script(60)
    planted = summarize(_turns(script), _style(name))
    disguised = summarize(_turns(script, _rewrite(BILLING.facts, _disguise)), _style(name))
    assert _shape(disguised) == _shape(planted)
    if name != "unhelpful":
        assert planted != disguised  # it did keep something of the facts' words (a real comparison)


@pytest.mark.parametrize("name", STYLES)
def test_a_fact_marker_changes_nothing_but_itself(name: str) -> None:
    """The old convention: a line written ``FACT: ...`` is kept by the default testing summarizer. The eval's
    styles treat it as any line: the summary with the marker renamed is the same summary, renamed."""
    script = BILLING.script(60)
    marked = summarize(_turns(script, _rewrite(BILLING.facts, lambda t: f"FACT: {t}")), _style(name))
    renamed = summarize(_turns(script, _rewrite(BILLING.facts, lambda t: f"NOTE: {t}")), _style(name))
    assert renamed.replace("NOTE: ", "FACT: ") == marked


def test_the_default_testing_summarizer_is_not_blind_so_the_checks_above_can_fail() -> None:
    script = BILLING.script(60)
    marked = summarize(_turns(script, _rewrite(BILLING.facts, lambda t: f"FACT: {t}")))
    renamed = summarize(_turns(script, _rewrite(BILLING.facts, lambda t: f"NOTE: {t}")))
    assert renamed.replace("NOTE: ", "FACT: ") != marked
    assert not SummarizerStyle().blind and all(_style(name).blind for name in STYLES)


def _blind_input(turns: Sequence[Turn]) -> str:
    """What the blind styles read, rebuilt from the documented rule: the messages, then the quoted blocks."""
    texts = [t.text.strip() for t in turns[:-1] if t.text.strip()]
    return "\n".join(texts)


def test_start_keeps_the_beginning_of_its_input_and_end_keeps_its_end() -> None:
    turns = _turns(BILLING.script(60))
    budget = SUMMARIZERS["start"](DEFAULT_WINDOW)[1]["max_tokens"]
    start = _body(summarize(turns, _style("start", DEFAULT_WINDOW)))
    end = _body(summarize(turns, _style("end", DEFAULT_WINDOW)))
    assert _blind_input(turns).startswith(start) and count_tokens(start) == budget
    assert count_tokens(end) == budget
    # The end of the input is what the final request quotes: the previous summary, then the user's message to
    # cover (last, where a reader of the end reads it); the prompt's instructions are not material.
    assert end.endswith(_cover(BILLING.script(60))) and ANCHOR in end
    assert NO_TOOLS_PREAMBLE not in end and "nine numbered sections" not in end and "<previous_summary>" not in end


def test_sample_keeps_whole_sentences_in_order_within_its_length() -> None:
    turns = _turns(BILLING.script(60))
    body = _body(summarize(turns, _style("sample", DEFAULT_WINDOW)))
    source = _blind_input(turns) + "\n" + _cover(BILLING.script(60)) + "\n" + ANCHOR
    sentences = body.splitlines()
    assert len(sentences) > 10 and count_tokens(body) <= SUMMARIZERS["sample"](DEFAULT_WINDOW)[1]["max_tokens"]
    at = 0
    for sentence in sentences:  # each one found after the one before it: whole sentences, in order
        at = source.find(sentence, at)
        assert at >= 0, sentence
        at += len(sentence)
    assert summarize(turns, _style("sample")) == summarize(turns, _style("sample"))  # deterministic


def test_unhelpful_keeps_nothing_specific() -> None:
    script = BILLING.script(60)
    body = _body(summarize(_turns(script), _style("unhelpful")))
    assert body == UNHELPFUL_SUMMARY
    for fact in BILLING.facts:
        assert fact.answer.lower() not in body.lower() and fact.key.lower() not in body.lower()


def test_a_blind_style_needs_its_length() -> None:
    with pytest.raises(ValueError, match="needs max_tokens"):
        SummarizerStyle(keeps="start")
    with pytest.raises(ValueError, match="keeps must be one of"):
        SummarizerStyle(keeps="facts-only")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenarios_plant_nothing_a_summarizer_could_recognise(name: str) -> None:
    scenario = get_scenario(name)
    for turn in scenario.script():
        assert not any(line.lstrip().startswith("FACT") for line in turn.lines())
    artifacts = [f for f in scenario.facts if f.artifact]
    assert len(artifacts) >= 3
    assert {f.kind for f in artifacts} >= {"file_path", "identifier", "error_message"}
