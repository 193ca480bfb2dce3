"""List prices of the models the evaluation can put a dollar figure on (USD per million tokens).

From the providers' pricing pages (Anthropic, OpenAI), base input and output prices, no cache discount:
the evaluation compares what the summaries cost with the input they spared, both at the base price. A
model not listed gets token figures only. Estimates for comparison, not a bill.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelPrice", "price_of"]


@dataclass(frozen=True)
class ModelPrice:
    model: str
    input: float  #: USD per million input tokens
    output: float  #: USD per million output tokens

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1e6


#: Longest prefix wins (``claude-sonnet-4-6`` and its dated names).
_TABLE: dict[str, tuple[float, float]] = {
    "claude-opus-4-6": (5.00, 25.00),
    "claude-opus-4-1": (15.00, 75.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
}


def price_of(model: str) -> ModelPrice | None:
    """The list price of ``model`` (longest known prefix), None when unknown."""
    matches = [prefix for prefix in _TABLE if model.startswith(prefix)]
    if not matches:
        return None
    prefix = max(matches, key=len)
    return ModelPrice(model, *_TABLE[prefix])
