"""Where the SDKs are intercepted (packaged as ``otel_context.instrumentation``).

``AnthropicInstrumentor`` and ``OpenAIInstrumentor`` live in their own modules, imported lazily so that
importing otel_context never imports an SDK. :func:`instrument_all` / :func:`uninstrument_all` back
``otel_context.instrument()`` / ``uninstrument()``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from otel_context.settings import Settings

__all__ = ["instrument_all", "instrumentors", "uninstrument_all"]

_MODULES = (
    ("otel_context.instrumentation.anthropic", "AnthropicInstrumentor", "anthropic"),
    ("otel_context.instrumentation.openai", "OpenAIInstrumentor", "openai"),
)


def instrumentors() -> list[Any]:
    """One instrumentor per supported SDK that is installed (whatever its version)."""
    from ._instrumentor import supported_version

    found = []
    for module_name, class_name, package in _MODULES:
        requirement = importlib.import_module(module_name).REQUIREMENT
        _, installed = supported_version(requirement)
        if installed is not None and importlib.util.find_spec(package) is not None:
            found.append(getattr(importlib.import_module(module_name), class_name)())
    return found


def instrument_all(settings: Settings, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Instrument every installed SDK with ``settings``; an instrumented one is re-instrumented (no stacking)."""
    from otel_context import pricing

    pricing.configure(settings.prices)  # also with no SDK installed: the explicit API's calls are priced too
    for inst in instrumentors():
        if inst.is_instrumented_by_opentelemetry:
            inst.uninstrument()
        inst.instrument(
            settings=settings, tracer_provider=tracer_provider, meter_provider=meter_provider, skip_dep_check=True
        )
    from opentelemetry import trace

    from ._background import register_exit, watch_provider

    register_exit()  # before the exit hook of a tracer provider set until now: its spans are ended first
    watch_provider(tracer_provider if tracer_provider is not None else trace.get_tracer_provider())


def uninstrument_all() -> None:
    for inst in instrumentors():
        if inst.is_instrumented_by_opentelemetry:
            inst.uninstrument()
    from ._background import shutdown

    shutdown()  # pending background summaries are cancelled or abandoned, never applied
