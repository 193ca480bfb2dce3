"""The price source (otel_context/pricing.py): genai-prices' own calculation for the same usage, the user's
table over it, no cost for an unknown model, nothing fetched, and what happens where the library is missing."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price, data_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_context
from otel_context import pricing
from otel_context.settings import Settings, SettingsError, resolve
from otel_context.usage import TokenUsage

REPO = Path(__file__).resolve().parents[1]
#: 2026-12-04 12:00 UTC, and 20:00 UTC (DeepSeek's off-peak window).
NOON = datetime(2026, 12, 4, 12, tzinfo=timezone.utc).timestamp()
EVENING = datetime(2026, 12, 4, 20, tzinfo=timezone.utc).timestamp()


@pytest.fixture(autouse=True)
def _no_user_prices() -> Iterator[None]:
    pricing.configure()
    yield
    pricing.configure()


def _library_models(provider_id: str) -> list[str]:
    """The ids of the provider's models that name themselves (a few ids are not a name the model matches, e.g.
    ``ft:gpt-4o`` for every ``ft:gpt-4o:...`` fine-tune)."""
    snapshot = data_snapshot.get_snapshot()
    provider = next(p for p in snapshot.providers if p.id == provider_id)
    return [m.id for m in provider.models if m.is_match(m.id)]


#: Every model of the providers the SDKs speak to: the providers' own and DeepSeek (off-peak prices by time of
#: day), Azure (through its fallback to OpenAI's table).
MODELS = [
    *(("anthropic", m) for m in _library_models("anthropic")),
    *(("openai", m) for m in _library_models("openai")),
    *(("deepseek", m) for m in _library_models("deepseek")),
    ("azure.ai.openai", "gpt-4o"),
    ("azure.ai.openai", "gpt-4.1-mini"),
]


@st.composite
def usages(draw: st.DrawFn) -> TokenUsage:
    """A response's usage as the formats normalize it: reads and writes inside the input, 1-hour writes inside
    the writes, reasoning inside the output; inputs up to past the long-context tiers (200K, 272K)."""
    read = draw(st.integers(0, 300_000))
    write = draw(st.integers(0, 100_000))
    write_1h = draw(st.integers(0, write))
    uncached = draw(st.integers(0, 300_000))
    output = draw(st.integers(0, 64_000))
    reasoning = draw(st.integers(0, output))
    return TokenUsage(
        input_tokens=uncached + read + write,
        output_tokens=output,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        reasoning_tokens=reasoning,
        reported_cache=True,
        reported_reasoning=bool(reasoning),
    )


def library_price(provider: str, model: str, usage: TokenUsage, context: dict[str, str] | None, at: float) -> Decimal:
    """genai-prices' own ``calc_price`` for the same usage."""
    fields: dict[str, int] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
    if usage.cache_write_1h_tokens:
        fields["cache_write_1h_tokens"] = usage.cache_write_1h_tokens
    if usage.reasoning_tokens:
        fields["output_reasoning_tokens"] = usage.reasoning_tokens
    provider_id = {"azure.ai.openai": "azure"}.get(provider, provider)
    return calc_price(
        Usage(**fields),
        model,
        provider_id=provider_id,
        genai_request_timestamp=datetime.fromtimestamp(at, tz=timezone.utc),
        price_context=context,
    ).total_price


def assert_same(ours: float, theirs: Decimal) -> None:
    assert math.isclose(ours, float(theirs), rel_tol=1e-9, abs_tol=1e-12), (ours, theirs)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(MODELS),
    usages(),
    st.sampled_from([None, {"service_tier": "flex"}, {"service_tier": "priority"}, {"speed": "fast"}]),
    st.sampled_from([NOON, EVENING]),
)
def test_a_calls_cost_is_the_librarys_calculation(
    model: tuple[str, str], usage: TokenUsage, context: dict[str, str] | None, at: float
) -> None:
    provider, name = model
    found = pricing.cost(provider, name, usage, tuple(context.items()) if context else (), now=at)
    assert found is not None
    assert_same(found.amount, library_price(provider, name, usage, context, at))
    parts = found.input + found.cache_read + found.cache_write + found.output + found.reasoning
    rates = pricing.rates(provider, name, tuple(context.items()) if context else (), now=at)
    assert rates is not None
    assert math.isclose(parts + rates.for_input(usage.input_tokens).request, found.amount, rel_tol=1e-12)
    assert found.source == f"genai-prices {pricing.library_version()}"


