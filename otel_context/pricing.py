"""What a call costs: one price source, offline, and the user's own prices beside it.

The source is pydantic's ``genai-prices`` (the package's bundled data; docs/telemetry.md, "Cost"), the table
Logfire prices calls with: input, output, cache reads and writes (with the 1-hour TTL where a provider prices
it), long-context tiers, prices by date, and the request-specific rates a response names (OpenAI's
``service_tier``, Anthropic's ``speed``, batch processing). Its run-time updater (``UpdatePrices``) is never
started here: nothing is fetched, prices change when the package is upgraded (``pip install -U
genai-prices``). The user's own prices (``OTEL_CONTEXT_PRICES``, ``instrument(prices=...)``: custom,
fine-tuned, self-hosted models, negotiated rates) are looked up first. A model neither knows gets no cost,
never a guessed one.

Pricing a call is a lookup, not a parse: a model's prices are resolved once (per provider, model, request
context and UTC day: prices change by date) into :class:`Rates`, plain floats in USD per token, and a call's
:class:`Cost` is a few multiplications of its :class:`~otel_context.usage.TokenUsage`. The split of a call's
input and output follows the library's own calculation (``calc_price``), which the tests hold it to: cache
reads and writes are parts of the input, billed at their own rates where the model has them (else as input),
and reasoning is part of the output.

genai-prices needs Python 3.11 or later. On Python 3.10 (or wherever it is not installed) only the user's
prices are known: every other call carries no cost, and :func:`configure` says so once in the log.

``economics`` decisions ("does this compaction repay itself") read :func:`multipliers` (cache write and read
prices relative to the input price) and :func:`rates` (the summarizer's prices).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, NamedTuple

from otel_context import process_state, semconv, telemetry
from otel_context.usage import TokenUsage

__all__ = [
    "CURRENCY",
    "Cost",
    "Multipliers",
    "PriceTableError",
    "Rates",
    "UserPrice",
    "configure",
    "cost",
    "library_version",
    "multipliers",
    "parse_user_prices",
    "price_context",
    "rates",
    "rewrite_cost",
]

log = logging.getLogger("otel_context")

#: Every figure is in US dollars: the library's prices are, and so must the user's be.
CURRENCY = "USD"
#: ``otel_context.cost.source`` of a price from the user's table.
SOURCE_USER = "user"
#: Per million tokens: how providers, the library and the user's table state prices.
_PER = 1_000_000

#: gen_ai.provider.name -> the library's provider id (the others are asked by the same name).
_PROVIDER_IDS = {
    semconv.PROVIDER_AZURE_OPENAI: "azure",
    semconv.PROVIDER_AWS_BEDROCK: "aws",
    semconv.PROVIDER_GCP_VERTEX: "google",
}

PriceContext = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Rates:
    """One model's prices in USD per token, resolved once. ``None``: not priced apart (cache reads and writes
    are then billed as input, reasoning as output, as the providers bill them)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    #: Writes with the 1-hour TTL (Anthropic), where they have a price of their own.
    cache_write_1h: float | None = None
    reasoning: float | None = None
    #: A fee per request (a few models), in USD.
    request: float = 0.0
    #: Long-context tiers: above ``start`` input tokens (cache included), the whole call is billed at these
    #: rates (the providers' "cliff"); highest start first.
    tiers: tuple[tuple[int, Rates], ...] = ()
    #: Where the price comes from: ``genai-prices <version>`` or ``user``.
    source: str = SOURCE_USER

    def for_input(self, input_tokens: int) -> Rates:
        """The rates of a call with ``input_tokens`` of input (a long-context tier, or these)."""
        for start, tier in self.tiers:
            if input_tokens > start:
                return tier
        return self

    @property
    def rewrite(self) -> float:
        """What a token costs to put back in the cache after a break: its write price, or (a provider that
        caches without charging writes, as OpenAI) its input price."""
        return self.cache_write if self.cache_write is not None else self.input

    @property
    def read(self) -> float:
        """What a token read from the cache costs (the input price where reads have none of their own)."""
        return self.cache_read if self.cache_read is not None else self.input


