"""Async clients and streaming: the span stays open while you read the stream and ends exactly once.

    python examples/async_streaming.py

Streams Anthropic (``messages.stream``) and OpenAI (``chat.completions.create(stream=True)``) answers with
the async clients, then shows what the instrumentation recorded: time to first chunk and the usage seen in
the stream. Each provider uses the real API when its key (ANTHROPIC_API_KEY / OPENAI_API_KEY) is set, the
simulated provider otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_context
from otel_context import semconv

spans = InMemorySpanExporter()  # keep finished spans to print them below; use OTLP in a real app
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
otel_context.instrument(tracer_provider=provider)


async def stream_anthropic(client: anthropic.AsyncAnthropic) -> None:
    async with client.messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=300,
        messages=[{"role": "user", "content": "Explain prompt caching in two sentences."}],
    ) as stream:
        async for text in stream.text_stream:
            print(text, end="", flush=True)
    print()


async def stream_openai(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": "Explain context windows in two sentences."}],
        stream=True,
        stream_options={"include_usage": True},  # the usage arrives in the last chunk
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


def show(span: Any) -> None:
    attrs = span.attributes or {}
    print(
        f"span {span.name!r}: stream={attrs.get(semconv.GEN_AI_REQUEST_STREAM)} "
        f"time_to_first_chunk={attrs.get(semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, 0):.4f}s "
        f"input_tokens={attrs.get(semconv.GEN_AI_USAGE_INPUT_TOKENS)} "
        f"output_tokens={attrs.get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS)}"
    )


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        sim = None
        if not (os.environ.get("ANTHROPIC_API_KEY") and os.environ.get("OPENAI_API_KEY")):
            from otel_context.testing import SimulatedProvider

            sim = stack.enter_context(SimulatedProvider())
        a_client = anthropic.AsyncAnthropic() if os.environ.get("ANTHROPIC_API_KEY") else sim.async_anthropic()
        o_client = openai.AsyncOpenAI() if os.environ.get("OPENAI_API_KEY") else sim.async_openai()
        await stream_anthropic(a_client)
        await stream_openai(o_client)
        await a_client.close()
        await o_client.close()
    for span in spans.get_finished_spans():
        show(span)


if __name__ == "__main__":
    asyncio.run(main())
    otel_context.uninstrument()
    provider.shutdown()
