"""Run a program as if only ``pip install 'otel-context[EXTRAS]'`` had been done.

The test environment holds the dev extras (the Prometheus exporter, the distro, pytest, ...), so an example
that needs more than the extras its README row names would still run here, and fail for a user ("No module
named 'opentelemetry.exporter.prometheus'"). So the example runs under a guard: every module that only
installed distributions outside the closure of ``otel-context[EXTRAS]`` (its requirements, theirs, and so
on, read from the installed metadata) provide cannot be imported, exactly as if it were not installed.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

#: The program run in the subprocess: ``python -c GUARD BLOCKED_JSON SCRIPT ARGS...``.
GUARD = """
import json, runpy, sys
# None in sys.modules is Python's own "not installed": import raises ModuleNotFoundError, and
# importlib.util.find_spec (how otel-context looks for an SDK) answers None.
for name in json.load(open(sys.argv[1])):
    sys.modules[name] = None
script = sys.argv[2]
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions_for(extras: Iterable[str]) -> set[str]:
    """The canonical names of every distribution ``otel-context[extras]`` installs (itself included)."""
    todo = [("otel-context", frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        name, wanted = todo.pop()
        if (canonical(name), wanted) in seen:
            continue
        seen.add((canonical(name), wanted))
        # The one pip installed (it has a RECORD): an editable install leaves a build's egg-info in the checkout,
        # which is found first from there and may be older than pyproject.toml.
        found = sorted(metadata.distributions(name=name), key=lambda d: d.read_text("RECORD") is None)
        if not found:
            continue  # an optional dependency of a dependency that is not installed here
        dist = found[0]
        names.add(canonical(name))
        for text in dist.requires or []:
            requirement = Requirement(text)
            environments = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in environments):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return names


@functools.lru_cache(maxsize=1)
def _modules_by_distribution() -> dict[str, set[str]]:
    """module name -> the canonical names of the installed distributions that ship it."""
    owners: dict[str, set[str]] = defaultdict(set)
    for dist in metadata.distributions():
        name = canonical(dist.metadata["Name"] or "")
        for path in dist.files or []:
            parts = path.parts
            if not parts or any(p == ".." or p.endswith((".dist-info", ".egg-info", ".data")) for p in parts):
                continue
            leaf = parts[-1]
            if leaf == "__init__.py":
                module = parts[:-1]
            elif leaf.endswith(".py"):
                module = (*parts[:-1], leaf[:-3])
            elif leaf.endswith((".so", ".pyd")):
                module = (*parts[:-1], leaf.split(".")[0])
            else:
                continue
            if module and all(p.isidentifier() for p in module):
                owners[".".join(module)].add(name)
    return owners


def write_blocked(extras: Iterable[str], where: Path) -> Path:
    """A JSON file naming the modules a user with ``otel-context[extras]`` does not have."""
    allowed = distributions_for(extras)
    blocked = {
        module
        for module, owners in _modules_by_distribution().items()
        if not owners & allowed and module.partition(".")[0] not in sys.stdlib_module_names
    }
    # A package's submodules go with it: only the outermost blocked names are needed.
    outermost = sorted(m for m in blocked if not any(m.startswith(p + ".") for p in _parents(m) if p in blocked))
    where.write_text(json.dumps(outermost))
    return where


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def command(script: Path, blocked: Path, *args: str) -> list[str]:
    """The command that runs ``script`` with ``args`` under the guard."""
    return [sys.executable, "-c", GUARD, str(blocked), str(script), *args]


def readme_extras(readme: Path) -> dict[str, list[str]]:
    """example file -> the extras its row of the examples README names (``| [x.py](x.py) | `a,b` | ... |``)."""
    rows = {}
    for line in readme.read_text().splitlines():
        match = re.match(r"\|\s*\[([\w.]+\.py)\]\([\w.]+\.py\)\s*\|\s*`otel-context\[([\w,-]+)\]`\s*\|", line)
        if match:
            rows[match.group(1)] = match.group(2).split(",")
    return rows
