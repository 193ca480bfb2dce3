"""The client a background summary sends its requests through: the app's, with connections of its own.

A summary prepared in the background runs on a thread (or loop task) of ours while the app goes on. If its
requests used the app's client, they would use the app's connection pool, and an app that closes its client
once its own call returned (a client per request, ``with Anthropic() as client:``) would close the socket our
thread is reading: httpx's ``close()`` closes every connection of the pool, in use or not. What follows is
up to the timing: mostly an error, sometimes a thread waiting on a socket no longer its own until the
summarizer's timeout (measured with httpx alone: 8 hangs in 300 closes made mid-request).

So a summary is sent through a *sibling* of the app's client: ``client.copy(http_client=...)`` (the SDKs'
own copy: same credentials, base URL, headers, middleware) whose HTTP client is the app's with fresh
connection pools built from the same settings (TLS context, limits, HTTP/2, proxies, socket options). The
sibling is ours: we close it when the summary ends, and the app's ``close()`` cannot reach it.

A transport we cannot remake exactly (one of the app's own classes, a SOCKS proxy, anything unknown) is not
guessed at: the summary then goes through the app's client as before, and a request that fails because the
app closed that client gives the summary up (:mod:`._background`).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from otel_context import telemetry

__all__ = ["SummaryClient"]

#: A pool's constructor parameter it keeps only in another form: HTTPProxy folds ``proxy_auth`` into its
#: ``Proxy-Authorization`` header, which ``_proxy_headers`` (passed on) carries.
_FOLDED = frozenset({"proxy_auth"})


def _client_closed(client: Any) -> bool:
    """Whether ``client`` was closed (both SDKs' ``is_closed()``)."""
    is_closed = getattr(client, "is_closed", None)
    try:
        return callable(is_closed) and is_closed() is True
    except Exception:
        return False


class SummaryClient:
    """The SDK client one background summary sends through, and whether it is ours to close."""

    __slots__ = ("client", "owned")

    def __init__(self, app_client: Any) -> None:
        self.client = app_client
        self.owned = False
        try:
            sibling = _sibling(app_client)
        except Exception:  # an SDK or httpx release shaped otherwise: share the app's client, as before
            telemetry.log_once(
                "summary.client", "otel_context: could not give a background summary its own connections", exc_info=True
            )
            sibling = None
        if sibling is not None:
            self.client, self.owned = sibling, True

    def closed(self) -> bool:
        """Whether the client the summary goes through was closed under it (only the app's can be)."""
        return _client_closed(self.client)

    def close(self) -> None:
        if self.owned:
            self.client.close()

    async def aclose(self) -> None:
        if self.owned:
            await self.client.close()


def _sibling(app_client: Any) -> Any:
    """A copy of ``app_client`` with an HTTP client of its own, or None when its connections cannot be remade."""
    http = getattr(app_client, "_client", None)
    copier = getattr(app_client, "copy", None)
    if http is None or not callable(copier) or _client_closed(app_client):
        return None
    sibling_http = _sibling_http(http)  # nothing opened yet: dropping it on a failed copy leaks nothing
    return None if sibling_http is None else copier(http_client=sibling_http)


def _sibling_http(http: Any) -> Any:
    """``http`` (an httpx client) with new transports of the same settings; None for one it cannot remake."""
    import httpx2

    if not isinstance(http, httpx2.Client | httpx2.AsyncClient):
        return None
    transport = _remade(http._transport)
    if transport is None:
        return None
    mounts: dict[Any, Any] = {}
    for pattern, mounted in http._mounts.items():  # proxies by URL pattern (None: no proxy for these hosts)
        remade = None if mounted is None else _remade(mounted)
        if mounted is not None and remade is None:
            return None
        mounts[pattern] = remade
    sibling = copy.copy(http)  # auth, headers, cookies, timeout, event hooks, redirects: the app's own
    sibling._transport = transport
    sibling._mounts = mounts
    sibling._state = type(http._state).UNOPENED
    return sibling


def _remade(transport: Any) -> Any:
    """A new transport with ``transport``'s settings and no connection; None when that cannot be exact.

    Only httpx's own transports qualify, holding nothing but their pool, itself one of httpcore's own whose
    every constructor parameter is kept under its name (the TLS context is shared, not loaded again).
    """
    import httpcore2
    import httpx2

    if type(transport) not in (httpx2.HTTPTransport, httpx2.AsyncHTTPTransport) or set(vars(transport)) != {"_pool"}:
        return None
    pool = transport._pool
    kinds = (httpcore2.ConnectionPool, httpcore2.HTTPProxy, httpcore2.AsyncConnectionPool, httpcore2.AsyncHTTPProxy)
    if type(pool) not in kinds:
        return None
    settings: dict[str, Any] = {}
    for name in list(inspect.signature(type(pool).__init__).parameters)[1:]:
        if name in _FOLDED:
            continue
        if not hasattr(pool, f"_{name}"):
            return None
        settings[name] = getattr(pool, f"_{name}")
    remade = copy.copy(transport)
    remade._pool = type(pool)(**settings)
    return remade
