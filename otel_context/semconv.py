"""Every telemetry name otel-context emits, in one place.

These names are an API (documented in ``docs/telemetry.md``): users build
dashboards, TraceQL queries and alerts on them. Change one only with a deprecation note in the changelog.
No other module may spell a telemetry name as a string literal; import it from here.

Standard names follow the OpenTelemetry GenAI semantic conventions (semantic-conventions-genai v0.1.0).
Everything semconv does not define lives under the project's own ``otel_context.`` namespace.
"""

from __future__ import annotations

from typing import Final

# --- instrumentation scope -------------------------------------------------------------------------------
SCOPE_NAME: Final = "otel_context"

# --- span names ----------------------------------------------------------------------------------------
COMPACT_SPAN: Final = "compact"

# gen_ai.operation.name values
OP_CHAT: Final = "chat"
OP_EMBEDDINGS: Final = "embeddings"
OP_COUNT_TOKENS: Final = "count_tokens"
OP_COMPACT: Final = "compact"  # OpenAI ``responses.compact``: a server-side compaction call

# gen_ai.provider.name values
PROVIDER_ANTHROPIC: Final = "anthropic"
PROVIDER_OPENAI: Final = "openai"
PROVIDER_AZURE_OPENAI: Final = "azure.ai.openai"
PROVIDER_DEEPSEEK: Final = "deepseek"
PROVIDER_AWS_BEDROCK: Final = "aws.bedrock"
PROVIDER_GCP_VERTEX: Final = "gcp.vertex_ai"

# --- GenAI span attributes (semconv) -------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_CONVERSATION_COMPACTED: Final = "gen_ai.conversation.compacted"
#: How the call's conversation was identified: ``explicit`` (the app named it) or ``derived`` (provider and
#: first user message name a family; the call's own history picks the conversation within it).
CONVERSATION_ID_SOURCE: Final = "otel_context.conversation.id_source"
ID_SOURCE_EXPLICIT: Final = "explicit"
ID_SOURCE_DERIVED: Final = "derived"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"  # legacy metric attribute, behind the legacy switch
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"

# Content-capture events (EVENT_ONLY / SPAN_AND_EVENT)
EVENT_GEN_AI_CLIENT_INFERENCE_DETAILS: Final = "gen_ai.client.inference.operation.details"
#: What the size cap of captured content (OTEL_CONTEXT_CAPTURE_MAX_CHARS) took out, next to the content (on the
#: span or the details event), only when it took something: the oldest messages (or system-instruction parts)
#: left out, and the texts cut (each cut text ends with ``...[truncated N characters]``).
CAPTURE_MESSAGES_OMITTED: Final = "otel_context.capture.messages_omitted"
CAPTURE_TEXTS_CUT: Final = "otel_context.capture.texts_cut"

# Finish reasons, normalized as OpenTelemetry's own instrumentations do.
FINISH_REASON_MAP: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
}

# --- context attributes (project namespace) --------------------------------------------------------------
CONTEXT_WINDOW: Final = "otel_context.context.window"
CONTEXT_EFFECTIVE_WINDOW: Final = "otel_context.context.effective_window"
CONTEXT_ESTIMATED_TOKENS: Final = "otel_context.context.estimated_tokens"
CONTEXT_UTILIZATION: Final = "otel_context.context.utilization"
CONTEXT_STATE: Final = "otel_context.context.state"
CONTEXT_STATE_OK: Final = "ok"
CONTEXT_STATE_WARNING: Final = "warning"
CONTEXT_STATE_ERROR: Final = "error"
CONTEXT_STATE_BLOCKING: Final = "blocking"
# Why a history was sent unchanged although compaction was wanted (unknown blocks, broken pairing, ...).
CONTEXT_COMPACTION_SKIPPED_REASON: Final = "otel_context.compaction.skipped_reason"

# --- shared conversation state (otel_context.conversation.state_store) ---------------------------------------
# Where a call's conversation state came from: this process's memory, the shared store, or this process's
# memory because the shared store failed (down, slow, full, garbage).
STATE_SOURCE: Final = "otel_context.state.source"
STATE_SOURCE_MEMORY: Final = "memory"
STATE_SOURCE_STORE: Final = "store"
STATE_SOURCE_FALLBACK: Final = "fallback"
STATE_SOURCES: Final = (STATE_SOURCE_MEMORY, STATE_SOURCE_STORE, STATE_SOURCE_FALLBACK)
# Attribute of the errors metric: which store operation failed (error.type says how).
STATE_STORE_OPERATION: Final = "otel_context.state_store.operation"
STATE_STORE_OPERATIONS: Final = ("get", "put", "lock", "release", "wait", "remove")
STATE_STORE_ERROR_TYPES: Final = ("timeout", "unavailable", "full", "response", "garbage", "too_large", "unencodable")

