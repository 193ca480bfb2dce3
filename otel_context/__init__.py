"""otel-context: OpenTelemetry for Python LLM apps, with context-window telemetry and a bundled compactor.

The public API lives here; ``import otel_context.auto`` is the one-line way in.
"""

from __future__ import annotations

from typing import Any

from otel_context.compaction.api import CompactionResult, Compactor, should_compact
from otel_context.conversation import conversation, pin, unpin
from otel_context.settings import Settings, SettingsError, resolve
from otel_context.usage import TokenUsage

__version__ = "0.1.0"


def instrument(tracer_provider: Any = None, meter_provider: Any = None, **settings: Any) -> Settings:
    """Instrument every supported SDK that is installed (anthropic 2.x, openai 3.x).

    ``settings`` are :class:`Settings` fields; the ``OTEL_CONTEXT_*`` / standard variables fill the rest.
    Bad values raise :class:`SettingsError` here. Calling it again re-applies new settings (it never
    stacks wrappers). Returns the settings in force.
    """
    resolved = resolve(settings)
    from otel_context.instrumentation import instrument_all

    instrument_all(resolved, tracer_provider=tracer_provider, meter_provider=meter_provider)
    return resolved


def uninstrument() -> None:
    """Restore the SDKs exactly as they were."""
    from otel_context.instrumentation import uninstrument_all

    uninstrument_all()


#: How long :func:`wait_for_summaries` waits at most when not told.
DEFAULT_SUMMARY_WAIT_SECONDS = 30.0


def wait_for_summaries(timeout: float = DEFAULT_SUMMARY_WAIT_SECONDS) -> bool:
    """Wait until no summary prepared in the background is in flight, at most ``timeout`` seconds; True when
    none is left (each has then ended its ``compact`` span and its summarizer's ``chat`` span).

    Call it before shutting your tracer provider down (``provider.shutdown()``): a summary still in flight
    ends its spans later, when no processor takes them any more, and they are lost (the log says so once).
    The interpreter's exit waits on its own, briefly, before the provider's exit hook runs. From the event
    loop that runs an async client's summaries, use :func:`wait_for_summaries_async` instead (this one would
    block them: it raises ``RuntimeError`` there)."""
    from otel_context.instrumentation._background import wait_idle

    return wait_idle(_wait_seconds(timeout))


async def wait_for_summaries_async(timeout: float = DEFAULT_SUMMARY_WAIT_SECONDS) -> bool:
    """:func:`wait_for_summaries` for async code: the summaries on the running loop go on while it waits."""
    from otel_context.instrumentation._background import await_idle

    return await await_idle(_wait_seconds(timeout))


def _wait_seconds(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf"):
        raise ValueError(f"timeout must be a number of seconds, 0 or more, got {timeout!r}")
    return float(timeout)


__all__ = ["Settings", "SettingsError", "TokenUsage", "__version__", "instrument", "uninstrument"]
__all__ += ["wait_for_summaries", "wait_for_summaries_async"]
__all__ += ["CompactionResult", "Compactor", "conversation", "microcompact", "pin", "should_compact", "unpin"]
__all__ += ["TokenMonitor", "place_cache_breakpoints"]


def __getattr__(name: str) -> Any:
    """Helpers imported on first use: ``microcompact(messages, wire_format=...)`` (the rule-based layer, no
    LLM call), ``TokenMonitor`` (one line per turn at a terminal) and ``place_cache_breakpoints``."""
    if name == "microcompact":
        from otel_context.compaction.microcompact import microcompact_messages

        return microcompact_messages
    if name == "TokenMonitor":  # needs the OpenTelemetry SDK: imported on first use
        from otel_context.monitor import TokenMonitor

        return TokenMonitor
    if name == "place_cache_breakpoints":
        from otel_context.cache_control import place_cache_breakpoints

        return place_cache_breakpoints
    raise AttributeError(f"module 'otel_context' has no attribute {name!r}")
