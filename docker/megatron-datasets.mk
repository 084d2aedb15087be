# The Makefile megatron-core's compile_helpers() runs (`make -C megatron/core/datasets`, on rank 0 before
# Megatron-LM builds its datasets). A Megatron-LM checkout has one; the megatron-core wheel ships the
# helpers prebuilt (helpers_cpp) but not the Makefile, so the call fails there. The runtime image adds
# this one to the installed package: it builds helpers_cpp from helpers.cpp with the image's compiler and
# pybind11 only when the module is missing, so the prebuilt one is kept and nothing writes into
# site-packages at run time.
PYTHON ?= python3
SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
OUT := helpers_cpp$(SUFFIX)

all: $(OUT)

# No prerequisite on purpose: an existing module is up to date.
$(OUT):
	$(CXX) -O3 -Wall -shared -std=c++17 -fPIC $(shell $(PYTHON) -m pybind11 --includes) helpers.cpp -o $@

.PHONY: all