def test_the_parts_of_a_cached_anthropic_call() -> None:
    usage = TokenUsage(
        input_tokens=10_000,
        output_tokens=500,
        cache_read_tokens=8_000,
        cache_write_tokens=1_000,
        cache_write_1h_tokens=400,
        reasoning_tokens=100,
    )
    found = pricing.cost("anthropic", "claude-sonnet-4-6", usage, now=NOON)
    assert found is not None
    # Sonnet 4.6: $3 input, $15 output, reads $0.30, writes $3.75 (5 minutes) and $6 (1 hour) per million.
    assert math.isclose(found.input, 1_000 * 3e-6)
    assert math.isclose(found.cache_read, 8_000 * 0.3e-6)
    assert math.isclose(found.cache_write, 600 * 3.75e-6 + 400 * 6e-6)
    assert math.isclose(found.cache_write_1h, 400 * 6e-6)
    assert math.isclose(found.output, 400 * 15e-6)
    assert math.isclose(found.reasoning, 100 * 15e-6)
    assert_same(found.amount, library_price("anthropic", "claude-sonnet-4-6", usage, None, NOON))


def test_a_long_context_call_is_billed_at_its_tier() -> None:
    short = TokenUsage(input_tokens=200_000, output_tokens=1_000)
    long = TokenUsage(input_tokens=200_001, output_tokens=1_000)
    at_base = pricing.cost("anthropic", "claude-sonnet-4-5", short, now=NOON)
    at_tier = pricing.cost("anthropic", "claude-sonnet-4-5", long, now=NOON)
    assert at_base is not None and at_tier is not None
    assert at_tier.input > at_base.input * 1.5  # the whole call at the long-context rate, not the tokens above
    for usage in (short, long):
        assert_same(
            pricing.cost("anthropic", "claude-sonnet-4-5", usage, now=NOON).amount,  # type: ignore[union-attr]
            library_price("anthropic", "claude-sonnet-4-5", usage, None, NOON),
        )


def test_prices_by_date() -> None:
    """Sonnet 4.6 lost its long-context premium on 2026-03-13: a call is priced at its own day's prices."""
    long = TokenUsage(input_tokens=300_000, output_tokens=1_000)
    before = datetime(2026, 3, 12, 12, tzinfo=timezone.utc).timestamp()
    then = pricing.cost("anthropic", "claude-sonnet-4-6", long, now=before)
    now = pricing.cost("anthropic", "claude-sonnet-4-6", long, now=NOON)
    assert then is not None and now is not None and then.amount > now.amount
    assert_same(then.amount, library_price("anthropic", "claude-sonnet-4-6", long, None, before))


def test_off_peak_prices_hold_only_in_their_window() -> None:
    usage = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    day = pricing.cost("deepseek", "deepseek-chat", usage, now=NOON)
    evening = pricing.cost("deepseek", "deepseek-chat", usage, now=EVENING)
    assert day is not None and evening is not None and evening.amount < day.amount
    # Resolved once per window: the cached day rates are not used past their end (16:30 UTC).
    assert pricing.cost("deepseek", "deepseek-chat", usage, now=NOON).amount == day.amount  # type: ignore[union-attr]
    assert pricing.cost("deepseek", "deepseek-chat", usage, now=EVENING).amount == evening.amount  # type: ignore[union-attr]


def test_an_unknown_model_has_no_cost() -> None:
    usage = TokenUsage(input_tokens=1_000, output_tokens=10)
    assert pricing.cost("openai", "my-local-llama", usage) is None
    assert pricing.cost("anthropic", None, usage) is None
    assert pricing.multipliers("openai", "my-local-llama") is None


def test_a_price_is_resolved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = data_snapshot.get_snapshot()
    calls: list[str] = []
    original = snapshot.find_provider_model

    def counting(model_ref: str, *args: Any) -> Any:
        calls.append(model_ref)
        return original(model_ref, *args)

    monkeypatch.setattr(snapshot, "find_provider_model", counting)
    usage = TokenUsage(input_tokens=1_000, output_tokens=10)
    for _ in range(100):
        pricing.cost("openai", "gpt-4.1", usage, now=NOON)
        pricing.cost("openai", "no-such-model", usage, now=NOON)
    assert calls == ["gpt-4.1", "no-such-model"]  # an unknown model is remembered too


