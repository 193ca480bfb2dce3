# The two commands a newcomer needs: `make demo` and `make test`.
# Both create .venv on first use: `make demo` (and `make eval`) with the project and its demo extra (rich and
# both SDKs), `make test` with the dev extras (the test, lint and type-check toolchain, the demo's included).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo eval test lint typecheck unit test-oldest-sdks bench dashboards clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	@echo "Installing otel-context and its demo extra into $(VENV) (once; make test adds its tools)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/otel-context demo $(ARGS)

# What survives compaction (docs/eval.md): offline on the simulated provider unless ARGS says otherwise.
eval: $(DEMO_STAMP)
	$(BIN)/otel-context eval $(ARGS)

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The tests once more on the oldest releases pyproject.toml declares supported (its anthropic, openai and redis
# extras; `make test` runs on the dev extras' pins, the newest releases): CI runs both.
OLDEST := .venv-oldest-sdks
test-oldest-sdks: $(STAMP)
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python -m pip install --quiet -e '.[dev]'
	$(OLDEST)/bin/python -m pip install --quiet $$($(BIN)/python .ci/oldest_sdks.py)
	$(OLDEST)/bin/python -m pip list 2>/dev/null | grep -E '^(anthropic|openai|redis) '
	$(OLDEST)/bin/pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/compaction.py
	$(BIN)/python benchmarks/state_store.py

dashboards: $(STAMP)
	$(BIN)/python dashboards/build.py

clean:
	rm -rf $(VENV) $(OLDEST) build *.egg-info
