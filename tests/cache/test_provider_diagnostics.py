"""Done-when of issue 42: the providers' own cache diagnostics, end to end.

The real SDK clients (Anthropic Messages and OpenAI Responses; sync, async and streamed), the instrumentation
and the engine against the simulated provider, which answers ``diagnostics.previous_message_id`` and
``prompt_cache_options.comparison_response_id`` from its own cache model; read back from the spans, the
requests the provider received, and the ``otel_context.cache_diagnoses`` counter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import otel_context
from otel_context import semconv
from otel_context.cache_control import place_cache_breakpoints

ANTHROPIC_MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-5"
SYSTEM = "You are a meticulous coding assistant for the otel-context repository. " * 100  # ~2,100 tokens
FILE = 'def handler(event, context):\n    return compute(event["x"]) + 1\n' * 20  # ~520 tokens


def _tool(name: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}: {text} " * 30,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }


TOOLS = [_tool(name, "works on files of the repository and returns their content.") for name in ("read_file", "grep")]


def question(turn: int) -> str:
    return f"Turn {turn}: review this file and explain it. words:60\n{FILE}"


# --- a chat app per SDK and mode ----------------------------------------------------------------------------


@dataclass
class Chat:
    """A chat app that keeps plain-data history and resends it all every turn (in the SDK's own shape)."""

    provider: str
    mode: str  # sync | async | stream (raw events) | helper (the SDK's stream helper)
    client: Any
    system: str = SYSTEM
    tools: list[dict[str, Any]] = field(default_factory=lambda: list(TOOLS))
    model: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model = self.model or (ANTHROPIC_MODEL if self.provider == "anthropic" else OPENAI_MODEL)

    def body(self) -> dict[str, Any]:
        if self.provider == "anthropic":
            body = {
                "model": self.model,
                "max_tokens": 400,
                "system": self.system,
                "tools": self.tools,
                "messages": [dict(m) for m in self.history],
            }
            return place_cache_breakpoints(body)  # type: ignore[arg-type, return-value]
        return {
            "model": self.model,
            "instructions": self.system,
            "tools": [
                {
                    "type": "function",
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                }
                for t in self.tools
            ],
            "input": [dict(m) for m in self.history],
        }

    async def turn(self, number: int, text: str | None = None) -> None:
        self.history.append({"role": "user", "content": question(number) if text is None else text})
        reply, response_id = await self._send(self.body())
        self.ids.append(response_id)
        self.history.append({"role": "assistant", "content": reply})

    async def _send(self, body: dict[str, Any]) -> tuple[str, str]:
        create = self.client.messages.create if self.provider == "anthropic" else self.client.responses.create
        if self.mode == "sync":
            return _text_and_id(self.provider, create(**body))
        if self.mode == "async":
            return _text_and_id(self.provider, await create(**body))
        if self.mode == "helper":  # the SDK's stream helper and its final message
            if self.provider == "anthropic":
                with self.client.messages.stream(**body) as stream:
                    return _text_and_id(self.provider, stream.get_final_message())
            with self.client.responses.stream(**body) as stream:
                return _text_and_id(self.provider, stream.get_final_response())
        text, response_id = "", ""
        for event in create(**body, stream=True):  # the app reads the raw events
            if self.provider == "anthropic":
                if event.type == "message_start":
                    response_id = event.message.id
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    text += event.delta.text
            elif event.type == "response.completed":
                text, response_id = event.response.output_text, event.response.id
        return text, response_id


def _text_and_id(provider: str, response: Any) -> tuple[str, str]:
    if provider == "anthropic":
        return "".join(b.text for b in response.content if b.type == "text"), response.id
    return response.output_text, response.id


MODES = [(p, m) for p in ("anthropic", "openai") for m in ("sync", "async", "stream")]
#: With the SDKs' stream helpers too (``messages.stream``, ``responses.stream``).
ALL_MODES = [*MODES, ("anthropic", "helper"), ("openai", "helper")]


def _client(sim: Any, provider: str, mode: str) -> Any:
    if provider == "anthropic":
        return sim.async_anthropic() if mode == "async" else sim.anthropic()
    return sim.async_openai() if mode == "async" else sim.openai()


async def _close(client: Any) -> None:
    closed = client.close()
    if closed is not None:
        await closed


# --- reading the telemetry back -------------------------------------------------------------------------------


def main_chat_spans(spans: Callable[..., list[Any]]) -> list[Any]:
    """The app's chat spans, oldest first (the summarizer's, children of a compact span, excluded)."""
    compact_ids = {s.context.span_id for s in spans(semconv.COMPACT_SPAN)}
    chats = [s for s in spans() if s.attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_CHAT]
    mains = [s for s in chats if s.parent is None or s.parent.span_id not in compact_ids]
    return sorted(mains, key=lambda s: s.start_time)


def unexpected_break(span: Any) -> dict[str, Any] | None:
    found = [
        dict(e.attributes)
        for e in span.events
        if e.name == semconv.CACHE_BREAK_EVENT and e.attributes[semconv.CACHE_BREAK_INTENTIONAL] is False
    ]
    assert len(found) <= 1
    return found[0] if found else None


def diagnoses(metric_reader: Any) -> dict[tuple[str, str, str], int]:
    """otel_context.cache_diagnoses by (detector reason, provider reason, agreement)."""
    counts: dict[tuple[str, str, str], int] = {}
    data = metric_reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != semconv.METRIC_CACHE_DIAGNOSES:
                    continue
                for point in metric.data.data_points:
                    a = point.attributes
                    assert a[semconv.GEN_AI_PROVIDER_NAME] in (semconv.PROVIDER_ANTHROPIC, semconv.PROVIDER_OPENAI)
                    assert a[semconv.GEN_AI_REQUEST_MODEL]
                    key = (
                        a[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON],
                        a[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON],
                        a[semconv.CACHE_DIAGNOSIS_AGREEMENT],
                    )
                    counts[key] = counts.get(key, 0) + point.value
    return counts


def compared_ids(sim: Any) -> list[str | None]:
    """Per request the provider received (chat only): the previous response it was asked to compare with."""
    out: list[str | None] = []
    for exchange in sim.exchanges:
        body = exchange.body
        if exchange.path.endswith("/messages"):
            out.append((body.get("diagnostics") or {}).get("previous_message_id", "<absent>"))
        elif exchange.path.endswith("/responses"):
            out.append((body.get("prompt_cache_options") or {}).get("comparison_response_id", "<absent>"))
    return out


# --- done when ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("provider", "mode"), ALL_MODES)
async def test_every_later_call_carries_the_providers_diagnosis_and_each_change_agrees(
    provider: str, mode: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    chat = Chat(provider, mode, _client(simulated_provider, provider, mode))
    try:
        await chat.turn(1)
        await chat.turn(2)
        chat.system = "Today is 2026-12-03. " + SYSTEM  # a system-prompt change
        await chat.turn(3)
        await chat.turn(4)
        chat.tools = [*TOOLS, _tool("list_dir", "lists a directory of the repository.")]  # a tool change
        await chat.turn(5)
        chat.model = "claude-opus-4-6" if provider == "anthropic" else "gpt-5.1"  # a model change
        await chat.turn(6)
        await chat.turn(7)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    mains = main_chat_spans(spans)
    assert len(mains) == 7
    # Each call after the first names the previous response of the conversation, and only that.
    first = None if provider == "anthropic" else "<absent>"  # Anthropic's first turn opts in with null
    assert compared_ids(simulated_provider) == [first, *chat.ids[:-1]]
    statuses = [s.attributes.get(semconv.CACHE_DIAGNOSIS_STATUS) for s in mains]
    assert statuses[0] is None
    assert all(status is not None for status in statuses[1:]), statuses
    system_reason = semconv.REASON_SYSTEM_CHANGED if provider == "anthropic" else "input_changed"
    expected = {
        2: (semconv.DETECTOR_NONE, semconv.DIAGNOSIS_HIT),
        3: (semconv.REASON_SYSTEM_CHANGED, system_reason),
        4: (semconv.DETECTOR_NONE, semconv.DIAGNOSIS_HIT),
        5: (semconv.REASON_TOOLS_CHANGED, semconv.REASON_TOOLS_CHANGED),
        6: (semconv.REASON_MODEL_CHANGED, semconv.REASON_MODEL_CHANGED),
        7: (semconv.DETECTOR_NONE, semconv.DIAGNOSIS_HIT),
    }
    for turn, (ours, theirs) in expected.items():
        attributes = mains[turn - 1].attributes
        assert attributes[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON] == ours, turn
        assert (
            attributes.get(semconv.CACHE_DIAGNOSIS_PROVIDER_REASON, attributes[semconv.CACHE_DIAGNOSIS_STATUS])
            == theirs
        )
        assert attributes[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE, turn
        brk = unexpected_break(mains[turn - 1])
        if ours == semconv.DETECTOR_NONE:
            assert brk is None, turn
        else:
            # Our cache-break event, with the provider's side of the same call.
            assert brk is not None, turn
            assert brk[semconv.CACHE_BREAK_REASON] == ours
            assert brk[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] == theirs
            assert brk[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE
            assert attributes[semconv.CACHE_DIAGNOSIS_MISSED_TOKENS] > 2_000
    assert diagnoses(metric_reader) == {
        (semconv.DETECTOR_NONE, semconv.DIAGNOSIS_HIT, semconv.AGREEMENT_AGREE): 3,
        (semconv.REASON_SYSTEM_CHANGED, system_reason, semconv.AGREEMENT_AGREE): 1,
        (semconv.REASON_TOOLS_CHANGED, semconv.REASON_TOOLS_CHANGED, semconv.AGREEMENT_AGREE): 1,
        (semconv.REASON_MODEL_CHANGED, semconv.REASON_MODEL_CHANGED, semconv.AGREEMENT_AGREE): 1,
    }


@pytest.mark.parametrize(("provider", "mode"), MODES)
async def test_a_compaction_is_our_intentional_break_and_the_providers_miss_and_they_agree(
    provider: str, mode: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    window = 14_000
    chat = Chat(provider, mode, _client(simulated_provider, provider, mode))
    simulated_provider.set_window(chat.model, window)
    otel_context.instrument(
        capture_content="NO_CONTENT", cache_diagnostics=True, auto_compact_window=window, background_compaction=False
    )
    try:
        turn = 0
        while not spans(semconv.COMPACT_SPAN):
            turn += 1
            assert turn <= 20, "the history never crossed the compaction threshold"
            await chat.turn(turn)
        await chat.turn(turn + 1)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    compacts = spans(semconv.COMPACT_SPAN)
    mains = main_chat_spans(spans)
    theirs = semconv.REASON_MESSAGES_CHANGED if provider == "anthropic" else "input_changed"
    for compact in compacts:  # (OpenAI, with its larger fixed prompt, compacts again on the turn after)
        intentional = [dict(e.attributes) for e in compact.events if e.name == semconv.CACHE_BREAK_EVENT]
        assert [e[semconv.CACHE_BREAK_REASON] for e in intentional] == [semconv.REASON_COMPACTION]
        compacted = next(s for s in mains if s.context.span_id == compact.parent.span_id)
        assert unexpected_break(compacted) is None
        attributes = compacted.attributes
        assert attributes[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_MISS
        assert attributes[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] == theirs
        assert attributes[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON] == semconv.REASON_COMPACTION
        assert attributes[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE
    if len(compacts) == 1:
        # The call after it compares with the compacted request, whose prefix it resends: a hit.
        assert mains[-1].attributes[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_HIT
    # Each call names the previous response; the summarizer's requests (ours) name none.
    summarizer_calls = len(spans()) - len(mains) - len(compacts)
    compared = compared_ids(simulated_provider)
    named = [None, *chat.ids[:-1]] if provider == "anthropic" else chat.ids[:-1]
    assert [c for c in compared if c != "<absent>"] == named
    assert compared.count("<absent>") == summarizer_calls + (provider == "openai")
    counts = diagnoses(metric_reader)
    assert counts[(semconv.REASON_COMPACTION, theirs, semconv.AGREEMENT_AGREE)] == len(compacts)
    assert not [key for key in counts if key[2] != semconv.AGREEMENT_AGREE]


async def test_a_miss_below_the_detectors_five_percent_is_a_disagreement(
    spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    """Crafted: a long cached prompt (~85,000 tokens) where the app edits its previous message (~3,100 tokens
    lost: above 2,000 but under 5 % of what was cached). The detector lets it pass by design; the provider
    names it, and the miss is counted as a disagreement."""
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    chat = Chat("anthropic", "sync", simulated_provider.anthropic(), system=SYSTEM * 40)
    attachment = f"Turn 2: keep this file in mind.\n{FILE * 6}"
    try:
        # An explicit conversation: an edited history is still the app's one conversation (a derived one
        # would branch at the edit, and a branch names no previous response).
        with otel_context.conversation("crafted"):
            await chat.turn(1)
            await chat.turn(2, attachment)
            chat.history[2] = {"role": "user", "content": attachment.replace("keep", "remember")}
            await chat.turn(3)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    edited = main_chat_spans(spans)[-1]
    assert unexpected_break(edited) is None  # the detector saw no break
    attributes = edited.attributes
    assert attributes[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] == semconv.REASON_MESSAGES_CHANGED
    assert attributes[semconv.CACHE_DIAGNOSIS_MISSED_TOKENS] > 2_000
    assert attributes[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON] == semconv.DETECTOR_NONE
    assert attributes[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_DISAGREE
    assert (
        diagnoses(metric_reader)[(semconv.DETECTOR_NONE, semconv.REASON_MESSAGES_CHANGED, semconv.AGREEMENT_DISAGREE)]
        == 1
    )


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_with_the_setting_off_no_request_changes_by_a_byte(
    provider: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    async def conversation() -> list[str]:
        simulated_provider.clear()
        chat = Chat(provider, "sync", _client(simulated_provider, provider, "sync"))
        try:
            for number in range(1, 4):
                await chat.turn(number)
            chat.system = "Today is 2026-12-03. " + SYSTEM
            await chat.turn(4)
        finally:
            await _close(chat.client)
        return [json.dumps(e.body) for e in simulated_provider.exchanges]

    bare = await conversation()
    otel_context.instrument(capture_content="NO_CONTENT")
    try:
        observed = await conversation()
    finally:
        otel_context.uninstrument()
    assert observed == bare
    assert all("diagnostics" not in b and "prompt_cache_options" not in b for b in observed)
    assert all(semconv.CACHE_DIAGNOSIS_STATUS not in s.attributes for s in main_chat_spans(spans))
    assert diagnoses(metric_reader) == {}


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_no_response_id_crosses_conversations_that_open_alike(
    provider: str, spans: Any, simulated_provider: Any
) -> None:
    """Two users open with the same words (one derived conversation family, one state until they part), and
    interleave: each request names only a response of its own conversation."""
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    client = _client(simulated_provider, provider, "sync")
    alice, bob = Chat(provider, "sync", client), Chat(provider, "sync", client)
    try:
        await alice.turn(1, "Hi")
        await bob.turn(1, "Hi")  # the same request: the same reply, so neither can name the other's
        await alice.turn(2, "Please review the parser. words:30")
        await bob.turn(2, "Please review the lexer. words:30")
        await alice.turn(3)
        await bob.turn(3)
        await alice.turn(4)
    finally:
        await _close(client)
        otel_context.uninstrument()
    mine = {"alice": set(alice.ids), "bob": set(bob.ids)}
    owners = ["alice", "bob", "alice", "bob", "alice", "bob", "alice"]
    compared = compared_ids(simulated_provider)
    for owner, named in zip(owners, compared, strict=True):
        if named not in (None, "<absent>"):
            assert named in mine[owner], (owner, named, compared)
    # Each one's turns 3 and 4 name its own previous reply (the replies of turn 2 differ).
    assert compared[4] == alice.ids[1] and compared[5] == bob.ids[1] and compared[6] == alice.ids[2]
    # The second turn of each: the opening "Hi" was answered alike for both, which proves nothing.
    assert compared[2] in (None, "<absent>") and compared[3] in (None, "<absent>")


async def test_the_apps_own_diagnostics_field_is_never_overwritten(spans: Any, simulated_provider: Any) -> None:
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    client = simulated_provider.anthropic()
    chat = Chat("anthropic", "sync", client)
    try:
        await chat.turn(1)
        chat.history.append({"role": "user", "content": question(2)})
        body = {**chat.body(), "diagnostics": {"previous_message_id": "msg_unknown_to_the_provider"}}
        response = client.messages.create(**body)
    finally:
        await _close(client)
        otel_context.uninstrument()
    assert compared_ids(simulated_provider)[-1] == "msg_unknown_to_the_provider"
    # (Read as JSON: the oldest supported SDK has no such field and keeps it as an extra.)
    assert response.model_dump()["diagnostics"]["cache_miss_reason"]["type"] == "previous_message_not_found"
    last = main_chat_spans(spans)[-1].attributes
    assert last[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_NOT_FOUND
    assert last[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_UNKNOWN


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_pending_diagnosis_is_said_and_counted_as_unknown(
    provider: str, spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    simulated_provider.diagnoses_pending = True
    chat = Chat(provider, "stream", _client(simulated_provider, provider, "stream"))
    try:
        await chat.turn(1)
        await chat.turn(2)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    last = main_chat_spans(spans)[-1].attributes
    assert last[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_PENDING
    assert last[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_UNKNOWN
    assert diagnoses(metric_reader) == {
        (semconv.DETECTOR_NONE, semconv.DIAGNOSIS_PENDING, semconv.AGREEMENT_UNKNOWN): 1
    }


async def test_a_request_rejected_as_too_long_retries_asking_as_it_did(spans: Any, simulated_provider: Any) -> None:
    """Reactive compaction: the summarizer's own requests ask the provider nothing (they are ours); the
    retried request names the same previous response as the rejected one did, and its answer is read."""
    otel_context.instrument(
        capture_content="NO_CONTENT", cache_diagnostics=True, auto_compact_window=200_000, background_compaction=False
    )
    chat = Chat("anthropic", "sync", simulated_provider.anthropic())
    try:
        for number in range(1, 5):
            await chat.turn(number)
        simulated_provider.set_window(chat.model, 6_000)  # the next request no longer fits: rejected, compacted
        await chat.turn(5)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    statuses = [e.status for e in simulated_provider.exchanges]
    compared = compared_ids(simulated_provider)
    assert statuses[4] == 400 and statuses[-1] == 200 and len(statuses) > 6
    assert compared[:5] == [None, *chat.ids[:4]]  # the rejected request named the previous response ...
    assert set(compared[5:-1]) == {"<absent>"}  # ... the summarizer's did not ...
    assert compared[-1] == chat.ids[3]  # ... and the retry names it again
    retried = main_chat_spans(spans)[-1].attributes
    assert retried[semconv.GEN_AI_CONVERSATION_COMPACTED] is True
    assert retried[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_MISS
    assert retried[semconv.CACHE_DIAGNOSIS_PROVIDER_REASON] == semconv.REASON_MESSAGES_CHANGED
    assert retried[semconv.CACHE_DIAGNOSIS_DETECTOR_REASON] == semconv.REASON_COMPACTION
    assert retried[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_AGREE


async def test_a_break_the_provider_calls_a_hit_is_a_disagreement(
    spans: Any, metric_reader: Any, simulated_provider: Any
) -> None:
    """The provider evicts the cache (its prompts are unchanged): the detector reports a break it cannot explain
    (``unknown``), the provider's comparison finds nothing diverged (a hit), and the two disagree."""
    otel_context.instrument(capture_content="NO_CONTENT", cache_diagnostics=True)
    chat = Chat("anthropic", "sync", simulated_provider.anthropic())
    try:
        await chat.turn(1)
        await chat.turn(2)
        simulated_provider.reset_cache()
        await chat.turn(3)
    finally:
        await _close(chat.client)
        otel_context.uninstrument()
    evicted = main_chat_spans(spans)[-1]
    brk = unexpected_break(evicted)
    assert brk is not None and brk[semconv.CACHE_BREAK_REASON] == semconv.REASON_UNKNOWN
    assert brk[semconv.CACHE_DIAGNOSIS_STATUS] == semconv.DIAGNOSIS_HIT
    assert brk[semconv.CACHE_DIAGNOSIS_AGREEMENT] == semconv.AGREEMENT_DISAGREE
    assert diagnoses(metric_reader)[(semconv.REASON_UNKNOWN, semconv.DIAGNOSIS_HIT, semconv.AGREEMENT_DISAGREE)] == 1


def test_two_first_calls_at_once_that_get_the_same_reply_name_neither(spans: Any) -> None:
    """The race a sequential test cannot show: two conversations open alike, both first calls read the empty
    state before either commits, and both get the same reply. Whichever commits last, neither next call may name
    the other's response: the engine's plans, driven as the instrumentation drives them, interleaved by hand."""
    from opentelemetry import trace

    from otel_context import engine
    from otel_context.contract import CallRequest
    from otel_context.flow import SummaryRequest, SummaryResult, drive, perform_with
    from otel_context.settings import resolve
    from otel_context.usage import CacheDiagnosis, TokenUsage

    settings = resolve({"cache_diagnostics": True}, env={})
    tracer = trace.get_tracer(__name__)
    opening = [{"role": "user", "content": "Hi"}]

    def no_summary(request: SummaryRequest) -> SummaryResult:
        raise AssertionError("these short histories are never compacted")

    def plan(messages: list[dict[str, Any]]) -> Any:
        body = {"model": ANTHROPIC_MODEL, "max_tokens": 100, "messages": messages}
        request = CallRequest("anthropic", "anthropic_messages", body, ANTHROPIC_MODEL, settings)
        return drive(engine.plan(tracer.start_span("chat"), request), perform_with(no_summary))

    def answer(call: Any, response_id: str) -> None:
        response = {"id": response_id, "content": [{"type": "text", "text": "Hello! How can I help?"}]}
        usage = TokenUsage(input_tokens=10, output_tokens=5)
        call.on_response(tracer.start_span("chat"), usage, response, response_id, CacheDiagnosis("hit"))

    alice, bob = plan(list(opening)), plan(list(opening))  # both read before either commits
    answer(alice, "msg_alice")
    answer(bob, "msg_bob")
    reply = {"role": "assistant", "content": "Hello! How can I help?"}
    for user in ("alice", "bob"):
        following = plan([*opening, reply, {"role": "user", "content": f"I am {user}."}])
        assert "msg_" not in json.dumps(following.body), following.body
