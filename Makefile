# One entry point for the site and its tests. Every target installs what it needs first,
# so `make serve` or `make test` works on a fresh machine (Python 3.11, Node 20, npm).
#   make serve   build the site and serve it on http://127.0.0.1:$(PORT)/
#   make test    build the site, then run every test (calc's and the browser's)
#   make check   ruff, a strict build and results.md up to date
#   make bench   time the built site in headless Chromium (scripts/bench_site.py; BENCH_ARGS=--quick: a short run)
#   make gpu-check  every CUDA measurement on one GPU in at most 8 minutes (DRY_RUN=1: a CPU sample)

PYTHON ?= python3
PORT ?= 8000
VENV := .venv
TOOL_VENV := .venv-pyodide
PYODIDE_PYTHON ?=
BIN := $(VENV)/bin
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup setup-browser build serve live test check bench gpu-check clean

setup: $(VENV)/.installed node_modules/.installed $(TOOL_VENV)/.installed

# Python: calc (editable) with the tools of its tests, the site, the browser tests and the measurements.
$(VENV)/.installed: pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,docs,browser,measure]'
	touch $@

# pyodide-build (`pyodide lockfile add-wheels` writes the site's lock file) needs Python 3.12 or newer,
# in its own tool environment. The first interpreter that is 3.12+ wins: $(PYODIDE_PYTHON) if given,
# then python3.14, python3.13, python3.12 and python3 on PATH, then pyenv's versions.
$(TOOL_VENV)/.installed: pyproject.toml Makefile
	@py="$$(for c in $(PYODIDE_PYTHON) python3.14 python3.13 python3.12 python3 \
	        $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do \
	      $$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$c; break; }; \
	    done)"; \
	if [ -z "$$py" ]; then echo "make: no Python 3.12 or newer found for pyodide-build: install python3.12 (apt-get install python3.12, or pyenv) or pass PYODIDE_PYTHON=/path/to/python3.12" >&2; exit 1; fi; \
	echo "pyodide-build runs on $$py ($$($$py --version))"; \
	test -x $(TOOL_VENV)/bin/python || $$py -m venv $(TOOL_VENV)
	$(TOOL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $$($(TOOL_VENV)/bin/python -c \
	  "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['pyodide-build']))")
	touch $@

# Node: Pyodide and KaTeX, vendored into the site by hooks/assets.py (exact versions: package-lock.json).
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian's Chromium for the browser tests and the benchmark (Playwright never downloads one).
setup-browser: setup
	test -x $(CHROMIUM) || ($(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium)

build: setup
	$(BIN)/mkdocs build --strict

# Serve the built site exactly as the tests see it; `make live` rebuilds on every edit instead.
serve: build
	$(BIN)/python scripts/site_browser.py --port $(PORT)

live: setup
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(PORT)

# Two pytest workers (pytest-xdist), a test file each at a time: most of a browser test is Pyodide starting in
# a fresh page, about one core's work, so two of them at once take the suite from about 18 to 13 minutes on
# the 2-core machine. TEST_JOBS=0 runs them one after another.
TEST_JOBS ?= 2
test: build setup-browser
	node --test tests/js/
	$(BIN)/pytest -n $(TEST_JOBS) --dist loadfile

check: build
	$(BIN)/ruff check calc hooks scripts tests
	$(BIN)/python scripts/make_results.py --check

bench: build setup-browser
	$(BIN)/python scripts/bench_site.py $(BENCH_ARGS)

# Every CUDA measurement (dense, MoE, LoRA, QLoRA, the loops) on one GPU, writing docs/data/*.json
# (scripts/training/gpu_check.py); DRY_RUN=1 runs a small sample of each on the CPU and writes nothing.
gpu-check: setup
	$(BIN)/python scripts/training/gpu_check.py $(if $(DRY_RUN),--dry-run)

clean:
	rm -rf site test-artifacts build/pyodide-site
