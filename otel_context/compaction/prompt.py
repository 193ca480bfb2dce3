"""The summarizer's prompt and the parsing of its answer.

Why this shape (the one Claude Code's production compactor uses; docs/compaction.md):
- a no-tools preamble FIRST: a summarizer that sees tool definitions (or remembers them from the
  transcript) sometimes answers with a tool call instead of text, and then the compaction has nothing;
- an ``<analysis>`` scratchpad before the ``<summary>``: the model reviews the conversation before it
  commits to a summary, and the scratchpad is stripped so it costs no context afterwards;
- nine fields, with every user message verbatim and the next step quoted: the top user complaint about
  compaction is lost instructions and re-done work.
"""

from __future__ import annotations

import re

NO_TOOLS_PREAMBLE = (
    "IMPORTANT: answer with plain text only. Do not call any tool: no tools are available for this reply, "
    "a tool call will be rejected and the summary will be lost. Your whole answer is one <analysis> block "
    "followed by one <summary> block."
)

_FIELDS = (
    (
        "Primary request and intent",
        "Everything the user asked for, in detail, including how their requests changed over time.",
    ),
    (
        "Key technical concepts",
        "Technologies, languages, frameworks, libraries, versions and conventions in play. Any technology, "
        "language or framework choice the user made must be kept verbatim.",
    ),
    (
        "Files and code sections",
        "Every file read, created or modified, with why it matters; include the important code snippets.",
    ),
    ("Errors and fixes", "Every error met, its exact message where known, and how it was fixed or not."),
    ("Problem solving", "Problems solved and troubleshooting still under way, with the conclusions reached."),
    (
        "All user messages",
        "Every message the user wrote (not tool results), verbatim, oldest first. Do not paraphrase them.",
    ),
    ("Pending tasks", "Tasks the user asked for that are not finished yet."),
    ("Current work", "Precisely what was being worked on right before this summary, with file names and code."),
    (
        "Optional next step",
        "The next step, only if it follows directly from the user's most recent request; quote the most "
        "recent messages verbatim to show where the work stopped, so that nothing drifts.",
    ),
)


def build_prompt(extra_instructions: str | None = None) -> str:
    """The summarizer's final user turn (the transcript to summarize precedes it)."""
    lines = [
        NO_TOOLS_PREAMBLE,
        "",
        "Write a detailed summary of the conversation so far. It will replace the conversation, so another "
        "assistant must be able to continue the work from it alone, without asking the user anything.",
        "",
        "First, inside <analysis> tags, go through the conversation in order and note for each part the "
        "user's explicit requests, your approach, decisions, file names, code, errors and user feedback. "
        "Check that nothing the user asked for is missing.",
        "",
        "Then write the summary inside <summary> tags, with these nine numbered sections:",
    ]
    for number, (title, what) in enumerate(_FIELDS, start=1):
        lines.append(f"{number}. {title}: {what}")
    lines += [
        "",
        "Shape of the answer:",
        "<analysis>",
        "[your review of the conversation]",
        "</analysis>",
        "<summary>",
        *(f"{number}. {title}:\n   [...]" for number, (title, _) in enumerate(_FIELDS, start=1)),
        "</summary>",
    ]
    if extra_instructions and extra_instructions.strip():
        lines += ["", "Additional instructions that take precedence:", extra_instructions.strip()]
    lines += ["", "Reminder: text only, no tool calls."]
    return "\n".join(lines)


class SummaryParseError(ValueError):
    """The summarizer's answer holds no usable summary (empty, only a scratchpad, or a refusal to write)."""


_ANALYSIS = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.DOTALL | re.IGNORECASE)
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL | re.IGNORECASE)


def parse_summary(text: str) -> str:
    """The summary to put into the context: ``<analysis>`` stripped, the ``<summary>`` body extracted.

    A summary with no closing tag is kept as far as it goes (a reply whose finish reason says it was cut at
    its length limit never gets here: see :func:`otel_context.compaction.summary.summarize`). An answer with no
    tags at all is used as it is (some models ignore the format). Raises :class:`SummaryParseError` when
    nothing usable remains, so the compaction fails cleanly instead of replacing history with nothing.
    """
    if not text or not text.strip():
        raise SummaryParseError("the summarizer returned an empty answer")
    match = _SUMMARY.search(text)
    summary = match.group(1) if match is not None else _ANALYSIS.sub("", text)
    summary = summary.strip()
    if not summary:
        raise SummaryParseError("the summarizer's answer has no summary (only an <analysis> block or empty tags)")
    return summary


SUMMARY_MESSAGE_HEADER = (
    "[Context compacted] This conversation continues an earlier session whose history no longer fits "
    "in the context window. The earlier part is summarized below."
)
SUMMARY_MESSAGE_FOOTER = (
    "Continue from where the work stopped, using this summary and the messages that follow. Do not ask the "
    "user to repeat anything and do not restart finished tasks."
)


def summary_message_text(summary: str, rehydrated: str = "") -> str:
    """The text of the one message that replaces the compacted history."""
    parts = [SUMMARY_MESSAGE_HEADER, "", summary]
    if rehydrated:
        parts += ["", rehydrated]
    parts += ["", SUMMARY_MESSAGE_FOOTER]
    return "\n".join(parts)
