"""The package's public surface: what a user imports, with and without the optional SDKs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import otel_context


def test_public_names_are_importable() -> None:
    for name in otel_context.__all__:
        assert getattr(otel_context, name) is not None, name
    body = {"system": "You are terse.", "messages": [{"role": "user", "content": "hi"}]}
    placed = otel_context.place_cache_breakpoints(body)
    assert placed is not body and "cache_control" not in str(body)  # a new body; the caller's is untouched


def test_the_core_imports_and_instruments_without_either_sdk() -> None:
    """anthropic and openai are optional extras: with neither importable, the one import still works."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["anthropic"] = None  # makes `import anthropic` raise ImportError
        sys.modules["openai"] = None
        import otel_context
        from otel_context import Compactor, conversation
        from otel_context.testing import SimulatedProvider, count_tokens
        otel_context.instrument()
        with conversation("c1"):
            pass
        otel_context.uninstrument()
        print("ok", count_tokens("hello world") > 0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok True"
    assert "Traceback" not in done.stderr
