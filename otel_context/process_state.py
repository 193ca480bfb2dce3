"""One registry of this process's module-level tables: what ``engine.reset()`` and a fork's child do with each.

Why: a table kept at module level (the conversations, the windows providers told us, the warnings already
logged, the locks...) outlives every call, and two events must each know all of them: ``engine.reset()``
(tests, and apps that want a clean slate) and ``os.fork`` (a pre-forking server's child, ``multiprocessing``
with the fork start method). When each event kept its own list, a new table could be forgotten by one of
them. Here every table registers once, next to its definition, with both answers, and the reason when it is
kept: the two events walk this one registry. ``tests/test_process_state.py`` fails for a module-level table
that did not register.

Order: a fork's child runs the registered actions in registration order, which is import order, so the
lowest layers first (:mod:`otel_context.fork_safe` gives back the locks before anything else of the child
runs). A reset runs them in the opposite order, the highest layers first: a reset may read the tables of the
modules below it, and must act before a lower layer's reset tells it what that one forgets (the background
summaries are dropped and their fleet leases given back before the store forgets their conversations).

A leaf: it imports nothing of the project, so that every module can register.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Registration", "register", "registered", "reset"]


class Registration(NamedTuple):
    """The tables of one module and what happens to them (None: kept as they are, for the reason given at
    the registration)."""

    module: str
    #: The module-level names of the tables (what the registry test checks every table against).
    names: tuple[str, ...]
    on_reset: Callable[[], object] | None
    in_forked_child: Callable[[], object] | None


_registry: list[Registration] = []


def register(
    module: str,
    names: tuple[str, ...],
    *,
    on_reset: Callable[[], object] | None,
    in_forked_child: Callable[[], object] | None,
) -> None:
    """Register the tables ``names`` of ``module`` (its ``__name__``), once, at its import: what
    :func:`reset` does with them, and what a fork's child does before any of its own code runs."""
    _registry.append(Registration(module, names, on_reset, in_forked_child))


def registered() -> tuple[Registration, ...]:
    """Every registration, in registration order."""
    return tuple(_registry)


def reset() -> None:
    """Clear every table that a reset clears (``engine.reset()``), the highest layers first."""
    for registration in reversed(_registry):
        if registration.on_reset is not None:
            registration.on_reset()


def _after_fork_in_child() -> None:
    """A fork's child: every table's action, the lowest layers first. One that fails does not stop the others
    (as separate fork hooks would not), and is logged."""
    for registration in list(_registry):
        if registration.in_forked_child is not None:
            try:
                registration.in_forked_child()
            except Exception:
                logging.getLogger("otel_context").warning(
                    "otel_context: a forked child could not renew %s", registration.module, exc_info=True
                )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
