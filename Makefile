# fedrun — set-up, tests, benchmarks.  `make install` then `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Real datasets are read from here when it exists (never committed).
FEDRUN_DATA_DIR ?= $(if $(wildcard ../shared/datasets),$(abspath ../shared/datasets),$(HOME)/.cache/fedrun/datasets)
export FEDRUN_DATA_DIR

PEERS  := .venv-peers

.PHONY: install browser postgres tracking-server tracking-server-stop lint test test-fast bench bench-peers gpu-bundle clean

install: $(BIN)/fedrun browser postgres

$(BIN)/fedrun: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned to the CPU build; install it first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,tracking,cluster]'
	@touch $@

# Chromium for the browser test (tests/integration/test_browser.py), which reads MLflow's UI in a real browser:
# Debian's package when apt-get is there and this runs as root (CI); otherwise one line, and that test skips.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable
browser:
	@for b in $(BROWSERS); do command -v $$b >/dev/null && exit 0; done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "chromium could not be installed: the browser test will skip"; \
	else echo "no Chromium: the browser test will skip (sudo apt-get install chromium, or install Google Chrome)"; fi

# PostgreSQL for the shared tracking server (fedrun-tracking-server, below; its test starts and stops one): Debian's
# package when apt-get is there and this runs as root (CI); otherwise one line, and that test skips.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's postgresql for the tracking server"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
	    || echo "postgresql could not be installed: the tracking-server test will skip"; \
	else echo "no PostgreSQL: the tracking-server test will skip (sudo apt-get install postgresql)"; fi

# A shared MLflow server on PostgreSQL under outputs/tracking/ (docs/scale-out.md); prints the URI to export.
tracking-server: install
	$(BIN)/fedrun-tracking-server start

tracking-server-stop:
	$(BIN)/fedrun-tracking-server stop

# The suite runs on one worker per core, four at most (pytest-xdist; each worker's torch then uses its share of
# the cores: tests/conftest.py). TEST_WORKERS=0 runs it in one process. The log ends with the 25 slowest tests, so
# a CI run that outgrows its 15 minutes shows where the time went.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

# Lint before the tests: ruff (pycodestyle, pyflakes, isort, bugbear, pydocstyle) and mypy on the package, at the
# level pyproject.toml sets ([tool.ruff], [tool.mypy]: its list of modules not yet type-clean only shrinks).
lint: install
	$(BIN)/ruff check fedrun tests scripts
	$(BIN)/mypy

test: install lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=25

test-fast: install lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not integration"

bench: install
	$(BIN)/python scripts/bench/bench.py

# W0 through Flower's simulation engine, beside fedrun, in a separate environment (Ray and Flower
# stay out of the main one). Writes outputs/bench/peers/peers.md.
$(PEERS)/bin/flwr:
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q "flwr[simulation]==1.41.0" numpy

bench-peers: install $(PEERS)/bin/flwr
	$(BIN)/python scripts/bench/bench_peers.py export
	$(PEERS)/bin/python scripts/bench/bench_peers.py flower
	$(BIN)/python scripts/bench/bench_peers.py fedrun
	$(BIN)/python scripts/bench/bench_peers.py report

# A GPU machine with its own CUDA torch and no network (issue #7): `make gpu-bundle` here puts the
# packages its image lacks and the datasets under .gpu/ (about 45 MB, git-ignored; the device tool carries 64 MiB);
# carry .gpu/ there and run `bash scripts/checks/gpu_run.sh` (docs/benchmarks.md, "On a GPU").
GPU_PYTHON   ?= 3.12
GPU_PACKAGES := hydra-core==1.3.8 omegaconf==2.3.1 phe==1.5.0 gmpy2==2.3.2

gpu-bundle: install
	rm -rf .gpu && mkdir -p .gpu/wheels .gpu/datasets
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d .gpu/wheels $(GPU_PACKAGES)
	$(BIN)/pip wheel -q --no-deps -w .gpu/wheels antlr4-python3-runtime==4.9.3  # sdist only: a py3 wheel built here
	cp -r $(FEDRUN_DATA_DIR)/. .gpu/datasets/
	@du -sh .gpu

clean:
	rm -rf outputs .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
