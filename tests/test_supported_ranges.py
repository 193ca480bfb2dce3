"""The client ranges pyproject.toml declares are the ones CI tests: ``make test`` on the dev pins, ``make
test-oldest-sdks`` on the lower bounds (.ci/oldest_sdks.py). For redis-py, whose connection classes the shared
store runs on, the dev pin is the newest release the range allows, so that no release CI has not run reaches a
user (issue 51 item 8)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _requirement(name: str, extra: str) -> Requirement:
    for text in requires("otel-context") or []:
        requirement = Requirement(text)
        if (
            requirement.name == name
            and requirement.marker is not None
            and requirement.marker.evaluate({"extra": extra})
        ):
            return requirement
    raise AssertionError(f"no {name} in the {extra} extra")


def test_the_oldest_run_installs_the_lower_bound_of_every_client_range() -> None:
    printed = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "oldest_sdks.py")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert printed == ["anthropic==2.10", "openai==3.50", "redis==5.2.1"]


def test_the_redis_range_ends_at_the_release_the_tests_run_on() -> None:
    supported = _requirement("redis", "redis").specifier
    pinned = _requirement("redis", "dev")
    (pin,) = [Version(spec.version) for spec in pinned.specifier if spec.operator == "=="]
    assert pin in supported
    # The tests run on the pin (make test) or on the range's lower bound (make test-oldest-sdks).
    (lower,) = [Version(spec.version) for spec in supported if spec.operator == ">="]
    assert Version(version("redis")) in (pin, lower)
    # The upper bound is the next minor release after the pin: nothing newer than the pinned line is allowed.
    (upper,) = [Version(spec.version) for spec in supported if spec.operator == "<"]
    assert upper == Version(f"{pin.major}.{pin.minor + 1}")
