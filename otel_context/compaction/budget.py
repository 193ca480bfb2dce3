"""The context budget of one call: which window applies, how much of it is usable, and the thresholds.

Numbers (docs/compaction.md; Claude Code's production constants):
``effective = window - min(max_output_tokens, 20_000)`` (20K: the summary reserve, p99.99 of summaries is
17,387 tokens); ``auto = effective - 13_000``; ``warning = error = effective - 20_000``;
``blocking = effective - 3_000``. Below a 200K window the three buffers shrink in proportion, so a 30K
test window or a cheap 16K model still gets positive, ordered thresholds.

Which window: a per-call-site override, then the app's per-model windows (``model_windows`` /
``OTEL_CONTEXT_MODEL_WINDOWS``), then its one window for every model (``auto_compact_window``), then the
built-in table (:data:`MODEL_TABLE`, every provider's rows from ``otel_context/providers.py``). A model we
do not know, with no window declared, has no budget: the engine then observes only and never rewrites
(guessing a window could compact a conversation that was nowhere near its real limit), and the log says once
how to declare its window.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from otel_context import semconv, telemetry, tokens
from otel_context.formats.base import WireFormatAdapter
from otel_context.providers import CONTEXT_1M_BETA as CONTEXT_1M_BETA  # importable from here, as before
from otel_context.providers import PROVIDERS, has_1m_beta
from otel_context.providers import ModelSpec as ModelSpec  # the window table's row, importable from here
from otel_context.settings import Settings

#: Output reserve for the summary (p99.99 of production summaries is 17,387 tokens).
SUMMARY_RESERVE_TOKENS = 20_000
AUTOCOMPACT_BUFFER_TOKENS = 13_000
WARNING_BUFFER_TOKENS = 20_000
BLOCKING_BUFFER_TOKENS = 3_000
#: Window at and above which the buffers apply unscaled.
REFERENCE_WINDOW = 200_000
#: The built-in window table: every provider's rows (``otel_context/providers.py``, one description per
#: provider), in the providers' order. Longest prefix wins (:func:`lookup_model`).
MODEL_TABLE: dict[str, ModelSpec] = {name: spec for provider in PROVIDERS for name, spec in provider.models.items()}


def _longest_prefix(model: str, prefixes: Sequence[str]) -> str | None:
    """The longest of ``prefixes`` that names ``model``'s family (case-insensitive), or None."""
    name = model.lower().strip()
    best: str | None = None
    for candidate in (name, name.rsplit("/", 1)[1]) if "/" in name else (name,):  # "openai/gpt-4o" (gateway)
        for prefix in prefixes:
            if candidate.startswith(prefix) and (best is None or len(prefix) > len(best)):
                # "gpt-4" must not swallow "gpt-4o..." (handled by longest prefix) nor "gpt-4.1" (idem);
                # a bare family prefix must end at a separator unless it is the full name.
                rest = candidate[len(prefix) :]
                if rest and prefix[-1] not in "-." and rest[0] not in "-.:@":
                    continue
                best = prefix
    return best


@functools.lru_cache(maxsize=256)
def lookup_model(model: str | None) -> ModelSpec | None:
    """The table entry for ``model`` (longest matching prefix, case-insensitive), or None if unknown."""
    if not model:
        return None
    best = _longest_prefix(model, tuple(MODEL_TABLE))
    return MODEL_TABLE[best] if best is not None else None


def declared_window(model: str | None, settings: Settings) -> int | None:
    """The window the app declared for ``model`` in ``settings.model_windows`` (longest prefix), or None."""
    if not model or not settings.model_windows:
        return None
    windows = dict(settings.model_windows)
    best = _longest_prefix(model, tuple(windows))
    return windows[best] if best is not None else None


@dataclass(frozen=True)
class Budget:
    """Window and thresholds of one call, all in tokens."""

    window: int
    effective: int
    auto_threshold: int
    warning_threshold: int
    error_threshold: int
    blocking_limit: int
    #: True when the window came from an override rather than the model table.
    overridden: bool = False

    def state(self, tokens: int, *, compaction_available: bool) -> str:
        """``ok`` | ``warning`` | ``error`` | ``blocking`` for an estimate.

        ``warning`` and ``error`` share one line (effective - 20K, as in Claude Code); the state is
        ``error`` rather than ``warning`` when nothing will compact automatically (compaction off or
        observe-only, kill switch, open breaker, a history the provider holds): above that line with no
        safety net is an error.
        """
        if tokens >= self.blocking_limit:
            return semconv.CONTEXT_STATE_BLOCKING
        if tokens >= self.error_threshold and not compaction_available:
            return semconv.CONTEXT_STATE_ERROR
        if tokens >= self.warning_threshold:
            return semconv.CONTEXT_STATE_WARNING
        return semconv.CONTEXT_STATE_OK