# --- cache attributes -------------------------------------------------------------------------------------
CACHE_HIT_RATIO: Final = "otel_context.cache.hit_ratio"

# --- cost (otel_context/pricing.py; docs/telemetry.md, "Cost") ----------------------------------------------
#: What the call cost, in COST_CURRENCY, and its parts, which add up to it: input neither read from nor written
#: to the cache (and any cache tokens the model does not price apart), cache reads, cache writes (the 1-hour
#: TTL's share of them apart too, where reported), output without reasoning, reasoning. A part absent is 0;
#: an unknown model gets none of these (never a guessed price).
COST_AMOUNT: Final = "otel_context.cost.amount"
COST_CURRENCY: Final = "otel_context.cost.currency"
#: Where the price came from: ``genai-prices <version>`` (its bundled table) or ``user`` (OTEL_CONTEXT_PRICES).
COST_SOURCE: Final = "otel_context.cost.source"
COST_INPUT: Final = "otel_context.cost.input"
COST_CACHE_READ: Final = "otel_context.cost.cache_read"
COST_CACHE_WRITE: Final = "otel_context.cost.cache_write"
COST_CACHE_WRITE_1H: Final = "otel_context.cost.cache_write_1h"
COST_OUTPUT: Final = "otel_context.cost.output"
COST_REASONING: Final = "otel_context.cost.reasoning"
#: The conversation's spend so far in this process, this call included (on its chat spans; never a metric label).
CONVERSATION_COST: Final = "otel_context.conversation.cost"
#: What the compactions whose result this call sends saved on it: the tokens they removed from the history (all
#: of them, a chain of compactions together) at the model's cache-read price (docs/telemetry.md, "Cost").
COST_COMPACTION_SAVING: Final = "otel_context.cost.compaction_saving"
#: On the compact span: what the compaction's summarizer calls cost (USD; every attempt and part, a failed or
#: discarded summary's too), and its estimated saving on each following call that sends its result (the tokens
#: it removed at the model's cache-read price).
COMPACTION_COST: Final = "otel_context.compaction.cost"
COMPACTION_SAVING_PER_CALL: Final = "otel_context.compaction.saving_per_call"
#: The GenAI conventions' proposed names for the same figures (not merged yet), emitted beside ours only with
#: ``OTEL_CONTEXT_CONVENTIONS=proposed``.
GEN_AI_USAGE_COST_AMOUNT: Final = "gen_ai.usage.cost.amount"
GEN_AI_USAGE_COST_CURRENCY: Final = "gen_ai.usage.cost.currency"
GEN_AI_USAGE_COST_SOURCE: Final = "gen_ai.usage.cost.source"
#: Values of OTEL_CONTEXT_CONVENTIONS: names beyond the conventions otel-context follows by default. ``proposed``:
#: names proposed to the conventions, not merged yet (above); ``legacy``: the older names of what otel-context
#: emits under the current ones, beside them, for viewers and dashboards that lag the conventions (the cache-write
#: attribute below, and the older metrics as OTEL_CONTEXT_LEGACY_METRICS emits them).
CONVENTIONS_PROPOSED: Final = "proposed"
CONVENTIONS_LEGACY: Final = "legacy"
CONVENTIONS: Final = (CONVENTIONS_PROPOSED, CONVENTIONS_LEGACY)
#: The cache-write tokens' name up to core semconv v1.41 (since: gen_ai.usage.cache_write.input_tokens), still
#: what Arize Phoenix 20.x reads to price cache writes; on the chat span beside the current name, with the same
#: figure, only with OTEL_CONTEXT_CONVENTIONS=legacy.
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"

