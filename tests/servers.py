"""Where a test needs an external program (promtool, prometheus, redis-server): one convention for all.

On a developer's machine a missing program SKIPS the test, with a reason that says how to install it, so
``make test`` passes on a fresh clone. CI sets ``OTEL_CONTEXT_REQUIRE_SERVERS=1`` (``.ci/run`` does), which
turns that skip into a failure: CI installs the programs and can never silently skip those tests.

Use: ``path = require_binary("redis-server", "apt-get install -y redis-server")`` at the top of the test
(or of its fixture); ``from servers import require_binary`` works from any test module.
"""

from __future__ import annotations

import os
import shutil

import pytest

#: Set to 1 (CI) to fail, instead of skip, when a program a test needs is missing.
REQUIRE_SERVERS_ENV = "OTEL_CONTEXT_REQUIRE_SERVERS"


def servers_required() -> bool:
    """Whether missing programs fail the test (CI) rather than skip it (a developer's machine)."""
    return os.environ.get(REQUIRE_SERVERS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def require_binary(name: str, install: str) -> str:
    """The path of program ``name``; when it is missing, skip (or fail under CI) saying ``install``."""
    path = shutil.which(name)
    if path is not None:
        return path
    reason = f"{name} is not installed; install it with `{install}`"
    if servers_required():
        pytest.fail(f"{reason} ({REQUIRE_SERVERS_ENV}=1 forbids skipping)", pytrace=False)
    pytest.skip(f"{reason} (set {REQUIRE_SERVERS_ENV}=1 to fail instead)")
    raise AssertionError("unreachable")  # pytest.skip raises
