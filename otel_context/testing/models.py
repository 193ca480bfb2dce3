"""Context windows per model: the built-in table the simulated provider enforces.

Matching is by longest prefix (``claude-sonnet-4-5-20250929`` matches ``claude-sonnet-4-5``). Any other model
name gets the provider's ``default_window`` unless the provider runs with ``strict_models=True``, in which
case it is rejected with the provider's real "model not found" error.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_WINDOWS", "EMBEDDING_DIMENSIONS", "lookup_window"]

DEFAULT_WINDOWS: dict[str, int] = {
    # Anthropic (standard windows; the 1M beta is not simulated)
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-5-haiku": 200_000,
    "claude-3-opus": 200_000,
    "claude-3-haiku": 200_000,
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "text-embedding-3-small": 8_192,
    "text-embedding-3-large": 8_192,
    "text-embedding-ada-002": 8_192,
}

EMBEDDING_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def lookup_window(model: str, table: Mapping[str, int]) -> int | None:
    """The window of ``model`` from ``table`` by exact name, else longest matching prefix, else None."""
    if model in table:
        return table[model]
    best: str | None = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else None