# --- compact span attributes ----------------------------------------------------------------------------
COMPACTION_TRIGGER_SOURCE: Final = "otel_context.compaction.trigger_source"
COMPACTION_STRATEGY: Final = "otel_context.compaction.strategy"
COMPACTION_INPUT_TOKENS: Final = "otel_context.compaction.input_tokens"
COMPACTION_OUTPUT_TOKENS: Final = "otel_context.compaction.output_tokens"
COMPACTION_SUMMARY_TOKENS: Final = "otel_context.compaction.summary_tokens"
COMPACTION_MESSAGES_COMPACTED: Final = "otel_context.compaction.messages_compacted"
COMPACTION_DURATION_MS: Final = "otel_context.compaction.duration_ms"
COMPACTION_OUTCOME: Final = "otel_context.compaction.outcome"
COMPACTION_CONSECUTIVE_FAILURES: Final = "otel_context.compaction.consecutive_failures"
COMPACTION_FILES_REHYDRATED: Final = "otel_context.compaction.files_rehydrated"
COMPACTION_USER_MESSAGES_KEPT: Final = "otel_context.compaction.user_messages_kept"
COMPACTION_THRESHOLD_TOKENS: Final = "otel_context.compaction.threshold_tokens"
COMPACTION_BREAKER_OPEN: Final = "otel_context.compaction.breaker_open"
# On the chat span of a call that compacts while its conversation compacts on most of its calls (a compaction
# loop, engine/economics.py): each compaction leaves too little room for the calls after it.
COMPACTION_LOOP: Final = "otel_context.compaction.loop"
# The summarizer's last reply's finish reason, normalized as gen_ai.response.finish_reasons is (``stop``;
# ``length``: cut at its max_tokens, never a success). Not gen_ai.response.finish_reasons itself: the compact
# span is not an inference span, and GenAI backends would count it as one.
COMPACTION_FINISH_REASON: Final = "otel_context.compaction.finish_reason"
# Whether the summary was prepared in the background before the threshold (``background``) or made while
# the caller waited (``inline``); on compact spans and on the compactions counter.
COMPACTION_MODE: Final = "otel_context.compaction.mode"
MODE_INLINE: Final = "inline"
MODE_BACKGROUND: Final = "background"
COMPACTION_MODES: Final = (MODE_INLINE, MODE_BACKGROUND)
# What a compaction kept (otel_context/compaction/retention.py): the fraction of the dropped span's salient
# items found in the new request, how many were checked, and where the cut fell (messages replaced by the
# summary; 0 for microcompact).
COMPACTION_RETENTION: Final = "otel_context.compaction.retention"
COMPACTION_ITEMS_CHECKED: Final = "otel_context.compaction.items_checked"
COMPACTION_CUT_INDEX: Final = "otel_context.compaction.cut_index"
#: Event on the compact span (content capture on only): the salient items not found, capped.
COMPACTION_LOST_EVENT: Final = "otel_context.compaction.lost"
COMPACTION_LOST_ITEMS: Final = "otel_context.compaction.lost.items"  # string[]: the items, oldest first
COMPACTION_LOST_KINDS: Final = "otel_context.compaction.lost.kinds"  # string[]: the kind of each item
COMPACTION_LOST_COUNT: Final = "otel_context.compaction.lost.count"  # int: all items lost (before the cap)
# The repair of a summary from that check (otel_context/compaction/repair.py): the figure before the repair
# (COMPACTION_RETENTION is the one after it, what the request that goes out holds), the tokens it added and
# its budget, what it restored and what did not fit, by kind (one attribute per kind of RETENTION_KINDS that
# it restores, e.g. otel_context.compaction.repair.restored.instruction), and restored sentences marked as
# replaced by a later one. And the user's messages the verbatim list dropped to keep the head smaller than
# what it replaces (the lowest in priority first; their sentences are the repair's).
COMPACTION_RETENTION_BEFORE_REPAIR: Final = "otel_context.compaction.retention.before_repair"
COMPACTION_REPAIR_TOKENS: Final = "otel_context.compaction.repair.tokens"
COMPACTION_REPAIR_BUDGET: Final = "otel_context.compaction.repair.budget"
COMPACTION_REPAIR_RESTORED: Final = "otel_context.compaction.repair.restored"  # int: items restored, all kinds
COMPACTION_REPAIR_RESTORED_PREFIX: Final = "otel_context.compaction.repair.restored."  # + kind: int
COMPACTION_REPAIR_LEFT_OUT: Final = "otel_context.compaction.repair.left_out"  # int: lost, over the budget
COMPACTION_REPAIR_LEFT_OUT_PREFIX: Final = "otel_context.compaction.repair.left_out."  # + kind: int
COMPACTION_REPAIR_SUPERSEDED: Final = "otel_context.compaction.repair.superseded"
COMPACTION_USER_MESSAGES_DROPPED: Final = "otel_context.compaction.user_messages_dropped"
COMPACTION_SUMMARY_PARTS: Final = "otel_context.compaction.summary_parts"
# The summary model the settings name and the provider said it does not know (a 404 ``not_found_error`` /
# ``model_not_found``): the compaction summarized with the call's own model instead.
COMPACTION_SUMMARY_MODEL_REJECTED: Final = "otel_context.compaction.summary_model_rejected"
# The app's pins (otel_context.pin) kept verbatim before the summary, and those over their cap.
COMPACTION_PINNED_KEPT: Final = "otel_context.compaction.pinned_kept"
COMPACTION_PINNED_DROPPED: Final = "otel_context.compaction.pinned_dropped"
# The work trail a summary message carries (otel_context/compaction/trail.py): its tokens and budget, what it
# holds by kind (one attribute per kind of TRAIL_KINDS, e.g. otel_context.compaction.trail.files_changed) and
# what did not fit its budget at this compaction, in all and by kind (otel_context.compaction.trail.dropped.files_read).
COMPACTION_TRAIL_TOKENS: Final = "otel_context.compaction.trail.tokens"
COMPACTION_TRAIL_BUDGET: Final = "otel_context.compaction.trail.budget"
COMPACTION_TRAIL_PREFIX: Final = "otel_context.compaction.trail."  # + kind: int, what the trail holds
COMPACTION_TRAIL_DROPPED: Final = "otel_context.compaction.trail.dropped"  # int: left out, all kinds
COMPACTION_TRAIL_DROPPED_PREFIX: Final = "otel_context.compaction.trail.dropped."  # + kind: int
TRAIL_KIND_CHANGED: Final = "files_changed"
TRAIL_KIND_CREATED: Final = "files_created"
TRAIL_KIND_READ: Final = "files_read"
TRAIL_KIND_DEFINITION: Final = "definitions"
TRAIL_KIND_OPEN_ERROR: Final = "errors_open"
TRAIL_KIND_CLOSED_ERROR: Final = "errors_closed"
TRAIL_KIND_COMMAND: Final = "commands"
TRAIL_KIND_DECISION: Final = "decisions"
TRAIL_KINDS: Final = (
    TRAIL_KIND_CHANGED,
    TRAIL_KIND_CREATED,
    TRAIL_KIND_READ,
    TRAIL_KIND_DEFINITION,
    TRAIL_KIND_OPEN_ERROR,
    TRAIL_KIND_CLOSED_ERROR,
    TRAIL_KIND_COMMAND,
    TRAIL_KIND_DECISION,
)
RETENTION_KIND_INSTRUCTION: Final = "instruction"
RETENTION_KIND_ERROR: Final = "error"
RETENTION_KIND_PATH: Final = "path"
RETENTION_KIND_IDENTIFIER: Final = "identifier"
RETENTION_KIND_NUMBER: Final = "number"
# The work trail's kinds the check counts too (what it holds of the replaced span): the assistant's decisions,
# the commands run and the definitions read or changed.
RETENTION_KIND_DECISION: Final = "decision"
RETENTION_KIND_COMMAND: Final = "command"
RETENTION_KIND_DEFINITION: Final = "definition"
RETENTION_KINDS: Final = (
    RETENTION_KIND_INSTRUCTION,
    RETENTION_KIND_ERROR,
    RETENTION_KIND_PATH,
    RETENTION_KIND_IDENTIFIER,
    RETENTION_KIND_NUMBER,
    RETENTION_KIND_DECISION,
    RETENTION_KIND_COMMAND,
    RETENTION_KIND_DEFINITION,
)

