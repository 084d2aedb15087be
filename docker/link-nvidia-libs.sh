#!/bin/sh
# Register the CUDA libraries of the pip `nvidia-*` packages with the dynamic loader, so that
# Transformer Engine finds libnccl, libcudnn and the CUDA runtime that torch itself uses (and not a
# different system copy: a cuDNN mismatch silently disables fused attention).
set -eu
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[ -d "$site/nvidia" ] || { echo "link-nvidia-libs: no pip nvidia packages; system libraries stay in use"; exit 0; }
find "$site/nvidia" -mindepth 2 -maxdepth 3 -type d -name lib | sort >/etc/ld.so.conf.d/00-mcore-images-nvidia.conf
ldconfig
echo "link-nvidia-libs: $(wc -l </etc/ld.so.conf.d/00-mcore-images-nvidia.conf) folders registered"
