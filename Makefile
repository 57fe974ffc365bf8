# Two entry points for a fresh machine: `make serve` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test services install dev lint tracker bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

serve: install
	$(BIN)/tally serve

test: dev
	.ci/services
	$(BIN)/ruff check app actors storage common tests bench
	$(BIN)/pytest -q -n 2 --dist loadgroup
	@if command -v npm >/dev/null 2>&1; then cd tracker_js && npm ci --silent --no-audit --no-fund && npm test --silent; \
	else echo "node not found: tracker unit tests skipped"; fi

services:
	.ci/services

lint: dev
	$(BIN)/ruff check app actors storage common tests bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
