"""The window of a call's model (capped by what a provider told us), and the budget worked out from it.

A window belongs to the model, not to a conversation: when a provider's "too long" error states a smaller
window than the one we assumed, every conversation of that model uses it from then on.
"""

from __future__ import annotations

from typing import Any

from otel_context import process_state
from otel_context.compaction.budget import Budget, budget_for
from otel_context.contract import CallRequest
from otel_context.formats.base import WireFormatAdapter
from otel_context.providers import BETA_HEADER
from otel_context.settings import Settings

#: Windows the providers stated in too-long errors, by (provider, model), when smaller than the ones we
#: assumed. Bounded by the number of models an app calls.
_learned_windows: dict[tuple[str, str], int] = {}
_LEARNED_WINDOWS_MAX = 256

#: Budgets already worked out: a budget depends only on its key and the (frozen) settings it was made with.
_budgets: dict[tuple[Any, ...], tuple[Settings, Budget | None]] = {}
_BUDGETS_MAX = 256

# Reset: the learned windows are forgotten (a clean slate assumes the model tables again); the budgets are
# kept (a pure function of their key and settings). A fork's child: both inherited (the same models).
process_state.register(__name__, ("_learned_windows",), on_reset=_learned_windows.clear, in_forked_child=None)
process_state.register(__name__, ("_budgets",), on_reset=None, in_forked_child=None)


def learn_window(provider: str, model: str, window: int) -> None:
    """Remember the window a provider stated for ``model`` (smaller than the one assumed)."""
    if len(_learned_windows) >= _LEARNED_WINDOWS_MAX and (provider, model) not in _learned_windows:
        _learned_windows.clear()
    _learned_windows[provider, model] = window


def learned_window(provider: str, model: str) -> int | None:
    """The window a provider stated for ``model``, if it told us one."""
    return _learned_windows.get((provider, model))


def budget_of(request: CallRequest, adapter: WireFormatAdapter, model: str) -> Budget | None:
    """The call's budget, with the window capped by what the provider told about this model (memoized)."""
    max_output = adapter.max_output_tokens(request.body)
    settings = request.settings
    window_cap = _learned_windows.get((request.provider, model))
    key = (model, id(settings), max_output, request.headers.get(BETA_HEADER), window_cap)  # the 1M beta is read there
    known = _budgets.get(key)
    if known is not None and known[0] is settings:
        return known[1]
    budget = budget_for(model, settings, max_output_tokens=max_output, headers=request.headers)
    if budget is not None and window_cap is not None and window_cap < budget.window:
        budget = budget_for(model, settings, max_output_tokens=max_output, headers=request.headers, window=window_cap)
    if len(_budgets) >= _BUDGETS_MAX:  # bounded whatever the models and settings: start afresh
        _budgets.clear()
    _budgets[key] = (settings, budget)
    return budget
