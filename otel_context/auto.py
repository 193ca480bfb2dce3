"""``import otel_context.auto``: the one import.

Configures the OpenTelemetry SDK from the standard ``OTEL_*`` variables when the app has not set its own
providers (:mod:`otel_context.sdk_setup`), then instruments every supported SDK that is installed.
Clients created before this import are instrumented too (the hook is on the SDKs' base client class).
Bad settings raise :class:`otel_context.SettingsError` here, at import time, not later inside a call.
"""

from __future__ import annotations

from otel_context import instrument, sdk_setup

sdk_setup.configure_from_env()
settings = instrument()
