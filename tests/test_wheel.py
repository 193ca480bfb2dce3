"""The built wheel installs and works outside the source tree.

``instrumentation/`` is a top-level folder of the repository that ships as ``otel_context.instrumentation``
(the package-dir mapping in pyproject.toml): an editable install hides a mistake there, a wheel does not. So
the test builds the wheel from a copy of the tree (``python -m build``, no network: the dev extras carry
``build`` and ``setuptools``), installs it into an empty folder, and runs, from another empty folder, the
quickstart against the simulated provider, the simulated provider's CLI and the demo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

QUICKSTART = """
import otel_context, otel_context.instrumentation
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
import otel_context.auto
from otel_context.testing import SimulatedProvider

with SimulatedProvider() as sim:
    sim.anthropic().messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=[{"role": "user", "content": "Hi"}])
print("module", otel_context.__file__)
print("instrumentation", otel_context.instrumentation.__file__)
print("spans", [s.name for s in exporter.get_finished_spans()])
"""


def _run(args: list[str], cwd: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(site), OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the wheel's install (``pip install --target``, dependencies from this venv)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "data")
    shutil.copytree(REPO, source, ignore=ignore)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (root / "dist").glob("otel_context-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("otel_context/py.typed", "otel_context/instrumentation/_core.py", "otel_context/testing/server.py"):
        assert needed in names
    assert not any(n.startswith(("instrumentation/", "tests/")) for n in names)  # nothing outside the package
    # Every subpackage of the checkout ships (pyproject lists them by hand: a new one is easily left out).
    packages = {
        str(init.parent.relative_to(REPO)) + "/__init__.py"
        for init in (REPO / "otel_context").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert packages and sorted(packages - set(names)) == []
    site = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site)]
    done = subprocess.run([*pip, str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return site


def test_the_installed_wheel_instruments_a_call(installed: Path, tmp_path: Path) -> None:
    proc = _run(["-c", QUICKSTART], tmp_path, installed)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["module"].startswith(str(installed))  # the wheel's copy, not this checkout
    assert lines["instrumentation"].startswith(str(installed / "otel_context" / "instrumentation"))
    assert lines["spans"] == "['chat claude-sonnet-4-6']"


def test_the_installed_wheel_runs_the_demo_and_the_simulated_provider_cli(installed: Path, tmp_path: Path) -> None:
    demo = _run(
        ["-c", "import sys; from otel_context.cli import main; sys.exit(main(['demo', '--turns', '3']))"],
        tmp_path,
        installed,
    )
    assert demo.returncode == 0, demo.stderr
    assert "Run summary" in demo.stdout
    cli = _run(["-m", "otel_context.testing", "--help"], tmp_path, installed)
    assert cli.returncode == 0 and "--latency" in cli.stdout


def test_the_installed_wheel_runs_the_retention_evaluation(installed: Path, tmp_path: Path) -> None:
    """``otel-context eval`` (docs/eval.md) from a user install: its package ships with the wheel."""
    args = [
        "eval",
        "--scenario",
        "billing",
        "--summarizer",
        "end",
        "--turns",
        "40",
        "--window",
        "6000",
        "--json",
        "-",
    ]
    proc = _run(["-c", f"import sys; from otel_context.cli import main; sys.exit(main({args!r}))"], tmp_path, installed)
    payload = json.loads(proc.stdout)
    assert payload["runs"][0]["compactions"], proc.stderr[-2000:]  # it measured something
    assert proc.returncode == (0 if payload["passed"] else 1), proc.stderr[-2000:]
