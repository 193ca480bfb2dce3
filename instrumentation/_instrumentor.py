"""The ``BaseInstrumentor`` plumbing both SDK instrumentors share: version check, patching, restoring.

Patches are recorded as (owner, attribute, original) so that ``uninstrument()`` puts back exactly what
was there, and instrumenting twice never stacks wrappers (``BaseInstrumentor`` refuses a second
``instrument()``; ``otel_context.instrument`` re-applies settings by uninstrumenting first).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Collection
from typing import Any

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from otel_context import pricing, semconv, telemetry
from otel_context import settings as settings_mod

from . import _depth
from ._core import Interceptor, SDKSpec

__all__ = ["SDKInstrumentor", "supported_version"]


def supported_version(requirement: str) -> tuple[bool, str | None]:
    """(installed and inside the range, installed version or None)."""
    req = Requirement(requirement)
    try:
        installed = importlib.metadata.version(req.name)
    except importlib.metadata.PackageNotFoundError:
        return False, None
    try:
        return Version(installed) in req.specifier, installed
    except InvalidVersion:
        return False, installed


class SDKInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Shared base: subclasses name the SDK requirement and build the spec and the patch list."""

    requirement: str = ""

    def __init__(self) -> None:
        super().__init__()
        if not hasattr(self, "_patches"):
            self._patches: list[tuple[Any, str, Any]] = []
            self.interceptor: Interceptor | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return (self.requirement,)

    def _check_dependency_conflicts(self) -> Any:
        # Our own ``_instrument`` checks the range and logs ONE warning on every path (code, the one import,
        # ``opentelemetry-instrument``), where OpenTelemetry would log an error or a debug line depending on
        # the path. A missing SDK is still reported as a conflict, so nothing is patched or logged then.
        _, installed = supported_version(self.requirement)
        if installed is None:
            return super()._check_dependency_conflicts()
        return None

    # -- subclass hooks -----------------------------------------------------------------------------------

    def _make_spec(self) -> SDKSpec:
        raise NotImplementedError

    def _patch(self, interceptor: Interceptor) -> None:
        raise NotImplementedError

    # -- helpers for subclasses ----------------------------------------------------------------------------

    def _wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        original = owner.__dict__[name]
        wrapt.wrap_function_wrapper(owner, name, wrapper)
        self._patches.append((owner, name, original))

    def _replace(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, value)
        self._patches.append((owner, name, original))

    # -- BaseInstrumentor ------------------------------------------------------------------------------------

    def _instrument(self, **kwargs: Any) -> None:
        ok, installed = supported_version(self.requirement)
        if not ok:
            if installed is not None:
                telemetry.log_once(
                    f"unsupported:{self.requirement}",
                    "otel_context: %s %s is not supported (%s); it is left uninstrumented",
                    Requirement(self.requirement).name,
                    installed,
                    self.requirement,
                )
            return
        settings = kwargs.get("settings")
        if not isinstance(settings, settings_mod.Settings):
            settings = settings_mod.resolve()
        legacy = settings.legacy_metrics or semconv.CONVENTIONS_LEGACY in settings.conventions
        telemetry.configure(kwargs.get("tracer_provider"), kwargs.get("meter_provider"), legacy)
        pricing.configure(settings.prices)  # the price table loaded now, so that no call waits for it
        self.interceptor = Interceptor(self._make_spec(), settings)
        try:
            self._patch(self.interceptor)
        except Exception:
            self._restore()
            raise
        _depth.reserve()  # the SDK's request keeps the recursion headroom of the plain call

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._patches:
            _depth.give_back()
        self._restore()
        self.interceptor = None

    def _restore(self) -> None:
        while self._patches:
            owner, name, original = self._patches.pop()
            setattr(owner, name, original)