# Why an LLM call was made, on the summarizer's own calls only (chat span and its metric series: duration and
# the four token counters), so that a dashboard can set what compaction costs against what it saves. Absent
# on the app's calls (no extra series, nothing added to the per-call cost).
CALL_PURPOSE: Final = "otel_context.call.purpose"
PURPOSE_COMPACTION: Final = "compaction"

TRIGGER_AUTO: Final = "auto"
TRIGGER_MANUAL: Final = "manual"
TRIGGER_REACTIVE: Final = "reactive"
TRIGGER_PROVIDER: Final = "provider"
TRIGGER_SOURCES: Final = (TRIGGER_AUTO, TRIGGER_MANUAL, TRIGGER_REACTIVE, TRIGGER_PROVIDER)

STRATEGY_MICROCOMPACT: Final = "microcompact"
STRATEGY_SUMMARY: Final = "summary"
STRATEGY_TRUNCATE: Final = "truncate"
STRATEGY_PROVIDER: Final = "provider"
STRATEGIES: Final = (STRATEGY_MICROCOMPACT, STRATEGY_SUMMARY, STRATEGY_TRUNCATE, STRATEGY_PROVIDER)

OUTCOME_SUCCESS: Final = "success"
OUTCOME_FAILURE: Final = "failure"
OUTCOME_SKIPPED: Final = "skipped"
OUTCOMES: Final = (OUTCOME_SUCCESS, OUTCOME_FAILURE, OUTCOME_SKIPPED)
#: A background summary that was never applied (the history was rewound or edited below its cut, a newer
#: compaction replaced it, the conversation was forgotten, or the instrumentation was removed).
OUTCOME_DISCARDED: Final = "discarded"
# Why a background summary was discarded: on its ``discarded`` compact span and on the background summaries
# counter (below), so that a summarizer's spend on summaries nobody used has a cause.
COMPACTION_DISCARD_REASON: Final = "otel_context.compaction.discard_reason"
#: The history was edited or rewound below its cut.
DISCARD_STALE: Final = "stale"
#: A newer compaction covered its prefix first.
DISCARD_SUPERSEDED: Final = "superseded"
#: It would not make the request smaller than what the call sends already.
DISCARD_NO_GAIN: Final = "no_gain"
#: Still running when a call at the blocking limit stopped waiting for it (that call compacted inline).
DISCARD_LATE: Final = "late"
#: Its result needs a pairing repair of the part it keeps (not replayable byte for byte).
DISCARD_UNUSABLE: Final = "unusable"
#: The conversation's state was forgotten (evicted, idle, cleared).
DISCARD_FORGOTTEN: Final = "forgotten"
#: Given up: uninstrument(), engine.reset(), or the app closed a client the summary had to share.
DISCARD_ABANDONED: Final = "abandoned"
#: The interpreter exited while it ran.
DISCARD_EXIT: Final = "exit"
DISCARD_REASONS: Final = (
    DISCARD_STALE,
    DISCARD_SUPERSEDED,
    DISCARD_NO_GAIN,
    DISCARD_LATE,
    DISCARD_UNUSABLE,
    DISCARD_FORGOTTEN,
    DISCARD_ABANDONED,
    DISCARD_EXIT,
)
# A background summary's life on the background summaries counter: made and ready (``prepared``), sent by a
# call (``applied``), dropped unsent (``discarded``, with its reason).
BACKGROUND_EVENT: Final = "otel_context.compaction.background_event"
BACKGROUND_PREPARED: Final = "prepared"
BACKGROUND_APPLIED: Final = "applied"
BACKGROUND_DISCARDED: Final = "discarded"
BACKGROUND_EVENTS: Final = (BACKGROUND_PREPARED, BACKGROUND_APPLIED, BACKGROUND_DISCARDED)

