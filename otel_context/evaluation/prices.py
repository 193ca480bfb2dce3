"""The evaluation's dollar figures, from the one price source of every span's cost (:mod:`otel_context.pricing`:
genai-prices' bundled table, or the user's ``OTEL_CONTEXT_PRICES``).

Base input and output prices, no cache discount: the evaluation compares what the summaries cost with the
input they spared, both at the base price. A model without a known price gets token figures only. Estimates
for comparison, not a bill.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_context import pricing

__all__ = ["ModelPrice", "price_of"]


@dataclass(frozen=True)
class ModelPrice:
    model: str
    input: float  #: USD per input token
    output: float  #: USD per output token

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens * self.input + output_tokens * self.output


def price_of(provider: str, model: str) -> ModelPrice | None:
    """The base price of ``model`` at ``provider`` (its standard, short-context rates), None when unknown."""
    found = pricing.rates(provider, model)
    return ModelPrice(model, found.input, found.output) if found is not None else None
