"""Soak: a mixed instrumented workload for a set time; fails (exit 1) when an invariant breaks.

    .venv/bin/python benchmarks/soak.py --seconds 60        # what CI runs (.ci/run)
    .venv/bin/python benchmarks/soak.py --seconds 1200      # the 20-minute run

Workload, against the simulated provider on loopback: worker threads and one asyncio loop, each keeping its own
conversations (sync and async clients, streamed and not, anthropic Messages, OpenAI Chat and Responses). Every
turn appends a user message with a file's worth of text, so conversations cross the compaction threshold
(``auto_compact_window``) and are summarized inline; after a few dozen turns a worker starts a new conversation.
Content capture is on. Faults are injected at random (500, 529/503, 429 with no retries, dropped streams), and
the clients have ``max_retries=0``, so each injected fault reaches whichever call takes it: the app asked for
those errors.

Memory: the run limits glibc to two malloc arenas (``--arenas``). With glibc's default (per-thread arenas) the
memory the workers free stays in their arenas, and RSS creeps up after warm-up with nothing leaking: see
benchmarks/README.md, soak. ``--memory-detail`` prints where the RSS is at each sample (Python objects alive,
pymalloc arenas, glibc malloc in use and free-but-kept); ``--malloc-trim`` returns free memory every 2 s.

Invariants (each printed, any failure -> exit 1):

* errors that reached the app: only the injected kinds (status errors 429/500/503/529, connection errors of
  dropped streams), never more than were injected; anything else (an exception of ours) fails the run;
  (the engine tracks at most ``--max-conversations`` (32) conversations, so that bound is reached in warm-up;
  Responses calls use ``store: false`` and the provider's prompt cache, exchange record and token-count memos
  are reset every 2 s:
  the provider's memory is not ours to measure);
* no open spans at the end (spans started == spans ended, counted by a span processor, once the background
  summaries that ``uninstrument()`` abandoned have ended: at most 30 s);
* RSS and thread count flat after warm-up (the first fifth of the run, at least 10 s): the last samples'
  maximum RSS at most 25 MB (or 25 %) above the warm-up's, threads at most 8 above.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ctypes.util
import gc
import os
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anthropic
import httpx2 as httpx
import openai
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import otel_context
from otel_context.instrumentation import _background  # summaries in flight (a private count; see the end)
from otel_context.testing import Fault, SimulatedProvider
from otel_context.testing import tokens as sim_tokens

CLAUDE = "claude-sonnet-4-6"
GPT = "gpt-4o"
INJECTED_STATUSES = {429, 500, 503, 529}
TURNS_PER_CONVERSATION = 40
#: A dropped connection surfaces as the SDK's connection error, or mid-stream as httpx's own error.
_DROPPED = (anthropic.APIConnectionError, openai.APIConnectionError, httpx.TransportError)


class CountingProcessor(SpanProcessor):
    """Counts spans started and ended (open spans = the difference); keeps nothing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.ended = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        with self.lock:
            self.started += 1

    def on_end(self, span: Any) -> None:
        with self.lock:
            self.ended += 1


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: int = 0
    injected: int = 0
    app_errors: int = 0
    unexpected: list[str] = field(default_factory=list)

    def call(self, error: BaseException | None) -> None:
        with self.lock:
            self.calls += 1
            if error is None:
                return
            status = getattr(error, "status_code", None)
            if status in INJECTED_STATUSES or isinstance(error, _DROPPED):
                self.app_errors += 1
            else:
                self.unexpected.append(f"{type(error).__module__}.{type(error).__qualname__}: {str(error)[:200]}")


#: How often the simulated provider's own memory is reset (see forget_provider_memory).
HOUSEKEEPING_SECONDS = 2.0


