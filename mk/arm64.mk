# linux/arm64 images (Grace hosts: GH200, GB200, GB300) built and tested on an x86_64 Debian machine under QEMU.
# Included by the Makefile; `make help` lists the targets. On an aarch64 machine the same targets run natively.
# STACK and LAYER reach the recipes as environment variables (defaults: debian, runtime), never as shell text.

.PHONY: emulation build-arm64 test-arm64

emulation: ## let this Debian host build and run linux/arm64 images: QEMU 11.1 or newer (Debian's qemu-user, from trixie-backports when this host's is older) registered with the F flag; idempotent
	bash .ci/emulation.sh

build-arm64: emulation ## emulated linux/arm64 build: [STACK=debian] [LAYER=runtime]; its arm64 base (debootstrap --arch arm64), then its layers (::phase lines time both)
	STACK="$${STACK:-debian}" PLATFORM=linux/arm64 bash .ci/phase.sh arm64-base $(FROM_MAKE) base STACK PLATFORM
	STACK="$${STACK:-debian}" LAYER="$${LAYER:-runtime}" PLATFORM=linux/arm64 \
	  bash .ci/phase.sh arm64-build $(FROM_MAKE) build STACK LAYER PLATFORM MAX_JOBS NVCC_THREADS FORCE BAKE_ARGS

# certify runs the image tests, the 2-rank CPU smoke and the bridge check in the image (every container with
# --platform linux/arm64) and writes a certificate of that platform: one run, nothing run twice. Under QEMU the
# smoke's runs take about ten times as long: its 900 s default watchdog stopped it in the eighth of nine runs.
test-arm64: ## certify the image build-arm64 made: its image tests, the 2-rank CPU smoke, the bridge check: [STACK=debian] [LAYER=runtime]
	image="mcore-images:$${LAYER:-runtime}-$${STACK:-debian}.arm64"; \
	bash .ci/phase.sh arm64-certify $(MCORE) certify "$$image" --out build/arm64-certificate -- --cpu --nproc 2 --watchdog 3600
