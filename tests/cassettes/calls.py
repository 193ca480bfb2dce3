"""Rebuild the SDK call that produced a recorded request, and make it with a real client.

The recordings come from five projects and several SDK generations, so the recorded request bodies carry
fields the installed SDKs no longer take as keyword arguments (anthropic 2.x dropped ``temperature`` and
``output_format``; openai 3.x does not declare ``prompt_cache_options``): every body field the method does
not declare goes through ``extra_body``, so the wire request equals the recorded one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .cassette import Interaction

#: How a recorded exchange is replayed: the SDK's plain method, its async twin, or its stream helper.
SYNC, ASYNC, HELPER = "sync", "async", "helper"


def make_client(provider: str, base_url: str, *, asynchronous: bool = False) -> Any:
    """A real SDK client for the replay server at ``base_url`` (the server's root URL).

    ``verify=False`` only skips loading the CA bundle (the server is plain HTTP on loopback): that load is
    most of the ~60 ms an SDK client otherwise takes to build, and these tests build hundreds.
    """
    import anthropic
    import httpx2
    import openai

    http: Any = httpx2.AsyncClient(verify=False) if asynchronous else httpx2.Client(verify=False)
    if provider == "anthropic":
        cls: Any = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
        return cls(base_url=base_url, api_key="cassette-key", max_retries=0, http_client=http)
    cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    return cls(base_url=base_url + "/v1", api_key="cassette-key", max_retries=0, http_client=http)


def _split_kwargs(method: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(method).parameters
    declared = {k: v for k, v in body.items() if k in params and k not in ("extra_body", "extra_headers")}
    extra = {k: v for k, v in body.items() if k not in declared}
    if extra:
        declared["extra_body"] = extra
    return declared


def _anthropic_betas(interaction: Interaction) -> list[str]:
    header = interaction.request_headers.get("anthropic-beta", "")
    return [b.strip() for b in header.split(",") if b.strip()]


def _anthropic_resource(client: Any, interaction: Interaction) -> tuple[Any, dict[str, Any]]:
    """``client.messages`` or ``client.beta.messages`` (with the recorded ``anthropic-beta`` values)."""
    if interaction.beta or _anthropic_betas(interaction):
        betas = _anthropic_betas(interaction)
        return client.beta.messages, ({"betas": betas} if betas else {})
    return client.messages, {}


def _openai_method(client: Any, interaction: Interaction, name: str) -> Callable[..., Any]:
    resource = {
        "/chat/completions": lambda: client.chat.completions,
        "/completions": lambda: client.completions,
        "/responses": lambda: client.responses,
        "/embeddings": lambda: client.embeddings,
    }[interaction.path]()
    return getattr(resource, name)  # type: ignore[no-any-return]


def is_stream(interaction: Interaction) -> bool:
    """Whether the recorded request asked for a stream (the response may still be a JSON error)."""
    body = interaction.request_body
    return isinstance(body, dict) and bool(body.get("stream"))


def call_sync(client: Any, interaction: Interaction) -> Any:
    """Make the call with a sync client and consume it fully; returns the SDK's result (or the last event)."""
    body = dict(interaction.request_body or {})
    if interaction.provider == "anthropic":
        resource, extra = _anthropic_resource(client, interaction)
        name = "count_tokens" if interaction.path.endswith("count_tokens") else "create"
        method = getattr(resource, name)
        kwargs = {**_split_kwargs(method, body), **extra}
    else:
        method = _openai_method(client, interaction, "create")
        kwargs = _split_kwargs(method, body)
    result = method(**kwargs)
    if is_stream(interaction):
        last = None
        for last in result:  # noqa: B007 - consuming is the point
            pass
        return last
    return result


async def call_async(client: Any, interaction: Interaction) -> Any:
    """The same through the async client."""
    body = dict(interaction.request_body or {})
    if interaction.provider == "anthropic":
        resource, extra = _anthropic_resource(client, interaction)
        name = "count_tokens" if interaction.path.endswith("count_tokens") else "create"
        method = getattr(resource, name)
        kwargs = {**_split_kwargs(method, body), **extra}
    else:
        method = _openai_method(client, interaction, "create")
        kwargs = _split_kwargs(method, body)
    result = await method(**kwargs)
    if is_stream(interaction):
        last = None
        async for last in result:  # noqa: B007
            pass
        return last
    return result


def call_helper(client: Any, interaction: Interaction) -> Any:
    """A streamed exchange through the SDK's stream helper (``messages.stream`` / ``*.stream``)."""
    body = {k: v for k, v in (interaction.request_body or {}).items() if k != "stream"}
    if interaction.provider == "anthropic":
        resource, extra = _anthropic_resource(client, interaction)
        kwargs = {**_split_kwargs(resource.stream, body), **extra}
        with resource.stream(**kwargs) as stream:
            for _ in stream:
                pass
            return stream.get_final_message()
    method = _openai_method(client, interaction, "stream")
    with method(**_split_kwargs(method, body)) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion() if interaction.path == "/chat/completions" else stream.get_final_response()
