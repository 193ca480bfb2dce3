"""pytest fixtures for the simulated provider (loaded by every pytest run through the pytest11 entry point).

Kept cheap to import: the server and the SDKs are imported only when a fixture is used.

* ``simulated_provider``: a started :class:`~otel_context.testing.SimulatedProvider` (function scope).
* ``anthropic_client`` / ``async_anthropic_client`` / ``openai_client`` / ``async_openai_client``: real SDK
  clients pointed at it (``max_retries=0``), closed after the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

if TYPE_CHECKING:
    from .server import SimulatedProvider

_F = TypeVar("_F", bound=Callable[..., Any])

try:  # pytest-asyncio's marker makes the async fixtures work in its strict mode too (already imported by pytest)
    import pytest_asyncio

    _marker: Any = pytest_asyncio.fixture
except ImportError:  # pragma: no cover - without pytest-asyncio (e.g. anyio's plugin handles async fixtures)
    _marker = pytest.fixture


def _async_fixture(fn: _F) -> _F:
    return cast(_F, _marker(fn))


@pytest.fixture
def simulated_provider() -> Iterator[SimulatedProvider]:
    """A running simulated provider, stopped after the test."""
    from .server import SimulatedProvider

    sim = SimulatedProvider()
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def anthropic_client(simulated_provider: SimulatedProvider) -> Iterator[Any]:
    """A real ``anthropic.Anthropic`` client talking to ``simulated_provider``."""
    client = simulated_provider.anthropic()
    try:
        yield client
    finally:
        client.close()


@_async_fixture
async def async_anthropic_client(simulated_provider: SimulatedProvider) -> AsyncIterator[Any]:
    """A real ``anthropic.AsyncAnthropic`` client talking to ``simulated_provider``."""
    client = simulated_provider.async_anthropic()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def openai_client(simulated_provider: SimulatedProvider) -> Iterator[Any]:
    """A real ``openai.OpenAI`` client talking to ``simulated_provider``."""
    client = simulated_provider.openai()
    try:
        yield client
    finally:
        client.close()


@_async_fixture
async def async_openai_client(simulated_provider: SimulatedProvider) -> AsyncIterator[Any]:
    """A real ``openai.AsyncOpenAI`` client talking to ``simulated_provider``."""
    client = simulated_provider.async_openai()
    try:
        yield client
    finally:
        await client.close()
