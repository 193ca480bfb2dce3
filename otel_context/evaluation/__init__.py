"""The retention evaluation behind ``otel-context eval`` (docs/eval.md).

Scripted long coding-agent conversations with planted facts are driven through the real transparent
compaction; after each compaction the evaluation reports which facts reached the next request (verbatim,
in the summary, or absent), how the model answers probe questions from the compacted request and from the
full history, and what the summaries cost against the input they spared.

* :mod:`~otel_context.evaluation.scenarios`: the conversations and their facts;
* :mod:`~otel_context.evaluation.classify`: where a fact stands in a request that went out;
* :mod:`~otel_context.evaluation.runner`: one run through the SDK, the instrumentation and a provider;
* :mod:`~otel_context.evaluation.report`: the tables and the JSON.
"""
