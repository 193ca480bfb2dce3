"""Token estimates: the chars/4 rule padded by 4/3, images at a flat rate, and the tiktoken refinement that
is used only from an already cached encoding file (nothing may download)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_context import tokens
from otel_context.formats import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES, WireFormatAdapter
from tests.formats.histories import anthropic_agent_body, openai_chat_agent_body, openai_responses_agent_body

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


@pytest.fixture(autouse=True)
def _isolated_tokenizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """An empty tiktoken cache and no network for every test; the tokenizer choice is recomputed."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("token estimation tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    tokens.reset_tokenizer_cache()
    yield
    tokens.reset_tokenizer_cache()


def write_encoding(cache_dir: Path, merges: list[bytes]) -> None:
    """A tiny tiktoken encoding file (every byte plus ``merges``) where tiktoken would have cached o200k."""
    ranked = [bytes([b]) for b in range(256)] + merges
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for rank, tok in enumerate(ranked)]
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_text("\n".join(lines) + "\n")


def test_chars_rule_is_padded() -> None:
    assert not tokens.using_tiktoken()
    assert tokens.estimate_text("") == 0
    assert tokens.estimate_text("abc") == 1
    assert tokens.estimate_text("x" * 300) == 100  # 300 / 4 * 4/3
    assert tokens.estimate_text("x" * 301) == 101


def test_without_tiktoken_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    write_encoding(tmp_path / "cache", [b"ab"])
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # makes `import tiktoken` raise ImportError
    tokens.reset_tokenizer_cache()
    assert not tokens.using_tiktoken()
    assert tokens.estimate_text("ab" * 600) == 400


def test_tiktoken_is_used_only_from_a_cached_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tiktoken  # noqa: F401  (a dev dependency: this test must run, never skip)

    text = "ab" * 600
    assert tokens.estimate_text(text) == 400  # empty cache: chars rule, and no download was attempted
    write_encoding(tmp_path / "cache", [b"ab"])
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    tokens.reset_tokenizer_cache()
    assert tokens.using_tiktoken()
    assert tokens.estimate_text(text) == math.ceil(600 * 4 / 3)  # one token per "ab", padded


def test_corrupt_cache_file_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_text("not an encoding\n")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    tokens.reset_tokenizer_cache()
    assert not tokens.using_tiktoken()
    assert tokens.estimate_text("abcd") == 2


def test_cache_disabled_by_empty_dir_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert tokens.tiktoken_cache_dir() is None
    assert tokens.cached_encoding_file(O200K_URL) is None


def test_items_count_images_at_a_flat_rate() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 40_000}}
    items = [{"role": "user", "content": [image, {"type": "text", "text": "x" * 30}]}]
    assert tokens.estimate_items(ANTHROPIC_MESSAGES, items) == tokens.IMAGE_TOKENS + 10 + tokens.ITEM_OVERHEAD_TOKENS


def test_a_malformed_item_is_estimated_from_its_text() -> None:
    assert tokens.estimate_item(ANTHROPIC_MESSAGES, "x" * 30) == 10 + tokens.ITEM_OVERHEAD_TOKENS  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("adapter", "body"),
    [
        (ANTHROPIC_MESSAGES, anthropic_agent_body()),
        (OPENAI_CHAT, openai_chat_agent_body()),
        (OPENAI_RESPONSES, openai_responses_agent_body()),
    ],
)
def test_fixed_part_is_system_plus_tools(adapter: WireFormatAdapter, body: dict[str, object]) -> None:
    a = adapter
    fixed = tokens.estimate_fixed(a, body)
    system = tokens.estimate_text(a.system_text(body))
    assert fixed > system > 0
    assert fixed - system == tokens.estimate_text(json.dumps(body.get("tools"), default=str, ensure_ascii=False))
    # Adding a message never lowers the estimate.
    total = fixed + tokens.estimate_items(a, a.items(body))
    more = a.with_items(body, [*a.items(body), a.make_user_item("one more question " * 20)])
    assert tokens.estimate_fixed(a, more) + tokens.estimate_items(a, a.items(more)) > total
