"""Every request recorded against the real APIs (tests/data/cassettes) is understood by its adapter:
no unknown content, valid pairing, safe cuts, a positive estimate and a summarizer request without tools."""

from __future__ import annotations

from typing import Any

import pytest

from otel_context import tokens
from otel_context.formats import for_format
from tests.cassettes.cassette import all_names, load

FORMAT_BY_PATH = {
    "/messages": "anthropic_messages",
    "/chat/completions": "openai_chat",
    "/responses": "openai_responses",
}


def _requests() -> list[tuple[str, str, dict[str, Any], Any]]:
    found = []
    for name in all_names():
        for n, interaction in enumerate(load(name).interactions):
            wire_format = FORMAT_BY_PATH.get(interaction.path)
            if wire_format and isinstance(interaction.request_body, dict):
                found.append((f"{name}#{n}", wire_format, interaction.request_body, interaction))
    return found


REQUESTS = _requests()


def test_the_cassettes_cover_all_three_formats() -> None:
    assert {fmt for _id, fmt, _body, _i in REQUESTS} == set(FORMAT_BY_PATH.values())
    assert len(REQUESTS) >= 50


@pytest.mark.parametrize(
    ("wire_format", "body", "interaction"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS]
)
def test_recorded_request(wire_format: str, body: dict[str, Any], interaction: Any) -> None:
    adapter = for_format(wire_format)
    items = adapter.items(body)
    assert items
    assert adapter.has_unknown_content(items) is None
    assert adapter.validate(items) == []
    assert adapter.repair(items) == items
    for cut in adapter.round_boundaries(items):
        assert adapter.validate(items[:cut]) == [] and adapter.validate(items[cut:]) == []
    assert tokens.estimate_fixed(adapter, body) + tokens.estimate_items(adapter, adapter.items(body)) > 0
    summary = adapter.make_summary_request(body, items, "Summarize in <summary>.", 1000, "m")
    assert "tools" not in summary and adapter.validate(adapter.items(summary)) == []
    if interaction.status == 200 and not interaction.is_sse:
        response = interaction.json
        text = adapter.response_text(response)
        assert isinstance(text, str)
        assert text or "tool" in repr(response) or "refusal" in repr(response)