# --- foreign conventions on the compact span, for GenAI-aware trace viewers (compaction/viewers.py) ----------
# OpenInference's names (Arize Phoenix, and the tools built on its conventions): the span's kind, and its input
# and output in words. Foreign because the GenAI conventions have no operation for a compaction (none of the
# registry's gen_ai.operation.name values fits, and a custom one would have GenAI backends count the span as a
# model call), and such viewers read these. Only on the compact span; never message text unless content capture
# is on.
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
#: A summary (or the provider's compaction): a step that calls a model itself (its summarizer's chat span).
OPENINFERENCE_KIND_CHAIN: Final = "CHAIN"
#: A microcompaction (or a truncation): the request rewritten by rule, no model call.
OPENINFERENCE_KIND_PROMPT: Final = "PROMPT"
INPUT_VALUE: Final = "input.value"
INPUT_MIME_TYPE: Final = "input.mime_type"
OUTPUT_VALUE: Final = "output.value"
OUTPUT_MIME_TYPE: Final = "output.mime_type"
MIME_TEXT_PLAIN: Final = "text/plain"

# --- where a compaction prepared in the background went (events on the chat span) ---------------------------
#: On the chat span of the call that sends a summary prepared in the background (this worker's, or one the
#: fleet published), with a span link to that summary's ``compact`` span: that span ended when the summary was
#: ready, in a trace of its own, so the application is recorded here. Attributes: trigger source, mode, and
#: the context before and after on this call (``COMPACTION_INPUT_TOKENS`` / ``COMPACTION_OUTPUT_TOKENS``) and
#: the threshold that applied.
COMPACTION_APPLIED_EVENT: Final = "otel_context.compaction.applied"
#: A background summary's calls and its ``compact`` span name each other's trace and span (hex, as viewers show
#: them), besides the span links: a viewer that stores no links (Arize Phoenix) still leads from one to the
#: other, and any viewer finds one from the other's id with a search. On the chat span of the call that
#: started the summary (``started``) and of the call that sends it (``applied``): the summary's compact span;
#: on that compact span: the call that started it (``started_by``; it ended before any call applied it, so the
#: applying call is found by searching for its ``applied.trace_id``); on the ``discarded`` record of a summary
#: dropped unapplied: the summary's compact span.
COMPACTION_STARTED_TRACE_ID: Final = "otel_context.compaction.started.trace_id"
COMPACTION_STARTED_SPAN_ID: Final = "otel_context.compaction.started.span_id"
COMPACTION_APPLIED_TRACE_ID: Final = "otel_context.compaction.applied.trace_id"
COMPACTION_APPLIED_SPAN_ID: Final = "otel_context.compaction.applied.span_id"
COMPACTION_STARTED_BY_TRACE_ID: Final = "otel_context.compaction.started_by.trace_id"
COMPACTION_STARTED_BY_SPAN_ID: Final = "otel_context.compaction.started_by.span_id"
COMPACTION_DISCARDED_TRACE_ID: Final = "otel_context.compaction.discarded.trace_id"
COMPACTION_DISCARDED_SPAN_ID: Final = "otel_context.compaction.discarded.span_id"

