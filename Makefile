# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean install

$(STAMP): pyproject.toml setup.py amv_calib/gate/_ckernel.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/amv-calib run pipelines/retrain.toml

lint: $(STAMP)
	$(BIN)/ruff check amv_calib tests bench

typecheck: $(STAMP)
	$(BIN)/mypy amv_calib

# The gate's tests run twice: with its compiled kernel, and with the pure-Python engine and
# numpy batch that run where the kernel did not build.
GATE_TESTS := tests/gate/test_gate_engine.py tests/gate/test_gate_properties.py tests/gate/test_gate_planner.py \
	tests/gate/test_gate_seed_node.py tests/gate/test_batch.py tests/gate/test_ckernel.py

test: $(STAMP) lint typecheck
	$(BIN)/python -m pytest -q
	AMV_CALIB_PURE_PYTHON=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(GATE_TESTS)

# Each benchmark compares against a named baseline in the same run and writes bench/results/.
bench: $(STAMP)
	set -e; for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache amv_calib/gate/*.so
