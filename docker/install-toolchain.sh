#!/bin/sh
# The run-time toolchain of a runtime image: a C/C++ compiler, make and the Python headers, from the OS.
# They are run-time tools of this stack, not build leftovers: Triton compiles its kernel launcher (C,
# against Python.h) on the first launch, torch.compile's inductor compiles C++ on CPU, and
# torch.utils.cpp_extension (megatron-core's NCCL allocator) and megatron-core's compile_helpers() build
# extensions at run time. ninja and pybind11 come from the runtime lock (PyPI, hashed). A Megatron-LM
# checkout's datasets Makefile names the module it builds with `python3-config --extension-suffix`; Debian's
# pythonX.Y-dev installs only pythonX.Y-config (python3-config comes with the unversioned python3-dev), so
# python3-config is linked to it here and checked against the interpreter the venv runs.
#   install-toolchain.sh FLAVOR PYTHON_VERSION GCC_VERSION
# The OS release fixes gcc's major.minor; GCC_VERSION (the stack's pin) is checked against it, so a base
# that moved to another compiler fails here, not at the first kernel.
set -eu
flavor="$1"
python_version="$2"
gcc_version="$3"
case "$flavor" in
  debian | cuda)
    # The headers package of the interpreter the venv runs (python3-dev on Debian is that interpreter's).
    headers="python${python_version}-dev"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc g++ make libc6-dev "$headers"
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
    ;;
  ngc) ;;  # NGC's PyTorch container ships gcc, make and the Python headers.
  *) echo "install-toolchain: unknown flavor '$flavor'" >&2; exit 1 ;;
esac
have="$(gcc -dumpfullversion)"
case "$have" in
  "$gcc_version" | "$gcc_version".*) ;;
  *) echo "install-toolchain: gcc $have installed, the stack pins gcc $gcc_version: pin gcc=${have%.*} in env/stacks.json" >&2
     exit 1 ;;
esac
include="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$include/Python.h" ] || { echo "install-toolchain: no Python.h in $include" >&2; exit 1; }
command -v make >/dev/null || { echo "install-toolchain: make is missing" >&2; exit 1; }
if ! command -v python3-config >/dev/null; then
  versioned="$(command -v "python${python_version}-config")" \
    || { echo "install-toolchain: no python${python_version}-config to link python3-config to" >&2; exit 1; }
  ln -s "$versioned" /usr/local/bin/python3-config
fi
suffix="$(python -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
[ "$(python3-config --extension-suffix)" = "$suffix" ] \
  || { echo "install-toolchain: python3-config names $(python3-config --extension-suffix), the venv's python $suffix" >&2
       exit 1; }
echo "install-toolchain: gcc $have, $(make --version | head -n 1), $include/Python.h, python3-config ($suffix)"
