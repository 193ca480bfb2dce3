"""Provider usage -> one :class:`TokenUsage`.

Every provider reports tokens differently (Anthropic excludes cache reads/writes from ``input_tokens``,
OpenAI includes cached tokens in ``prompt_tokens``, DeepSeek has its own hit/miss fields). Everything
downstream (span attributes, metrics, cache-break detection, the compaction budget) reads this one shape.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenUsage:
    """Token figures of one response, normalized.

    ``input_tokens`` INCLUDES cache reads and writes (GenAI semconv): for Anthropic it is
    ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: Anthropic's split of cache writes by TTL (5-minute and 1-hour breakpoints).
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    reasoning_tokens: int = 0
    #: Server-side compaction iterations reported inside the usage (Anthropic ``usage.iterations``).
    compaction_input_tokens: int = 0
    compaction_output_tokens: int = 0
    #: Which fields the provider actually reported (so a real 0 is not confused with "not reported").
    reported_cache: bool = False
    reported_reasoning: bool = False

    @property
    def context_tokens(self) -> int:
        """Tokens this exchange leaves in the context: everything sent plus what the model wrote."""
        return self.input_tokens + self.output_tokens

    @property
    def hit_ratio(self) -> float:
        """Cache-read tokens / input tokens (0 when there was no input)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0
