# Build timing and the layer-reuse check (src/mcore_images/image_build/timing.py).
TIMING_MCORE ?= 0.16.0
TIMING_TE ?= 2.19.0
export TIMING_MCORE TIMING_TE

.PHONY: build-timing layer-reuse

build-timing: ## time builds of STACK (default debian) side by side: cold (empties the machine's build cache), warm, megatron-core bump, TE bump
	$(FROM_MAKE) build-timing STACK TIMING_MCORE TIMING_TE -- --scenarios cold,warm,mcore,te --prune-build-cache \
	  --out build/build-timing.json

layer-reuse: ## rebuild with only megatron-core changed (an override); fail unless base and kernels stay cached
	$(FROM_MAKE) build-timing STACK TIMING_MCORE -- --scenarios mcore --check-reuse mcore \
	  --out build/layer-reuse.json
