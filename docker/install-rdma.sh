#!/bin/sh
# rdma-core's userland for NCCL's InfiniBand/RoCE transport (it opens libibverbs at run time and falls back
# to TCP sockets, silently, where it cannot): verbs, the providers (mlx5, efa, …), rdmacm, and ibv_devinfo.
# librdmacm is librdmacm1t64 from Debian trixie and Ubuntu 24.04 on (the 64-bit time_t transition).
# Versions come with the flavor's pinned base (its Debian suite, or the digest-pinned CUDA image).
set -eu
rdmacm=librdmacm1t64
apt-cache show "$rdmacm" >/dev/null 2>&1 || rdmacm=librdmacm1
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  libibverbs1 ibverbs-providers ibverbs-utils "$rdmacm"
