"""The retention evaluation behind ``otel-context eval`` (docs/eval.md).

Scripted long coding-agent conversations with planted facts are driven through the real transparent
compaction; after each compaction the evaluation reports which facts reached the next request (verbatim,
in the summary, or absent), what of the agent's own work did (files read and changed, definitions, errors
open and closed, commands, decisions), how the model answers probe questions from the compacted request and
from the full history, and what the summaries cost against the input they spared.

* :mod:`~otel_context.evaluation.script`: what a scripted session is made of (facts, turns, the scenario);
* :mod:`~otel_context.evaluation.scenarios`: the conversations and their facts, the default set;
* :mod:`~otel_context.evaluation.long_session`: the long session whose own work a compaction must keep;
* :mod:`~otel_context.evaluation.work`: the agent's work, and whether a piece of it reaches a request;
* :mod:`~otel_context.evaluation.classify`: where a fact stands in a request that went out;
* :mod:`~otel_context.evaluation.runner`: one run through the SDK, the instrumentation and a provider;
* :mod:`~otel_context.evaluation.report`: the tables and the JSON.
"""
