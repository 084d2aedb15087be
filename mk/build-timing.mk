# Build timing and the layer-reuse check (src/mcore_images/build_timing.py).
TIMING_MCORE ?= 0.16.0
TIMING_TE ?= 2.19.0

.PHONY: build-timing layer-reuse

build-timing: ## time builds of STACK (default debian) side by side: cold, warm, megatron-core bump, TE bump
	$(MCORE) build-timing --stack $(or $(STACK),debian) --scenarios cold,warm,mcore,te \
	  --mcore $(TIMING_MCORE) --te $(TIMING_TE) --out build/build-timing.json

layer-reuse: ## rebuild with only megatron-core changed (an override); fail unless base and kernels stay cached
	$(MCORE) build-timing --stack $(or $(STACK),debian) --scenarios mcore --mcore $(TIMING_MCORE) --check-reuse mcore \
	  --out build/layer-reuse.json