def _scaled(buffer: int, window: int) -> int:
    """A buffer shrunk in proportion for windows under the 200K reference."""
    if window >= REFERENCE_WINDOW:
        return buffer
    return max(1, buffer * window // REFERENCE_WINDOW)


def block_budget(tokens: int, floor: int, window: int | None, effective: int | None) -> int:
    """The tokens a block the compactor adds to a summary message may take (the repair's, the work trail's):
    ``tokens`` at the 200K reference window, scaled below it like the buffers but not below ``floor`` (nor above
    ``tokens``: 0 turns the block off), and at most an eighth of the effective window (the summary, the user's
    verbatim messages and the kept turns need the rest)."""
    scale = 1.0 if window is None or window >= REFERENCE_WINDOW else window / REFERENCE_WINDOW
    budget = max(int(tokens * scale), min(floor, tokens))
    if effective is not None:
        budget = min(budget, effective // 8)
    return max(0, budget)


def budget_for(
    model: str | None,
    settings: Settings,
    *,
    max_output_tokens: int | None = None,
    headers: Mapping[str, str] | None = None,
    window: int | None = None,
) -> Budget | None:
    """The budget for a call, or None when the window is unknown (observe only).

    ``window`` (a per-call-site override) wins over the window declared for this model
    (``settings.model_windows``), which wins over ``settings.auto_compact_window`` (code or
    ``OTEL_CONTEXT_AUTO_COMPACT_WINDOW``), which wins over the model table.
    """
    spec = lookup_model(model)
    if window is None:
        window = declared_window(model, settings)
    if window is None:
        window = settings.auto_compact_window
    overridden = window is not None
    if window is None:
        if spec is None:
            telemetry.log_once(
                "budget.unknown_model:" + (model or "")[:100],
                "otel_context: the context window of model %r is unknown, so its conversations are observed, "
                'never compacted; declare it with OTEL_CONTEXT_MODEL_WINDOWS="%s=<tokens>" '
                "(or instrument(model_windows={%r: <tokens>}))",
                model,
                model,
                model,
            )
            return None
        window = spec.window_1m if spec.window_1m is not None and has_1m_beta(headers) else spec.window
    if max_output_tokens is None or max_output_tokens <= 0:
        max_output_tokens = spec.max_output if spec is not None else SUMMARY_RESERVE_TOKENS
    reserve = min(max_output_tokens, SUMMARY_RESERVE_TOKENS)
    # Never let the reserve eat more than half of a tiny window: the thresholds must stay positive.
    reserve = min(reserve, window // 2)
    effective = window - reserve
    auto = effective - _scaled(AUTOCOMPACT_BUFFER_TOKENS, window)
    warning = effective - _scaled(WARNING_BUFFER_TOKENS, window)
    blocking = effective - _scaled(BLOCKING_BUFFER_TOKENS, window)
    if settings.autocompact_pct_override is not None:
        # May only lower the threshold (a percentage of the effective window).
        auto = min(auto, int(effective * settings.autocompact_pct_override / 100))
    if settings.blocking_limit_override is not None:
        blocking = settings.blocking_limit_override
    auto = max(1, auto)
    warning = max(1, min(warning, auto))
    return Budget(
        window=window,
        effective=effective,
        auto_threshold=auto,
        warning_threshold=warning,
        error_threshold=warning,
        blocking_limit=max(1, blocking),
        overridden=overridden,
    )


# --- estimates (otel_context.tokens is the one estimator) -----------------------------------------------


def calibration(adapter: WireFormatAdapter, body: Mapping[str, Any], reported_input_tokens: int) -> float | None:
    """Provider tokens per estimated token, from the provider's count of a request we also estimate.

    Our estimate pads chars/4 by 4/3 on purpose (it gates compaction, where undercounting is the costly
    error), so it is off by a factor that depends on the text and on the provider's tokenizer. A request
    the provider has just counted (``usage.input_tokens``) measures that factor for this very content.
    None when the count cannot describe this request: nothing reported, or under
    :data:`MIN_CALIBRATION` of our estimate (no tokenizer packs that many characters per token; such a
    figure comes from a stub or a proxy, not from counting this request).
    """
    if reported_input_tokens <= 0:
        return None
    ours = tokens.estimate_fixed(adapter, body) + tokens.estimate_items(adapter, adapter.items(body))
    if ours <= 0:
        return None
    ratio = reported_input_tokens / ours
    return ratio if ratio >= MIN_CALIBRATION else None


#: Lowest plausible ratio of a provider's count to our padded estimate (see :func:`calibration`).
MIN_CALIBRATION = 0.5
