#!/usr/bin/env bash
# Build benchmarks/.venv-peers: a SEPARATE virtualenv for benchmarks/overhead.py with the peer
# instrumentations installed from PyPI next to otel-context, so all configurations run on the same SDKs
# and the same OpenTelemetry SDK. Never part of the project's dev extras (the peers pin older OTel pieces
# and would change what the test suite runs on).
#
#   bash benchmarks/setup_peers.sh          # idempotent; re-run after changing the pins below
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv-peers"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi

# The SDKs exactly as the project's dev extras pin them, the peers at the releases pinned
# below, and otel-context itself from this checkout.
"$venv/bin/python" -m pip install --quiet \
    "anthropic==2.15.0" \
    "openai==3.57.0" \
    "opentelemetry-instrumentation-genai-anthropic==1.3b0" \
    "opentelemetry-instrumentation-genai-openai==1.3b0" \
    "opentelemetry-instrumentation-anthropic==0.62.4" \
    "opentelemetry-instrumentation-openai==0.62.4" \
    -e "$root"

"$venv/bin/python" -m pip list 2>/dev/null | grep -Ei '^(anthropic|openai|opentelemetry-(api|sdk|instrumentation|util-genai|semantic)|otel-context|wrapt|httpx)' \
    > "$venv/versions.txt"
echo "peers venv ready: $venv"
cat "$venv/versions.txt"
