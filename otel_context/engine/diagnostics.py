"""The providers' own cache diagnostics: asked for (``cache_diagnostics`` on), read, and set against the detector.

Anthropic compares a request with the one named by ``diagnostics.previous_message_id``, OpenAI Responses with
``prompt_cache_options.comparison_response_id``, and each says in the response why the prompt's cache was
missed (docs/telemetry.md, "The provider's cache diagnosis"). This module asks with the previous response of
the call's own conversation, and records the answer beside the detector's (:mod:`otel_context.cache`).

Which response is "the previous one" is decided by content, as everything a conversation's state gives a
call (docs/conversations.md): a response id of one conversation in another's request would be a leak, and
with derived keys two conversations that open alike share a state until their histories part. So a call
names a response only when it sends that response's reply back (its text and tool-call ids,
:meth:`~otel_context.formats.base.ChatFormat.reply_signature`) right after the very items that response
answered; a reply two responses of those items shared proves nothing and names none. A Responses call that
continues a stored response (``previous_response_id``) names that one: the app chained it itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_context import cache, semconv
from otel_context.conversation import Resolution, Snapshot
from otel_context.conversation.state import merge_replies, same_items
from otel_context.formats.base import ChatFormat, Item


def previous_response(
    adapter: ChatFormat, body: Mapping[str, Any], items: Sequence[Item], resolution: Resolution
) -> str | None:
    """The id of the response this call continues, when its content proves it (see the module doc)."""
    continued = adapter.continued_response(body)
    if continued is not None:
        return continued
    snapshot = resolution.snapshot
    if snapshot is None or not snapshot.replies:
        return None
    n = len(snapshot.items)
    if n == 0 or len(items) <= n:
        return None
    # The history this response answered, unchanged (its last item may come back with a moved cache marker);
    # an explicit conversation is one by the app's word, edits included (a derived one branches at an edit).
    if not resolution.state.explicit and resolution.unchanged < n - 1:
        return None
    end = n
    while end < len(items) and adapter.is_model_output(items[end]):
        end += 1
    if end == n:
        return None
    signature = adapter.items_reply_signature(items[n:end])
    if not signature:
        return None
    for digest, response_id in snapshot.replies:
        if digest == signature:
            return response_id or None
    return None


def ask(adapter: ChatFormat, body: Mapping[str, Any], previous: str | None) -> Mapping[str, Any]:
    """``body`` asking for the provider's diagnosis against ``previous`` (a copy), or ``body`` itself when the
    format has no such field or the app set it."""
    asked = adapter.with_cache_comparison(body, previous)
    return body if asked is None else asked


def replies_of(
    adapter: ChatFormat,
    read: Snapshot | None,
    items: Sequence[Item],
    response: Mapping[str, Any] | None,
    response_id: str | None,
) -> tuple[tuple[str, str], ...]:
    """The replies a call's snapshot keeps (:attr:`Snapshot.replies`): this response's, beside those of the
    snapshot the call read when that one answered the very same items (a retry, or another history that opened
    alike); a digest two responses share is kept with no id."""
    if not response_id:
        return ()
    digest = adapter.reply_signature(response)
    if not digest:
        return ()
    known = read.replies if read is not None and read.replies and same_items(read.items, items) else ()
    return merge_replies(known, ((digest, response_id),))


def detector_reason(brk: cache.CacheBreak | None, compacted: bool) -> str:
    """The detector's word on a call: its break's reason, ``compaction`` when a compaction changed the prefix on
    purpose (the intentional break), else ``none``."""
    if brk is not None:
        return brk.reason
    return semconv.REASON_COMPACTION if compacted else semconv.DETECTOR_NONE
