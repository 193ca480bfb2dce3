"""Scripted replies: what the simulated model answers, deterministically, so tests can predict it.

The conventions (stable; tests and users rely on them):

* **Tool calls.** When the request offers tools and the LAST message is a real user message (not a tool
  result) whose text contains directives ``tool:<name>``, each optionally followed *directly* by a JSON object
  (``tool:read_file{"path": "a.py"}``), the reply calls each named tool that is offered, in order (parallel
  calls when there are several); stop reason ``tool_use`` / finish reason ``tool_calls``. Without a JSON
  object the arguments are generated from the tool's schema: each required property gets ``"sim-<name>"``
  (string), ``1`` (integer), ``1.0`` (number), ``true`` (boolean), ``[]`` / ``{}``, or the first ``enum``
  value. Directives naming tools that are not offered are ignored. Since tool results are not user messages,
  an agent loop always terminates.
* **Text.** Otherwise the reply is ``"Simulated reply <n>: <words>"`` where ``n`` and the words are derived
  from a hash of the whole conversation (the same request always gets the same reply). The default is
  :data:`DEFAULT_WORDS` words; a ``words:<N>`` directive in the last user message asks for N words. After tool
  results the text starts ``"Simulated reply <n>: received <k> tool result(s)."``. A reply longer than
  ``max_tokens`` is cut at ``max_tokens`` tokens with stop reason ``max_tokens`` / finish reason ``length``.
* **Forced tools.** A ``tool_choice`` that forces a tool (Anthropic ``any``/``tool``, OpenAI ``required`` or
  a named function) always gets a tool call: the directives of the last user message if any match, else
  the named tool (or the first offered one) with schema-generated arguments.
* **Thinking.** With Anthropic ``thinking`` enabled (``enabled`` or ``adaptive``) the reply starts with a
  ``thinking`` block ``"Considering <n>: <12 words>"`` (cut to ``budget_tokens``) and a signature.
* **Structured output.** When the request asks for a JSON schema (Anthropic ``output_config.format``,
  Chat ``response_format``, Responses ``text.format``), the reply text is a JSON example of that schema: each
  required property gets the example value above (nested objects, ``$ref``/``$defs``, ``anyOf`` first
  non-null option, arrays empty unless ``minItems``); ``json_object`` gets ``{"reply": "sim"}``. Tool
  directives still win.
* **Summaries.** When the last user message contains ``<summary>`` or the word summary/summarize/summarise
  (any case), the reply is::

      <analysis>
      Summarizing <m> messages (<u> from the user); kept <f> FACT lines and the user messages verbatim.
      </analysis>
      <summary>
      Facts:
      <every line of the conversation, the final request included, whose stripped text starts with "FACT:",
       stripped, once each, in order>
      User messages:
      - <each user message before the final request, verbatim, cut at 500 characters>
      </summary>

  A previous summary sitting in the history is a user message, so its facts are carried over again.
* **Probes.** When the last user message has lines containing ``probe: <key>`` (the key runs to the end of
  the line or to a closing parenthesis), the reply answers them by lookup, one line per probe, before any
  summary or tool directive: ``<n>. <every line of the context before that message that contains the key,
  any case, stripped, once each, joined with " | ">``, or ``<n>. unknown``. The retention evaluation
  (``otel-context eval``) asks its questions this way, so its offline score is exactly what reached the
  request (:func:`answer_probes`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import canonical_json, count_tokens

__all__ = [
    "DEFAULT_WORDS",
    "FAITHFUL",
    "KEEPS",
    "UNHELPFUL_SUMMARY",
    "USER_MESSAGE_CAP",
    "Reply",
    "SummarizerStyle",
    "ToolCall",
    "Turn",
    "answer_probes",
    "plan_reply",
    "probe_keys",
    "structured_text",
    "summarize",
    "summary_requested",
    "thinking_text",
]

DEFAULT_WORDS = 20
USER_MESSAGE_CAP = 500
MAX_WORDS = 100_000

_DIRECTIVE = re.compile(r"tool:([A-Za-z0-9_\-.]+)")
_WORDS = re.compile(r"\bwords:(\d+)")
_SUMMARY = re.compile(r"<summary>|\bsummar(?:y|ize|ise|ies)\b", re.IGNORECASE)
_PIECE = re.compile(r"\w{1,4}|[^\w\s]")
#: ``probe: <key>``: the key runs to the end of the line or to a closing parenthesis.
_PROBE = re.compile(r"\bprobe:[ \t]*([^()\n]*[^()\s])", re.IGNORECASE)
_VOCAB_TEXT = (
    "the context window holds every token of the request and the model reads it all before it answers "
    "a cache hit saves time and money while a miss writes the prefix again so stable prompts pay off "
    "tools return results that flow back into the conversation until the task is done and the agent stops "
    "compaction keeps facts alive by summarizing older turns into one message"
)
_VOCAB: tuple[str, ...] = tuple(_VOCAB_TEXT.split(" "))


@dataclass(frozen=True)
class Turn:
    """One message of the conversation, reduced to what the script needs."""

    role: str  # system | user | assistant | tool
    text: str
    tool_result: bool = False  # a user turn that carries tool results (or an OpenAI tool message)
    results: int = 0  # how many tool results it carries


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class Reply:
    """What the simulated model says: text and/or tool calls."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    truncated: bool = False
    kind: str = "text"  # text | tool | summary | structured | probe

    @property
    def output_tokens(self) -> int:
        """Tokens charged for this reply (text tokens + per call: name, canonical JSON arguments, 3)."""
        total = count_tokens(self.text)
        for call in self.tool_calls:
            total += count_tokens(f"{call.name} {canonical_json(call.arguments)}") + 3
        return max(total, 1)


