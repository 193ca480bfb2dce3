"""Settings from code and from ``OTEL_CONTEXT_*`` / standard OTel variables, validated with clear errors.

Precedence: a value passed in code wins; the environment fills only what code left unset; defaults come
last. A bad value passed in code fails at instrument time with a :class:`SettingsError` that names the
keyword and the allowed values, never later from deep inside a call. A bad value in the environment never
stops the app (telemetry must not take production down, and the OpenTelemetry SDK treats its own variables
the same way): one warning names the variable, the value and what is allowed, and the default applies. So
do a malformed entry of ``OTEL_CONTEXT_MODEL_WINDOWS`` (that entry is ignored) and an ``OTEL_CONTEXT_*``
variable nobody reads (a likely misspelling: the warning names the closest known variable).

Every variable otel-context reads is listed here, in :data:`ENV_VARS` or :data:`OTHER_ENV_VARS`: a new
variable added only there is known to the misspelling check too.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from otel_context import pricing, process_state, semconv, store_spec

# The providers a summary model can be named for, and whose model a name is: importable from here, as before.
from otel_context.providers import SUMMARY_PROVIDERS as SUMMARY_PROVIDERS
from otel_context.providers import model_owner as model_owner

CaptureMode = Literal["NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT"]
CompactionMode = Literal["auto", "observe", "off"]

CAPTURE_MODES: tuple[CaptureMode, ...] = ("NO_CONTENT", "SPAN_ONLY", "EVENT_ONLY", "SPAN_AND_EVENT")
COMPACTION_MODES: tuple[CompactionMode, ...] = ("auto", "observe", "off")
#: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true/false as the upstream GenAI instrumentations mean
#: it (content on events / none), for apps that set it for those too.
CAPTURE_BOOLEANS: dict[bool, CaptureMode] = {True: "EVENT_ONLY", False: "NO_CONTENT"}

log = logging.getLogger("otel_context")

#: The smallest context window compaction can work in: a summary is asked with at least 1,024 tokens of room
#: and its prompt takes about 700 more, so a smaller window cannot hold a summary request beside anything to
#: summarize (every compaction would fail, the breaker open, and the provider refuse the conversation). A
#: declared window under it is refused (``claude-sonnet-4-6=10``, a slip of the keyboard, was taken at its word).
MIN_WINDOW_TOKENS = 4_096
#: A model name as the providers and gateways spell them: a letter or digit first, then letters, digits and
#: ``. _ - : / @ +`` (``claude-haiku-4-5``, ``ft:gpt-4o-mini:org::id``, ``anthropic/claude-3.5-sonnet``,
#: ``claude-3-5-sonnet-v2@20241022``, ``llama3:8b``). Anything else (``:::``, a space) is no model's name.
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}")

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
    #: OTEL_CONTEXT_CONVENTIONS: names beyond the GenAI conventions otel-context follows, emitted beside its own,
    #: comma-separated: ``proposed`` (names proposed to the conventions, not merged yet: ``gen_ai.usage.cost.*``),
    #: ``legacy`` (the older names, for viewers and dashboards that lag: ``gen_ai.usage.cache_creation.input_tokens``
    #: and the older metrics). Empty by default (docs/telemetry.md, "Which semantic conventions").
    conventions: frozenset[str] = frozenset()

    #: OTEL_CONTEXT_CACHE_DIAGNOSTICS: ask the provider why a prompt's cache was missed: each chat call of a
    #: conversation names the previous response of that same conversation (Anthropic Messages
    #: ``diagnostics.previous_message_id``, OpenAI Responses ``prompt_cache_options.comparison_response_id``),
    #: unless the app set that field itself. Off: no request is changed for it. (A diagnosis the app asked for
    #: itself is read either way.)
    cache_diagnostics: bool = False

    #: OTEL_CONTEXT_COMPACTION: auto (threshold + reactive), observe (telemetry only), off.
    compaction: CompactionMode = "auto"
    #: OTEL_CONTEXT_MICROCOMPACT: clear old tool results before summarizing.
    microcompact: bool = False
    #: OTEL_CONTEXT_AUTO_COMPACT_WINDOW: pretend the model's window is this many tokens.
    auto_compact_window: int | None = None
    #: OTEL_CONTEXT_MODEL_WINDOWS: context windows per model, ``"my-local-llama=32768,gpt-4o=128000"`` (from
    #: code: a mapping ``{"my-local-llama": 32768}``). A name matches by prefix like the built-in table (the
    #: longest wins); it wins over OTEL_CONTEXT_AUTO_COMPACT_WINDOW and the table for the models it names.
    model_windows: tuple[tuple[str, int], ...] = ()
    #: OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE: auto threshold as a percent of the effective window (lower only).
    autocompact_pct_override: float | None = None
    #: OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE: the blocking limit in tokens.
    blocking_limit_override: int | None = None
    #: OTEL_CONTEXT_DISABLE_COMPACT: kill switch for every compaction (auto, reactive, manual via hooks).
    disable_compact: bool = False
    #: OTEL_CONTEXT_DISABLE_AUTO_COMPACT: kill switch for threshold-triggered compaction only.
    disable_auto_compact: bool = False
    #: OTEL_CONTEXT_SUMMARY_MODEL: the summarizer's model (default: the call's own model), per provider
    #: (``anthropic:claude-haiku-4-5,openai:gpt-5-mini``); a bare name is for the provider whose model it is
    #: (see :func:`summary_model_for`).
    summary_model: str | None = None
    #: OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS: the most an inline compaction's summarizer calls may add to the
    #: app's call, all attempts together; then the compaction fails and the original request goes out.
    summarizer_timeout_seconds: float = 60.0
    #: OTEL_CONTEXT_SUMMARIZER_MAX_RETRIES: retries of a failed summarizer call (5xx, 429, connection errors),
    #: each after a short back-off; never when the provider asks to wait longer than a second.
    summarizer_max_retries: int = 1
    #: OTEL_CONTEXT_BACKGROUND_COMPACTION: prepare the summary in the background once the estimate passes
    #: ``background_start_pct`` of the auto threshold, so the call that crosses the threshold applies it
    #: without waiting for the summarizer (transparent mode only; the explicit Compactor is unchanged).
    #: False: today's inline compaction, exactly.
    background_compaction: bool = True
    #: OTEL_CONTEXT_BACKGROUND_START_PCT: where the background summary starts, percent of the auto threshold.
    background_start_pct: float = 80.0

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
    #: OTEL_CONTEXT_USER_MESSAGES_BUDGET: tokens of the user's own messages kept verbatim beside a summary
    #: (scaled below a 200K window like the other buffers, at most a quarter of the effective window; 0: none).
    user_messages_budget: int = 20_000
    #: OTEL_CONTEXT_REPAIR_BUDGET: tokens a summary's repair may add (what the summary dropped of the user's
    #: sentences and the artifacts, restored; scaled below a 200K window, at most an eighth of the effective
    #: window; 0: no repair, the check only measures).
    repair_budget: int = 10_000
    #: OTEL_CONTEXT_TRAIL_BUDGET: tokens of the work trail a summary message carries (the files, definitions,
    #: errors, commands and decisions of the agent's work; scaled below a 200K window, at most an eighth of the
    #: effective window; 0: no trail).
    trail_budget: int = 25_000

    #: Bounded per-conversation state (see docs/conversations.md).
    #: OTEL_CONTEXT_MAX_CONVERSATIONS: conversation states kept (least recently used go first).
    max_conversations: int = 1_024
    #: OTEL_CONTEXT_CONVERSATION_IDLE_SECONDS: a conversation idle this long is forgotten.
    conversation_idle_seconds: float = 3_600.0
    #: OTEL_CONTEXT_MAX_STATE_BYTES: approximate bytes of the apps' histories the states may keep alive.
    max_state_bytes: int = 64 * 1024 * 1024
    #: OTEL_CONTEXT_STATE_STORE: where conversation state lives: None/"memory" (this process), a
    #: redis:// / rediss:// / unix:// URL, or from code a redis.Redis client or a StateStore.
    state_store: Any = None
    #: OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS: the most a call waits, in all, for the shared store and for a
    #: summary another worker is making (a lock holder that may be slow, gone or unknown); past it the call goes
    #: on as without a store (its own state; it summarizes itself if its request does not fit).
    state_store_max_wait_seconds: float = 0.25
    #: OTEL_CONTEXT_STATE_STORE_KEY: encrypt and authenticate what the shared store holds (AES-256-GCM):
    #: comma-separated base64 keys of 32 bytes, the first encrypts, each decrypts (rotation); see
    #: docs/deploying.md. Never shown (no repr). A bad key from the environment: one warning, and no
    #: shared store (state stays in each process); from code: a SettingsError.
    state_store_key: tuple[bytes, ...] | None = field(default=None, repr=False)

    #: OTEL_CONTEXT_PRICES: the user's own prices (custom, fine-tuned, self-hosted models, negotiated rates),
    #: looked up before genai-prices' bundled table: the path of a JSON file, or from code a mapping (or a
    #: path) ``{"my-model": {"input": 0.5, "output": 1.5, "cache_read": 0.05}}`` in USD per million tokens
    #: (``provider:name`` for one provider, a trailing ``*`` for a prefix). An invalid entry is skipped with one
    #: warning; see :func:`otel_context.pricing.parse_user_prices` and docs/telemetry.md ("Cost").
    prices: tuple[pricing.UserPrice, ...] = ()

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
    "OTEL_CONTEXT_CONVENTIONS": ("conventions", "conventions"),
    "OTEL_CONTEXT_CACHE_DIAGNOSTICS": ("cache_diagnostics", "bool"),
    "OTEL_CONTEXT_COMPACTION": ("compaction", "compaction"),
    "OTEL_CONTEXT_MICROCOMPACT": ("microcompact", "bool"),
    "OTEL_CONTEXT_AUTO_COMPACT_WINDOW": ("auto_compact_window", "window"),
    "OTEL_CONTEXT_MODEL_WINDOWS": ("model_windows", "windows"),
    "OTEL_CONTEXT_AUTOCOMPACT_PCT_OVERRIDE": ("autocompact_pct_override", "pct"),
    "OTEL_CONTEXT_BLOCKING_LIMIT_OVERRIDE": ("blocking_limit_override", "posint"),
    "OTEL_CONTEXT_DISABLE_COMPACT": ("disable_compact", "bool"),
    "OTEL_CONTEXT_DISABLE_AUTO_COMPACT": ("disable_auto_compact", "bool"),
    "OTEL_CONTEXT_SUMMARY_MODEL": ("summary_model", "summary_model"),
    "OTEL_CONTEXT_SUMMARIZER_TIMEOUT_SECONDS": ("summarizer_timeout_seconds", "seconds"),
    "OTEL_CONTEXT_SUMMARIZER_MAX_RETRIES": ("summarizer_max_retries", "nonnegint"),
    "OTEL_CONTEXT_BACKGROUND_COMPACTION": ("background_compaction", "bool"),
    "OTEL_CONTEXT_BACKGROUND_START_PCT": ("background_start_pct", "pct"),
    "OTEL_CONTEXT_KEEP_RECENT_MESSAGES": ("keep_recent_messages", "posint"),
    "OTEL_CONTEXT_MICROCOMPACT_KEEP_RECENT": ("microcompact_keep_recent", "nonnegint"),
    "OTEL_CONTEXT_MICROCOMPACT_CLEAR_AT_LEAST": ("microcompact_clear_at_least", "nonnegint"),
    "OTEL_CONTEXT_MAX_TOOL_RESULT_TOKENS": ("max_tool_result_tokens", "posint"),
    "OTEL_CONTEXT_MAX_CONVERSATIONS": ("max_conversations", "posint"),
    "OTEL_CONTEXT_CONVERSATION_IDLE_SECONDS": ("conversation_idle_seconds", "seconds"),
    "OTEL_CONTEXT_MAX_STATE_BYTES": ("max_state_bytes", "nonnegint"),
    "OTEL_CONTEXT_STATE_STORE": ("state_store", "store"),
    "OTEL_CONTEXT_USER_MESSAGES_BUDGET": ("user_messages_budget", "nonnegint"),
    "OTEL_CONTEXT_REPAIR_BUDGET": ("repair_budget", "nonnegint"),
    "OTEL_CONTEXT_TRAIL_BUDGET": ("trail_budget", "nonnegint"),
    "OTEL_CONTEXT_STATE_STORE_MAX_WAIT_SECONDS": ("state_store_max_wait_seconds", "seconds"),
    "OTEL_CONTEXT_STATE_STORE_KEY": ("state_store_key", "key"),
    "OTEL_CONTEXT_PRICES": ("prices", "prices"),
}

#: Variables read elsewhere than :class:`Settings` (known to the misspelling check).
OTHER_ENV_VARS: frozenset[str] = frozenset(
    {
        # tests/servers.py: CI fails, instead of skipping, tests whose server program is missing.
        "OTEL_CONTEXT_REQUIRE_SERVERS",
        # dashboards/docker-compose.yml: the address the viewing stacks publish their ports on.
        "OTEL_CONTEXT_BIND",
    }
)

#: Every ``OTEL_CONTEXT_*`` variable otel-context reads.
KNOWN_ENV_VARS: frozenset[str] = frozenset(v for v in ENV_VARS if v.startswith("OTEL_CONTEXT_")) | OTHER_ENV_VARS

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
        # The upstream GenAI instrumentations (openai-v2 and others before the enum) take true/false: true
        # records the content on events, not on span attributes, which is what EVENT_ONLY does here.
        if isinstance(raw, bool) or str(raw).strip().lower() in _TRUE | _FALSE:
            return CAPTURE_BOOLEANS[_parse("bool", raw, where)]
        text = str(raw).strip().upper()
        if text not in CAPTURE_MODES:
            raise SettingsError(
                f"{where}={raw!r} is not a capture mode; allowed: {', '.join(CAPTURE_MODES)}, or true "
                "(= EVENT_ONLY) / false (= NO_CONTENT)"
            )
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
    if kind == "window":
        window = _parse("posint", raw, where)
        if window is not None and window < MIN_WINDOW_TOKENS:
            raise SettingsError(_window_too_small(where, raw))
        return window
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
            seconds = float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
        except ValueError:
            raise SettingsError(f"{where}={raw!r} must be a number of seconds") from None
        if not seconds > 0 or seconds == float("inf"):
            raise SettingsError(f"{where}={raw!r} must be a positive, finite number of seconds")
        return seconds
    if kind == "store":
        try:
            return store_spec.validate_spec(raw)
        except store_spec.StateStoreConfigError as exc:
            raise SettingsError(f"{where}: {exc}") from None
    if kind == "key":
        try:
            return store_spec.parse_keys(raw)
        except store_spec.StateStoreConfigError as exc:
            raise SettingsError(f"{where}: {exc}") from None
    if kind == "str":
        if raw is None:  # from code: unset (str(None) would name a model "None")
            return None
        text = str(raw).strip()
        return text or None
    if kind == "windows":
        return _parse_windows(raw, where)
    if kind == "summary_model":
        return _parse_summary_model(raw, where)
    if kind == "conventions":
        words = raw.split(",") if isinstance(raw, str) else list(raw)
        chosen = frozenset(str(w).strip().lower() for w in words if str(w).strip())
        unknown = sorted(chosen - set(semconv.CONVENTIONS))
        if unknown:
            raise SettingsError(
                f"{where}={raw!r} names unknown conventions ({', '.join(unknown)}); known: {', '.join(semconv.CONVENTIONS)}"
            )
        return chosen
    if kind == "prices":
        if isinstance(raw, tuple) and all(isinstance(entry, pricing.UserPrice) for entry in raw):
            return raw  # already parsed (a copy of settings in force)
        try:
            return pricing.parse_user_prices(raw, where, _warn_once)
        except pricing.PriceTableError as exc:
            raise SettingsError(str(exc)) from None
    raise AssertionError(kind)


def _window_too_small(where: str, raw: Any) -> str:
    return (
        f"{where}={raw!r} is too small a context window: compaction needs at least {MIN_WINDOW_TOKENS:,} tokens "
        "(a summary request alone takes about 1,700)"
    )


def _parse_windows(raw: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``model=tokens`` pairs from a string (env: a bad entry is warned about and skipped) or a mapping
    (code: a bad entry is a :class:`SettingsError`). Names are kept lower-case, as the table matches."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        pairs: list[tuple[str, int]] = []
        for entry in raw.split(","):
            if not entry.strip():
                continue
            name, sep, value = entry.partition("=")
            try:
                window = int(value.strip().replace("_", "")) if sep else 0
            except ValueError:
                window = 0
            if not name.strip() or window < 1:
                _warn_once(
                    f"windows:{entry.strip()}",
                    "otel_context: %s: ignoring %r; each entry must be model=tokens with a positive whole "
                    "number, e.g. my-local-llama=32768,gpt-4o=128000",
                    where,
                    entry.strip(),
                )
                continue
            if window < MIN_WINDOW_TOKENS:
                _warn_once(
                    f"windows:{entry.strip()}",
                    "otel_context: %s: ignoring %r; %s tokens is too small a context window: compaction needs at "
                    "least %s (the model's known window applies, if any)",
                    where,
                    entry.strip(),
                    f"{window:,}",
                    f"{MIN_WINDOW_TOKENS:,}",
                )
                continue
            pairs.append((name.strip().lower(), window))
        return tuple(pairs)
    items = raw.items() if isinstance(raw, Mapping) else raw
    try:
        entries = [(name, window) for name, window in items]
    except (TypeError, ValueError):
        raise SettingsError(f"{where}={raw!r} must map model names to windows, e.g. {{'gpt-4o': 128000}}") from None
    result: list[tuple[str, int]] = []
    for name, window in entries:
        if not isinstance(name, str) or not name.strip():
            raise SettingsError(f"{where}: {name!r} is not a model name")
        result.append((name.strip().lower(), _parse("window", window, f"{where}[{name!r}]")))
    return tuple(result)


_warned: set[str] = set()
# Reset and a fork's child: kept (a misconfiguration is warned about once per process).
process_state.register(__name__, ("_warned",), on_reset=None, in_forked_child=None)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings) if f.default is not dataclasses.MISSING}


def _env_value_ignored(var: str, raw: str, error: SettingsError, default: Any) -> None:
    """One warning for an environment value otel-context cannot use; the default stays in force.

    The error already names the variable, the value (a secret in it left out) and what is allowed.
    """
    _warn_once(f"bad:{var}={raw}", "otel_context: %s; using the default (%s) instead", error, _shown(default))


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, frozenset)) and not value:
        return "none"
    return str(value)


def _warn_once(key: str, message: str, *args: Any) -> None:
    """A warning the first time ``key`` is seen (instrument() may run many times with the same variables)."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def check_unknown_variables(env: Mapping[str, str]) -> None:
    """Warn once per ``OTEL_CONTEXT_*`` variable that nothing reads, naming the closest known one: a
    misspelled variable (``OTEL_CONTEXT_AUTOCOMPACT_WINDOW``) would otherwise be ignored in silence."""
    for var in env:
        if not var.startswith("OTEL_CONTEXT_") or var in KNOWN_ENV_VARS:
            continue
        # Compared without the common prefix, which would make every name look close.
        suffixes = {known[len("OTEL_CONTEXT_") :]: known for known in sorted(KNOWN_ENV_VARS)}
        close = difflib.get_close_matches(var[len("OTEL_CONTEXT_") :], list(suffixes), n=1, cutoff=0.6)
        hint = (
            f"did you mean {suffixes[close[0]]}?" if close else "`otel-context settings` lists the variables it reads"
        )
        _warn_once(f"unknown:{var}", "otel_context: %s is not a variable otel-context reads; %s", var, hint)