def forget_provider_memory(sim: SimulatedProvider) -> None:
    """The simulated provider's record of exchanges, prompt cache, the prompts it keeps for cache diagnostics
    (up to 4,096 whole prompts: several hundred MB here) and token-count memos are not ours to measure: reset
    them every few seconds so that the RSS figures are the app's and ours."""
    sim.clear()
    sim.reset_cache()
    sim.forget_prompt_records()
    sim_tokens._pieces_long.cache_clear()
    sim_tokens._count_long.cache_clear()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * 4096 / 1e6


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def _libc() -> Any:
    """glibc, or None elsewhere (the memory detail and the trim are glibc's)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


#: glibc's mallopt parameter for the number of malloc arenas (MALLOC_ARENA_MAX).
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int) -> bool:
    """At most ``arenas`` glibc malloc arenas (as ``MALLOC_ARENA_MAX`` would), set before any thread starts.

    With glibc's default (up to 8 per core) every worker thread allocates from an arena of its own, and the
    memory each one frees stays in that arena: a 20-minute run's RSS kept rising by ~20 MB after warm-up with
    Python objects and the bytes in use flat, and one ``malloc_trim(0)`` gave 46 MB back (benchmarks/README.md,
    soak). Two arenas keep that retained memory at ~40 MB instead of ~90 MB. False where there is no glibc.
    """
    return bool(_LIBC is not None and _LIBC.mallopt(_M_ARENA_MAX, arenas))


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: give the free memory of every malloc arena back to the system."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


def _pymalloc_mb() -> tuple[float, float]:
    """(MB of pymalloc arenas mapped, MB in blocks in use), parsed from ``sys._debugmallocstats`` (writes to the
    C stderr, so fd 2 is pointed at a temporary file for the moment; a benchmark-only probe)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()

    def number(label: str) -> float:
        found = re.search(re.escape(label) + r"\s*=\s*([\d,]+)", text)
        return int(found.group(1).replace(",", "")) / 1e6 if found else float("nan")

    return number("bytes/arena"), number("# bytes in allocated blocks")


def memory_detail() -> dict[str, float]:
    """Where the RSS is: Python objects alive (count), pymalloc's arenas and what is in use in them, and glibc
    malloc's in-use and free-but-kept bytes (all arenas; ``mallinfo2``). RSS growing with ``malloc free`` and
    flat objects and in-use bytes is the allocator keeping freed memory (fragmentation), not a leak."""
    detail = {"objects": float(len(gc.get_objects()))}
    detail["pymalloc_mb"], detail["pymalloc_used_mb"] = _pymalloc_mb()
    if _LIBC is not None:
        info = _LIBC.mallinfo2()
        detail["malloc_used_mb"] = (info.uordblks + info.hblkhd) / 1e6
        detail["malloc_free_mb"] = info.fordblks / 1e6
    return detail


def user_turn(worker: int, conversation: int, turn: int) -> str:
    lines = "".join(f"line {i} of w{worker}c{conversation}t{turn}.py: value = {i * turn}\n" for i in range(120))
    return f"Conversation {worker}-{conversation}, turn {turn}. Read this file:\n{lines}"