def summary_pattern() -> re.Pattern[str]:
    """What marks a summary request in a message's text."""
    return _SUMMARY


def summary_requested(turns: Sequence[Turn]) -> bool:
    """Whether the last message asks for a summary (see the module docstring)."""
    last = turns[-1] if turns else None
    return bool(last and last.role == "user" and not last.tool_result and _SUMMARY.search(last.text))


def _example(schema: Any, root: Mapping[str, Any], name: str, depth: int = 0) -> Any:
    """A deterministic value that validates against ``schema`` (the subset SDK-generated schemas use)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return f"sim-{name}"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _example(target, root, name, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")] or options
            return _example(usable[0], root, name, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    ptype = schema.get("type")
    if isinstance(ptype, list):
        ptype = next((t for t in ptype if t != "null"), "string")
    if ptype == "integer":
        return 1
    if ptype == "number":
        return 1.0
    if ptype == "boolean":
        return True
    if ptype == "null":
        return None
    if ptype == "array":
        return [_example(schema.get("items", {}), root, name, depth + 1)] if schema.get("minItems") else []
    if ptype == "object" or "properties" in schema:
        return _schema_args(schema, root, depth + 1)
    return f"sim-{name}"


def _schema_args(schema: Any, root: Mapping[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """Arguments for a tool / a structured output: every required property gets an example value."""
    args: dict[str, Any] = {}
    if not isinstance(schema, Mapping):
        return args
    root = root if root is not None else schema
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    assert isinstance(props, Mapping)
    for name in schema.get("required") or []:
        args[str(name)] = _example(props.get(name, {}), root, str(name), depth)
    return args


def structured_text(schema: Any) -> str:
    """The JSON text of a structured-output reply: an example object for ``schema`` (see :func:`_example`)."""
    if not isinstance(schema, Mapping) or not schema:
        return json.dumps({"reply": "sim"})
    value = _example(schema, schema, "value")
    return json.dumps(value)


def _directives(text: str, tools: Mapping[str, Any]) -> list[ToolCall]:
    calls: list[ToolCall] = []
    decoder = json.JSONDecoder()
    for match in _DIRECTIVE.finditer(text):
        name = match.group(1).rstrip(".")
        if name not in tools:
            continue
        end = match.end()
        args: dict[str, Any] | None = None
        if end < len(text) and text[end] == "{":
            try:
                value, _ = decoder.raw_decode(text, end)
                if isinstance(value, dict):
                    args = value
            except ValueError:
                args = None
        calls.append(ToolCall(name, args if args is not None else _schema_args(tools[name])))
    return calls


def _digest(turns: Sequence[Turn], salt: str) -> bytes:
    h = hashlib.sha256(salt.encode())
    for t in turns:
        h.update(f"{t.role}\x1f{t.text}\x1e".encode())
    return h.digest()


def _words(seed: bytes, count: int) -> list[str]:
    out: list[str] = []
    block = seed
    while len(out) < count:
        block = hashlib.sha256(block).digest()
        out.extend(_VOCAB[b % len(_VOCAB)] for b in block)
    return out[:count]


def _truncate(text: str, max_tokens: int | None) -> tuple[str, bool]:
    if max_tokens is None or max_tokens <= 0:
        return text, False
    ends = [m.end() for m in _PIECE.finditer(text)]
    if len(ends) <= max_tokens:
        return text, False
    return text[: ends[max_tokens - 1]], True


#: What a :class:`SummarizerStyle` keeps: the ``FACT:`` convention, or one of the styles blind to it.
KEEPS_FACTS = "facts"
KEEPS_START = "start"
KEEPS_END = "end"
KEEPS_SAMPLE = "sample"
KEEPS_NOTHING = "nothing"
KEEPS = (KEEPS_FACTS, KEEPS_START, KEEPS_END, KEEPS_SAMPLE, KEEPS_NOTHING)
#: The seed of the ``sample`` style's choice of sentences (by position only, never by content).
SAMPLE_SEED = "otel-context-sample"
#: What the ``nothing`` style writes, whatever it is given: a summary with nothing specific in it.
UNHELPFUL_SUMMARY = (
    "The user and the assistant worked on the code base together: files were read, commands and tests were "
    "run, and several edits were made. The work is in progress and continues from the latest messages."
)


@dataclass(frozen=True)
class SummarizerStyle:
    """How the simulated summarizer loses things, as real ones do (the default loses nothing).

    A faithful summarizer hides the bugs a compactor has with real ones: an LLM summary is bounded in
    length, tends to favour what it read last, and does not know which lines of a conversation matter.

    ``keeps`` says what the summary is made of:

    * ``"facts"`` (the default): the ``FACT:`` lines and the user messages (the testing convention of the
      module docstring), with two knobs, both off by default: ``max_tokens`` keeps at most this many tokens of
      facts and user messages, the oldest entries dropped first; ``reads_last_tokens`` reads only the last
      this many tokens of the conversation (the final request excluded).
    * The styles blind to what a conversation plants: they never look at what a line says, only at where it
      stands and how long it is, so a planted fact and a line of filler are kept or dropped alike. Their input
      is the text of every message before the final request, in order, then the material the final request
      quotes in blocks of its own (a line ``<tag>`` ... a line ``</tag>``, e.g. the previous summary to
      update; the instructions around them are not material). ``max_tokens`` (required) is the summary's
      length:

      - ``"start"``: the first ``max_tokens`` tokens of the input, as a summarizer that runs out of room;
      - ``"end"``: the last ``max_tokens`` tokens of the input, as a summarizer that favours what it read last;
      - ``"sample"``: a deterministic sample of the input's sentences (each kept with the probability
        ``max_tokens`` / the input's tokens, drawn from a fixed seed, in order: the same positions for the
        same sentence count), then cut at ``max_tokens``, as a summarizer that keeps a bit of everything;
      - ``"nothing"``: :data:`UNHELPFUL_SUMMARY`, a generic text that keeps nothing specific.
    """

    max_tokens: int | None = None
    reads_last_tokens: int | None = None
    keeps: str = KEEPS_FACTS

    def __post_init__(self) -> None:
        for name in ("max_tokens", "reads_last_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"SummarizerStyle.{name} must be a positive int or None, got {value!r}")
        if self.keeps not in KEEPS:
            raise ValueError(f"SummarizerStyle.keeps must be one of {', '.join(KEEPS)}, got {self.keeps!r}")
        if self.keeps in (KEEPS_START, KEEPS_END, KEEPS_SAMPLE) and self.max_tokens is None:
            raise ValueError(f"SummarizerStyle(keeps={self.keeps!r}) needs max_tokens (the summary's length)")

    @property
    def lossy(self) -> bool:
        return self.keeps != KEEPS_FACTS or self.max_tokens is not None or self.reads_last_tokens is not None

    @property
    def blind(self) -> bool:
        """Whether the style ignores the ``FACT:`` convention (it cannot tell a planted line from filler)."""
        return self.keeps != KEEPS_FACTS


FAITHFUL = SummarizerStyle()


def _read_window(turns: Sequence[Turn], tokens: int) -> list[Turn]:
    """The last ``tokens`` tokens of ``turns``: older turns dropped, the oldest kept one cut at its end."""
    kept: list[Turn] = []
    left = tokens
    for t in reversed(turns):
        if left <= 0:
            break
        size = count_tokens(t.text)
        if size <= left:
            kept.append(t)
            left -= size
            continue
        ends = [m.end() for m in _PIECE.finditer(t.text)]
        start = ends[-left - 1] if len(ends) > left else 0
        kept.append(Turn(t.role, t.text[start:], t.tool_result, t.results))
        break
    kept.reverse()
    return kept


def _last_tokens(text: str, tokens: int) -> str:
    """The end of ``text`` that holds at most ``tokens`` tokens (cut at a token's start)."""
    starts = [m.start() for m in _PIECE.finditer(text)]
    return text[starts[-tokens] :] if len(starts) > tokens else text


#: A block the final request quotes: a line ``<tag>``, its material, a line ``</tag>``.
_QUOTED_BLOCK = re.compile(r"^<([A-Za-z_][\w-]*)>[ \t]*$\n(.*?)^</\1>[ \t]*$", re.MULTILINE | re.DOTALL)
#: The answer's shape the prompt describes (``<analysis>``, ``<summary>``) is not material to summarize.
_SHAPE_TAGS = frozenset({"analysis", "summary"})
_TAG_LINE = re.compile(r"^\s*</?[A-Za-z_][\w-]*>\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _blind_input(history: Sequence[Turn], final: Turn | None) -> str:
    """What a blind style summarizes: every message's text in order, then the final request's quoted blocks."""
    parts = [t.text.strip() for t in history if t.text.strip()]
    if final is not None:
        for match in _QUOTED_BLOCK.finditer(final.text):
            if match.group(1).lower() in _SHAPE_TAGS:
                continue
            lines = [line for line in match.group(2).splitlines() if line.strip() and not _TAG_LINE.match(line)]
            if lines:
                parts.append("\n".join(lines))
    return "\n".join(parts)


def _sentences(text: str) -> list[str]:
    """The sentences of ``text``: each line split after a ``.``, ``!`` or ``?`` followed by a space."""
    return [s for line in text.splitlines() for s in _SENTENCE_END.split(line.strip()) if s]


def _blind_summary(text: str, style: SummarizerStyle) -> str:
    if style.keeps == KEEPS_NOTHING:
        return UNHELPFUL_SUMMARY
    assert style.max_tokens is not None  # checked by SummarizerStyle
    if style.keeps == KEEPS_START:
        return _truncate(text, style.max_tokens)[0]
    if style.keeps == KEEPS_END:
        return _last_tokens(text, style.max_tokens)
    sentences = _sentences(text)
    total = sum(count_tokens(s) for s in sentences)
    rate = min(1.0, style.max_tokens / total) if total else 1.0
    rng = random.Random(SAMPLE_SEED)
    kept: list[str] = []
    left = style.max_tokens
    for sentence in sentences:
        if rng.random() >= rate:
            continue
        size = count_tokens(sentence)
        if size > left:
            break
        kept.append(sentence)
        left -= size
    return "\n".join(kept)


def summarize(turns: Sequence[Turn], style: SummarizerStyle = FAITHFUL) -> str:
    """The scripted summary of ``turns`` (the last turn is the summary request), lossy as ``style`` says."""
    history = list(turns[:-1])
    if style.reads_last_tokens is not None:
        history = _read_window(history, style.reads_last_tokens)
    if style.blind:
        body = _blind_summary(_blind_input(history, turns[-1] if turns else None), style)
        lines = [
            "<analysis>",
            f"Summarizing {len(history)} messages ({style.keeps}).",
            "</analysis>",
            "<summary>",
            body,
            "</summary>",
        ]
        return "\n".join(lines)
    read = [*history, turns[-1]] if turns else history
    # (position, kind, text): facts at their first appearance, user messages where they stand.
    entries: list[tuple[int, str, str]] = []
    seen: set[str] = set()
    position = 0
    for index, t in enumerate(read):
        is_user = index < len(history) and t.role == "user" and not t.tool_result
        for line in t.text.splitlines():
            s = line.strip()
            position += 1
            if s.startswith("FACT:") and s not in seen:
                seen.add(s)
                entries.append((position, "fact", s))
        if is_user:
            position += 1
            entries.append((position, "user", t.text[:USER_MESSAGE_CAP]))
    if style.max_tokens is not None:
        sizes = [count_tokens(text) + 1 for _, _, text in entries]
        total = sum(sizes)
        start = 0
        while start < len(entries) and total > style.max_tokens:
            total -= sizes[start]
            start += 1
        entries = entries[start:]
    facts = [text for _, kind, text in entries if kind == "fact"]
    users = [text for _, kind, text in entries if kind == "user"]
    lines = [
        "<analysis>",
        f"Summarizing {len(history)} messages ({len(users)} from the user); kept {len(facts)} FACT lines and "
        "the user messages verbatim.",
        "</analysis>",
        "<summary>",
        "Facts:",
        *facts,
        "User messages:",
        *[f"- {u}" for u in users],
        "</summary>",
    ]
    return "\n".join(lines)


def probe_keys(text: str) -> list[str]:
    """The keys of the ``probe: <key>`` lines of ``text``, in order (see :func:`answer_probes`)."""
    return [m.group(1).strip() for m in _PROBE.finditer(text)]


def answer_probes(context: Sequence[Turn], keys: Sequence[str]) -> str:
    """The scripted answer to probe questions: for each key, every line of ``context`` that mentions it.

    A retention evaluation (``otel-context eval``) asks the model what it still knows after a compaction.
    The scripted model cannot reason, so it answers by lookup, which makes the offline score exactly what
    reached the request: line ``<n>.`` of the reply is every line of the context (system prompt, messages,
    tool results) that contains the ``n``-th key (any case), stripped, once each, oldest first, joined with
    ``" | "``; ``unknown`` when none does.
    """
    answers: list[str] = []
    for number, key in enumerate(keys, start=1):
        needle = key.lower()
        found: list[str] = []
        for turn in context:
            for line in turn.text.splitlines():
                stripped = line.strip()
                if needle in stripped.lower() and stripped not in found:
                    found.append(stripped)
        answers.append(f"{number}. {' | '.join(found) if found else 'unknown'}")
    return "\n".join(answers)


def plan_reply(
    turns: Sequence[Turn],
    tools: Mapping[str, Any],
    *,
    max_tokens: int | None = None,
    salt: str = "",
    force_tool: str | None = None,
    json_schema: Mapping[str, Any] | None = None,
    summarizer: SummarizerStyle = FAITHFUL,
) -> Reply:
    """The deterministic reply to a conversation (see the module docstring for the conventions).

    ``tools`` maps each offered tool name to its JSON schema; ``salt`` varies replies for the same
    conversation (e.g. the choice index when ``n > 1``). ``force_tool`` is the tool a forced ``tool_choice``
    names (``"*"``: any tool); then the reply is always a tool call (the directive's calls if the last
    message has directives, else that tool, or the first offered one, with schema-generated arguments).
    ``summarizer`` says how a summary reply loses things (:class:`SummarizerStyle`).
    """
    last = turns[-1] if turns else Turn("user", "")
    real_user = last.role == "user" and not last.tool_result
    if force_tool is not None and tools:
        calls = _directives(last.text, tools) if real_user else []
        if force_tool != "*":
            calls = [c for c in calls if c.name == force_tool]
        if not calls:
            name = force_tool if force_tool in tools else next(iter(tools))
            calls = [ToolCall(name, _schema_args(tools[name]))]
        return Reply(tool_calls=calls, kind="tool")
    if json_schema is not None and not (real_user and tools and _directives(last.text, tools)):
        text, cut = _truncate(structured_text(json_schema), max_tokens)
        return Reply(text=text, truncated=cut, kind="structured")
    keys = probe_keys(last.text) if real_user else []
    if keys:
        text, cut = _truncate(answer_probes(turns[:-1], keys), max_tokens)
        return Reply(text=text, truncated=cut, kind="probe")
    if summary_requested(turns):
        text, cut = _truncate(summarize(turns, summarizer), max_tokens)
        return Reply(text=text, truncated=cut, kind="summary")
    if real_user and tools:
        calls = _directives(last.text, tools)
        if calls:
            return Reply(tool_calls=calls, kind="tool")
    seed = _digest(turns, salt)
    n = int.from_bytes(seed[:4], "big") % 100_000
    count = DEFAULT_WORDS
    if real_user:
        m = _WORDS.search(last.text)
        if m:
            count = min(int(m.group(1)), MAX_WORDS)
    prefix = f"Simulated reply {n}:"
    if not real_user and (last.tool_result or last.role == "tool"):
        k = 0
        for t in reversed(turns):
            if not (t.role == "tool" or t.tool_result):
                break
            k += max(t.results, 1)
        prefix += f" received {k} tool result{'s' if k != 1 else ''}."
    words = _words(seed, count)
    text = prefix + (" " + " ".join(words) + "." if words else "")
    text, cut = _truncate(text, max_tokens)
    return Reply(text=text, truncated=cut)


def thinking_text(turns: Sequence[Turn], budget: int | None) -> str:
    """The scripted thinking of a reply: ``"Considering <n>: <12 words>"``, cut to ``budget`` tokens."""
    seed = _digest(turns, "thinking")
    n = int.from_bytes(seed[:4], "big") % 100_000
    text = f"Considering {n}: " + " ".join(_words(seed, 12)) + "."
    return _truncate(text, budget)[0]