def resolve(
    code: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    base: Settings | None = None,
) -> Settings:
    """Build validated settings: ``code`` over ``env`` (default ``os.environ``) over ``base`` (defaults)."""
    env = os.environ if env is None else env
    check_unknown_variables(env)
    # Shallow: every value is immutable or an object to keep as is (hooks, a store client).
    values: dict[str, Any] = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)} if base else {}
    bad_key = False
    bad_key_error: SettingsError | None = None
    for var, (name, kind) in ENV_VARS.items():
        raw = env.get(var)
        if raw is not None and raw.strip() != "" and name not in (code or {}):
            try:
                values[name] = _parse(kind, raw, var)
            except SettingsError as exc:
                if kind == "key":
                    # A secret: never store values in clear because its variable was mistyped, and never
                    # fail the app over telemetry. The message names the variable, not the value.
                    bad_key = True
                    bad_key_error = exc
                    continue
                _env_value_ignored(var, raw, exc, values.get(name, _DEFAULTS.get(name)))
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
    if bad_key and "state_store_key" not in (code or {}):
        # Said once the store setting is known: only a configured store is then not used.
        if values.get("state_store") is None:
            _warn_once(
                f"bad_key:{bad_key_error}",
                "otel_context: %s; ignored (no shared state store is configured: state stays in each process)",
                bad_key_error,
            )
        else:
            _warn_once(
                f"bad_key:{bad_key_error}",
                "otel_context: %s; the shared state store is not used (state stays in each process rather than "
                "being stored in clear)",
                bad_key_error,
            )
        values["state_store"] = None  # state stays in each process (docs/deploying.md)
    return Settings(**values)


