# Two commands on a fresh machine:
#   make run    creates .venv if missing, then runs `effbench run --smoke`
#   make test   same environment, then the test suite (CPU only)
PYTHON ?= python3
VENV ?= .venv
# The pins this project is developed and tested with (a CUDA build that also runs on the CPU).
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.effbench-installed

.PHONY: run test test-slow env lint image-smoke clean

env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(TORCH_PINS)
	$(VENV)/bin/python -m pip install -e '.[dev]'
	touch $@

run: $(STAMP)
	$(VENV)/bin/effbench run --smoke

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# The tests marked slow (each 15-100 s on 2 cores: DDP on gloo, convergence, the benchmarks at --tiny).
test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -m slow

# Python (ruff, ruff format, mypy) and container files (hadolint, docker compose config, singularity.def validator, shellcheck).
lint: $(STAMP)
	bash .ci/lint.sh

# Build the Dockerfile with podman (root, no Docker engine) and run the smoke test inside the image.
image-smoke:
	bash .ci/image-smoke.sh

clean:
	rm -rf $(VENV) results .pytest_cache
