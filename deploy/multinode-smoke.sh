#!/usr/bin/env bash
# The GPU smoke across several nodes with plain torchrun rendezvous (c10d). Run it inside the image,
# the same command on every node at once (Slurm: srun; Kubernetes: one pod per node):
#
#   NNODES=2 RDZV_ENDPOINT=node0:29500 bash deploy/multinode-smoke.sh [python -m mcore_images.smoke options...]
#
# Started by torchrun, `python -m mcore_images.smoke` runs as the ranks directly (src/mcore_images/smoke/cli.py): layouts are planned
# for the whole world, and the rank 0 — on whichever node the rendezvous puts it — writes
# certificate.json/.md to OUT (put OUT on a shared filesystem to find it on the submitting host).
#
#   NNODES          nodes taking part (required)
#   RDZV_ENDPOINT   HOST:PORT every node reaches; the node whose name is HOST hosts the store (required)
#   NPROC_PER_NODE  ranks per node (default: gpu, one per visible GPU)
#   RDZV_ID         job id shared by the nodes (default: mcore-smoke; Slurm: the job id)
#   OUT             certificate folder (default: ./smoke-out)
# The images install the smoke programs in their venv; outside an image, put a checkout's src/ on
# PYTHONPATH.
set -euo pipefail
die() { echo "multinode-smoke: $*" >&2; exit 2; }

[[ "${NNODES:-}" =~ ^[1-9][0-9]*$ ]] || die "set NNODES to the number of nodes (a positive integer), got '${NNODES:-}'"
[[ "${RDZV_ENDPOINT:-}" =~ ^[^:[:space:]]+:[0-9]+$ ]] || die "set RDZV_ENDPOINT=HOST:PORT (a node every node reaches), got '${RDZV_ENDPOINT:-}'"
nproc="${NPROC_PER_NODE:-gpu}"
[[ "$nproc" == gpu || "$nproc" =~ ^[1-9][0-9]*$ ]] || die "NPROC_PER_NODE must be 'gpu' or a positive integer, got '$nproc'"
python -c "import mcore_images.smoke.cli" 2>/dev/null || die "python cannot import the smoke programs: run inside an mcore-images image (or put a checkout's src/ on PYTHONPATH)"
command -v torchrun >/dev/null || die "torchrun not found: run inside an mcore-images image (torch installs it)"
out="${OUT:-smoke-out}"
mkdir -p "$out"

# NVLink multicast off (the images set these too; a site may have cleared them): it can take a
# shared host's GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

exec torchrun --nnodes "$NNODES" --nproc-per-node "$nproc" \
  --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT" --rdzv-id "${RDZV_ID:-mcore-smoke}" \
  --max-restarts 0 -m mcore_images.smoke --out "$out" "$@"
