"""The client a background summary sends through: a sibling of the app's, with connections of its own.

End to end (an app closing its client with a summary in flight, directly and through a proxy) in
``tests/engine/test_background_e2e.py``; here, which clients get a sibling and what it shares with the app's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anthropic
import httpcore2
import httpx2
import openai
import pytest

from otel_context.instrumentation._summary_client import SummaryClient
from tests.instrumentation.instr_support import TransportOfTheApp


def _pool(client: Any) -> Any:
    return client._client._transport._pool


@pytest.mark.parametrize("sdk", [anthropic, openai])
def test_a_sibling_has_its_own_connections_and_the_apps_settings(sdk: Any) -> None:
    app = sdk.Anthropic if sdk is anthropic else sdk.OpenAI
    http = sdk.DefaultHttpxClient(limits=httpx2.Limits(max_connections=7), http2=False, trust_env=False)
    client = app(api_key="k", base_url="http://127.0.0.1:9", http_client=http, default_headers={"x-app": "mine"})
    summary = SummaryClient(client)
    sibling = summary.client
    assert summary.owned and sibling is not client and sibling._client is not client._client
    assert _pool(sibling) is not _pool(client)
    assert _pool(sibling)._ssl_context is _pool(client)._ssl_context  # shared, not loaded again (~18 ms)
    assert _pool(sibling)._max_connections == 7 and _pool(sibling)._socket_options == _pool(client)._socket_options
    assert sibling.api_key == "k" and str(sibling.base_url) == str(client.base_url)
    assert sibling.default_headers["x-app"] == "mine"
    client.close()
    assert not summary.closed()  # the app's close does not reach it
    summary.close()
    assert summary.closed()


def test_a_proxy_is_remade_with_its_credentials() -> None:
    http = anthropic.DefaultHttpxClient(proxy="http://user:secret@127.0.0.1:9", trust_env=False)
    client = anthropic.Anthropic(api_key="k", base_url="http://provider.invalid", http_client=http)
    summary = SummaryClient(client)
    assert summary.owned
    (app_proxy,) = [t for t in client._client._mounts.values() if t is not None]
    (our_proxy,) = [t for t in summary.client._client._mounts.values() if t is not None]
    assert isinstance(app_proxy, httpx2.HTTPTransport) and isinstance(our_proxy, httpx2.HTTPTransport)
    assert our_proxy is not app_proxy and type(our_proxy._pool) is type(app_proxy._pool)
    our_pool, app_pool = our_proxy._pool, app_proxy._pool
    assert isinstance(our_pool, httpcore2.HTTPProxy) and isinstance(app_pool, httpcore2.HTTPProxy)
    assert our_pool._proxy_url == app_pool._proxy_url
    assert our_pool._proxy_headers == app_pool._proxy_headers  # Proxy-Authorization included
    summary.close()
    client.close()


@pytest.mark.parametrize(
    "http",
    [
        lambda: httpx2.Client(transport=TransportOfTheApp()),
        lambda: httpx2.Client(mounts={"http://": TransportOfTheApp()}),
    ],
    ids=["transport", "mount"],
)
def test_a_transport_of_the_apps_own_is_shared_not_guessed_at(http: Any) -> None:
    client = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9", http_client=http())
    summary = SummaryClient(client)
    assert not summary.owned and summary.client is client
    summary.close()  # not ours: left open
    assert not client.is_closed()
    client.close()
    assert summary.closed()


def test_an_app_client_already_closed_is_not_copied() -> None:
    client = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")
    client.close()
    summary = SummaryClient(client)
    assert not summary.owned and summary.closed()


def test_a_copy_the_sdk_refuses_falls_back_to_the_apps_client(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(anthropic.Anthropic):
        def copy(self, **kwargs: Any) -> Any:
            raise TypeError("this client cannot be copied")

    client = Refusing(api_key="k", base_url="http://127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        summary = SummaryClient(client)
    assert not summary.owned and summary.client is client
    assert any("own connections" in r.getMessage() for r in caplog.records)
    client.close()


def test_an_async_sibling_is_closed_on_the_loop() -> None:
    async def main() -> None:
        client = anthropic.AsyncAnthropic(
            api_key="k", base_url="http://127.0.0.1:9", http_client=anthropic.DefaultAsyncHttpxClient(trust_env=False)
        )
        summary = SummaryClient(client)
        assert summary.owned and isinstance(summary.client._client, httpx2.AsyncClient)
        await client.close()
        assert not summary.closed()
        await summary.aclose()
        assert summary.closed()

    asyncio.run(main())


@pytest.mark.parametrize("sdk", [anthropic, openai])
def test_the_sdks_own_http_client_gets_a_sibling(sdk: Any) -> None:
    """The app passed no http_client: the SDK made one (proxies from the environment, if any, are remade)."""
    client = (sdk.Anthropic if sdk is anthropic else sdk.OpenAI)(api_key="k", base_url="http://127.0.0.1:9")
    summary = SummaryClient(client)
    assert summary.owned and type(summary.client._client) is type(client._client)
    summary.close()
    assert not client.is_closed()
    client.close()
