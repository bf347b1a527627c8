# Two set-up commands that work on a fresh machine: `make demo` and `make test`.
# Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.core-stamp
STAMP := $(VENV)/.dev-stamp

.PHONY: demo test check bench format clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The demo needs refvault and the MCP SDK (its screenshot step runs an MCP server behind the gateway);
# tests, checks and benchmarks need the dev extra.
$(CORE): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[mcp]'
	touch $(CORE)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(CORE) $(STAMP)

demo: $(CORE)
	$(BIN)/refvault demo

check: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy src
	$(BIN)/lint-imports --no-logo
	$(BIN)/python -m refvault.devtools.ref_sites

test: check
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/capture.py
	$(BIN)/python bench/dispatch.py
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/materialize.py
	$(BIN)/python bench/guard.py
	$(BIN)/python bench/load.py

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

clean:
	rm -rf $(VENV) .refvault .mypy_cache .pytest_cache .ruff_cache .import_linter_cache
