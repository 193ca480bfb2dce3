"""Settings from code and from ``OTEL_CONTEXT_*`` / standard OTel variables, validated with clear errors.

Precedence: a value passed in code wins; the environment fills only what code left unset; defaults come
last. A bad value fails at instrument time with a :class:`SettingsError` that names the variable (or the
keyword) and the allowed values, never later from deep inside a call.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

CaptureMode = Literal["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"]
CompactionMode = Literal["auto", "observe", "off"]

CAPTURE_MODES: tuple[CaptureMode, ...] = ("NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT")
COMPACTION_MODES: tuple[CompactionMode, ...] = ("auto", "observe", "off")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """A setting has a value otel-context cannot use; the message names it and what is allowed."""


@dataclass(frozen=True)
class Settings:
    """Everything that can be tuned. Field docs name the environment variable that sets each."""

    #: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: whether prompts/completions go on spans/events.
    capture_content: CaptureMode = "NO_CONTENT"
    #: OTEL_CONTEXT_CAPTURE_MAX_CHARS: cap on each captured content attribute, in UTF-8 bytes (so in characters too).
    capture_max_chars: int = 16_384
    #: OTEL_CONTEXT_ANTHROPIC_NATIVE_SPANS: keep the anthropic SDK's own span on instrumented calls
    #: (off by default, so that every call has exactly one span: ours).
    anthropic_native_spans: bool = False
    #: OTEL_CONTEXT_LEGACY_METRICS: also emit gen_ai.client.operation.duration / gen_ai.client.token.usage.
    legacy_metrics: bool = False

    #: OTEL_CONTEXT_COMPACTION: auto (threshold + reactive), observe (telemetry only), off.
    compaction: CompactionMode = "auto"
    #: OTEL_CONTEXT_MICROCOMPACT: clear old tool results before summarizing.
    microcompact: bool = False
    #: OTEL_CONTEXT_AUTO_COMPACT_WINDOW: pretend the model's window is this many tokens.
    auto_compact_window: int | None = None
    #: OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE: auto threshold as a percent of the effective window (lower only).
    autocompact_pct_override: float | None = None
    #: OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE: the blocking limit in tokens.
    blocking_limit_override: int | None = None
    #: OTEL_CONTEXT_DISABLE_COMPACT: kill switch for every compaction (auto, reactive, manual via hooks).
    disable_compact: bool = False
    #: OTEL_CONTEXT_DISABLE_AUTO_COMPACT: kill switch for threshold-triggered compaction only.
    disable_auto_compact: bool = False
    #: OTEL_CONTEXT_SUMMARY_MODEL: the summarizer's model (default: the call's own model).
    summary_model: str | None = None
    #: OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS: the most an inline compaction's summarizer calls may add to the
    #: app's call, all attempts together; then the compaction fails and the original request goes out.
    summarizer_timeout_seconds: float = 60.0
    #: OTEL_CONTEXT_SUMMARIZER_MAX_RETRIES: retries of a failed summarizer call (5xx, 429, connection errors),
    #: each after a short back-off; never when the provider asks to wait longer than a second.
    summarizer_max_retries: int = 1

    #: OTEL_CONTEXT_KEEP_RECENT_MESSAGES: messages kept verbatim after a summary.
    keep_recent_messages: int = 6
    #: OTEL_CONTEXT_MICROCOMPACT_KEEP_RECENT: newest tool results microcompact leaves alone.
    microcompact_keep_recent: int = 3
    #: OTEL_CONTEXT_MICROCOMPACT_CLEAR_AT_LEAST: minimum reclaimable tokens before microcompact acts.
    microcompact_clear_at_least: int = 5_000
    #: OTEL_CONTEXT_MAX_TOOL_RESULT_TOKENS: a single tool result above this is cut head/tail.
    max_tool_result_tokens: int = 25_000
    #: Tool names whose results microcompact may clear (empty: every tool).
    microcompact_tools: frozenset[str] = frozenset()
    #: Tool names that read files, and the input keys that hold the path, for rehydration.
    file_read_tools: frozenset[str] = frozenset({"read_file", "Read", "view", "cat", "open_file"})
    file_path_keys: tuple[str, ...] = ("path", "file_path", "filename", "file")
    rehydrate_max_files: int = 5
    rehydrate_max_tokens_per_file: int = 5_000
    rehydrate_max_tokens_total: int = 50_000

    #: Bounded per-conversation state.
    max_conversations: int = 1_024
    conversation_idle_seconds: float = 3_600.0

    #: Code-only hooks: pre_compact(event) may add must-keep instructions or veto; post_compact(event) may
    #: add messages. See otel_context.compaction.hooks.
    pre_compact: Callable[..., Any] | None = field(default=None, compare=False)
    post_compact: Callable[..., Any] | None = field(default=None, compare=False)
    #: Code-only: replace the summarizer (e.g. a fake that fails, in tests and the alert demo).
    summarizer: Callable[..., Any] | None = field(default=None, compare=False)

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied and validated."""
        return resolve(changes, env={}, base=self)


