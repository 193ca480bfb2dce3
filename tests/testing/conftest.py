"""Fixtures for the simulated provider's own tests (the plugin provides simulated_provider and the clients)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def sim(simulated_provider: Any) -> Any:
    """Short alias."""
    return simulated_provider
