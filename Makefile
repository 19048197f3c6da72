# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-floors lint typecheck bench bench-report clean install constraints ts

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,spark,openai-agents,langgraph]'
	touch $(STAMP)

install: $(STAMP)

# The demo's versions go to out/models/ (ignored by git): the tracked models/ (the shipped
# amv-guard/v1 and its aliases) never changes, so `make test` finds it as shipped.
demo: $(STAMP)
	$(BIN)/amv-calib run pipelines/retrain.toml
	$(BIN)/python examples/demo_check.py

lint: $(STAMP)
	$(BIN)/ruff check amv_calib tests bench examples

# The package under --strict; the tests and benchmarks with the relaxed settings of
# pyproject.toml (tests.*, bench.*, examples.*).
typecheck: $(STAMP)
	$(BIN)/mypy amv_calib
	$(BIN)/mypy --explicit-package-bases tests bench examples

# The TypeScript gate (clients/typescript): installed from its lockfile, built, its node tests
# and the Agents SDK example's run; tests/gate/test_typescript_gate.py then holds it equal to the
# Python gate. Without npm it is skipped here (and that test skips), except under CI=true.
TS := clients/typescript

ts:
	@if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$CI" = "true" ]; then echo "CI=true and node/npm are not installed: cannot build $(TS)" >&2; exit 1; fi; \
	  echo "node/npm not installed: $(TS) not built (its tests will skip)"; exit 0; \
	fi; \
	set -e; cd $(TS); npm ci --no-audit --no-fund; npm run build; npm test; \
	cd examples/agents-guardrail; npm ci --no-audit --no-fund; npm test

# Two workers, one test file each at a time (module fixtures are built once; the Spark files
# go to one worker, in one session); tests/conftest.py starts the longest files (Spark, then
# the others of more than ~20 s) first. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: $(STAMP) lint typecheck ts
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Day-to-day: the tests without the slow and Spark marks (the rest of the suite, CI's, is
# `make test`); ruff and mypy are `make lint typecheck`.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not spark"

# The dependency floors: pyproject.toml's lowest versions of the runtime dependencies
# (constraints-floor.txt pins each at its floor) in a venv of their own, .venv-floors, and
# the fast tests there. A user installs amv-calib beside their own packages: these are the
# oldest they may have. Raise a floor in both files when this fails on it.
FLOORS_VENV ?= .venv-floors

test-floors:
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOORS_VENV)/bin/python -m pip install --quiet -c constraints-floor.txt -e '.[dev,openai-agents,langgraph]'
	$(FLOORS_VENV)/bin/python -m pip check
	$(FLOORS_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not spark"

# Each benchmark compares against a named baseline in the same run and writes bench/results/;
# --check fails on a missed target, naming it (bench/README.md). Every script runs; the make
# fails at the end if any missed.
bench: $(STAMP)
	fail=""; for f in bench/bench_*.py; do echo "== $$f"; \
	  $(BIN)/python $$f --check || fail="$$fail $$f"; done; \
	if [ -n "$$fail" ]; then echo "missed targets in:$$fail" >&2; exit 1; fi

# The benchmark page, docs/benchmarks.md, written from bench/results/*.json (committed): the
# same bytes for the same results files. Run after `make bench` (or one bench script).
bench-report: $(STAMP)
	$(BIN)/python bench/report.py

# Pin what is installed now (after a dependency change in pyproject.toml).
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) $(FLOORS_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -rf $(TS)/node_modules $(TS)/dist $(TS)/examples/agents-guardrail/node_modules
