# Two commands on a fresh machine:
#   make run    creates .venv if missing (torch, torchvision, effbench and what it needs to run), then
#               `effbench run --smoke`
#   make test   the same environment plus the test extra (pytest, the references the tests check against),
#               then the test suite (CPU only), one process per core up to 4
# Each target installs only what it uses: `make lint` adds the lint extra, `make test-dali` the dali extra.
PYTHON ?= python3
VENV ?= .venv
# The pins this project is developed and tested with (a CUDA build that also runs on the CPU).
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# `make test PYTEST_ARGS=...` adds pytest options (a file, -k, -x)
PYTEST_ARGS ?=
PYTEST := $(VENV)/bin/python -m pytest -n logical --maxprocesses 4 --dist loadfile
PIP := $(VENV)/bin/python -m pip install --quiet
# One stamp per extra: an extra is installed once, again only when pyproject.toml changes.
RUN_STAMP := $(VENV)/.effbench-run
TEST_STAMP := $(VENV)/.effbench-test
LINT_STAMP := $(VENV)/.effbench-lint
DALI_STAMP := $(VENV)/.effbench-dali

.PHONY: run test test-slow test-dali env lint image-smoke clean

env: $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH_PINS)
	$(PIP) -e .
	touch $@

# HolisticTraceAnalysis without its jupyterlab (pyproject.toml's test extra says why and lists what it imports)
HTA_PIN := HolisticTraceAnalysis==0.5.0

$(TEST_STAMP): $(RUN_STAMP)
	$(PIP) -e '.[test]'
	$(PIP) --no-deps $(HTA_PIN)
	touch $@

$(LINT_STAMP): $(RUN_STAMP)
	$(PIP) -e '.[lint]'
	touch $@

$(DALI_STAMP): $(RUN_STAMP)
	$(PIP) -e '.[dali]'
	touch $@

run: $(RUN_STAMP)
	$(VENV)/bin/effbench run --smoke

test: $(TEST_STAMP)
	$(PYTEST) $(PYTEST_ARGS)

# The tests marked slow (each 15-100 s on 2 cores: DDP on gloo, convergence, the benchmarks at --tiny).
test-slow: $(TEST_STAMP) $(DALI_STAMP)
	$(PYTEST) -m slow $(PYTEST_ARGS)

# The tests of `--loader dali` (NVIDIA DALI's CPU pipeline runs without a GPU); `make test` skips them without DALI.
test-dali: $(TEST_STAMP) $(DALI_STAMP)
	$(PYTEST) -m 'dali and not slow' $(PYTEST_ARGS)

# Python (ruff, ruff format, mypy) and container files (hadolint, docker compose config, singularity.def validator, shellcheck).
lint: $(LINT_STAMP)
	bash .ci/lint.sh

# Build the Dockerfile with podman (root, no Docker engine) and run the smoke test inside the image.
image-smoke:
	bash .ci/image-smoke.sh

clean:
	rm -rf $(VENV) results .pytest_cache
