"""Estimated cost of a run, with and without compaction and prompt caching.

Prices are list prices in USD per million tokens, as published by the providers (Anthropic's pricing page:
Claude Sonnet 4.6 $3 input / $15 output; 5-minute cache writes 1.25x the input price, cache reads 0.1x.
OpenAI's pricing page: GPT-4.1 $2 input / $8 output, cached input $0.50 = 0.25x, no write premium). They
are estimates for comparison, not a bill: check the provider's page for today's figures.

The four figures:

* **actual**: every ``chat`` span of the run (summarizer calls included), billed by its cache reads, cache
  writes, the rest of its input, and its output.
* **without caching**: the same calls with every input token at the base price.
* **without compaction**: the requests the app *passed* (its full, never-compacted history), counted by the
  simulated provider's tokenizer, with an append-only prompt cache (each call reads what the previous call
  sent and writes the rest): what the same session costs if nothing compacts (and the provider allowed it).
* **neither**: the never-compacted requests with every input token at the base price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from otel_context.demo.stats import CallFigures

__all__ = ["PRICES", "CostEstimate", "Price", "estimate"]


@dataclass(frozen=True)
class Price:
    """USD per million tokens, and cache multipliers relative to the input price."""

    model: str
    input: float
    output: float
    cache_write_multiplier: float
    cache_read_multiplier: float
    source: str

    def call(self, uncached: int, cache_write: int, cache_read: int, output: int) -> float:
        """Cost of one call in USD."""
        per = self.input / 1e6
        return (
            uncached * per
            + cache_write * per * self.cache_write_multiplier
            + cache_read * per * self.cache_read_multiplier
            + output * self.output / 1e6
        )


PRICES: dict[str, Price] = {
    "anthropic": Price("claude-sonnet-4-6", 3.00, 15.00, 1.25, 0.10, "Anthropic list price (Sonnet 4.6)"),
    "openai": Price("gpt-4.1", 2.00, 8.00, 1.00, 0.25, "OpenAI list price (GPT-4.1)"),
}


@dataclass(frozen=True)
class CostEstimate:
    """The four figures of the module docstring, in USD."""

    actual: float
    without_caching: float
    without_compaction: float
    without_either: float


def estimate(
    price: Price,
    calls: Sequence[CallFigures],
    uncompacted_inputs: Sequence[int],
    min_cacheable: int = 1024,
) -> CostEstimate:
    """Estimate a run's cost (see the module docstring).

    ``uncompacted_inputs``: for every agent call, in order, the input tokens of the request the app
    passed before any rewriting. The agent calls' output tokens are reused for the hypothetical runs.
    """
    actual = sum(price.call(c.uncached_input, c.cache_write, c.cache_read, c.output_tokens) for c in calls)
    no_cache = sum(price.call(c.input_tokens, 0, 0, c.output_tokens) for c in calls)
    agent_outputs = [c.output_tokens for c in calls if not c.summarizer]
    no_compaction = 0.0
    neither = 0.0
    previous = 0
    for i, tokens in enumerate(uncompacted_inputs):
        output = agent_outputs[i] if i < len(agent_outputs) else 0
        read = min(previous, tokens) if previous >= min_cacheable else 0
        write = tokens - read if tokens >= min_cacheable else 0
        no_compaction += price.call(tokens - read - write, write, read, output)
        neither += price.call(tokens, 0, 0, output)
        previous = tokens
    return CostEstimate(actual, no_cache, no_compaction, neither)
