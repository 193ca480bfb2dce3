"""One fuzz example: the same call uninstrumented and instrumented against the simulated provider, compared.

:func:`check` runs ``case`` twice with a real SDK client (sync, sync stream, async or async stream): first
with no instrumentation (the baseline), then instrumented with compaction on, microcompact on, content capture
on and a small window (:data:`bodies.WINDOW`, the same in the engine and the provider), and asserts:

* the instrumented call ends as the baseline did (success, or the same SDK exception type and status), except
  that a baseline rejected as too long may succeed instrumented (compaction's job);
* the call made exactly one root span, the chat span, every other span (compaction, summarizer) under it, and
  every span started has ended;
* the caller's arguments are equal to a deep copy taken before the call;
* none of our code failed and logged it (the app's call going on is not enough);
* every request body the provider received is the baseline's (the app's own) or one the provider accepted;
* the chat span carries the captured input messages (content capture never fails on odd content);
* a malformed history reaches the provider exactly as the baseline's did, with the skipped reason on the
  span when a compaction was due.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import engine, semconv, telemetry
from otel_context.instrumentation import _background
from otel_context.testing import SimulatedProvider

from .bodies import CLAUDE, GPT, WINDOW, Case

MODES = ("sync", "stream", "async", "async_stream")


class OpenSpans(SpanProcessor):
    """The spans started and not yet ended (by id, with their names for the failure message)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[int, str] = {}
        self.started = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self.lock:
            self.open[span.context.span_id] = span.name
            self.started += 1

    def on_end(self, span: Any) -> None:
        with self.lock:
            self.open.pop(span.context.span_id, None)


