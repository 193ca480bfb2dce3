"""A misspelled ``OTEL_CONTEXT_*`` variable is not ignored in silence: one warning names the closest one."""

from __future__ import annotations

import logging
from collections.abc import Callable
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
    assert len(found) == 1 and "docs/compaction.md" in found[0]
