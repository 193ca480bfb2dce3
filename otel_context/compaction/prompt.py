"""The summarizer's prompt and the parsing of its answer.

Why this shape (the one Claude Code's production compactor uses; docs/compaction.md):
- a no-tools preamble FIRST: a summarizer that sees tool definitions (or remembers them from the
  transcript) sometimes answers with a tool call instead of text, and then the compaction has nothing;
- an ``<analysis>`` scratchpad before the ``<summary>``: the model reviews the conversation before it
  commits to a summary, and the scratchpad is stripped so it costs no context afterwards;
- nine fields, with every user message verbatim and the next step quoted: the top user complaint about
  compaction is lost instructions and re-done work;
- from the second compaction on, the previous summary to update (anchored, as Factory, OpenHands and OpenCode
  do), never a summary of the summary; the prompt names the user's messages the app keeps verbatim beside the
  summary, and says that a later user instruction replaces an earlier one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NO_TOOLS_PREAMBLE = (
    "IMPORTANT: answer with plain text only. Do not call any tool: no tools are available for this reply, "
    "a tool call will be rejected and the summary will be lost. Your whole answer is one <analysis> block "
    "followed by one <summary> block."
)

_FIELDS = (
    (
        "Primary request and intent",
        "Everything the user asked for, in detail, including how their requests changed over time, and the "
        "constraints they set (languages, tools, style, what not to do) as they stand now: a later user "
        "instruction replaces an earlier one, so write the one in force and what it replaced.",
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
        "Every message the user wrote (not tool results), verbatim, oldest first. Do not paraphrase them. "
        "The ones the app keeps verbatim beside the summary (said above) need not be copied again.",
    ),
    ("Pending tasks", "Tasks the user asked for that are not finished yet."),
    ("Current work", "Precisely what was being worked on right before this summary, with file names and code."),
    (
        "Optional next step",
        "The next step, only if it follows directly from the user's most recent request; quote the most "
        "recent messages verbatim to show where the work stopped, so that nothing drifts.",
    ),
)


#: Opens the line of a summary request that continues a summary made in parts (the span did not fit one
#: request): the earlier parts are summarized in its previous summary.
CONTINUED_PART_PREFIX = "[Continued]"


def build_prompt(
    extra_instructions: str | None = None,
    *,
    anchor: str | None = None,
    kept_verbatim: str | None = None,
    to_cover: Sequence[str] = (),
    part: tuple[int, int] | None = None,
) -> str:
    """The summarizer's final user turn (the transcript to summarize precedes it).

    ``anchor``: the previous summary, from the second compaction on. The summarizer then updates it with the
    messages dropped since (the transcript), instead of summarizing a summary as if it were conversation: a
    re-summarized summary loses a little more at every compaction, the oldest first (the user's first
    constraints), and a summarizer that favours the end of its input loses it whole. It is repeated here, at
    the end, where such a summarizer reads. ``kept_verbatim``: which of the user's messages the app keeps
    verbatim beside the summary (the summary need not spend its room on them). ``to_cover``: the user's
    messages that leave that verbatim list now, which no summary covered yet: quoted last, after the previous
    summary, where a summarizer that reads only the end of its input reads them too. ``part``: (k, n) of a
    span summarized in n requests, from the second on (its previous summary is that of the parts before).
    """
    if anchor is None:
        task = [
            "Write a detailed summary of the conversation so far. It will replace the conversation, so another "
            "assistant must be able to continue the work from it alone, without asking the user anything.",
        ]
    else:
        task = [
            "The conversation above was compacted before: its earlier part is summarized in the summary between "
            "<previous_summary> tags at the end of this message. Update that summary with the messages after "
            "it; do not summarize the summary. Keep what still holds, replace what a later message changed, add "
            "what is new. The updated summary replaces both the previous summary and those messages, so another "
            "assistant must be able to continue the work from it alone, without asking the user anything.",
        ]
    task += [
        "When a later user instruction contradicts an earlier one, the later one holds: write the instruction "
        "in force, and say what it replaced.",
    ]
    if kept_verbatim:
        task.append(kept_verbatim)
    if part is not None:
        task.append(
            f"{CONTINUED_PART_PREFIX} The conversation is summarized in {part[1]} parts, oldest first: this is part "
            f"{part[0]}, and the summary to update covers the parts before it."
        )
    lines = [
        NO_TOOLS_PREAMBLE,
        "",
        *task,
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
    if anchor is not None:
        lines += ["", "The summary to update:", "<previous_summary>", anchor, "</previous_summary>"]
    if to_cover:
        lines += [
            "",
            "These messages of the user are no longer kept verbatim beside the summary: the summary must keep what "
            "they ask and state, with instructions, names and numbers quoted exactly.",
            "<user_messages>",
            *(f"<message>\n{text}\n</message>" for text in to_cover),
            "</user_messages>",
        ]
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
#: Opens the files restored after the summary (inside the summary message).
REHYDRATED_HEADER = "Files read before the compaction (their latest content as read then):"
#: Opens the line that says which of the user's messages follow the summary message verbatim.
VERBATIM_NOTE_PREFIX = "[Verbatim]"
#: Opens a text the app pinned (``otel_context.pin``), kept verbatim as a user message before every summary.
PINNED_PREFIX = "[Pinned]"
#: Opens the block the repair adds after the summary (:mod:`otel_context.compaction.repair`): what the summary
#: left out, restored from the conversation.
RESTORED_HEADER = "[Restored] What the summary left out, verbatim, oldest first; later statements hold:"
#: Opens the user's sentences in that block (read back as the user's words by the next compaction).
RESTORED_USER_LINE = "The user said:"
#: Opens the artifacts (error lines, paths, identifiers) in that block.
RESTORED_ARTIFACTS_LINE = "From the work:"
#: Marks a restored sentence a later statement of the user replaces.
SUPERSEDED_MARK = "(replaced by a later message)"
#: Opens the work trail of the summary message (:mod:`otel_context.compaction.trail`): the files, definitions,
#: errors, commands and decisions of the agent's own work, kept whatever the summarizer writes.
WORK_TRAIL_HEADER = "[Work trail] The agent's own work so far, from the conversation itself (oldest first):"


def _block_lines(text: str, heading: str) -> list[str]:
    """The ``- `` lines under ``heading`` in a summary message (``text``), the marker stripped: the block ends at
    the first line that is not one."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if line == heading:
            inside = True
        elif inside and line.startswith("- "):
            out.append(line[2:])
        else:
            inside = False
    return out


