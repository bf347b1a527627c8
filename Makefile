# Two set-up commands that work on a fresh machine: `make demo` and `make test`.
# Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.core-stamp
STAMP := $(VENV)/.dev-stamp

.PHONY: demo test check browser bench format clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The demo needs refvault and the MCP SDK (its screenshot step runs an MCP server behind the gateway);
# tests, checks and benchmarks need the dev extra. Both then compile the leak guard's kernels for this
# machine (once, saying so; later runs load them from numba's cache), so no command pauses to compile.
$(CORE): pyproject.toml | $(VENV)/bin/python
	@echo "installing refvault[mcp] into .venv (first run only)…"
	$(BIN)/python -m pip install --quiet -e '.[mcp]'
	$(BIN)/python -m refvault.guard.warm
	touch $(CORE)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "installing refvault[dev] into .venv (first run only)…"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m refvault.guard.warm
	touch $(CORE) $(STAMP)

demo: $(CORE)
	$(BIN)/refvault demo

check: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy src
	$(BIN)/lint-imports --no-logo
	$(BIN)/python -m refvault.devtools.ref_sites
	$(BIN)/python -m refvault.devtools.tools_doc --check

# The console's browser tests drive Debian's chromium through its chromium-driver (installed here if missing).
browser:
	@scripts/ensure-browser.sh

test: check browser
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/capture.py
	$(BIN)/python bench/dispatch.py
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/materialize.py
	$(BIN)/python bench/guard.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/audit.py
	$(BIN)/python bench/cli.py
	$(BIN)/python bench/redaction.py
	$(BIN)/python bench/lineage.py
	$(BIN)/python bench/budgets.py
	$(BIN)/python bench/proofs.py
	$(BIN)/python bench/migrate.py
	$(BIN)/python bench/observability.py

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

clean:
	rm -rf $(VENV) .refvault .mypy_cache .pytest_cache .ruff_cache .import_linter_cache
