"""What the package knows about each model provider, one :class:`Provider` each.

A provider's description is the knowledge that is not a wire format's (``otel_context/formats/`` holds what
each format's JSON means, and names its provider by :attr:`Provider.name`): which model names are the
provider's (so a summary model named for one provider is never sent to another), and its models' context
windows (the built-in table :func:`otel_context.compaction.budget.lookup_model` reads).

It is a leaf below :mod:`otel_context.settings`, which reads the summary model setting with it (a layer
above, the formats, could not be imported there). Adding a provider: one :class:`Provider` below, listed
in :data:`PROVIDERS`, and its formats' ``provider`` naming it (docs/design.md, "Adding a wire format").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from otel_context import semconv


@dataclass(frozen=True)
class ModelSpec:
    """What the budget needs to know about a model family."""

    window: int
    max_output: int
    #: The window when the request carries the 1M-context beta header (Claude), else None.
    window_1m: int | None = None


@dataclass(frozen=True)
class Provider:
    """One model provider."""

    #: ``gen_ai.provider.name``, and what its formats' ``provider`` says.
    name: str
    #: Its models' rows of the built-in window table, by name prefix (the longest prefix wins; dated
    #: suffixes such as ``-20250929`` and ``-latest`` fall under their family).
    models: Mapping[str, ModelSpec]
    #: Name prefixes that tell a bare model name is this provider's (a prefix not ending in ``-`` must end
    #: the name or be followed by ``-``: ``o1`` is ``o1`` and ``o1-mini``, not ``o100``).
    model_prefixes: tuple[str, ...] = ()
    #: A summary model may be named for it (``name:MODEL`` in ``summary_model``): it has wire formats of
    #: its own. A provider whose models are spoken through another's formats (DeepSeek through OpenAI chat)
    #: has only window rows here; its calls' summaries follow the format's provider.
    summary_provider: bool = True


ANTHROPIC = Provider(
    name=semconv.PROVIDER_ANTHROPIC,
    model_prefixes=("claude-",),
    models=MappingProxyType(
        {
            "claude-opus-4-6": ModelSpec(200_000, 128_000, 1_000_000),
            "claude-opus-4-5": ModelSpec(200_000, 64_000),
            "claude-opus-4-1": ModelSpec(200_000, 32_000),
            "claude-opus-4": ModelSpec(200_000, 32_000),
            "claude-sonnet-4-6": ModelSpec(200_000, 64_000, 1_000_000),
            "claude-sonnet-4-5": ModelSpec(200_000, 64_000, 1_000_000),
            "claude-sonnet-4": ModelSpec(200_000, 64_000, 1_000_000),
            "claude-haiku-4-5": ModelSpec(200_000, 64_000),
            "claude-3-7-sonnet": ModelSpec(200_000, 64_000),
            "claude-3-5-sonnet": ModelSpec(200_000, 8_192),
            "claude-3-5-haiku": ModelSpec(200_000, 8_192),
            "claude-3-opus": ModelSpec(200_000, 4_096),
            "claude-3-haiku": ModelSpec(200_000, 4_096),
            "claude-": ModelSpec(200_000, 64_000, 1_000_000),
        }
    ),
)

OPENAI = Provider(
    name=semconv.PROVIDER_OPENAI,
    model_prefixes=("gpt-", "chatgpt-", "ft:gpt-", "o1", "o3", "o4", "codex-"),
    models=MappingProxyType(
        {
            "gpt-5": ModelSpec(400_000, 128_000),
            "gpt-5-chat": ModelSpec(128_000, 16_384),
            "gpt-4.1": ModelSpec(1_047_576, 32_768),
            "gpt-4o": ModelSpec(128_000, 16_384),
            "chatgpt-4o": ModelSpec(128_000, 16_384),
            "gpt-4-turbo": ModelSpec(128_000, 4_096),
            "gpt-4": ModelSpec(8_192, 8_192),
            "gpt-3.5-turbo": ModelSpec(16_385, 4_096),
            "o1": ModelSpec(200_000, 100_000),
            "o1-mini": ModelSpec(128_000, 65_536),
            "o1-preview": ModelSpec(128_000, 32_768),
            "o3": ModelSpec(200_000, 100_000),
            "o3-mini": ModelSpec(200_000, 100_000),
            "o4-mini": ModelSpec(200_000, 100_000),
            "codex-mini": ModelSpec(200_000, 100_000),
        }
    ),
)

#: DeepSeek speaks the OpenAI chat format (``openai_chat`` reads its usage spelling).
DEEPSEEK = Provider(
    name=semconv.PROVIDER_DEEPSEEK,
    models=MappingProxyType(
        {
            "deepseek-chat": ModelSpec(128_000, 8_192),
            "deepseek-reasoner": ModelSpec(128_000, 65_536),
        }
    ),
    summary_provider=False,
)

#: Every provider, in the order their window rows and name prefixes are read.
PROVIDERS: tuple[Provider, ...] = (ANTHROPIC, OPENAI, DEEPSEEK)
#: The providers a summary model can be named for (``provider:MODEL``).
SUMMARY_PROVIDERS: tuple[str, ...] = tuple(p.name for p in PROVIDERS if p.summary_provider)

#: The header that carries Anthropic's beta flags, and the flag of the 1M-context window
#: (:attr:`ModelSpec.window_1m`, on Claude rows only).
BETA_HEADER = "anthropic-beta"
CONTEXT_1M_BETA = "context-1m"


def has_1m_beta(headers: Mapping[str, str] | None) -> bool:
    """Whether the beta header asks for the 1M context window."""
    if not headers:
        return False
    beta = headers.get(BETA_HEADER, "")
    return any(part.strip().startswith(CONTEXT_1M_BETA) for part in beta.split(","))


def model_owner(model: str) -> str | None:
    """The provider whose model ``model`` is, from its name (None: not known, so any provider's)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for provider in PROVIDERS:
        for prefix in provider.model_prefixes:
            if name.startswith(prefix) and (prefix.endswith("-") or name[len(prefix) :][:1] in ("", "-")):
                return provider.name
    return None


__all__ = [
    "ANTHROPIC",
    "BETA_HEADER",
    "CONTEXT_1M_BETA",
    "DEEPSEEK",
    "OPENAI",
    "PROVIDERS",
    "SUMMARY_PROVIDERS",
    "ModelSpec",
    "Provider",
    "has_1m_beta",
    "model_owner",
]