def _split_summary_entry(entry: str) -> tuple[str | None, str]:
    """``"openai:gpt-5-mini"`` -> ("openai", "gpt-5-mini"); a bare name -> (None, name). Only the known
    providers count as a prefix: an OpenAI fine-tune (``ft:gpt-4o-mini:org::id``) keeps its colons."""
    provider, sep, name = entry.partition(":")
    if sep and provider.strip().lower() in SUMMARY_PROVIDERS:
        return provider.strip().lower(), name.strip()
    return None, entry.strip()


def _parse_summary_model(raw: Any, where: str) -> str | None:
    """The summary model setting, checked: comma-separated entries, each ``provider:model`` or a bare name;
    one entry per provider at most. Kept as the normalized text; :func:`summary_model_for` reads it."""
    if raw is None:  # from code: unset (str(None) would name a model "None")
        return None
    text = str(raw).strip()
    if not text:
        return None
    allowed = (
        f"a model name, or one per provider as {','.join(f'{p}:MODEL' for p in SUMMARY_PROVIDERS)} "
        "(e.g. anthropic:claude-haiku-4-5,openai:gpt-5-mini)"
    )
    seen: set[str] = set()
    entries: list[str] = []
    for entry in text.split(","):
        provider, name = _split_summary_entry(entry)
        if not name:
            raise SettingsError(f"{where}={raw!r} has an empty model name; use {allowed}")
        if _MODEL_NAME.fullmatch(name) is None:
            raise SettingsError(f"{where}={raw!r}: {name!r} is not a model name; use {allowed}")
        owner = provider or model_owner(name) or "*"
        if owner in seen:
            raise SettingsError(f"{where}={raw!r} names more than one model for a provider; use {allowed}")
        seen.add(owner)
        entries.append(f"{provider}:{name}" if provider else name)
    return ",".join(entries)


