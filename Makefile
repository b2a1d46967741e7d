# entrepot — the two set-up commands (README "Quick start") and a few more.
#   make run     create .venv if missing, install entrepot, serve on the embedded defaults
#   make test    create/update .venv with the dev and spark extras, run the tests and mypy --strict

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: run test test-slow typecheck bench torture clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "entrepot needs Python >= 3.11"'
	@$(PYTHON) -m venv $(VENV) || { echo "make: '$(PYTHON) -m venv' failed; on Debian install python3-venv" >&2; rm -rf $(VENV); exit 1; }
	$(PIP) install --quiet --upgrade pip

# The compiled parts (setup.py) are rebuilt when their sources change: a stale build would
# shadow the edited source.
COMPILED := setup.py store/_placing.c $(wildcard gateway/srmp/*.py)

$(VENV)/.installed-run: pyproject.toml $(COMPILED) | $(BIN)/python
	$(PIP) install --quiet -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(COMPILED) | $(BIN)/python
	$(PIP) install --quiet -e '.[dev,spark]'
	@touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/entrepot serve

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest
	$(BIN)/mypy --strict gateway store mapping

test-slow: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m slow

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy --strict gateway store mapping

torture: $(VENV)/.installed-dev
	$(BIN)/python -m tests.torture --json var/torture/report.json

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench --json bench/results/latest.json

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .hypothesis