# --- a request the provider rejected as too long (the call then compacts and retries it once) ---------------
#: On the chat span, before the retry: what the provider said, so the retried span still shows the rejection.
REQUEST_REJECTED_EVENT: Final = "otel_context.request.rejected"
#: The provider's message (capped; it names sizes, never the conversation's text).
REQUEST_REJECTED_MESSAGE: Final = "otel_context.request.rejected.message"
#: The request's size and the limit the provider stated, in its tokens (when its message says).
REQUEST_REJECTED_INPUT_TOKENS: Final = "otel_context.request.rejected.input_tokens"
REQUEST_REJECTED_LIMIT_TOKENS: Final = "otel_context.request.rejected.limit_tokens"
#: The HTTP status of the rejection (absent for a response that stopped at the window).
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"

# --- cache-break events -----------------------------------------------------------------------------------
CACHE_BREAK_EVENT: Final = "otel_context.cache_break"
CACHE_BREAK_INTENTIONAL: Final = "otel_context.cache_break.intentional"
CACHE_BREAK_REASON: Final = "otel_context.cache_break.reason"
CACHE_BREAK_EXPECTED_LOST_TOKENS: Final = "otel_context.cache_break.expected_lost_tokens"
CACHE_BREAK_LOST_TOKENS: Final = "otel_context.cache_break.lost_tokens"
#: What the break costs (USD): the prefix it made the provider write again (an unexpected break: the lost
#: tokens; a compaction: what of its result the next call writes, at most what was lost) at the write price of
#: the cache's TTL (the input price where writes have none, e.g. OpenAI), less what reading it would have cost.
CACHE_BREAK_COST: Final = "otel_context.cache_break.cost"

REASON_COMPACTION: Final = "compaction"
REASON_SYSTEM_CHANGED: Final = "system_changed"
REASON_TOOLS_CHANGED: Final = "tools_changed"
REASON_MODEL_CHANGED: Final = "model_changed"
REASON_MESSAGES_CHANGED: Final = "messages_changed"
REASON_TTL_EXPIRED: Final = "ttl_expired"
REASON_BETAS_CHANGED: Final = "betas_changed"
REASON_UNKNOWN: Final = "unknown"
CACHE_BREAK_REASONS: Final = (
    REASON_SYSTEM_CHANGED,
    REASON_TOOLS_CHANGED,
    REASON_MODEL_CHANGED,
    REASON_MESSAGES_CHANGED,
    REASON_TTL_EXPIRED,
    REASON_BETAS_CHANGED,
    REASON_UNKNOWN,
)

# --- the provider's own cache diagnosis (Anthropic ``diagnostics``, OpenAI ``prompt_cache_diagnostics``) -----
# On the chat span of a call whose response carries one (otel_context/cache.py reads it, docs/telemetry.md).
#: What the provider said: ``hit`` (nothing in the prompt diverged from the compared response), ``miss`` (it
#: names a reason), ``pending`` (the comparison had not finished when the response was sent), ``not_found``
#: (the provider has no record of the compared response), ``unavailable`` (it cannot say), ``unknown`` (the
#: response carried nothing we can read as a diagnosis: no diagnostics field although one was asked, an endpoint
#: that ignores the request for one, a shape we do not know).
CACHE_DIAGNOSIS_STATUS: Final = "otel_context.cache_diagnosis.status"
DIAGNOSIS_HIT: Final = "hit"
DIAGNOSIS_MISS: Final = "miss"
DIAGNOSIS_PENDING: Final = "pending"
DIAGNOSIS_NOT_FOUND: Final = "not_found"
DIAGNOSIS_UNAVAILABLE: Final = "unavailable"
DIAGNOSIS_UNKNOWN: Final = "unknown"
DIAGNOSIS_STATUSES: Final = (
    DIAGNOSIS_HIT,
    DIAGNOSIS_MISS,
    DIAGNOSIS_PENDING,
    DIAGNOSIS_NOT_FOUND,
    DIAGNOSIS_UNAVAILABLE,
    DIAGNOSIS_UNKNOWN,
)
#: The provider's reason of a miss, as it spelled it (Anthropic ``model_changed`` | ``system_changed`` |
#: ``tools_changed`` | ``messages_changed``; OpenAI ``model_changed`` | ``prompt_cache_key_changed`` |
#: ``tools_changed`` | ``text_format_changed`` | ``reasoning_effort_changed`` | ``verbosity_changed`` |
#: ``context_compacted`` | ``input_changed`` | ``service_tier_changed``); on the metric, the status when
#: there is no miss (``hit``, ``pending``, ...).
CACHE_DIAGNOSIS_PROVIDER_REASON: Final = "otel_context.cache_diagnosis.provider_reason"
#: The input tokens the provider says the change cost (Anthropic ``cache_missed_input_tokens``, OpenAI
#: ``cache_missed_tokens``) and, OpenAI only, the reusable prefix of the compared response.
CACHE_DIAGNOSIS_MISSED_TOKENS: Final = "otel_context.cache_diagnosis.missed_tokens"
CACHE_DIAGNOSIS_REUSABLE_TOKENS: Final = "otel_context.cache_diagnosis.reusable_tokens"
#: Our detector's reason for the same call: a ``cache_break`` reason, ``compaction`` (an intentional break
#: announced for this call) or ``none`` (no break detected).
CACHE_DIAGNOSIS_DETECTOR_REASON: Final = "otel_context.cache_diagnosis.detector_reason"
DETECTOR_NONE: Final = "none"
#: Whether the detector and the provider say the same: ``agree``, ``disagree``, or ``unknown`` when the
#: provider gave no verdict (pending, not_found, unavailable, unknown).
CACHE_DIAGNOSIS_AGREEMENT: Final = "otel_context.cache_diagnosis.agreement"
AGREEMENT_AGREE: Final = "agree"
AGREEMENT_DISAGREE: Final = "disagree"
AGREEMENT_UNKNOWN: Final = "unknown"
AGREEMENTS: Final = (AGREEMENT_AGREE, AGREEMENT_DISAGREE, AGREEMENT_UNKNOWN)

