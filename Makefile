# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean install constraints

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,spark,openai-agents,langgraph]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/amv-calib run pipelines/retrain.toml

lint: $(STAMP)
	$(BIN)/ruff check amv_calib tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy amv_calib

# Two workers, one test file each at a time (module fixtures are built once); tests/conftest.py
# starts the longest files (Spark) first. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Each benchmark compares against a named baseline in the same run and writes bench/results/.
bench: $(STAMP)
	set -e; for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f; done

# Pin what is installed now (after a dependency change in pyproject.toml).
constraints: $(STAMP)
	{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