class Cost(NamedTuple):
    """What one call cost, in USD: the total and its parts, which add up to it (a per-request fee, where a model
    has one, counts in the total only). Cache writes and reads not priced apart are in ``input``. A NamedTuple:
    one is made per call (a frozen dataclass's per-field ``object.__setattr__`` cost five times more)."""

    amount: float
    input: float  #: input not read from nor written to the cache (and any the model does not price apart)
    cache_read: float
    cache_write: float  #: every cache write, ``cache_write_1h`` included
    cache_write_1h: float  #: writes with the 1-hour TTL, where the provider reported them
    output: float  #: output, reasoning excluded
    reasoning: float  #: reasoning tokens (billed as output where the model has no price of its own for them)
    source: str


@dataclass(frozen=True, slots=True)
class Multipliers:
    """A model's cache prices relative to its input price (``economics``: does a compaction repay the cache
    it breaks). ``write``: a 5-minute write (1.0 where writes are billed as input, e.g. OpenAI);
    ``write_1h``: a 1-hour write; ``read``: a cache read."""

    write: float
    write_1h: float
    read: float


@dataclass(frozen=True)
class UserPrice:
    """One entry of the user's price table: ``name`` (exact, or a prefix when ``prefix``), for ``provider`` or
    any (None)."""

    provider: str | None
    name: str
    prefix: bool
    rates: Rates


class PriceTableError(ValueError):
    """The user's price table cannot be read at all (a missing file, not JSON, not a mapping)."""


# --- the user's table ------------------------------------------------------------------------------------------

#: Fields of an entry (USD per million tokens) and the Rates field each sets.
_FIELDS = {
    "input": "input",
    "output": "output",
    "cache_read": "cache_read",
    "cache_write": "cache_write",
    "cache_write_1h": "cache_write_1h",
    "reasoning": "reasoning",
}


