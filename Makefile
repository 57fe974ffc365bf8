# Two entry points for a fresh machine: `make serve` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test services install dev lint lock tracker bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Pinned by constraints.txt: a fresh clone installs the versions the suite last passed with, not whatever
# was released since.
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
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

# The newest releases pyproject.toml allows, into constraints.txt (then run `make test` before committing it).
lock:
	rm -rf .venv-lock
	$(PY) -m venv .venv-lock
	.venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q -e '.[dev]'
	{ head -2 constraints.txt; .venv-lock/bin/pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