@functools.lru_cache(maxsize=256)
def _summary_model_for(setting: str | None, provider: str, model: str) -> str:
    if not setting:
        return model
    bare: str | None = None
    for entry in setting.split(","):
        named, name = _split_summary_entry(entry)
        if named is not None and named == provider:
            return name
        if named is None and model_owner(name) in (None, provider):
            bare = name
    return bare or model


def configured_summary_model(settings: Settings, provider: str, model: str) -> str:
    """The model the settings name to summarize a conversation of ``model`` whose wire format is
    ``provider``'s (the format's ``provider``): the summary model named for that provider, else a bare name
    that is that provider's (or whose provider the name does not tell), else the call's own model. So
    ``claude-haiku-4-5`` alone is never sent to OpenAI."""
    return _summary_model_for(settings.summary_model, provider, model)


def summary_model_for(settings: Settings, provider: str, model: str) -> str:
    """The model that summarizes a conversation of ``model`` (:func:`configured_summary_model`), unless the
    provider said it does not know that model (:func:`reject_summary_model`): then the call's own model."""
    chosen = _summary_model_for(settings.summary_model, provider, model)
    if chosen != model and (provider, chosen) in _rejected_summary_models:
        return model
    return chosen


#: (provider, model) of the summary models a provider said it does not know (a typo in
#: OTEL_CONTEXT_SUMMARY_MODEL, a model the account cannot use): their conversations summarize with their own
#: model instead, so a mistyped setting costs no compaction.
_rejected_summary_models: set[tuple[str, str]] = set()
# Reset: forgotten (a test, or an app that starts afresh, tries the setting again). A fork's child: kept (the
# provider's answer holds there too).
process_state.register(
    __name__, ("_rejected_summary_models",), on_reset=_rejected_summary_models.clear, in_forked_child=None
)