def test_multipliers_for_economics() -> None:
    sonnet = pricing.multipliers("anthropic", "claude-sonnet-4-6")
    assert sonnet is not None
    assert (round(sonnet.write, 6), round(sonnet.write_1h, 6), round(sonnet.read, 6)) == (1.25, 2.0, 0.1)
    gpt = pricing.multipliers("openai", "gpt-4.1")
    assert gpt is not None
    assert (gpt.write, gpt.write_1h, gpt.read) == (1.0, 1.0, 0.25)  # OpenAI bills no write premium


def test_price_context_of_a_response() -> None:
    assert pricing.price_context("default") == (("service_tier", "default"),)
    assert pricing.price_context("auto") == ()
    assert pricing.price_context("standard", "fast") == (("speed", "fast"),)
    assert pricing.price_context("batch") == (("processing", "batch"),)
    assert pricing.price_context(None, None) == ()


# --- the user's prices ---------------------------------------------------------------------------------------------


def _user(table: Any) -> Settings:
    settings = resolve({"prices": table}, env={})
    pricing.configure(settings.prices)
    return settings


def test_a_user_price_overrides_the_librarys() -> None:
    usage = TokenUsage(input_tokens=2_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000)
    _user({"openai:gpt-4.1": {"input": 1.0, "output": 4.0, "cache_read": 0.1}})
    found = pricing.cost("openai", "gpt-4.1", usage)
    assert found is not None and found.source == pricing.SOURCE_USER
    assert math.isclose(found.amount, 1.0 + 4.0 + 0.1)
    # Only that provider's: the same name through Azure keeps the library's price.
    azure = pricing.cost("azure.ai.openai", "gpt-4.1", usage)
    assert azure is not None and azure.source.startswith("genai-prices")


def test_a_user_price_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "prices.json"
    table.write_text(
        json.dumps(
            {
                "my-llama-*": {"input": 0.2, "output": 0.6},
                "my-llama-70b": {"input": 1, "output": 2},
                "openai:gpt-4.1": {"input": 1.5, "output": 6, "cache_read": 0.3},  # a negotiated rate
            }
        )
    )
    settings = resolve(env={"OTEL_CONTEXT_PRICES": str(table)})
    pricing.configure(settings.prices)
    usage = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert math.isclose(pricing.cost("openai", "my-llama-8b", usage).amount, 0.8)  # type: ignore[union-attr]
    assert math.isclose(pricing.cost("openai", "My-Llama-70B", usage).amount, 3.0)  # type: ignore[union-attr]
    assert pricing.cost("openai", "my-llama", usage) is None  # the prefix is "my-llama-"
    negotiated = pricing.cost("openai", "gpt-4.1", usage)
    assert negotiated is not None and negotiated.source == pricing.SOURCE_USER
    assert math.isclose(negotiated.amount, 1.5 + 6.0)  # the file's price, not the library's ($2 / $8)


def test_a_plain_name_is_not_a_prefix() -> None:
    _user({"custom-model": {"input": 1, "output": 1}})
    usage = TokenUsage(input_tokens=10, output_tokens=10)
    assert pricing.cost("openai", "custom-model-2", usage) is None


def test_an_invalid_entry_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = {
        "good": {"input": 1, "output": 2},
        "no-output": {"input": 1},
        "negative": {"input": -1, "output": 2},
        "typo": {"input": 1, "output": 2, "cache_reads": 0.1},
        "not-a-mapping": 3,
    }
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        settings = _user(table)
        _user(table)  # instrument() again: no second warning
    assert [p.name for p in settings.prices] == ["good"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 4, warnings
    assert any("'no-output'" in w and '"output" is required' in w for w in warnings)
    assert any("'typo'" in w and "cache_reads" in w for w in warnings)


def test_an_unreadable_table_from_code_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read the price file"):
        resolve({"prices": str(tmp_path / "missing.json")}, env={})
    with pytest.raises(SettingsError, match="must name a JSON file or be a mapping"):
        resolve({"prices": 3}, env={})


def test_an_unreadable_table_from_the_environment_is_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="otel_context"):
        settings = resolve(env={"OTEL_CONTEXT_PRICES": str(bad)})
    assert settings.prices == ()
    assert [r.getMessage() for r in caplog.records if "OTEL_CONTEXT_PRICES" in r.getMessage()] != []


