"""With a shared store, the previous response a call's cache diagnosis is compared with comes from the fleet's
state: two spawned workers share one conversation through a real redis-server, each serving every other call,
so each call names the response the OTHER worker received (issue 42)."""

from __future__ import annotations

from typing import Any

import pytest

from otel_context.testing import SimulatedProvider
from otel_context.testing.fleet import Fleet, with_breakpoint
from otel_context.testing.redis_server import RedisServer

SYSTEM = "You answer questions about the repository. " * 120  # cached on both providers
SLOW_MACHINE = "?timeout_ms=2000"


def _compared(exchanges: list[Any]) -> list[Any]:
    out: list[Any] = []
    for exchange in exchanges:
        body = exchange.body
        if exchange.path.endswith("/messages"):
            out.append((body.get("diagnostics") or {}).get("previous_message_id"))
        else:
            out.append((body.get("prompt_cache_options") or {}).get("comparison_response_id"))
    return out


@pytest.mark.parametrize("sdk", ["anthropic", "openai-responses"])
def test_each_worker_names_the_response_the_other_worker_received(sdk: str, shared_redis: RedisServer) -> None:
    shared_redis.command("FLUSHALL")
    anthropic = sdk == "anthropic"
    model = "claude-sonnet-4-6" if anthropic else "gpt-5"
    ids: list[str] = []
    with (
        SimulatedProvider() as sim,
        Fleet(2, sim.base_url, sdk, cache_diagnostics=True, state_store=shared_redis.url + SLOW_MACHINE) as fleet,
    ):
        history: list[dict[str, Any]] = []
        for turn in range(4):
            history.append({"role": "user", "content": f"Question {turn}: what does module {turn} do? words:30"})
            if anthropic:
                response = fleet.call(model=model, max_tokens=300, system=SYSTEM, messages=with_breakpoint(history))
                history.append({"role": "assistant", "content": response["content"]})
            else:
                response = fleet.call(model=model, instructions=SYSTEM, input=list(history))
                history.extend(response["output"])  # the reply's own items, as agents send them back
            ids.append(response["id"])
        exchanges = sim.exchanges
    assert fleet.sources == ["store"] * 4
    assert _compared(exchanges) == [None, *ids[:-1]]