# --- metrics: standard (semconv-genai v0.1.0) ---------------------------------------------------------------
METRIC_INFERENCE_DURATION: Final = "gen_ai.client.inference.duration"
METRIC_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.inference.time_to_first_chunk"
METRIC_USAGE_INPUT_TOKENS: Final = "gen_ai.client.inference.usage.input_tokens"
METRIC_USAGE_OUTPUT_TOKENS: Final = "gen_ai.client.inference.usage.output_tokens"
METRIC_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.client.inference.usage.cache_read.input_tokens"
METRIC_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.client.inference.usage.cache_write.input_tokens"
# Older names, only behind the documented legacy switch (OTEL_CONTEXT_LEGACY_METRICS).
METRIC_LEGACY_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
METRIC_LEGACY_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"

# Bucket boundaries the GenAI semconv advises.
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
TIME_TO_FIRST_CHUNK_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
UTILIZATION_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1)
RETENTION_BUCKETS: Final = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)

# --- metrics: project --------------------------------------------------------------------------------------
METRIC_COMPACTIONS: Final = "otel_context.compactions"
METRIC_COMPACTION_DURATION: Final = "otel_context.compaction.duration"
METRIC_COMPACTION_TOKENS_SAVED: Final = "otel_context.compaction.tokens_saved"
METRIC_BREAKERS_OPEN: Final = "otel_context.compaction.breakers_open"
METRIC_CACHE_BREAKS: Final = "otel_context.cache_breaks"
METRIC_CONTEXT_UTILIZATION: Final = "otel_context.context.utilization"
METRIC_STATE_STORE_ERRORS: Final = "otel_context.state_store.errors"
#: Summaries prepared in the background, by ``otel_context.compaction.background_event`` (prepared, applied,
#: discarded) and, for a discard, ``otel_context.compaction.discard_reason`` (and provider, model).
METRIC_BACKGROUND_SUMMARIES: Final = "otel_context.compaction.background_summaries"
#: Conversations that started compacting on most of their calls (a compaction loop), by provider and model.
METRIC_COMPACTION_LOOPS: Final = "otel_context.compaction.loops"
#: Seconds a caller's request waited for a compaction before it went out (0 when a background summary was
#: ready), by mode and trigger_source: what background compaction takes off the critical path.
METRIC_COMPACTION_WAIT: Final = "otel_context.compaction.wait"
#: Fraction of a compaction's dropped salient items found in the new request (by trigger_source, strategy);
#: a summary's after its repair.
METRIC_COMPACTION_RETENTION: Final = "otel_context.compaction.retention"
#: The same fraction for a summary as the summarizer wrote it, before the repair (a panel shows both).
METRIC_COMPACTION_RETENTION_BEFORE_REPAIR: Final = "otel_context.compaction.retention.before_repair"
#: Calls whose response carried the provider's cache diagnosis, by detector reason, provider reason and
#: agreement (and provider, model): the detector's agreement with the provider over time.
METRIC_CACHE_DIAGNOSES: Final = "otel_context.cache_diagnoses"
#: Summaries made with the call's own model because the provider does not know the configured summary model
#: (by provider and the call's model).
METRIC_SUMMARY_MODEL_FALLBACKS: Final = "otel_context.compaction.summary_model_fallbacks"
#: What calls cost (USD), with the token counters' attributes (operation, provider, model, the summarizer's
#: ``otel_context.call.purpose``): summed in process like them (otel_context/token_counters.py).
METRIC_SPEND: Final = "otel_context.spend"
#: The part of it that paid for cache writes (USD; ``otel_context.cost.cache_write``), same attributes: the
#: cache-write share of spend (writes are often a bill's largest line).
METRIC_SPEND_CACHE_WRITE: Final = "otel_context.spend.cache_write"
#: What compactions saved on the calls that sent their result (USD; the chat span's
#: ``otel_context.cost.compaction_saving``), with the spend counter's attributes, summed in process like it.
METRIC_COMPACTION_SAVING: Final = "otel_context.compaction.saving"
#: What cache breaks cost (USD; the event's ``otel_context.cache_break.cost``), by intentional, reason,
#: provider, model: the spend lost to unexpected breaks, and what compactions pay in cache.
METRIC_CACHE_BREAK_COST: Final = "otel_context.cache_breaks.cost"
#: What summaries never applied cost (USD: a background summary discarded), by trigger source, strategy, mode.
METRIC_COMPACTION_DISCARDED_SPEND: Final = "otel_context.compaction.discarded_spend"
#: The unit of every cost metric: a UCUM annotation (Prometheus names carry no unit suffix for it).
UNIT_USD: Final = "{USD}"


