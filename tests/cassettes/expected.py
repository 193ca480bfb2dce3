"""What a span must say about a recorded exchange, computed from the recorded response alone.

Deliberately independent of ``otel_context.usage`` (which is what is being tested): the providers' documented
rules are spelled out here once more, on the raw JSON.

* Anthropic: ``gen_ai.usage.input_tokens`` = ``input_tokens + cache_read_input_tokens +
  cache_creation_input_tokens``; in a stream each field's final value is the last non-null one over
  ``message_start.message.usage`` and ``message_delta.usage`` (the final ``message_delta`` may repeat and
  change input and cache figures); server-side compaction shows only in ``usage.iterations``.
* OpenAI: ``prompt_tokens`` / ``input_tokens`` already include cached tokens; cache and reasoning figures sit in
  the ``*_details`` objects, which old responses lack entirely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from otel_context import semconv

from .cassette import Interaction


@dataclass
class Expected:
    """The usage attributes a span must carry (``required``) and the ones that are optional because the
    provider did not report them (``absent_or_zero``: when present they must be 0)."""

    required: dict[str, Any] = field(default_factory=dict)
    absent_or_zero: set[str] = field(default_factory=set)
    response_id: str | None = None
    response_model: str | None = None
    provider_compacted: bool = False
    error_type: str | None = None


def _int(d: Any, *path: str) -> int | None:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d if isinstance(d, int) and not isinstance(d, bool) else None


def _put(exp: Expected, name: str, value: int | None) -> None:
    if value is None:
        exp.absent_or_zero.add(name)
    else:
        exp.required[name] = value


def _anthropic_usage(exp: Expected, usage: dict[str, Any]) -> None:
    base = _int(usage, "input_tokens") or 0
    read = _int(usage, "cache_read_input_tokens")
    write = _int(usage, "cache_creation_input_tokens")
    exp.required[semconv.GEN_AI_USAGE_INPUT_TOKENS] = base + (read or 0) + (write or 0)
    _put(exp, semconv.GEN_AI_USAGE_OUTPUT_TOKENS, _int(usage, "output_tokens"))
    _put(exp, semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, read)
    _put(exp, semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, write)
    _put(exp, semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, _int(usage, "output_tokens_details", "thinking_tokens"))
    exp.provider_compacted = any(
        isinstance(it, dict) and it.get("type") == "compaction" for it in usage.get("iterations") or []
    )


def _openai_usage(exp: Expected, usage: dict[str, Any] | None, responses: bool) -> None:
    names = [
        semconv.GEN_AI_USAGE_INPUT_TOKENS,
        semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
        semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        semconv.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
        semconv.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    ]
    if usage is None:  # e.g. a stream recorded without include_usage: nothing may be invented
        exp.absent_or_zero.update(names)
        return
    inp, out = ("input_tokens", "output_tokens") if responses else ("prompt_tokens", "completion_tokens")
    values = [
        _int(usage, inp),
        _int(usage, out),
        _int(usage, f"{inp}_details", "cached_tokens"),
        _int(usage, f"{inp}_details", "cache_write_tokens"),
        _int(usage, f"{out}_details", "reasoning_tokens"),
    ]
    for name, value in zip(names, values, strict=True):
        _put(exp, name, value)


def _error_type(interaction: Interaction) -> str | None:
    try:
        body = interaction.json
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    if interaction.provider == "anthropic":
        return error.get("type")
    return error.get("code") or error.get("type")


def expected_for(interaction: Interaction) -> Expected:
    """The expectation for one recorded exchange."""
    exp = Expected()
    if interaction.status >= 400:
        exp.error_type = _error_type(interaction)
        return exp
    path = interaction.path
    if path.startswith("/messages"):
        if not interaction.is_sse:
            body = interaction.json
            _anthropic_usage(exp, body.get("usage") or {})
            exp.response_id, exp.response_model = body.get("id"), body.get("model")
            return exp
        final: dict[str, Any] = {}
        for event in interaction.events:
            data = event.data
            if data.get("type") == "message_start":
                message = data.get("message") or {}
                exp.response_id, exp.response_model = message.get("id"), message.get("model")
                usage = message.get("usage") or {}
            elif data.get("type") == "message_delta":
                usage = data.get("usage") or {}
            else:
                continue
            final.update({k: v for k, v in usage.items() if v is not None})
        _anthropic_usage(exp, final)
        return exp
    if path == "/responses":
        if interaction.is_sse:
            done = [e.data["response"] for e in interaction.events if e.data.get("type") == "response.completed"]
            body = done[-1]
        else:
            body = interaction.json
        _openai_usage(exp, body.get("usage"), responses=True)
        exp.response_id, exp.response_model = body.get("id"), body.get("model")
        return exp
    # chat completions, legacy completions, embeddings
    if interaction.is_sse:
        chunks = [e.data for e in interaction.events]
        with_usage = [c for c in chunks if c.get("usage")]
        _openai_usage(exp, with_usage[-1]["usage"] if with_usage else None, responses=False)
        exp.response_id, exp.response_model = chunks[0].get("id"), chunks[0].get("model")
        return exp
    body = interaction.json
    _openai_usage(exp, body.get("usage"), responses=False)
    if path == "/embeddings":
        # An embeddings response has no output and no id.
        exp.required.pop(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, None)
        exp.absent_or_zero.add(semconv.GEN_AI_USAGE_OUTPUT_TOKENS)
        exp.response_model = body.get("model")
        return exp
    exp.response_id, exp.response_model = body.get("id"), body.get("model")
    return exp
