"""The built wheel installs and works outside the source tree.

``instrumentation/`` is a top-level folder of the repository that ships as ``otel_context.instrumentation``
(the package-dir mapping in pyproject.toml): an editable install hides a mistake there, a wheel does not. So
the test builds the wheel from a copy of the tree (``python -m build``, no network: the dev extras carry
``build`` and ``setuptools``), installs it into an empty folder, and runs, from another empty folder, the
quickstart against the simulated provider, the simulated provider's CLI and the demo.

A plain install (``pip install 'otel-context[anthropic,openai]'``, no ``rich``) is a fresh virtual environment
holding the wheel (installed by pip, with its console script) and exactly the distributions those extras
require, resolved from the wheel's metadata and taken from this venv file by file (no network); ``pip check``
says the environment is complete, and ``otel-context eval`` and ``demo`` run in it.
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

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
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the tree, checked for what it ships."""
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
    return wheel


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the wheel's install (``pip install --target``, dependencies from this venv)."""
    site = tmp_path_factory.mktemp("site")
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


def test_the_wheel_declares_no_upper_python_bound(wheel: Path) -> None:
    """Any current Python installs it (nothing in the code is version-specific)."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    assert metadata["Requires-Python"] == ">=3.10"


def _closure(wheel: Path, extras: set[str]) -> set[str]:
    """The distributions ``otel-context[extras]`` needs, by the wheel's Requires-Dist and then each one's own,
    as installed in this venv (a version outside a requirement's range fails here)."""
    from importlib import metadata

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        roots = email.message_from_bytes(archive.read(name)).get_all("Requires-Dist") or []
    found: set[str] = set()
    todo = [(Requirement(text), extras) for text in roots]
    while todo:
        req, wanted = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in wanted or {""}):
            continue
        dist = metadata.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        key = f"{dist.metadata['Name']}[{','.join(sorted(req.extras))}]"
        if key in found:
            continue
        found.add(key)
        todo += [(Requirement(text), set(req.extras)) for text in dist.requires or []]
    return {key.split("[")[0] for key in found}


@pytest.fixture(scope="module")
def plain_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv as ``pip install 'otel-context[anthropic,openai]'`` leaves it: no ``rich``, no dev tools."""
    from importlib import metadata

    venv = tmp_path_factory.mktemp("plain") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    needed = _closure(wheel, {"anthropic", "openai"})
    assert "rich" not in {n.lower() for n in needed}
    for name in needed:
        dist = metadata.distribution(name)
        for file in dist.files or []:
            if file.parts[0] == "..":  # a script in bin/: the venv's own pip install writes otel-context's
                continue
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(Path(str(dist.locate_file(file))).resolve())
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    done = subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr  # every requirement is there, nothing more needed
    return venv


def _plain(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ANTHROPIC_", "OPENAI_", "PYTHON"))}
    env.pop("COLUMNS", None)
    return subprocess.run(
        [str(venv / "bin" / "otel-context"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_plain_install_runs_eval_with_tables_and_json(plain_venv: Path, tmp_path: Path) -> None:
    """``otel-context eval`` after ``pip install 'otel-context[anthropic,openai]'`` (docs/eval.md): tables in
    plain text, the JSON file, and the openai SDK; no traceback, nothing asks for ``rich``."""
    probe = subprocess.run(
        [str(plain_venv / "bin" / "python"), "-c", "import importlib.util as u; print(u.find_spec('rich'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "None"  # the environment is a plain one
    quick = ["--scenario", "billing", "--summarizer", "start", "--turns", "40", "--window", "6000"]
    out = tmp_path / "eval.json"
    tables = _plain(plain_venv, ["eval", *quick, "--json", str(out)], tmp_path)
    assert tables.returncode == 0, tables.stderr[-3000:]
    assert "Traceback" not in tables.stderr and "rich" not in tables.stderr
    for title in ("Compactions", "Facts after each compaction", "Retention", "billing: Invoice rounding"):
        assert title in tables.stdout
    payload = json.loads(out.read_text())
    assert payload["passed"] and payload["runs"][0]["compactions"]
    openai = _plain(plain_venv, ["eval", *quick, "--sdk", "openai", "--json"], tmp_path)
    assert openai.returncode == 0 and "Traceback" not in openai.stderr, openai.stderr[-3000:]
    assert json.loads(openai.stdout)["passed"]


def test_a_plain_install_runs_the_demo_in_plain_text(plain_venv: Path, tmp_path: Path) -> None:
    demo = _plain(plain_venv, ["demo", "--turns", "3"], tmp_path)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "`rich` is not installed, so the demo prints plain text" in demo.stderr
    assert "Traceback" not in demo.stderr and "turn 3/3" in demo.stdout
