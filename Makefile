# entrepot — the two set-up commands (README "Set up") and a few more.
#   make run        create .venv if missing, install entrepot, serve on the embedded defaults
#   make test       create/update .venv with the dev and spark extras, run every test not
#                   marked slow (real gateways on the default server.workers: one front per
#                   usable CPU), those marked workers again in one process
#                   (server.workers = 1), and mypy --strict (docs/testing.md)
#   make test-slow  only the tests marked slow: the long sizes of the store and link crash
#                   tests and of the Spark cluster test (make test runs their small sizes)
#   make install    install for systemd: /opt/entrepot/venv, /etc/entrepot, the unit
#                   (systemd/install.sh; PREFIX, SYSCONFDIR, UNITDIR, VIRTUALENV, DESTDIR)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: run test test-slow typecheck bench torture clean install

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
	ENTREPOT_TEST_WORKERS=1 $(BIN)/python -m pytest -m "workers and not slow"
	$(BIN)/mypy --strict gateway store mapping

test-slow: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m slow

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy --strict gateway store mapping

torture: $(VENV)/.installed-dev
	$(BIN)/python -m tests.torture --json var/torture/report.json

# The full benchmark run (bench/README.md) into bench/results/latest.json. Its HTTP load generator
# is wrk (Debian's package): installed here when missing and run as root, else named.
bench: $(VENV)/.installed-dev
	@command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make bench: installing wrk"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; \
	  else \
	    echo "make bench: wrk is missing; install it (Debian: sudo apt-get install -y wrk)" >&2; \
	    exit 1; \
	  fi; }
	$(BIN)/python -m bench --json bench/results/latest.json

# The installed layout of docs/operations.md; the variables systemd/install.sh reads are
# passed on from the command line (make install PREFIX=/srv/entrepot).
install:
	PYTHON=$(PYTHON) sh systemd/install.sh

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .hypothesis