def restored_artifact_lines(text: str) -> list[str]:
    """The artifacts a repair restored into a summary message (``text``), one a line as written (an
    identifier in its backticks): the next compaction's repair reads them back whole, so what was restored
    once is restored again if the next summary loses it, however much else the span names."""
    return _block_lines(text, RESTORED_ARTIFACTS_LINE)


def restored_user_lines(text: str) -> list[str]:
    """The user's sentences a repair restored into a summary message (``text``), markers stripped: the next
    compaction reads them as the user's words again, so what was restored once is checked every time."""
    out: list[str] = []
    for sentence in _block_lines(text, RESTORED_USER_LINE):
        if sentence.startswith(SUPERSEDED_MARK):
            continue  # replaced: the later statement is restored (or kept) beside it
        marker = sentence.find(' (the latest: it replaces the earlier "')
        out.append(sentence if marker < 0 else sentence[:marker])
    return out


def summary_message_text(summary: str, rehydrated: str = "", verbatim_note: str = "", trail: str = "") -> str:
    """The text of the message that replaces the compacted history (the user's own messages kept verbatim
    precede it as messages of their own; ``verbatim_note`` says so). ``summary`` ends with the repair's block
    (:data:`RESTORED_HEADER`) when the repair restored anything; ``trail``, the work trail
    (:data:`WORK_TRAIL_HEADER`), follows it, outside the summary the next summarizer updates."""
    parts = [SUMMARY_MESSAGE_HEADER, "", summary]
    if trail:
        parts += ["", trail]
    if rehydrated:
        parts += ["", rehydrated]
    if verbatim_note:
        parts += ["", verbatim_note]
    parts += ["", SUMMARY_MESSAGE_FOOTER]
    return "\n".join(parts)


def without_work_trail(text: str) -> str:
    """A summary message (``text``) without its work trail (:data:`WORK_TRAIL_HEADER`, up to the blank line that
    ends it): what the retention check reads of it (the trail is carried on whole, and counted as the trail's)."""
    start = text.find("\n\n" + WORK_TRAIL_HEADER)
    if start < 0:
        return text
    end = text.find("\n\n", start + 2)
    return text[:start] + (text[end:] if end >= 0 else "")


def is_summary_message(text: str) -> bool:
    """Whether ``text`` is our own summary message (never taken for something the user wrote)."""
    return text.startswith(SUMMARY_MESSAGE_HEADER)


def summary_of_message(text: str) -> str | None:
    """The summary inside one of our summary messages (without the restored files and the notes), or None."""
    if not is_summary_message(text):
        return None
    body = text[len(SUMMARY_MESSAGE_HEADER) :]
    for marker in (WORK_TRAIL_HEADER, REHYDRATED_HEADER, VERBATIM_NOTE_PREFIX, SUMMARY_MESSAGE_FOOTER):
        end = body.find("\n\n" + marker)
        if end >= 0:
            body = body[:end]
    return body.strip() or None