# env variable -> (field name, parser kind)
ENV_VARS: dict[str, tuple[str, str]] = {
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": ("capture_content", "capture"),
    "OTEL_CONTEXT_CAPTURE_MAX_CHARS": ("capture_max_chars", "posint"),
    "OTEL_CONTEXT_ANTHROPIC_NATIVE_SPANS": ("anthropic_native_spans", "bool"),
    "OTEL_CONTEXT_LEGACY_METRICS": ("legacy_metrics", "bool"),
    "OTEL_CONTEXT_COMPACTION": ("compaction", "compaction"),
    "OTEL_CONTEXT_MICROCOMPACT": ("microcompact", "bool"),
    "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": ("auto_compact_window", "posint"),
    "OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE": ("autocompact_pct_override", "pct"),
    "OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE": ("blocking_limit_override", "posint"),
    "OTEL_CONTEXT_DISABLE_COMPACT": ("disable_compact", "bool"),
    "OTEL_CONTEXT_DISABLE_AUTO_COMPACT": ("disable_auto_compact", "bool"),
    "OTEL_CONTEXT_SUMMARY_MODEL": ("summary_model", "str"),
    "OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS": ("summarizer_timeout_seconds", "seconds"),
    "OTEL_CONTEXT_SUMMARIZER_MAX_RETRIES": ("summarizer_max_retries", "nonnegint"),
    "OTEL_CONTEXT_KEEP_RECENT_MESSAGES": ("keep_recent_messages", "posint"),
    "OTEL_CONTEXT_MICROCOMPACT_KEEP_RECENT": ("microcompact_keep_recent", "nonnegint"),
    "OTEL_CONTEXT_MICROCOMPACT_CLEAR_AT_LEAST": ("microcompact_clear_at_least", "nonnegint"),
    "OTEL_CONTEXT_MAX_TOOL_RESULT_TOKENS": ("max_tool_result_tokens", "posint"),
}

_FIELD_KIND = {name: kind for name, kind in ENV_VARS.values()}
_FIELDS = {f.name for f in dataclasses.fields(Settings)}


def _parse(kind: str, raw: Any, where: str) -> Any:
    """Parse/validate one value; ``where`` is the env variable or keyword named in the error."""
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise SettingsError(f"{where}={raw!r} is not a boolean; use one of 1/true/yes/on or 0/false/no/off")
    if kind == "capture":
        text = str(raw).strip().upper()
        if text not in CAPTURE_MODES:
            raise SettingsError(f"{where}={raw!r} is not a capture mode; allowed: {', '.join(CAPTURE_MODES)}")
        return text
    if kind == "compaction":
        text = str(raw).strip().lower()
        if text not in COMPACTION_MODES:
            raise SettingsError(f"{where}={raw!r} is not a compaction mode; allowed: {', '.join(COMPACTION_MODES)}")
        return text
    if kind in ("posint", "nonnegint"):
        if raw is None:
            return None
        if isinstance(raw, bool):
            raise SettingsError(f"{where}={raw!r} must be a whole number")
        try:
            value = int(str(raw).strip().replace("_", "")) if not isinstance(raw, int) else raw
        except ValueError:
            raise SettingsError(f"{where}={raw!r} must be a whole number") from None
        minimum = 1 if kind == "posint" else 0
        if value < minimum:
            raise SettingsError(f"{where}={raw!r} must be at least {minimum}")
        return value
    if kind == "pct":
        if raw is None:
            return None
        try:
            pct = float(str(raw).strip().rstrip("%"))
        except ValueError:
            raise SettingsError(f"{where}={raw!r} must be a percentage between 1 and 100") from None
        if not 1 <= pct <= 100:
            raise SettingsError(f"{where}={raw!r} must be a percentage between 1 and 100")
        return pct
    if kind == "seconds":
        if isinstance(raw, bool):
            raise SettingsError(f"{where}={raw!r} must be a number of seconds")
        try:
            seconds = float(str(raw).strip())
        except ValueError:
            raise SettingsError(f"{where}={raw!r} must be a number of seconds") from None
        if not 0 < seconds < float("inf"):
            raise SettingsError(f"{where}={raw!r} must be a positive, finite number of seconds")
        return seconds
    if kind == "str":
        text = str(raw).strip()
        return text or None
    raise AssertionError(kind)


def resolve(
    code: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    base: Settings | None = None,
) -> Settings:
    """Build validated settings: ``code`` over ``env`` (default ``os.environ``) over ``base`` (defaults)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = dataclasses.asdict(base) if base is not None else {}
    if base is not None:  # asdict deep-copies callables fine, but keep the very objects
        for name in ("pre_compact", "post_compact", "summarizer"):
            values[name] = getattr(base, name)
    for var, (name, kind) in ENV_VARS.items():
        raw = env.get(var)
        if raw is not None and raw.strip() != "":
            values[name] = _parse(kind, raw, var)
    for name, raw in (code or {}).items():
        if name not in _FIELDS:
            allowed = ", ".join(sorted(_FIELDS))
            raise SettingsError(f"unknown setting {name!r}; known settings: {allowed}")
        field_kind = _FIELD_KIND.get(name)
        if field_kind is not None:
            values[name] = _parse(field_kind, raw, name)
        elif name in ("microcompact_tools", "file_read_tools"):
            values[name] = frozenset(cast("Any", raw))
        elif name == "file_path_keys":
            values[name] = tuple(cast("Any", raw))
        else:
            values[name] = raw
    return Settings(**values)
