"""Numbers read back from a finished span's attributes (the terminal monitor and the demo's summary).

An attribute may be missing or, from another instrumentation, of another type; a figure is a number and
never a bool (``True`` is an ``int`` to Python, not a token count).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["float_attr", "int_attr"]


def int_attr(attrs: Mapping[str, Any], key: str) -> int:
    """The attribute as an int, 0 when absent or not a number."""
    value = attrs.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def float_attr(attrs: Mapping[str, Any], key: str) -> float | None:
    """The attribute as a float, None when absent or not a number."""
    value = attrs.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
