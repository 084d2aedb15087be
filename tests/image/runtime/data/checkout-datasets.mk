# What a Megatron-LM checkout's megatron/core/datasets/Makefile asks of the image (Megatron-LM core_v0.16.1;
# megatron-core's sdist on PyPI does not carry that file, and these tests cannot fetch the checkout): the
# pybind11 include flags from `python3 -m pybind11 --includes`, and the module's file name from
# `python3-config --extension-suffix`. Without python3-config the suffix is empty and make writes a bare
# helpers_cpp that Python cannot import.
EXT := $(shell python3-config --extension-suffix)
INCLUDES := $(shell python3 -m pybind11 --includes)

helpers_cpp$(EXT): helpers.cpp
	$(CXX) -O3 -Wall -shared -std=c++17 -fPIC $(INCLUDES) $< -o $@
