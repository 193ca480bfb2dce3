"""Fuzzing the instrumentation end to end (issue 14, item 7): generated request bodies of the three wire formats
(valid, unusual, malformed; see :mod:`fuzz.bodies`) through the real SDK clients, sync and async, streamed and
not, against the simulated provider, each compared with the same call uninstrumented (:mod:`fuzz.harness`).

The default run is small (50 examples per format, ~7 s) and derandomized (the same examples every time, so
``make test`` never flakes). A deeper, random run (1,000 per format take ~3 minutes on 2 cores)::

    FUZZ_EXAMPLES=2000 .venv/bin/pytest -q tests/fuzz

``FUZZ_EXAMPLES`` is read by this suite only (the product never reads it). Hypothesis keeps no example
database (``database=None``): nothing is written into the repository; a failure prints the example and the
``@reproduce_failure`` blob.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .bodies import CASES, FORMATS
from .harness import MODES, Rig, check, make_rig

_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES") or 0)
settings.register_profile(
    "otel-context-fuzz",
    max_examples=_EXAMPLES or 50,
    derandomize=not _EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings.get_profile("otel-context-fuzz")


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    yield from make_rig()


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_instrumented_call_ends_as_the_plain_one(rig: Rig, fmt: str, data: st.DataObject) -> None:
    case = data.draw(CASES[fmt], label="case")
    mode = data.draw(st.sampled_from(MODES), label="mode")
    check(rig, case, mode)
