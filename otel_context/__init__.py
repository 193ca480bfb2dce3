"""otel-context: OpenTelemetry for Python LLM apps, with context-window telemetry and a bundled compactor.

The public API lives here; ``import otel_context.auto`` is the one-line way in.
"""

from __future__ import annotations

from typing import Any

from otel_context.compaction.api import CompactionResult, Compactor, should_compact
from otel_context.conversation import conversation
from otel_context.settings import Settings, SettingsError
from otel_context.usage import TokenUsage

__version__ = "0.1.0"

__all__ = ["Settings", "SettingsError", "TokenUsage", "__version__"]
__all__ += ["CompactionResult", "Compactor", "conversation", "microcompact", "should_compact"]


def __getattr__(name: str) -> Any:
    """``microcompact`` is imported on first use (the rule-based layer, no LLM call)."""
    if name == "microcompact":
        from otel_context.compaction.microcompact import microcompact

        return microcompact
    raise AttributeError(f"module 'otel_context' has no attribute {name!r}")
