"""otel-context: OpenTelemetry for Python LLM apps, with context-window telemetry and a bundled compactor.

The public API lives here; ``import otel_context.auto`` is the one-line way in.
"""

from __future__ import annotations

from otel_context.settings import Settings, SettingsError
from otel_context.usage import TokenUsage

__version__ = "0.1.0"

__all__ = ["Settings", "SettingsError", "TokenUsage", "__version__"]
