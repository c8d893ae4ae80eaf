# fedrun — set-up, tests, benchmarks.  `make install` then `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Real datasets are read from here when it exists (never committed).
FEDRUN_DATA_DIR ?= $(if $(wildcard ../shared/datasets),$(abspath ../shared/datasets),$(HOME)/.cache/fedrun/datasets)
export FEDRUN_DATA_DIR

PEERS  := .venv-peers

.PHONY: install test test-fast bench bench-peers clean

install: $(BIN)/fedrun

$(BIN)/fedrun: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned to the CPU build; install it first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not integration"

bench: install
	$(BIN)/python scripts/bench.py

# W0 through Flower's simulation engine, beside fedrun, in a separate environment (Ray and Flower
# stay out of the main one). Writes outputs/bench/peers/peers.md.
$(PEERS)/bin/flwr:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q "flwr[simulation]==1.41.0" numpy

bench-peers: install $(PEERS)/bin/flwr
	$(BIN)/python scripts/bench_peers.py export
	$(PEERS)/bin/python scripts/bench_peers.py flower
	$(BIN)/python scripts/bench_peers.py fedrun
	$(BIN)/python scripts/bench_peers.py report

clean:
	rm -rf outputs .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
