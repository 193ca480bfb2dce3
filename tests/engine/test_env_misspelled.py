"""A misspelled ``OTEL_CONTEXT_*`` variable is not ignored in silence: one warning names the closest one."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otel_context import settings as settings_mod


def _warnings(caplog: pytest.LogCaptureFixture, variable: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if variable in r.getMessage()]


def test_a_misspelled_variable_warns_once_naming_the_closest(
    instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_AUTOCOMPACT_WINDOW", "50000")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        instrumented()
        instrumented()  # instrument() again re-reads the environment: still one warning
    found = _warnings(caplog, "OTEL_CONTEXT_AUTOCOMPACT_WINDOW")
    assert len(found) == 1, found
    assert "did you mean OTEL_CONTEXT_AUTO_COMPACT_WINDOW?" in found[0]


def test_known_and_foreign_variables_do_not_warn(
    instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_AUTO_COMPACT_WINDOW", "50000")
    monkeypatch.setenv("OTEL_CONTEXT_REQUIRE_SERVERS", "1")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "app")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        instrumented()
    assert [r.getMessage() for r in caplog.records if "is not a variable" in r.getMessage()] == []


def test_every_settings_variable_is_known_to_the_check() -> None:
    """The check reads its list from settings.ENV_VARS: a variable added there needs nothing else."""
    for variable in settings_mod.ENV_VARS:
        if variable.startswith("OTEL_CONTEXT_"):
            assert variable in settings_mod.KNOWN_ENV_VARS


def test_a_name_far_from_every_variable_still_warns(
    instrumented: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_CONTEXT_ZZZ", "1")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        instrumented()
    found = _warnings(caplog, "OTEL_CONTEXT_ZZZ")
    # The installed help, not a file a pip install does not carry.
    assert len(found) == 1 and "`otel-context settings` lists the variables it reads" in found[0]
    assert ".md" not in found[0]


def test_otel_context_settings_lists_what_is_in_force_and_where_from() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_CONTEXT_COMPACTION="observe",
        OTEL_CONTEXT_CAPTURE_MAX_CHARS="lots",
        OTEL_CONTEXT_STATE_STORE="rediss://app:s3cret@redis.internal:6380/3",
        OTEL_CONTEXT_ZZZ="1",
    )
    script = Path(sys.executable).parent / "otel-context"
    proc = subprocess.run([str(script), "settings"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("OTEL_")}
    assert set(settings_mod.ENV_VARS) <= set(lines)
    assert lines["OTEL_CONTEXT_COMPACTION"].split()[1:] == ["observe", "(environment)"]
    assert lines["OTEL_CONTEXT_KEEP_RECENT_MESSAGES"].split()[1:] == ["6", "(default)"]
    assert "16384 (default: the environment's value is not usable)" in " ".join(proc.stdout.split())
    assert "rediss://redis.internal:6380/3  (environment)" in lines["OTEL_CONTEXT_STATE_STORE"]
    assert "s3cret" not in proc.stdout + proc.stderr
    assert "OTEL_CONTEXT_ZZZ: not a variable otel-context reads" in proc.stdout
    assert "OTEL_CONTEXT_CAPTURE_MAX_CHARS='lots' must be a whole number" in proc.stderr
