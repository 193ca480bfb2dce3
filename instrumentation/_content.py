"""Content capture (prompts, completions) in the GenAI semconv message-parts format, size-capped.

Off by default (``NO_CONTENT``). Each wire format turns its bodies into message parts
(``capture_input`` / ``capture_output`` of its module in ``otel_context.formats``); this module caps them and
writes them on the span. Only request and response BODIES are read: headers, and so API keys
and auth tokens, never reach this module. Each captured attribute is a JSON string of at most
``capture_max_chars`` UTF-8 bytes (CJK text takes 3 bytes a character): the newest messages are kept whole,
older ones have their texts cut, the oldest are left out, and the span says how many (see :func:`fit_json`).
Only content is ever cut, never a field that gives a message or part its meaning (role, part type, ids, tool
names), which viewers need to show the part at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from opentelemetry.trace import Span

from otel_context import formats, semconv, telemetry
from otel_context.formats.base import EndpointFormat

__all__ = ["Capture", "fit_json"]

# --- size cap ---------------------------------------------------------------------------------------------


#: Nesting kept in captured values (tool arguments); deeper parts become the truncation marker, so neither
#: our walk nor ``json.dumps`` can hit the interpreter's recursion limit on an app's deeply nested JSON.
MAX_DEPTH = 32

#: The keys of a message part that hold content (a text, a reasoning, a compaction's summary, a tool call's
#: arguments, a tool's response): the only values the cap cuts. Every other field (the part's ``type``, the
#: call ``id``, the tool ``name``, a message's ``role`` and ``finish_reason``) gives the part or message its
#: meaning, and a viewer that reads the message-part schema drops a part whose ``type`` it does not know.
CONTENT_KEYS = frozenset({"content", "response", "arguments", "result"})

#: Share of the cap the newest messages may fill whole before older ones are cut: room is left for the turns
#: that led to them. The newest message alone may fill the whole cap when it fits there.
_WHOLE_SHARE = 3 / 4
#: Smallest length (UTF-8 bytes) a cut text keeps: the start of a message still says what it was about.
MIN_TEXT_BYTES = 64


class Fitted(NamedTuple):
    """A captured list as a JSON string within its cap, and what the cap took out of it."""

    text: str
    #: The oldest items left out (the list kept is the newest ones, in order).
    omitted: int = 0
    #: Texts cut (each ends with a marker saying how many characters were cut).
    cut: int = 0


def _cut_value(value: Any, max_bytes: int | None, cuts: list[int], depth: int) -> Any:
    """``value`` with every string cut to ``max_bytes`` (None: uncut; ``cuts[0]`` counts the cuts) and nesting
    cut at :data:`MAX_DEPTH`."""
    if isinstance(value, str):
        if max_bytes is None:
            return value
        text, cut = telemetry.cut_text(value, max_bytes)
        cuts[0] += cut
        return text
    if depth >= MAX_DEPTH and isinstance(value, (list, dict)):
        return telemetry.TRUNCATED + "]"
    if isinstance(value, list):
        return [_cut_value(v, max_bytes, cuts, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _cut_value(v, max_bytes, cuts, depth + 1) for k, v in value.items()}
    return value


def _cut_item(item: Any, max_bytes: int | None, cuts: list[int]) -> Any:
    """A message (``role``, ``parts``) or a part (system instructions are parts) with its content cut to
    ``max_bytes``; the fields that give it its meaning are kept whole."""
    if not isinstance(item, dict):
        return _cut_value(item, max_bytes, cuts, 1)
    parts = item.get("parts")
    if isinstance(parts, list):
        return {k: [_cut_item(p, max_bytes, cuts) for p in parts] if k == "parts" else v for k, v in item.items()}
    return {k: _cut_value(v, max_bytes if k in CONTENT_KEYS else None, cuts, 2) for k, v in item.items()}


def _dumps(item: Any) -> tuple[str, int]:
    text = json.dumps(item, ensure_ascii=False, default=str)
    return text, len(text.encode("utf-8", "surrogatepass"))


def _cut_to_fit(item: Any, room: int) -> tuple[str, int, int, int] | None:
    """``item`` with its texts cut to the longest length that fits ``room`` bytes: its JSON, size, cuts and
    that length; None when it does not fit even with every text at :data:`MIN_TEXT_BYTES`."""
    best: tuple[str, int, int, int] | None = None
    low, high = MIN_TEXT_BYTES, max(MIN_TEXT_BYTES, room)
    while low <= high:  # the size grows with the length kept: the longest that fits, in log(room) steps
        length = (low + high) // 2
        cuts = [0]
        text, size = _dumps(_cut_item(item, length, cuts))
        if size <= room:
            best, low = (text, size, cuts[0], length), length + 1
        else:
            high = length - 1
    return best


def fit_json(value: list[Any], max_bytes: int) -> Fitted:
    """``value`` (messages, or the parts of system instructions) as a JSON list of at most ``max_bytes``
    UTF-8 bytes (and so as many characters), and what was cut to make it fit.

    Everything when it fits. Else, from the newest: items are kept whole while they fill at most three
    quarters of the cap (the newest alone may fill all of it; when even that is too small, its texts are cut
    to what fits in three quarters), then older ones with their texts cut shorter and shorter (to a quarter
    of the room then left, a sixteenth, :data:`MIN_TEXT_BYTES`: the older, the shorter), and the oldest that
    do not fit even so are left out. Only content is cut (:data:`CONTENT_KEYS`); a part's ``type``, its ids,
    a tool's name, a message's role are never cut. Bounded by the cap, not by the history: each walk stops at
    the first item that no longer fits, and an item is encoded once per length tried.
    """
    whole: list[tuple[str, int]] = []  # the newest items' JSON, as far as the first walk went
    used = 2  # "[]"
    for item in reversed(value):
        text, size = _dumps(item)
        whole.append((text, size))
        used += size + (2 if len(whole) > 1 else 0)  # ", " between items
        if used > max_bytes:
            break
    else:
        return Fitted("[" + ", ".join(text for text, _ in reversed(whole)) + "]")
    whole_room = int(max_bytes * _WHOLE_SHARE)
    tiers: list[int] = []  # the lengths older items' texts are cut to, set when the first one is cut
    kept: list[str] = []
    used, cuts = 2, 0
    limit: int | None = None  # the longest text the next (older) item may keep; None: whole
    for index, item in enumerate(reversed(value)):
        room = max_bytes - used - (2 if kept else 0)
        fitted: tuple[str, int, int] | None = None
        if limit is None:
            text, size = whole[index] if index < len(whole) else _dumps(item)
            if size <= (room if index == 0 else room - (max_bytes - whole_room)):
                fitted = (text, size, 0)
            elif index == 0 and (cut := _cut_to_fit(item, whole_room - used)) is not None:
                fitted, limit = cut[:3], cut[3]
        if fitted is None and not tiers:
            # A quarter, then a sixteenth of the room left, then the minimum: the older, the shorter.
            tiers = sorted({max(MIN_TEXT_BYTES, room // 4), max(MIN_TEXT_BYTES, room // 16), MIN_TEXT_BYTES})[::-1]
        for tier in tiers if fitted is None else ():
            if limit is not None and tier > limit:
                continue
            item_cuts = [0]
            text, size = _dumps(_cut_item(item, tier, item_cuts))
            if size <= room:
                fitted, limit = (text, size, item_cuts[0]), tier
                break
        if fitted is None:
            kept.reverse()
            return Fitted("[" + ", ".join(kept) + "]", len(value) - index, cuts)
        kept.append(fitted[0])
        used += fitted[1] + (2 if len(kept) > 1 else 0)
        cuts += fitted[2]
    kept.reverse()
    return Fitted("[" + ", ".join(kept) + "]", 0, cuts)


class Capture:
    """The captured content of one call; attributes and/or the details event are written when it ends."""

    __slots__ = ("format", "input", "instructions", "max_chars", "mode", "output", "wire_format")

    def __init__(self, mode: str, max_chars: int, wire_format: str | None, body: Any) -> None:
        self.mode = mode
        self.max_chars = max_chars
        self.wire_format = wire_format
        #: The chat format whose parts are captured (None: an endpoint whose content is not captured).
        self.format: EndpointFormat | None = formats.for_format(wire_format) if wire_format is not None else None
        self.output: list[Any] | None = None
        captured = self.format.capture_input(body) if self.format is not None and isinstance(body, Mapping) else None
        self.input, self.instructions = captured if captured is not None else ([], [])

    def set_response(self, response: Any) -> None:
        if self.format is not None:
            try:
                self.output = self.format.capture_output(response)
            except Exception:
                telemetry.log_once("capture_output", "otel_context: could not capture a response", exc_info=True)

    def set_stream(self, acc: Any, final: Any) -> None:
        if final is not None:
            self.set_response(final)
            return
        texts = getattr(acc, "texts", None)
        if texts is not None:
            message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": "".join(texts)}]}
            reasons = acc.info.finish_reasons
            if reasons:
                message["finish_reason"] = reasons[0]
            self.output = [message]

    def finish(self, span: Span) -> None:
        attrs: dict[str, str | int] = {}
        omitted = cut = 0
        for name, value in (
            (semconv.GEN_AI_INPUT_MESSAGES, self.input or None),
            (semconv.GEN_AI_SYSTEM_INSTRUCTIONS, self.instructions or None),
            (semconv.GEN_AI_OUTPUT_MESSAGES, self.output),  # an empty reply too: the call answered nothing
        ):
            if value is not None:
                fitted = fit_json(value, self.max_chars)
                attrs[name] = fitted.text
                omitted += fitted.omitted
                cut += fitted.cut
        if not attrs:
            return
        # What the cap took out, said next to the content (absent when nothing was cut).
        if omitted:
            attrs[semconv.CAPTURE_MESSAGES_OMITTED] = omitted
        if cut:
            attrs[semconv.CAPTURE_TEXTS_CUT] = cut
        if self.mode in ("SPAN_ONLY", "SPAN_AND_EVENT"):
            span.set_attributes(attrs)
        if self.mode in ("EVENT_ONLY", "SPAN_AND_EVENT"):
            telemetry.emit_event(span, semconv.EVENT_GEN_AI_CLIENT_INFERENCE_DETAILS, attrs)