# Prometheus-side names (after the OTLP/Prometheus exporters' translation), used by dashboards and rules.
PROM_COMPACTIONS_TOTAL: Final = "otel_context_compactions_total"
PROM_COMPACTION_DURATION: Final = "otel_context_compaction_duration_seconds"
PROM_COMPACTION_TOKENS_SAVED: Final = "otel_context_compaction_tokens_saved"
PROM_BREAKERS_OPEN: Final = "otel_context_compaction_breakers_open"
PROM_CACHE_BREAKS_TOTAL: Final = "otel_context_cache_breaks_total"
PROM_CONTEXT_UTILIZATION: Final = "otel_context_context_utilization"
PROM_STATE_STORE_ERRORS_TOTAL: Final = "otel_context_state_store_errors_total"
PROM_BACKGROUND_SUMMARIES_TOTAL: Final = "otel_context_compaction_background_summaries_total"
PROM_COMPACTION_LOOPS_TOTAL: Final = "otel_context_compaction_loops_total"
PROM_COMPACTION_WAIT: Final = "otel_context_compaction_wait_seconds"
PROM_COMPACTION_RETENTION: Final = "otel_context_compaction_retention"
PROM_COMPACTION_RETENTION_BEFORE_REPAIR: Final = "otel_context_compaction_retention_before_repair"
PROM_CACHE_DIAGNOSES_TOTAL: Final = "otel_context_cache_diagnoses_total"
PROM_SPEND_TOTAL: Final = "otel_context_spend_total"
PROM_SPEND_CACHE_WRITE_TOTAL: Final = "otel_context_spend_cache_write_total"
PROM_COMPACTION_SAVING_TOTAL: Final = "otel_context_compaction_saving_total"
PROM_CACHE_BREAK_COST_TOTAL: Final = "otel_context_cache_breaks_cost_total"
PROM_COMPACTION_DISCARDED_SPEND_TOTAL: Final = "otel_context_compaction_discarded_spend_total"

# Prometheus-side names of the standard metrics (UnderscoreEscapingWithSuffixes, what
# opentelemetry-exporter-prometheus and Prometheus 3's OTLP receiver produce by default), for dashboards and
# rules. Histograms get ``_bucket``/``_sum``/``_count`` appended; counters already carry ``_total``.
PROM_INFERENCE_DURATION: Final = "gen_ai_client_inference_duration_seconds"
PROM_TIME_TO_FIRST_CHUNK: Final = "gen_ai_client_inference_time_to_first_chunk_seconds"
PROM_USAGE_INPUT_TOKENS_TOTAL: Final = "gen_ai_client_inference_usage_input_tokens_total"
PROM_USAGE_OUTPUT_TOKENS_TOTAL: Final = "gen_ai_client_inference_usage_output_tokens_total"
PROM_USAGE_CACHE_READ_INPUT_TOKENS_TOTAL: Final = "gen_ai_client_inference_usage_cache_read_input_tokens_total"
PROM_USAGE_CACHE_WRITE_INPUT_TOKENS_TOTAL: Final = "gen_ai_client_inference_usage_cache_write_input_tokens_total"
PROM_LEGACY_OPERATION_DURATION: Final = "gen_ai_client_operation_duration_seconds"
PROM_LEGACY_TOKEN_USAGE: Final = "gen_ai_client_token_usage"
# Read, never emitted: older GenAI instrumentations (core semconv <= v1.41) report time to first chunk
# under this name, so the dashboards read it as an alternate of METRIC_TIME_TO_FIRST_CHUNK.
METRIC_LEGACY_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
PROM_LEGACY_TIME_TO_FIRST_CHUNK: Final = "gen_ai_client_operation_time_to_first_chunk_seconds"

# --- agent and tool spans (semconv GenAI), emitted by the demo agent and shown in examples -----------------
# `invoke_agent {gen_ai.agent.name}` around one agent turn; `execute_tool {gen_ai.tool.name}` per tool call.
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_TYPE_FUNCTION: Final = "function"
