"""The one convention for tests that need an external program: skip with how to install it, fail in CI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import REQUIRE_SERVERS_ENV, require_binary


def test_a_missing_program_skips_with_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(REQUIRE_SERVERS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"promtool is not installed; install it with `apt-get install"):
        require_binary("promtool", "apt-get install -y prometheus")


def test_ci_turns_the_skip_into_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(REQUIRE_SERVERS_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"redis-server is not installed.*forbids skipping"):
        require_binary("redis-server", "apt-get install -y redis-server")


def test_a_present_program_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = tmp_path / "promtool"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert require_binary("promtool", "apt-get install -y prometheus") == str(program)