def one_call(clients: dict[str, Any], kind: str, history: list[dict[str, Any]], rng: random.Random) -> str:
    """One app call of ``kind`` on ``history``; returns the assistant's text."""
    stream = rng.random() < 0.4
    if kind == "anthropic":
        client = clients["anthropic"]
        if stream:
            with client.messages.stream(model=CLAUDE, max_tokens=200, messages=history) as s:
                return str(s.get_final_text())
        msg = client.messages.create(model=CLAUDE, max_tokens=200, messages=history)
        return "".join(getattr(b, "text", "") for b in msg.content)
    if kind == "chat":
        client = clients["openai"]
        if stream:
            chunks = client.chat.completions.create(model=GPT, max_tokens=200, messages=history, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return str(
            client.chat.completions.create(model=GPT, max_tokens=200, messages=history).choices[0].message.content
        )
    client = clients["openai"]
    if stream:
        events = client.responses.create(model=GPT, max_output_tokens=200, input=history, stream=True, store=False)
        return "".join(getattr(e, "delta", "") for e in events if e.type == "response.output_text.delta")
    return str(client.responses.create(model=GPT, max_output_tokens=200, input=history, store=False).output_text)


async def one_async_call(clients: dict[str, Any], kind: str, history: list[dict[str, Any]], rng: random.Random) -> str:
    stream = rng.random() < 0.4
    if kind == "anthropic":
        client = clients["async_anthropic"]
        if stream:
            async with client.messages.stream(model=CLAUDE, max_tokens=200, messages=history) as s:
                return str(await s.get_final_text())
        msg = await client.messages.create(model=CLAUDE, max_tokens=200, messages=history)
        return "".join(getattr(b, "text", "") for b in msg.content)
    client = clients["async_openai"]
    if stream:
        chunks = await client.chat.completions.create(model=GPT, max_tokens=200, messages=history, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    response = await client.chat.completions.create(model=GPT, max_tokens=200, messages=history)
    return str(response.choices[0].message.content)


def conversation_turns(worker: int, stop: threading.Event) -> Iterator[list[dict[str, Any]]]:
    """The history to send at each turn (a new user message appended); a new conversation every
    :data:`TURNS_PER_CONVERSATION` turns; ends when ``stop`` is set. See :func:`settle`."""
    conversation = 0
    while not stop.is_set():
        conversation += 1
        history: list[dict[str, Any]] = []
        for turn in range(TURNS_PER_CONVERSATION):
            if stop.is_set():
                return
            history.append({"role": "user", "content": user_turn(worker, conversation, turn)})
            yield history


def settle(tally: Tally, history: list[dict[str, Any]], reply: str, error: BaseException | None) -> None:
    """Count the call; keep the reply in the history, or drop the user message that failed."""
    if error is None:
        history.append({"role": "assistant", "content": reply or "ok"})
    else:
        history.pop()
    tally.call(error)


def sync_worker(worker: int, sim: SimulatedProvider, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    clients = {"anthropic": sim.anthropic(max_retries=0), "openai": sim.openai(max_retries=0)}
    kind = ("anthropic", "chat", "responses")[worker % 3]
    try:
        for history in conversation_turns(worker, stop):
            try:
                reply, error = one_call(clients, kind, history, rng), None
            except Exception as exc:
                reply, error = "", exc
            settle(tally, history, reply, error)
    finally:
        for client in clients.values():
            client.close()


def async_worker(sim: SimulatedProvider, tally: Tally, stop: threading.Event, seed: int, tasks: int) -> None:
    async def conversation_task(index: int, clients: dict[str, Any]) -> None:
        rng = random.Random(seed + index)
        kind = ("anthropic", "chat")[index % 2]
        for history in conversation_turns(100 + index, stop):
            try:
                reply, error = await one_async_call(clients, kind, history, rng), None
            except Exception as exc:
                reply, error = "", exc
            settle(tally, history, reply, error)

    async def main() -> None:
        clients = {
            "async_anthropic": sim.async_anthropic(max_retries=0),
            "async_openai": sim.async_openai(max_retries=0),
        }
        try:
            await asyncio.gather(*(conversation_task(i, clients) for i in range(tasks)))
        finally:
            for client in clients.values():
                await client.close()

    asyncio.run(main())


def fault_injector(sim: SimulatedProvider, tally: Tally, stop: threading.Event, seed: int, rate: float) -> None:
    """About ``rate`` faults a second, at random times; each is counted as one error the app may see."""
    rng = random.Random(seed)
    faults = [
        lambda: Fault(status=500),
        lambda: Fault(status=529, retry_after=None),
        lambda: Fault(status=429, retry_after=None),
        lambda: Fault(drop_after_events=2),
    ]
    while not stop.wait(rng.expovariate(rate)):
        sim.inject(rng.choice(faults)())
        with tally.lock:
            tally.injected += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--threads", type=int, default=4, help="sync worker threads (default 4)")
    parser.add_argument("--async-tasks", type=int, default=4, help="conversations on the asyncio loop (default 4)")
    parser.add_argument("--fault-rate", type=float, default=0.5, help="faults injected per second (default 0.5)")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--rss-slack-mb",
        type=float,
        default=25.0,
        help="RSS growth allowed after warm-up, in MB or 25 %% of the warm-up RSS, whichever is larger (25)",
    )
    parser.add_argument("--max-conversations", type=int, default=32, help="engine's conversation bound (32)")
    parser.add_argument(
        "--memory-detail",
        action="store_true",
        help="per sample also: Python objects alive, pymalloc arenas (MB mapped / in use), glibc malloc in use "
        "and free-but-kept (MB); tells a leak from allocator fragmentation",
    )
    parser.add_argument(
        "--arenas",
        type=int,
        default=2,
        help="glibc malloc arenas (mallopt M_ARENA_MAX; default 2, 0 = glibc's own default, up to 8 per core); "
        "ignored when MALLOC_ARENA_MAX is set; see benchmarks/README.md, soak",
    )
    parser.add_argument(
        "--malloc-trim",
        action="store_true",
        help="call glibc's malloc_trim(0) every 2 s (with the provider's housekeeping), so RSS follows what is "
        "in use; see benchmarks/README.md, soak",
    )
    args = parser.parse_args()
    if args.seconds <= 0 or args.threads < 0 or args.async_tasks < 0:
        parser.error("--seconds must be positive, --threads and --async-tasks at least 0")
    if args.arenas > 0 and "MALLOC_ARENA_MAX" not in os.environ and limit_malloc_arenas(args.arenas):
        print(f"glibc malloc arenas: at most {args.arenas} (--arenas)")

    processor = CountingProcessor()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(processor)
    otel_context.instrument(
        tracer_provider=tracer_provider,
        capture_content="SPAN_ONLY",
        auto_compact_window=40_000,
        microcompact=True,
        # Few tracked conversations, so the bound is reached during warm-up: the run looks for leaks, not for
        # the size of that bound (issue 14 item 4).
        max_conversations=args.max_conversations,
    )
    tally = Tally()
    stop = threading.Event()
    samples: list[tuple[float, int, float, int]] = []
    with SimulatedProvider(latency=0.005) as sim:
        threads = [
            threading.Thread(target=sync_worker, args=(i, sim, tally, stop, args.seed + i), name=f"soak-sync-{i}")
            for i in range(args.threads)
        ]
        if args.async_tasks:
            threads.append(
                threading.Thread(
                    target=async_worker, args=(sim, tally, stop, args.seed + 1000, args.async_tasks), name="soak-async"
                )
            )
        threads.append(
            threading.Thread(
                target=fault_injector, args=(sim, tally, stop, args.seed + 2000, args.fault_rate), name="soak-faults"
            )
        )
        started = time.monotonic()
        for thread in threads:
            thread.start()
        header = f"{'t (s)':>7} {'calls':>7} {'app errors':>10} {'injected':>8} {'RSS MB':>7} {'threads':>7}"
        if args.memory_detail:
            header += f" {'objects':>9} {'pymalloc MB':>11} {'in use':>7} {'malloc MB':>9} {'free':>7}"
        print(header, flush=True)
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= args.seconds:
                break
            next_sample = min(started + len(samples) * args.sample_every + args.sample_every, started + args.seconds)
            while time.monotonic() < next_sample:
                time.sleep(min(HOUSEKEEPING_SECONDS, max(0.0, next_sample - time.monotonic())))
                forget_provider_memory(sim)
                if args.malloc_trim:
                    malloc_trim()
            elapsed = time.monotonic() - started
            samples.append((elapsed, tally.calls, rss_mb(), threading.active_count()))
            line = (
                f"{elapsed:>7.0f} {tally.calls:>7} {tally.app_errors:>10} {tally.injected:>8} "
                f"{samples[-1][2]:>7.1f} {samples[-1][3]:>7}"
            )
            if args.memory_detail:
                d = memory_detail()
                line += (
                    f" {d['objects']:>9.0f} {d['pymalloc_mb']:>11.1f} {d['pymalloc_used_mb']:>7.1f}"
                    f" {d.get('malloc_used_mb', float('nan')):>9.1f} {d.get('malloc_free_mb', float('nan')):>7.1f}"
                )
            print(line, flush=True)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        sim.clear_faults()
        forget_provider_memory(sim)
        gc.collect()
        before_trim = rss_mb()
        if malloc_trim():
            print(f"at the end, after gc.collect(): RSS {before_trim:.1f} MB, {rss_mb():.1f} MB after malloc_trim(0)")
    in_flight = _background.running()
    otel_context.uninstrument()
    # A summary still in flight in the background (one the last calls started; after the provider stopped it
    # may be waiting to retry) is abandoned by uninstrument() and ends its span when its current step returns:
    # give it that time before counting, and fail if it takes longer.
    background_idle = _background.wait_idle(30)

    failures: list[str] = []
    if any(thread.is_alive() for thread in threads):
        failures.append("a worker did not stop within 60 s")
    if not background_idle:
        failures.append(f"{_background.running()} background summaries still running 30 s after uninstrument()")
    if tally.unexpected:
        failures.append(f"{len(tally.unexpected)} unexpected errors reached the app, e.g. {tally.unexpected[0]}")
    if tally.app_errors > tally.injected:
        failures.append(f"{tally.app_errors} provider errors reached the app, only {tally.injected} were injected")
    open_spans = processor.started - processor.ended
    if open_spans:
        failures.append(f"{open_spans} spans still open at the end")
    if tally.calls == 0:
        failures.append("no call completed")
    warmup = max(10.0, args.seconds / 5)
    after = [s for s in samples if s[0] >= warmup]
    if len(after) >= 2:
        base_rss, base_threads = after[0][2], after[0][3]
        tail = after[len(after) // 2 :]
        peak_rss = max(s[2] for s in tail)
        peak_threads = max(s[3] for s in tail)
        if peak_rss > base_rss + max(args.rss_slack_mb, base_rss * 0.25):
            failures.append(f"RSS grew after warm-up: {base_rss:.1f} MB -> {peak_rss:.1f} MB")
        if peak_threads > base_threads + 8:
            failures.append(f"threads grew after warm-up: {base_threads} -> {peak_threads}")
        print(
            f"after warm-up ({warmup:.0f} s): RSS {base_rss:.1f} -> max {peak_rss:.1f} MB in the second half; "
            f"threads {base_threads} -> max {peak_threads}"
        )
    else:
        print("run too short to judge RSS and threads after warm-up")
    print(
        f"calls {tally.calls} ({tally.calls / args.seconds:.1f}/s), app errors {tally.app_errors} "
        f"(injected faults {tally.injected}), unexpected errors {len(tally.unexpected)}, "
        f"spans {processor.started} started / {processor.ended} ended, open {open_spans}; "
        f"background summaries in flight at uninstrument(): {in_flight}"
    )
    for failure in failures:
        print("FAIL:", failure)
    print("soak:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