def parse_user_prices(raw: Any, where: str, warn: Any) -> tuple[UserPrice, ...]:
    """The user's table from ``raw``: a mapping, or a path (str or ``os.PathLike``) to a JSON file holding one.

    Each key is a model name, ``provider:name`` for one provider only (``gen_ai.provider.name``: ``openai``,
    ``anthropic``, ...), and a trailing ``*`` makes it a prefix (the longest wins; a plain name matches only
    itself: ``gpt-4.1`` must not price ``gpt-4.1-mini``). Each value maps ``input`` and ``output`` (required),
    ``cache_read``, ``cache_write``, ``cache_write_1h``, ``reasoning`` (optional) to USD per million tokens.
    An invalid entry is skipped with one warning (``warn(key, message, *args)``); a table that cannot be read
    at all raises :class:`PriceTableError`.
    """
    if raw is None:
        return ()
    if isinstance(raw, (str, os.PathLike)):
        path = os.fspath(raw)
        if isinstance(path, bytes):
            path = path.decode()
        if not path.strip():
            return ()
        try:
            with open(path, encoding="utf-8") as file:
                raw = json.load(file)
        except OSError as exc:
            raise PriceTableError(f"{where}: cannot read the price file {path!r}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise PriceTableError(f"{where}: the price file {path!r} is not JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise PriceTableError(
            f"{where} must name a JSON file or be a mapping of model names to prices, e.g. "
            '{"my-model": {"input": 0.5, "output": 1.5}} (USD per million tokens)'
        )
    entries: list[UserPrice] = []
    for key, value in raw.items():
        try:
            entries.append(_user_entry(key, value))
        except ValueError as exc:
            warn(f"prices:{where}:{key!r}:{exc}", "otel_context: %s: ignoring the price of %r: %s", where, key, exc)
    return tuple(entries)


def _user_entry(key: Any, value: Any) -> UserPrice:
    if not isinstance(key, str) or not key.strip().rstrip("*").strip():
        raise ValueError("the key must be a model name (provider:name for one provider, a trailing * for a prefix)")
    provider, sep, name = key.strip().partition(":")
    if not sep or provider.strip().lower() not in _KNOWN_PROVIDERS:
        provider, name = "", key.strip()  # a fine-tune's name (ft:gpt-4.1-mini:org::id) keeps its colons
    prefix = name.endswith("*")
    name = name.rstrip("*").strip().lower()
    if not name:
        raise ValueError("the key names no model")
    if not isinstance(value, Mapping):
        raise ValueError('its value must map "input" and "output" to USD per million tokens')
    unknown = sorted(str(k) for k in value if k not in _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}")
    prices: dict[str, float | None] = {}
    for field, attribute in _FIELDS.items():
        figure = value.get(field)
        if figure is None:
            if field in ("input", "output"):
                raise ValueError(f'"{field}" is required (USD per million tokens)')
            prices[attribute] = None
            continue
        if isinstance(figure, bool) or not isinstance(figure, (int, float)) or not math.isfinite(figure) or figure < 0:
            raise ValueError(f'"{field}" must be a non-negative number of USD per million tokens, not {figure!r}')
        prices[attribute] = float(figure) / _PER
    rates = Rates(
        input=prices["input"] or 0.0,
        output=prices["output"] or 0.0,
        cache_read=prices["cache_read"],
        cache_write=prices["cache_write"],
        cache_write_1h=prices["cache_write_1h"],
        reasoning=prices["reasoning"],
        source=SOURCE_USER,
    )
    return UserPrice(provider.strip().lower() or None, name, prefix, rates)


_KNOWN_PROVIDERS = frozenset(
    {
        semconv.PROVIDER_ANTHROPIC,
        semconv.PROVIDER_OPENAI,
        semconv.PROVIDER_AZURE_OPENAI,
        semconv.PROVIDER_DEEPSEEK,
        semconv.PROVIDER_AWS_BEDROCK,
        semconv.PROVIDER_GCP_VERTEX,
    }
)


class _UserTable:
    """The user's entries, indexed: exact names per provider (and for any), then prefixes, longest first."""

    def __init__(self, entries: Iterable[UserPrice]) -> None:
        self.exact: dict[tuple[str | None, str], Rates] = {}
        prefixes: list[UserPrice] = []
        for entry in entries:
            if entry.prefix:
                prefixes.append(entry)
            else:
                self.exact[(entry.provider, entry.name)] = entry.rates  # a later entry of the same name wins
        self.prefixes = sorted(prefixes, key=lambda e: (-len(e.name), e.provider is None))

    def find(self, provider: str, model: str) -> Rates | None:
        name = model.lower()
        found = self.exact.get((provider, name)) or self.exact.get((None, name))
        if found is not None:
            return found
        for entry in self.prefixes:
            if (entry.provider is None or entry.provider == provider) and name.startswith(entry.name):
                return entry.rates
        return None


# --- the library -------------------------------------------------------------------------------------------------


class _Library(NamedTuple):
    version: str
    source: str
    snapshot: Any  #: genai_prices.data_snapshot (its get_snapshot() is the data in force)


_library: _Library | None = None
_library_loaded = False
_user = _UserTable(())
#: (provider, model, context) -> (Rates or None, the period they hold: time.time() from, until); bounded.
_resolved: dict[tuple[str, str, PriceContext], tuple[Rates | None, float, float]] = {}
_MAX_RESOLVED = 2048
# Reset and a fork's child: kept (the library is code; the table is the settings in force; the resolved rates
# are a pure function of their key until their own expiry).
process_state.register(
    __name__, ("_library", "_library_loaded", "_user", "_resolved"), on_reset=None, in_forked_child=None
)


def _load_library() -> _Library | None:
    """The library and its bundled data, imported once (about 40 ms with the SDKs already imported; 0.1 s
    without). Its ``UpdatePrices`` is never started: the data is what the installed package ships."""
    global _library, _library_loaded
    if _library_loaded:
        return _library
    _library_loaded = True
    try:
        import genai_prices
        from genai_prices import data_snapshot

        data_snapshot.get_snapshot()  # the bundled data, parsed now rather than on a call
    except Exception as exc:  # ImportError on Python 3.10 / not installed; anything else is a broken install
        where = "Python 3.10" if sys.version_info < (3, 11) else "this environment"
        reason = "it needs Python 3.11 or later" if sys.version_info < (3, 11) else f"{type(exc).__name__}: {exc}"
        log.info(
            "otel_context: no price library in %s (genai-prices: %s); calls are priced from OTEL_CONTEXT_PRICES "
            "only, the others carry no cost",
            where,
            reason,
        )
        _library = None
        return None
    version = str(getattr(genai_prices, "__version__", "") or "")
    _library = _Library(version, f"genai-prices {version}".strip(), data_snapshot)
    return _library


def library_version() -> str | None:
    """The version of genai-prices in use, None when it is not installed."""
    library = _load_library()
    return library.version if library is not None else None


def configure(entries: Iterable[UserPrice] = ()) -> None:
    """The user's prices (from the settings) in force from now on, and the library loaded (at instrument time,
    so that no call waits for it)."""
    global _user
    _user = _UserTable(entries)
    _resolved.clear()
    _load_library()


def _day(now: float) -> tuple[float, float]:
    """The UTC day of ``now``: from its midnight to the next."""
    start = now // 86_400 * 86_400
    return start, start + 86_400


def rates(provider: str, model: str | None, context: PriceContext = (), now: float | None = None) -> Rates | None:
    """The prices of ``model`` at ``provider`` (``gen_ai.provider.name``) for a request of ``context`` (see
    :func:`price_context`), from the user's table, else the library; None when neither knows the model."""
    if not model:
        return None
    when = time.time() if now is None else now
    key = (provider, model, context)
    found = _resolved.get(key)
    if found is not None and found[1] <= when < found[2]:
        return found[0]
    resolved, since, until = _resolve(provider, model, context, when)
    if len(_resolved) >= _MAX_RESOLVED:
        _resolved.clear()  # bounded, whatever model names the app sends
    _resolved[key] = (resolved, since, until)
    return resolved


def _resolve(provider: str, model: str, context: PriceContext, now: float) -> tuple[Rates | None, float, float]:
    """One lookup: the user's table, else the library's prices in force at ``now``, and the period they hold."""
    user = _user.find(provider, model)
    if user is not None:
        return user, -math.inf, math.inf
    library = _load_library()
    if library is None:
        return None, -math.inf, math.inf
    try:
        snapshot = library.snapshot.get_snapshot()
        found, info = snapshot.find_provider_model(model, None, _PROVIDER_IDS.get(provider, provider), None)
        at = datetime.fromtimestamp(now, tz=timezone.utc)
        if context and not any(info is m for m in found.models):
            # The library's rule: a model found through a fallback provider gets no request-specific rates.
            model_price = info.get_prices(at)
        else:
            model_price = info.get_prices(at, dict(context) if context else None)
        resolved = _rates_of(model_price, library.source)
    except LookupError:
        return None, *_day(now)
    except Exception:
        telemetry.log_once(f"pricing:{provider}:{model}", "otel_context: could not price %s", model, exc_info=True)
        return None, *_day(now)
    return resolved, *_valid_between(info, now)


def _valid_between(info: Any, now: float) -> tuple[float, float]:
    """The period around ``now`` in which its resolved prices hold: its UTC day (prices change by date), cut at
    the starts and ends of a daily window (off-peak prices) when the model has one."""
    day = now // 86_400 * 86_400
    since, until = day, day + 86_400
    constraints = [getattr(p, "constraint", None) for p in (info.prices if isinstance(info.prices, list) else ())]
    constraints += [getattr(v, "constraint", None) for v in (info.price_variants or ())]
    for constraint in constraints:
        for moment in (getattr(constraint, "start_time", None), getattr(constraint, "end_time", None)):
            if moment is None:
                continue
            offset = moment.utcoffset() if moment.tzinfo is not None else None
            seconds = moment.hour * 3600 + moment.minute * 60 + moment.second
            seconds -= int(offset.total_seconds()) if offset is not None else 0
            at = day + seconds % 86_400
            if at <= now:
                since = max(since, at)
            else:
                until = min(until, at)
    return since, until


def _number(value: Any) -> float | None:
    return None if value is None else float(value) / _PER


def _rates_of(model_price: Any, source: str) -> Rates:
    """The library's ``ModelPrice`` as :class:`Rates`: floats per token, each long-context tier resolved."""
    keys = (
        "input_mtok",
        "output_mtok",
        "cache_read_mtok",
        "cache_write_mtok",
        "cache_write_1h_mtok",
        "output_reasoning_mtok",
    )
    values: dict[str, Any] = {key: getattr(model_price, key, None) for key in keys}
    requests = getattr(model_price, "requests_kcount", None)
    starts = sorted({tier.start for v in values.values() if hasattr(v, "tiers") for tier in v.tiers}, reverse=True)

    def at(total_input: int) -> Rates:
        def pick(value: Any) -> float | None:
            if value is None:
                return None
            if hasattr(value, "tiers"):  # TieredPrices: the highest tier the input passes, else the base
                price = value.base
                for tier in reversed(value.tiers):
                    if total_input > tier.start:
                        price = tier.price
                        break
                return _number(price)
            return _number(value)

        return Rates(
            input=pick(values["input_mtok"]) or 0.0,
            output=pick(values["output_mtok"]) or 0.0,
            cache_read=pick(values["cache_read_mtok"]),
            cache_write=pick(values["cache_write_mtok"]),
            cache_write_1h=pick(values["cache_write_1h_mtok"]),
            reasoning=pick(values["output_reasoning_mtok"]),
            request=float(requests) / 1000 if requests is not None else 0.0,
            source=source,
        )

    base = at(0)
    if not starts:
        return base
    return replace(base, tiers=tuple((start, at(start + 1)) for start in starts))


# --- a call's cost ---------------------------------------------------------------------------------------------


def price_context(service_tier: Any = None, speed: Any = None) -> PriceContext:
    """The request context a response names, as the library keys it: OpenAI's ``service_tier`` (``flex``,
    ``priority``, ...; ``auto`` names no rate), Anthropic's ``usage.speed`` and ``usage.service_tier``
    (``batch``: the Message Batches rates). Empty for the standard rates."""
    context: list[tuple[str, str]] = []
    if isinstance(service_tier, str) and service_tier:
        if service_tier == "batch":
            context.append(("processing", "batch"))
        elif service_tier not in ("auto", "standard"):
            context.append(("service_tier", service_tier))
    if isinstance(speed, str) and speed and speed != "standard":
        context.append(("speed", speed))
    return tuple(context)


def cost(
    provider: str, model: str | None, usage: TokenUsage, context: PriceContext = (), now: float | None = None
) -> Cost | None:
    """What a call with ``usage`` cost, None when its model has no known price.

    Reads and writes are parts of the input (``usage.input_tokens`` counts them); 1-hour writes part of the
    writes; reasoning part of the output. A server-side compaction's passes (Anthropic ``usage.iterations``,
    not in the top-level figures) are billed too, as input and output.
    """
    found = rates(provider, model, context, now)
    if found is None:
        return None
    return cost_at(found, usage)


def cost_at(found: Rates, usage: TokenUsage) -> Cost:
    """:func:`cost` with the model's rates already found."""
    r = found.for_input(usage.input_tokens) if found.tiers else found
    read = usage.cache_read_tokens if r.cache_read is not None else 0
    write_1h = usage.cache_write_1h_tokens if r.cache_write_1h is not None else 0
    write = max(usage.cache_write_tokens - write_1h, 0) if r.cache_write is not None else 0
    uncached = max(usage.input_tokens - read - write - write_1h, 0) + usage.compaction_input_tokens
    reasoning_rate = r.reasoning if r.reasoning is not None else r.output
    reasoning_tokens = min(usage.reasoning_tokens, usage.output_tokens)
    input_cost = uncached * r.input
    read_cost = read * r.cache_read if r.cache_read is not None else 0.0
    write_1h_cost = write_1h * r.cache_write_1h if r.cache_write_1h is not None else 0.0
    write_cost = (write * r.cache_write if r.cache_write is not None else 0.0) + write_1h_cost
    output_cost = (usage.output_tokens - reasoning_tokens + usage.compaction_output_tokens) * r.output
    reasoning_cost = reasoning_tokens * reasoning_rate
    amount = input_cost + read_cost + write_cost + output_cost + reasoning_cost + r.request
    return Cost(amount, input_cost, read_cost, write_cost, write_1h_cost, output_cost, reasoning_cost, r.source)


#: A cache lifetime from which writes are billed at the 1-hour price.
_ONE_HOUR = 3600.0


def rewrite_cost(found: Rates, tokens: int, ttl_seconds: float = 300.0) -> float:
    """What writing ``tokens`` to the cache again costs more than reading them (a cache break): at the write
    price of the cache's lifetime (the 1-hour price from an hour on, where the model has one; the input price
    where writes have no price of their own, e.g. OpenAI's automatic caching), less the read price."""
    write = found.cache_write_1h if ttl_seconds >= _ONE_HOUR and found.cache_write_1h is not None else found.rewrite
    return max(tokens, 0) * max(write - found.read, 0.0)


def multipliers(provider: str, model: str | None) -> Multipliers | None:
    """``model``'s cache prices relative to its input price (standard rates, short context), None when its
    price is unknown or its input is free. For ``economics``' decisions: a warm cache's read against the
    rewrite a compaction or a clearing causes."""
    found = rates(provider, model)
    if found is None or found.input <= 0:
        return None
    write = found.rewrite / found.input
    write_1h = found.cache_write_1h / found.input if found.cache_write_1h is not None else write
    return Multipliers(write=write, write_1h=write_1h, read=found.read / found.input)
