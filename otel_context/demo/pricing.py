"""Estimated cost of a run, with and without compaction and prompt caching.

Prices come from the one price source of every span's cost (:mod:`otel_context.pricing`: genai-prices' bundled
table, or the user's own ``OTEL_CONTEXT_PRICES``), at the rates of each call's model. They are estimates for
comparison, not a bill.

The four figures:

* **actual**: every ``chat`` span of the run (summarizer calls included): the sum of their
  ``otel_context.cost.amount`` (what the spans say, priced by the instrumentation).
* **without caching**: the same calls with every input token at the base price.
* **without compaction**: the requests the app *passed* (its full, never-compacted history), counted by the
  simulated provider's tokenizer, with an append-only prompt cache (each call reads what the previous call
  sent and writes the rest): what the same session costs if nothing compacts (and the provider allowed it).
* **neither**: the never-compacted requests with every input token at the base price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from otel_context import pricing
from otel_context.demo.stats import CallFigures
from otel_context.usage import TokenUsage

__all__ = ["CostEstimate", "estimate", "price_note", "rates_of"]


@dataclass(frozen=True)
class CostEstimate:
    """The four figures of the module docstring, in USD."""

    actual: float
    without_caching: float
    without_compaction: float
    without_either: float


def rates_of(provider: str, model: str) -> pricing.Rates:
    """The demo's model's rates; the demo's models are in every genai-prices release (a missing one is a bug)."""
    found = pricing.rates(provider, model)
    if found is None:
        raise LookupError(f"no price for {provider} {model}: install genai-prices or set OTEL_CONTEXT_PRICES")
    return found


def _call(rates: pricing.Rates, uncached: int, cache_write: int, cache_read: int, output: int) -> float:
    usage = TokenUsage(
        input_tokens=uncached + cache_write + cache_read,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    return pricing.cost_at(rates, usage).amount


def estimate(
    provider: str,
    model: str,
    calls: Sequence[CallFigures],
    uncompacted_inputs: Sequence[int],
    min_cacheable: int = 1024,
) -> CostEstimate:
    """Estimate a run's cost (see the module docstring).

    ``uncompacted_inputs``: for every agent call, in order, the input tokens of the request the app
    passed before any rewriting, priced at ``model``'s rates. The agent calls' output tokens are reused for the
    hypothetical runs.
    """
    actual = sum(c.cost or 0.0 for c in calls)
    no_cache = sum(_call(rates_of(provider, c.model or model), c.input_tokens, 0, 0, c.output_tokens) for c in calls)
    rates = rates_of(provider, model)
    agent_outputs = [c.output_tokens for c in calls if not c.summarizer]
    no_compaction = 0.0
    neither = 0.0
    previous = 0
    for i, tokens in enumerate(uncompacted_inputs):
        output = agent_outputs[i] if i < len(agent_outputs) else 0
        read = min(previous, tokens) if previous >= min_cacheable else 0
        write = tokens - read if tokens >= min_cacheable else 0
        no_compaction += _call(rates, tokens - read - write, write, read, output)
        neither += _call(rates, tokens, 0, 0, output)
        previous = tokens
    return CostEstimate(actual, no_cache, no_compaction, neither)


def price_note(provider: str, model: str) -> str:
    """Where the prices come from and what they are, for the report's caption."""
    rates = rates_of(provider, model)
    per = 1_000_000
    return (
        f"Estimated at {rates.source} prices of {model}: ${rates.input * per:.2f}/M input, "
        f"${rates.output * per:.2f}/M output, cache writes {rates.rewrite / rates.input:g}x and reads "
        f"{rates.read / rates.input:g}x the input price."
    )