def reject_summary_model(provider: str, name: str) -> bool:
    """Remember that ``provider`` does not know the summary model ``name``; True the first time."""
    key = (provider, name)
    if key in _rejected_summary_models:
        return False
    _rejected_summary_models.add(key)
    return True


def in_force(env: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(variable, value in force, where it comes from) for every variable of :data:`ENV_VARS`, as
    ``otel-context settings`` prints them: from ``environment``, the ``default``, or the default because the
    environment's value is not usable (its warning says why). A key is never shown, nor a URL's password."""
    env = os.environ if env is None else env
    resolved = resolve(env=env)
    rows: list[tuple[str, str, str]] = []
    for var, (name, kind) in ENV_VARS.items():
        raw = env.get(var, "").strip()
        source = "default"
        if raw:
            try:
                _parse(kind, raw, var)
                source = "environment"
            except SettingsError:
                source = "default: the environment's value is not usable"
        value = getattr(resolved, name)
        if kind == "key":
            shown = "(set)" if value else "none"
        elif kind == "store" and isinstance(value, str):
            shown = store_spec.safe_address(value)
        elif kind == "windows":
            shown = ",".join(f"{model}={tokens}" for model, tokens in value) or "none"
        else:
            shown = _shown(value)
        rows.append((var, shown, source))
    return rows