def test_instrument_takes_prices(simulated_provider: Any) -> None:
    otel_context.instrument(prices={"claude-sonnet-4-6": {"input": 1, "output": 1}})
    try:
        found = pricing.rates("anthropic", "claude-sonnet-4-6")
        assert found is not None and found.source == pricing.SOURCE_USER
    finally:
        otel_context.uninstrument()


def test_instrument_takes_prices_with_no_sdk_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explicit API prices its summarizer's calls without an SDK to instrument: the table is in force
    whatever SDKs are installed (on a bare Python 3.10 install this was the only way to get a price)."""
    import otel_context.instrumentation

    monkeypatch.setattr(otel_context.instrumentation, "_MODULES", ())
    otel_context.instrument(prices={"my-model": {"input": 1, "output": 2}})
    try:
        found = pricing.rates("openai", "my-model")
        assert found is not None and found.source == pricing.SOURCE_USER
    finally:
        otel_context.uninstrument()


# --- offline, and without the library ----------------------------------------------------------------------------

#: Prices calls of both SDKs on the simulated provider (loopback) and records every network address the process
#: resolves or connects to (the interpreter's audit events): a fetch of prices would show a non-loopback one.
_OFFLINE = textwrap.dedent(
    """
    import json, sys
    seen = []
    def audit(event, args):
        if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto"):
            seen.append(repr(args[1] if event != "socket.getaddrinfo" else args[0]))
    sys.addaudithook(audit)
    import otel_context
    from otel_context import pricing
    from otel_context.testing import SimulatedProvider
    from otel_context.usage import TokenUsage
    otel_context.instrument()
    usage = TokenUsage(input_tokens=10_000, output_tokens=100, cache_read_tokens=5_000)
    costs = []
    with SimulatedProvider() as sim:
        sim.anthropic().messages.create(
            model="claude-sonnet-4-6", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        sim.openai().chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
        for provider, name in (("openai", "gpt-5"), ("anthropic", "claude-opus-4-6"), ("deepseek", "deepseek-chat")):
            costs.append(pricing.cost(provider, name, usage).amount)
    print(json.dumps({"seen": seen, "costs": costs}))
    """
)


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_pricing_never_fetches() -> None:
    done = _run(_OFFLINE)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["costs"] and all(isinstance(c, float) and c > 0 for c in result["costs"])
    outside = [address for address in result["seen"] if not any(h in address for h in ("127.0.0.1", "localhost"))]
    assert outside == []


#: The library blocked, as on Python 3.10 where it cannot install: a user price still applies, every other
#: call has no cost, and the log says so once.
_WITHOUT_LIBRARY = textwrap.dedent(
    """
    import json, logging, sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "genai_prices" or name.startswith("genai_prices."):
                raise ImportError("blocked: as on Python 3.10")
    sys.meta_path.insert(0, Block())
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("otel_context").addHandler(Keep())
    logging.getLogger("otel_context").setLevel(logging.INFO)
    import otel_context
    from otel_context import pricing
    from otel_context.usage import TokenUsage
    otel_context.instrument(prices={"my-model": {"input": 1, "output": 2}})
    otel_context.instrument(prices={"my-model": {"input": 1, "output": 2}})
    usage = TokenUsage(input_tokens=1_000_000, output_tokens=1_000_000)
    mine = pricing.cost("openai", "my-model", usage)
    print(json.dumps({
        "mine": mine.amount if mine else None,
        "gpt": pricing.cost("openai", "gpt-4.1", usage) is None,
        "version": pricing.library_version(),
        "log": [r for r in records if "price" in r],
    }))
    """
)


def test_without_the_library_only_the_users_prices_apply() -> None:
    done = _run(_WITHOUT_LIBRARY)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mine"] == 3.0 and result["gpt"] is True and result["version"] is None
    assert len(result["log"]) == 1 and "OTEL_CONTEXT_PRICES only" in result["log"][0], result["log"]
