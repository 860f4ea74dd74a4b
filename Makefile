# Every install step lives here: CI runs `make test` on a clean clone with no .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-portable cluster-test setup clean gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test,fp8]'
	touch $(STAMP)

run: setup
	$(BIN)/shardlab train --config configs/default.toml

# compileall first: where PYTHONDONTWRITEBYTECODE is set (CI's images set it) no import saves bytecode, and each of
# the suite's hundreds of rank processes would compile shardlab's ~350 modules again (~0.16 s a process)
test: setup
	$(BIN)/python -m compileall -q src
	$(BIN)/python -m pytest -q --durations=25

# The parity tests under every CPU kernel path (ATen capability x MKL_CBWR, oneDNN ISA for bf16); not part
# of `make test` (it runs the parity selection several times): docs/testing.md.
test-portable: setup
	$(BIN)/python scripts/test_portable.py

# Slurm and two-host tests with what they need (root: installs slurm-wlm and munge when missing); `make test`
# runs the same tests and skips them with the reason where Slurm or root is missing (docs/cluster.md).
cluster-test: setup
	PY=$(BIN)/python scripts/cluster_test.sh

# On a GPU machine as it is: no setup (it would fetch the pinned CPU torch), shardlab from src/ with the
# torch found there (docs/cuda.md). Exit 0 all passed, 1 a case failed, 2 no CUDA device.
gpu-check:
	PYTHONPATH=src $(PY) -m shardlab.testing.gpu_check

clean:
	rm -rf $(VENV)
