"""The simulated provider's mutable state shared by the endpoint modules (windows, cache, stored responses)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .caching import PromptCache
from .errors import Flavor, SimError
from .models import DEFAULT_WINDOWS, lookup_window
from .scripted import FAITHFUL, SummarizerStyle

__all__ = ["DIAGNOSIS_ANSWERS", "SimState"]

#: How the simulated provider answers a request for a cache diagnosis (``SimulatedProvider.diagnoses``): the
#: answers of the real APIs, and the unusual ones an instrumentation must read as "no verdict".
DIAGNOSIS_ANSWERS: dict[str, str] = {
    "answered": "the diagnosis its cache model finds (the default)",
    "pending": (
        "every one still pending (Anthropic cache_miss_reason: null, OpenAI prompt_cache_diagnostics: null), as "
        "a response sent before the comparison finished is"
    ),
    "ignored": (
        "none: the request's field is ignored, as by an endpoint that does not diagnose (no diagnostics field; "
        "no prompt_cache_options echoed)"
    ),
    "unreadable": (
        "one of a shape no documentation gives (Anthropic cache_miss_reason a bare word, OpenAI an unknown type)"
    ),
    "bad_counts": "the diagnosis found, its token counts out of range (2**70, -5)",
    "retracted": "Anthropic streams: the diagnosis in message_start, then cache_miss_reason: null in message_delta",
}


@dataclass
class SimState:
    """Everything an endpoint needs besides the request itself."""

    clock: Callable[[], float]
    cache: PromptCache
    default_window: int = 200_000
    strict_models: bool = False
    overrides: dict[str, int] = field(default_factory=dict)
    responses: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    #: Stored conversations (``POST /v1/conversations``, then ``conversation`` on ``/v1/responses``): their items.
    conversations: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: How summary replies lose things (see :class:`SummarizerStyle`); by default the ``FACT:`` convention, no cap.
    summarizer: SummarizerStyle = FAITHFUL
    #: How a request for a cache diagnosis is answered: one of :data:`DIAGNOSIS_ANSWERS`.
    diagnoses: str = "answered"
    #: Server-side compaction (Responses ``context_management``) refused: True, the endpoint does not know the
    #: field (400 ``unknown_parameter``, every model); a set of model names (or prefixes), those models do not
    #: support it (400 ``unsupported_parameter``); False (the default), every model compacts.
    refuses_compaction: bool | frozenset[str] = False

    def window(self, model: str, flavor: Flavor) -> int:
        """The context window of ``model``; unknown models get the default, or a 404 when strict."""
        if model in self.overrides:
            return self.overrides[model]
        found = lookup_window(model, self.overrides) if self.overrides else None
        if found is None:
            found = lookup_window(model, DEFAULT_WINDOWS)
        if found is not None:
            return found
        if self.strict_models:
            if flavor == "anthropic":
                raise SimError(404, f"model: {model}", error_type="not_found_error")
            raise SimError(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        return self.default_window

    def store_response(self, response_id: str, items: list[Mapping[str, Any]]) -> None:
        """Remember a Responses conversation (input + output items) for ``previous_response_id``."""
        with self.lock:
            self.responses[response_id] = items

    def stored_items(self, response_id: str) -> list[Mapping[str, Any]] | None:
        with self.lock:
            return self.responses.get(response_id)

    def store_conversation(self, conversation_id: str, items: list[Mapping[str, Any]]) -> None:
        """Set what a stored Responses ``conversation`` holds (its items so far, a compaction's result included)."""
        with self.lock:
            self.conversations[conversation_id] = items

    def conversation_items(self, conversation_id: str) -> list[Mapping[str, Any]] | None:
        with self.lock:
            return self.conversations.get(conversation_id)
