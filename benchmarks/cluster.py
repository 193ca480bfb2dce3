"""Redis Cluster benchmark (not a test), on a real 3-primary + 3-replica cluster and a single redis-server
that this script starts on loopback (no persistence) and stops.

1. Per operation and per call, side by side in one run: the store on one primary vs on the cluster (named
   by one node's URL, as a user names it) and behind Sentinel (a primary, a replica, three Sentinels, named
   ``redis+sentinel://…/service``): ``get``, ``put``, ``acquire + release``, ``aget``; and ``plan`` +
   ``on_response`` of an appended turn of a compacted conversation at the engine (``benchmarks/state_store.py``'s
   harness), with the writer idle and back to back. Target: the cluster within +200 µs per call of one primary.
2. ``--conversations`` conversations (default 1,000) of ``--turns`` turns each, every turn of a conversation
   served by the next of 4 spawned workers (``otel_context.testing.fleet``) against one simulated provider,
   vs one process serving them all: summarizer calls (the same), and the keys per primary (each within 20 %
   of the mean).

Run: ``.venv/bin/python benchmarks/cluster.py`` (``--markdown FILE`` writes the tables; ``--skip-fleet``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from state_store import _fmt, _state, measure, per_call

from otel_context.conversation.state_store import open_store
from otel_context.testing import SimulatedProvider, SummarizerStyle
from otel_context.testing.fleet import Figures, Fleet, file_content
from otel_context.testing.redis_server import RedisClusterServers, RedisSentinelServers, RedisServer

MODEL = "claude-sonnet-4-6"
WINDOW = 14_000
#: A summarizer that writes within the room this small window leaves (see tests/conversation/fault_support.py).
SUMMARIZER = SummarizerStyle(max_tokens=900)


def _ready(url: str) -> Any:
    store = open_store(url)
    assert getattr(store, "ready", lambda _t: True)(10.0)
    return store


def conversations(url: str, workers: int, count: int, turns: int) -> tuple[Figures, float]:
    """``count`` conversations, ``turns`` turns each, turn t of conversation c on worker (c + t) % workers;
    their figures, and the seconds the run took."""
    settings = {"auto_compact_window": WINDOW, "state_store": url + "?timeout_ms=500"}
    histories: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    began = time.perf_counter()
    with SimulatedProvider() as sim:
        sim.set_window(MODEL, WINDOW)
        sim.summarizer = SUMMARIZER
        with Fleet(workers, sim.base_url, "anthropic", **settings) as fleet:
            for turn in range(turns):
                for c, history in enumerate(histories):
                    history.append(
                        {
                            "role": "user",
                            "content": f"Conversation {c}, turn {turn}. " + file_content(f"c{c}t{turn}.py", 150),
                        }
                    )
                    answer = fleet.call(worker=(c + turn) % workers, model=MODEL, max_tokens=256, messages=history)
                    history.append({"role": "assistant", "content": answer["content"]})
        return Figures.of(sim.exchanges), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2_000, help="samples per operation")
    parser.add_argument("--conversations", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--markdown", help="write the tables to this file")
    parser.add_argument("--skip-fleet", action="store_true", help="leave out the 1,000-conversation table")
    args = parser.parse_args()
    value = _state(8)
    lines: list[str] = []
    with RedisServer() as server, RedisClusterServers() as cluster, RedisSentinelServers() as sentinel:
        setups: dict[str, tuple[str, Callable[[], list[RedisServer]]]] = {
            "one primary": (server.url, lambda: [server]),
            "cluster (3 + 3)": (cluster.url, cluster.primaries),
            "sentinel (1 + 1, 3 sentinels)": (sentinel.url, lambda: [sentinel.current_primary()]),
        }
        ops = {}
        for label, (url, _) in setups.items():
            store = _ready(url)
            ops[label] = measure(store, value, args.n)
            store.close()
        calls = {}
        for label, (url, primaries) in setups.items():
            for settle in (True, False):
                calls[(label, settle)] = per_call(url, settle=settle)
                for node in primaries():
                    node.call("FLUSHALL")
        others = [label for label in setups if label != "one primary"]
        lines += [
            f"Value: a state with an 8 KB summary; {args.n} samples per operation; median (p90), wall clock.",
            "",
            "| operation | one primary | " + " | ".join(f"{o} | added" for o in others) + " |",
            "|---|---|" + "---|---|" * len(others),
        ]
        for op in ops["one primary"]:
            one = ops["one primary"][op]
            cells = [
                f"{_fmt(ops[o][op])} | {statistics.median(ops[o][op]) - statistics.median(one):+.0f} µs" for o in others
            ]
            lines.append(f"| {op} | {_fmt(one)} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Per call at the engine (plan + on_response, an appended turn of a compacted 60-message conversation);"
            " added: wall clock, and the calling thread's CPU:",
            "",
            "| writer | one primary | " + " | ".join(f"{o} | added (CPU)" for o in others) + " |",
            "|---|---|" + "---|---|" * len(others),
        ]
        for settle, writer in ((True, "idle (as after a real request)"), (False, "back to back")):
            one, one_cpu = calls[("one primary", settle)]
            cells = []
            for o in others:
                many, many_cpu = calls[(o, settle)]
                added = statistics.median(many) - statistics.median(one)
                added_cpu = statistics.median(many_cpu) - statistics.median(one_cpu)
                cells.append(f"{_fmt(many)} | {added:+.0f} µs ({added_cpu:+.0f} µs)")
            lines.append(f"| {writer} | {_fmt(one)} | " + " | ".join(cells) + " |")
        if not args.skip_fleet:
            for node in cluster.primaries():
                node.call("FLUSHALL")
            alone, one_seconds = conversations(cluster.url, 1, args.conversations, args.turns)
            for node in cluster.primaries():
                node.call("FLUSHALL")
            four, four_seconds = conversations(cluster.url, 4, args.conversations, args.turns)
            keys = {node.port: int(node.call("DBSIZE")) for node in cluster.primaries()}
            mean = statistics.mean(keys.values())
            spread = ", ".join(f"{k:,} ({100 * (k - mean) / mean:+.1f} %)" for k in keys.values())
            lines += [
                "",
                f"{args.conversations:,} conversations x {args.turns} turns ({WINDOW:,}-token window), "
                "turn t of conversation c on worker (c + t) mod N, on the cluster:",
                "",
                "| workers | summarizer calls | rejected | cache reads / input | seconds |",
                "|---|---|---|---|---|",
                f"| 1 | {alone.summarizer_calls} | {alone.rejected} | {100 * alone.cache_read_fraction:.1f} % | {one_seconds:.0f} |",
                f"| 4 | {four.summarizer_calls} | {four.rejected} | {100 * four.cache_read_fraction:.1f} % | {four_seconds:.0f} |",
                "",
                f"Keys per primary after the 4-worker run (against their mean, {mean:,.0f}): {spread}.",
            ]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
