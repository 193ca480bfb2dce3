"""What a user reads matches what they have: no file outside the repository, no deprecated model name, and
every variable of the settings documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_context import settings as settings_mod

REPO = Path(__file__).resolve().parents[1]
#: Text a user reads or runs: docs, code and docstrings, examples, benchmarks, the build files.
TEXT_FILES = sorted(
    p
    for pattern in ("*.md", "*.py", "*.toml", "*.sh", "*.yml", "Makefile")
    for p in REPO.rglob(pattern)
    if not any(part.startswith(".venv") or part in (".git", "build", "dist") for part in p.relative_to(REPO).parts)
    and not p.is_relative_to(REPO / "tests" / "data")  # the recorded exchanges: third-party files, as they were
    and p != Path(__file__)
)
#: Files only the project's authors had (the design folder beside the checkout) and machine-specific paths.
OUTSIDE = re.compile(r"\.\./shared|/work/|TELEMETRY\.md|COMPACTION\.md|ENGINE_API\.md|ARCHITECTURE\.md|the seeds")


def test_the_text_files_were_found() -> None:
    assert REPO / "README.md" in TEXT_FILES and REPO / "otel_context" / "engine" / "planner.py" in TEXT_FILES


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_refers_to_files_a_user_does_not_have(path: Path) -> None:
    hits = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert hits == []


def test_no_deprecated_model_in_the_readme_docs_or_examples() -> None:
    from anthropic._data import DEPRECATED_MODELS  # what the SDK warns about when a call names it

    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*.py")]
    used = {m for path in texts for m in re.findall(r"claude-[a-z0-9-]+", path.read_text())}
    assert used and sorted(used & set(DEPRECATED_MODELS)) == []


def test_every_settings_variable_is_documented() -> None:
    compaction = (REPO / "docs" / "compaction.md").read_text()
    readme = (REPO / "README.md").read_text()
    for variable in settings_mod.KNOWN_ENV_VARS | set(settings_mod.ENV_VARS):
        assert f"`{variable}`" in compaction, variable
        if variable in settings_mod.ENV_VARS:
            assert f"`{variable}`" in readme, variable


def test_every_jaeger_command_keeps_the_metrics_home() -> None:
    """Jaeger takes traces only: every command that sends to the jaeger profile's stack says
    OTEL_METRICS_EXPORTER=none (the instruction that works; the docs once said three things)."""
    docs = [REPO / "README.md", REPO / "dashboards" / "README.md", *(REPO / "docs").glob("*.md")]
    checked = 0
    for path in docs:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if "--profile jaeger" not in line or not line.lstrip().startswith("docker compose"):
                continue
            sends = next(later for later in lines[n + 1 :] if "OTEL_EXPORTER_OTLP_ENDPOINT=" in later)
            assert "OTEL_METRICS_EXPORTER=none" in sends, f"{path.name}: {sends}"
            checked += 1
    assert checked >= 2  # the README's and dashboards/README.md's
    compose = (REPO / "dashboards" / "docker-compose.yml").read_text()
    assert compose.count("OTEL_METRICS_EXPORTER=none") >= 2  # the header and the jaeger service
    viewing = (REPO / "docs" / "viewing.md").read_text()
    jaeger_row = next(line for line in viewing.splitlines() if line.startswith("| Jaeger"))
    assert "OTEL_METRICS_EXPORTER=none" in jaeger_row
    assert not [p.name for p in docs if "which you can ignore" in p.read_text()]  # the metric export's error