class Failures(logging.Handler):
    """Log records of ours that carry an exception: a failure our code caught and logged (the app's call went
    on) is still a bug the fuzzer should report, not a warning to scroll past."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)

    def __enter__(self) -> Failures:
        telemetry._logged.clear()  # log_once: every kind of failure is logged again for this call
        logging.getLogger("otel_context").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("otel_context").removeHandler(self)

    def summary(self) -> list[str]:
        return [f"{r.getMessage()}: {r.exc_info[1]!r}" for r in self.records if r.exc_info]


@dataclass
class Rig:
    """The provider and the OpenTelemetry SDK the fuzz examples share (one per test module)."""

    sim: SimulatedProvider
    exporter: InMemorySpanExporter
    spans: OpenSpans
    tracer_provider: TracerProvider
    meter_provider: MeterProvider


def make_rig() -> Iterator[Rig]:
    exporter = InMemorySpanExporter()
    open_spans = OpenSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(open_spans)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    with SimulatedProvider(windows={CLAUDE: WINDOW, GPT: WINDOW}) as sim:
        try:
            yield Rig(sim, exporter, open_spans, tracer_provider, meter_provider)
        finally:
            otel_context.uninstrument()
            tracer_provider.shutdown()
            meter_provider.shutdown()


@dataclass(frozen=True)
class Outcome:
    """How a call ended, as the app sees it."""

    error: str | None  #: the exception's class (None: success)
    status: int | None
    too_long: bool
    message: str = field(default="", compare=False)

    @classmethod
    def of(cls, exc: BaseException | None) -> Outcome:
        if exc is None:
            return cls(None, None, False)
        text = str(exc)
        too_long = _TOO_LONG.search(text) is not None
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        return cls(name, getattr(exc, "status_code", None), too_long, text[:300])


#: How the providers word a rejection for length (Anthropic; OpenAI Chat / Responses).
_TOO_LONG = re.compile(r"too long|context_length_exceeded|maximum context length|exceeds the context window")


def _too_long(exchange: Any) -> bool:
    return _TOO_LONG.search(f"{exchange.error} {exchange.response}") is not None


def _method(client: Any, fmt: str) -> Any:
    if fmt == "anthropic":
        return client.messages.create
    if fmt == "chat":
        return client.chat.completions.create
    return client.responses.create


def _call_sync(sim: SimulatedProvider, case: Case, stream: bool) -> None:
    client = sim.anthropic(max_retries=0) if case.fmt == "anthropic" else sim.openai(max_retries=0)
    try:
        if stream:
            for _ in _method(client, case.fmt)(**case.kwargs, stream=True):
                pass
        else:
            _method(client, case.fmt)(**case.kwargs)
    finally:
        client.close()


async def _call_async(sim: SimulatedProvider, case: Case, stream: bool) -> None:
    client = sim.async_anthropic(max_retries=0) if case.fmt == "anthropic" else sim.async_openai(max_retries=0)
    try:
        if stream:
            async for _ in await _method(client, case.fmt)(**case.kwargs, stream=True):
                pass
        else:
            await _method(client, case.fmt)(**case.kwargs)
    finally:
        await client.close()


def call(sim: SimulatedProvider, case: Case, mode: str) -> Outcome:
    """Make the app's call; how it ended (any exception is the app's to see, so it is caught here)."""
    try:
        if mode.startswith("async"):
            asyncio.run(_call_async(sim, case, mode == "async_stream"))
        else:
            _call_sync(sim, case, mode == "stream")
    except Exception as exc:  # compared with the baseline's: an exception of ours is a different outcome
        return Outcome.of(exc)
    return Outcome.of(None)


def _fresh(rig: Rig) -> None:
    # A request the previous example's client gave up on (closed with a background summary in flight) may
    # still be handled: it must not land in this example's record.
    rig.sim.wait_idle(30)
    rig.sim.clear()
    rig.sim.reset_cache()
    rig.exporter.clear()
    engine.reset()


def check(rig: Rig, case: Case, mode: str) -> None:
    """Run ``case`` uninstrumented, then instrumented, and assert the properties (module docstring)."""
    otel_context.uninstrument()
    _fresh(rig)
    baseline = call(rig.sim, case, mode)
    base_bodies = [e.body for e in rig.sim.exchanges]
    assert len(base_bodies) <= 1, "the baseline client retried (max_retries=0)"

    _fresh(rig)
    otel_context.instrument(
        tracer_provider=rig.tracer_provider,
        meter_provider=rig.meter_provider,
        capture_content="SPAN_ONLY",
        auto_compact_window=WINDOW,
        microcompact=True,
    )
    before = copy.deepcopy(case.kwargs)
    started = rig.spans.started
    try:
        with Failures() as failures:
            outcome = call(rig.sim, case, mode)
    finally:
        otel_context.uninstrument()
    # A summary prepared in the background and still in flight is abandoned by uninstrument(): its thread
    # ends (and its compact span with ``outcome=discarded``) when its request comes back.
    _background.wait_idle(30)
    exchanges = rig.sim.exchanges
    spans = list(rig.exporter.get_finished_spans())

    assert case.kwargs == before, "the caller's arguments were mutated"
    assert not failures.records, f"our code failed (caught and logged): {failures.summary()}"
    if outcome != baseline:
        assert baseline.too_long and outcome.error is None, f"instrumented {outcome}, uninstrumented {baseline}"
    assert not rig.spans.open, f"spans left open: {sorted(rig.spans.open.values())}"
    assert rig.spans.started - started == len(spans)
    _check_spans(spans, case, expect_chat=bool(base_bodies) or baseline.error is None)
    for exchange in exchanges:
        if not base_bodies or exchange.body != base_bodies[0]:
            assert exchange.status != 400 or _too_long(exchange), (
                f"we sent a body of our own that the provider rejected: {exchange.error}"
            )
    if case.malformed:
        assert [e.body for e in exchanges] == base_bodies * len(exchanges), "a malformed request was rewritten"
        assert len(exchanges) == len(base_bodies), "a malformed request was summarized or resent"
        if case.due and spans:
            (chat,) = [s for s in spans if s.parent is None]
            assert (chat.attributes or {}).get(semconv.CONTEXT_COMPACTION_SKIPPED_REASON), "no skipped reason"


def _check_spans(spans: list[ReadableSpan], case: Case, *, expect_chat: bool) -> None:
    ids = {s.context.span_id for s in spans if s.context is not None}
    # A summary prepared in the background is a trace of its own, linked to the call that started it (and a
    # ready one that uninstrument() dropped is reported in one, linked to the summary's span).
    background = [
        s
        for s in spans
        if s.parent is None
        and s.name == semconv.COMPACT_SPAN
        and (s.attributes or {}).get(semconv.COMPACTION_MODE) == semconv.MODE_BACKGROUND
    ]
    for span in background:
        assert [link.context.span_id in ids for link in span.links] == [True], "a background summary unlinked"
    roots = [s for s in spans if s.parent is None and s not in background]
    if not expect_chat and not roots:
        return  # the SDK refused the arguments before any request (the same with and without us)
    assert [s.name for s in roots] == [f"chat {case.model}"], [s.name for s in spans]
    # Content capture is on: whatever the app sent, its messages are on the span (capped, never dropped).
    assert semconv.GEN_AI_INPUT_MESSAGES in (roots[0].attributes or {}), "content capture failed"
    for span in spans:
        assert span.end_time is not None
        assert span.parent is None or span.parent.span_id in ids, f"{span.name} is not under the call's span"
