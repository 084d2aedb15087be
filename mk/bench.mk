# Build-efficiency benchmark and the layer-reuse check (src/mcore_images/bench_build.py).
BENCH_MCORE ?= 0.16.0
BENCH_TE ?= 2.19.0

.PHONY: bench-build layer-reuse

bench-build: ## build benchmark on STACK (default debian): cold, warm, megatron-core bump, TE bump
	$(PYTHON) -m mcore_images.bench_build --stack $(or $(STACK),debian) --scenarios cold,warm,mcore,te \
	  --mcore $(BENCH_MCORE) --te $(BENCH_TE) --json build/bench-build.json

layer-reuse: ## rebuild with only megatron-core changed (an override); fail unless base and kernels stay cached
	$(PYTHON) -m mcore_images.bench_build --stack $(or $(STACK),debian) --scenarios mcore --mcore $(BENCH_MCORE) \
	  --check-reuse mcore
