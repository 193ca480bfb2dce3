"""Token estimates for request bodies, with nothing to download.

The compactor needs a number before the provider reports one (first call of a conversation, messages added
since the last response). The estimate is deliberately conservative: characters / 4, padded by 4/3, so a
request estimated under the threshold is very unlikely to be over it; images and documents count a flat
:data:`IMAGE_TOKENS` each.

tiktoken is an optional refinement, used only when it is importable AND an encoding file is already in its
local cache: tiktoken downloads encodings on first use, and this library must never touch the network at
run time. The cached file is parsed here (never through tiktoken's loaders, which re-download a file whose
hash does not match), and its count is padded the same way, since neither provider's tokenizer is exactly
o200k/cl100k.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from otel_context.formats.base import Body, Item, WireFormatAdapter

#: Tokens counted per image or document (a typical 1-megapixel image; PDFs pages vary, this is the floor).
IMAGE_TOKENS = 2_000
#: Padding applied to every estimate (the chars/4 rule undercounts code, JSON and non-English text).
PADDING = 4 / 3
#: Encodings tried in the local tiktoken cache, best first, with the URL tiktoken caches them under.
_TIKTOKEN_ENCODINGS = (
    ("o200k_base", "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"),
    ("cl100k_base", "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"),
)
#: Pre-tokenization pattern of cl100k/o200k-style encodings (close enough for an estimate).
_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def tiktoken_cache_dir() -> Path | None:
    """Where tiktoken keeps downloaded encodings (its own rules), or None when caching is disabled."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        value = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        value = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        value = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return Path(value) if value else None


def cached_encoding_file(url: str) -> Path | None:
    """The local cache file tiktoken would use for ``url``, if it exists."""
    directory = tiktoken_cache_dir()
    if directory is None:
        return None
    path = directory / hashlib.sha1(url.encode()).hexdigest()
    return path if path.is_file() else None


def _parse_ranks(data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def _local_counter() -> Callable[[str], int] | None:
    """A token counter from a locally cached tiktoken encoding, or None (no tiktoken, nothing cached)."""
    try:
        import tiktoken
    except ImportError:
        return None
    for name, url in _TIKTOKEN_ENCODINGS:
        path = cached_encoding_file(url)
        if path is None:
            continue
        try:
            ranks = _parse_ranks(path.read_bytes())
            encoding = tiktoken.Encoding(
                name=f"otel_context_{name}", pat_str=_PAT_STR, mergeable_ranks=ranks, special_tokens={}
            )
        except Exception:  # a corrupt cache file must not break estimates
            continue
        return lambda text: len(encoding.encode_ordinary(text))
    return None


def reset_tokenizer_cache() -> None:
    """Forget the tokenizer choice (after installing tiktoken or filling its cache; used by tests)."""
    _local_counter.cache_clear()


def using_tiktoken() -> bool:
    """Whether estimates currently use a locally cached tiktoken encoding."""
    return _local_counter() is not None


def estimate_text(text: str) -> int:
    """Padded token estimate of a text: ceil(chars / 4 * 4/3), or the padded tiktoken count when available."""
    if not text:
        return 0
    counter = _local_counter()
    raw = counter(text) if counter is not None else len(text) / 4
    return math.ceil(raw * PADDING)


#: Tokens a provider adds per message/item (role and framing) on top of its text.
ITEM_OVERHEAD_TOKENS = 4


def estimate_item(adapter: WireFormatAdapter, item: Item) -> int:
    """Estimated tokens of one conversation item: its text, :data:`IMAGE_TOKENS` per image/document, and the
    per-item framing. A malformed item (not a mapping) is estimated from its text: the provider will say."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return estimate_text(str(item)) + ITEM_OVERHEAD_TOKENS
    return estimate_text(adapter.item_text(item)) + IMAGE_TOKENS * adapter.image_count(item) + ITEM_OVERHEAD_TOKENS


def estimate_items(adapter: WireFormatAdapter, items: Sequence[Item]) -> int:
    """Estimated tokens of conversation items (the one estimator every part of the package uses)."""
    return sum(estimate_item(adapter, item) for item in items)


def estimate_fixed(adapter: WireFormatAdapter, body: Body) -> int:
    """Estimated tokens of what every request of a conversation carries besides its items: system and tools."""
    tools = body.get("tools")
    fixed = estimate_text(adapter.system_text(body))
    return fixed + estimate_text(json.dumps(tools, default=str, ensure_ascii=False)) if tools else fixed
