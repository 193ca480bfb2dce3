"""What compaction does to the user's words (issue 31): a 200-turn coding-agent conversation on a 30,000-token
window, through the real SDKs, with lossy simulated summarizers; per compaction, whether the turn-2
constraint, its reversal and the user's mid-conversation facts reached the model, the share of the user's
messages sent verbatim, the summarizer's input (and cache reads) and the context after the compaction.
Run: `python benchmarks/trust.py [--turns 200]` (about a minute)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import otel_context
from otel_context import engine
from otel_context.testing import SimulatedProvider, SummarizerStyle, trust

STYLES = {
    "max_tokens=2000": SummarizerStyle(max_tokens=2000),
    "reads_last_tokens=6000": SummarizerStyle(reads_last_tokens=6000),
}
MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o", "openai-responses": "gpt-4o"}


def one(sdk: str, style: str, background: bool, turns: int) -> trust.Audit:
    engine.reset()
    otel_context.instrument(auto_compact_window=30_000, background_compaction=background)
    try:
        with SimulatedProvider(summarizer=STYLES[style]) as sim:
            client = sim.anthropic() if sdk == "anthropic" else sim.openai()
            trust.run(client, sdk, MODELS[sdk], turns)
            sim.wait_idle(10)
            return trust.audit(sim.exchanges)
    finally:
        otel_context.uninstrument()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    print(
        "| sdk | summarizer | mode | # | turn | constraint | reversal | facts kept | user msgs verbatim |"
        " summarizer in (cache read) | tokens after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for sdk in MODELS:
        for style in STYLES:
            for background in (False, True):
                began = time.perf_counter()
                result = one(sdk, style, background, args.turns)
                mode = "background" if background else "inline"
                for k, c in enumerate(result.compactions, 1):
                    reversal = (
                        ("yes" if c.reversal else "NO")
                        if c.reversal_said
                        else ("(not said)" if not c.reversal else "?")
                    )
                    print(
                        f"| {sdk} | {style} | {mode} | {k} | {c.turn} | {'yes' if c.constraint else 'NO'} | {reversal} |"
                        f" {c.facts_kept}/{c.facts_said} | {c.verbatim}/{c.user_messages}"
                        f" ({100 * c.verbatim / c.user_messages:.0f} %) | {c.summarizer_input:,} ({c.summarizer_cache_read:,}) |"
                        f" {c.tokens_after:,} |"
                    )
                print(f"<!-- {sdk} {style} {mode}: {time.perf_counter() - began:.1f} s -->", file=sys.stderr)


if __name__ == "__main__":
    main()
