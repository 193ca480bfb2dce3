"""Warnings in the app's log when compaction fails and when a conversation's circuit breaker opens or closes.

Why: a failed compaction changes nothing the app sees (the request goes out unchanged), so without a line in
the log a summarizer that fails every time (a misspelled ``OTEL_CONTEXT_SUMMARY_MODEL``, a quota, an
unreachable gateway) is heard of only by whoever watches the metrics, or when the conversation finally
outgrows the window. So each failure cause is logged, once per conversation family and cause and then at
most every :data:`REPEAT_SECONDS` (with the count of those not logged), and so is a breaker opening and
closing. A warning names the conversation, the summary model, the trigger, and the provider's status, error
type and message: never content (the provider's message is cut at :data:`MAX_MESSAGE_CHARS`).

One home for all of it: the cascade calls :func:`compaction_failed`, :func:`breaker_opened` and
:func:`breaker_closed`, one line at each place.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping
from typing import Any

from otel_context import process_state, semconv
from otel_context.compaction.job import CompactionJob
from otel_context.fork_safe import new_lock
from otel_context.settings import summary_model_for

log = logging.getLogger("otel_context")

#: The same warning (conversation family and cause) again after this long at the earliest.
REPEAT_SECONDS = 600.0
#: At most this many warnings a minute in all (a fleet of failing conversations must not flood the log).
MAX_PER_MINUTE = 20
#: Warning keys remembered (least recently used first out).
MAX_KEYS = 1_024
#: The provider's error message is cut here.
MAX_MESSAGE_CHARS = 300


class _Limiter:
    """Once per key and then at most every ``REPEAT_SECONDS``, under an overall cap per minute."""

    def __init__(self) -> None:
        self._lock = new_lock(self, "_lock")  # a fork's child gets a free one
        #: key -> [time last logged, occurrences not logged since]
        self._keys: collections.OrderedDict[tuple[str, ...], list[float]] = collections.OrderedDict()
        self._minute = 0.0
        self._in_minute = 0

    def admit(self, key: tuple[str, ...]) -> int | None:
        """None: do not log now; else the number of occurrences not logged since the last warning."""
        now = time.monotonic()
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None:
                self._keys.move_to_end(key)
                if now - entry[0] < REPEAT_SECONDS:
                    entry[1] += 1
                    return None
            if now - self._minute >= 60.0:
                self._minute, self._in_minute = now, 0
            if self._in_minute >= MAX_PER_MINUTE:
                if entry is not None:
                    entry[1] += 1
                return None
            self._in_minute += 1
            skipped = int(entry[1]) if entry is not None else 0
            self._keys[key] = [now, 0]
            while len(self._keys) > MAX_KEYS:
                self._keys.popitem(last=False)
            return skipped

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()
            self._in_minute = 0


_limiter = _Limiter()
# engine.reset(): kept (alerts.reset() forgets it, for tests). A fork's child: inherited (its lock renewed by
# fork_safe).
process_state.register(__name__, ("_limiter",), on_reset=None, in_forked_child=None)


def reset() -> None:
    """Forget what was logged (tests; an app that wants every warning again)."""
    _limiter.clear()


def compaction_failed(job: CompactionJob, error: BaseException) -> None:
    """A compaction attempt failed: one warning per conversation family and cause (rate-limited)."""
    try:
        cause, unknown_model = _cause(error)
        model = _summary_model(job)
        family = job.conversation_id or "(no conversation id)"
        skipped = _limiter.admit(("failed", family, _cause_key(error)))
        if skipped is None:
            return
        if unknown_model:
            cause = (
                f"the provider does not know the summary model {model!r} ({cause}); set OTEL_CONTEXT_SUMMARY_MODEL "
                "to a model it serves, per provider if need be (anthropic:claude-haiku-4-5,openai:gpt-5-mini)"
            )
        log.warning(
            "otel_context: a compaction failed (conversation %s, trigger %s, summary model %s): %s. %s%s",
            family,
            job.trigger,
            model,
            cause,
            _AFTERMATH.get(job.trigger, _AFTERMATH[semconv.TRIGGER_AUTO]),
            _repeat_note(skipped),
        )
    except Exception:  # a warning must never fail a compaction's bookkeeping
        log.debug("otel_context: could not log a compaction failure", exc_info=True)


def summary_model_rejected(provider: str, model: str, error: BaseException) -> None:
    """The provider does not know the configured summary model: said once, as the conversations of that
    provider now summarize with their own model."""
    try:
        cause, _ = _cause(error)
        log.warning(
            "otel_context: the provider does not know the summary model %r (%s), so %s conversations summarize "
            "with their own model instead; set OTEL_CONTEXT_SUMMARY_MODEL to a model it serves, per provider if "
            "need be (anthropic:claude-haiku-4-5,openai:gpt-5-mini)",
            model,
            cause,
            provider,
        )
    except Exception:  # a warning must never fail a compaction
        log.debug("otel_context: could not log a rejected summary model", exc_info=True)


def unknown_model(error: BaseException) -> bool:
    """Whether ``error`` (a failed compaction, its cause the summarizer's error) is the provider saying it does
    not know the model (Anthropic ``404 not_found_error`` "model: NAME", OpenAI ``model_not_found``)."""
    return _cause(error)[1]


def provider_compaction_refused(server: str, model: str, status: int | None, message: str) -> None:
    """A model or endpoint refused the server-side compaction the library asked for a history the provider holds:
    said once (the refusal is remembered and the field never sent there again)."""
    skipped = _limiter.admit(("refused", server, model))
    if skipped is None:
        return
    log.warning(
        "otel_context: %s refused server-side compaction for model %r (%s: %s). The field is not sent to it again "
        "in this process, so the conversations it stores for this model (previous_response_id, conversation) are "
        "not compacted and fail at the context window; chain them with a model that compacts, or send the history "
        "in each request, which otel-context compacts itself%s",
        server or "the provider",
        model,
        f"HTTP {status}" if status is not None else "no HTTP status",
        _cut(message),
        _repeat_note(skipped),
    )


def breaker_opened(conversation_id: str | None, model: str, consecutive_failures: int, threshold: int) -> None:
    """A conversation's circuit breaker opened: automatic compaction stops for it."""
    family = conversation_id or "(no conversation id)"
    skipped = _limiter.admit(("opened", family))
    if skipped is None:
        return
    why = (
        f"{consecutive_failures} compactions in a row failed"
        if consecutive_failures >= threshold
        else f"{threshold} compactions in a row left the context above the threshold"
    )
    # Only automatic compactions count on the breaker (a manual one that fails is the app's to read), so the
    # way out is a manual summary of this very conversation, named as the app can pass it.
    cure = (
        f"otel_context.Compactor(client).compact(messages, model=..., conversation={conversation_id!r})"
        if conversation_id
        else "otel_context.Compactor(client).compact(messages, model=..., conversation=...)"
    )
    log.warning(
        "otel_context: the compaction circuit breaker opened for conversation %s (model %s): %s. It is no longer "
        "compacted automatically (nor when the provider says it is too long) until a manual compaction of it "
        "succeeds, %s, or the conversation is forgotten%s",
        family,
        model,
        why,
        cure,
        _repeat_note(skipped),
    )


def breaker_closed(conversation_id: str | None, model: str | None) -> None:
    """A conversation's circuit breaker closed again (a compaction succeeded: one by hand, or a summary)."""
    family = conversation_id or "(no conversation id)"
    skipped = _limiter.admit(("closed", family))
    if skipped is None:
        return
    log.warning(
        "otel_context: the compaction circuit breaker closed for conversation %s (model %s): a compaction "
        "succeeded, automatic compaction resumes%s",
        family,
        model or "unknown",
        _repeat_note(skipped),
    )


def compaction_loop(conversation_id: str | None, model: str, compactions: int, calls: int, window: int | None) -> None:
    """A conversation compacts on most of its calls: each compaction leaves too little room for the next
    calls, and each costs a cache rewrite (and a summary, the summarizer's call). Said once per conversation
    (then at most every :data:`REPEAT_SECONDS`)."""
    family = conversation_id or "(no conversation id)"
    skipped = _limiter.admit(("loop", family))
    if skipped is None:
        return
    log.warning(
        "otel_context: conversation %s (model %s) compacts on most of its calls (%d compactions in %d calls): "
        "each leaves too little room below the threshold%s for the calls after it, and each rewrites the "
        "prompt cache. A larger window (OTEL_CONTEXT_AUTO_COMPACT_WINDOW / model_windows), smaller tool results "
        "or fewer messages kept (OTEL_CONTEXT_KEEP_RECENT_MESSAGES) would let it compact less often%s",
        family,
        model,
        compactions,
        calls,
        f" of its {window:,}-token window" if window else "",
        _repeat_note(skipped),
    )


#: What became of the app's call, by trigger (nothing is lost in any case).
_AFTERMATH = {
    semconv.TRIGGER_AUTO: "Nothing was lost: the request went out unchanged",
    semconv.TRIGGER_REACTIVE: "The provider's 'too long' error reached the app, as it would without otel-context",
    semconv.TRIGGER_MANUAL: (
        "The history was returned unchanged (CompactionResult.error); a failed manual compaction does not count "
        "on the conversation's circuit breaker"
    ),
}


def _repeat_note(skipped: int) -> str:
    return f" ({skipped} more like it since the last warning)" if skipped else ""


def _summary_model(job: CompactionJob) -> str:
    if job.settings.summarizer is not None:
        return "the app's summarizer (Settings.summarizer)"
    # No model at all: an explicit Compactor with a summarize function and no model= (it needs none).
    return summary_model_for(job.settings, job.adapter.provider, job.model) or "the app's summarizer"


def _root(error: BaseException) -> tuple[BaseException, bool]:
    """The error behind a failed compaction (the cascade's error names the summarizer's as its cause), and
    whether it is a provider's answer (an SDK error with an HTTP status)."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 5:
        chain.append(chain[-1].__cause__)
    for candidate in chain:
        if isinstance(getattr(candidate, "status_code", None), int):
            return candidate, True
    return chain[-1], False


def _details(error: BaseException) -> tuple[int | None, str | None, str]:
    """(HTTP status, the provider's error type or code, the provider's message) of an SDK error."""
    status = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    inner: Mapping[str, Any] = {}
    if isinstance(body, Mapping):
        nested = body.get("error")
        inner = nested if isinstance(nested, Mapping) else body
    kind = inner.get("code") or inner.get("type")
    message = inner.get("message") or getattr(error, "message", None) or str(error)
    return (status if isinstance(status, int) else None), (str(kind) if kind else None), str(message)


def _cause(error: BaseException) -> tuple[str, bool]:
    """The cause in words, and whether the provider said it does not know the model."""
    root, from_provider = _root(error)
    if not from_provider:
        label = getattr(root, "kind", None) or type(root).__name__
        return f"{label}: {_cut(str(root) or type(root).__name__)}", False
    status, kind, message = _details(root)
    parts = [type(root).__name__] + ([f"HTTP {status}"] if status is not None else []) + ([kind] if kind else [])
    lowered = message.lower()
    # Anthropic: 404 not_found_error "model: NAME"; OpenAI: 404 model_not_found "The model `NAME` does not exist".
    unknown = kind == "model_not_found" or (status == 404 and "model" in lowered)
    return f"{', '.join(parts)}: {_cut(message)}", unknown


def _cause_key(error: BaseException) -> str:
    """What makes two failures the same cause: the error's class, status and code (not the message, which
    carries figures such as token counts)."""
    root, from_provider = _root(error)
    if not from_provider:
        return f"{type(root).__module__}.{type(root).__qualname__}:{getattr(root, 'kind', '')}"
    status, kind, _ = _details(root)
    return f"{type(root).__qualname__}:{status}:{kind}"


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"
