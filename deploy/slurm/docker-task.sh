#!/usr/bin/env bash
# One task of deploy/slurm/smoke.sbatch's LAUNCH=docker mode: deploy/multinode-smoke.sh in a container of
# IMAGE on this node, with host networking (the rendezvous and NCCL reach the other nodes directly).
# The container runs in the background so that Slurm's SIGTERM reaches the trap at once, and it is removed
# with the task: a cancelled or failed job leaves nothing running on the node. --pid=host: torchrun names an
# agent by host name and PID, and two containers of one host with host networking would both be
# "<host>_1_0" to the rendezvous (two tasks of one node, as in CI).
# Environment (from smoke.sbatch): IMAGE, DEPLOY, CERT_DIR, GPUS (1 or 0), DOCKER_MEMLOCK, and NNODES,
# RDZV_ENDPOINT, RDZV_ID, NPROC_PER_NODE for the launcher.
set -euo pipefail
name="mcore-smoke-${SLURM_JOB_ID:-local}-${SLURM_PROCID:-0}"
gpus=()
[[ "${GPUS:-1}" == 1 ]] && gpus=(--gpus all)
memlock=()
[[ -n "${DOCKER_MEMLOCK:-}" ]] && memlock=(--ulimit "memlock=$DOCKER_MEMLOCK")
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT TERM INT
docker run --rm --name "$name" --network host --pid=host --ipc=host --ulimit stack=67108864 "${memlock[@]}" "${gpus[@]}" \
  -e NNODES -e RDZV_ENDPOINT -e RDZV_ID -e NPROC_PER_NODE -e OUT=/cert \
  -e NCCL_NVLS_ENABLE=0 -e TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -e NVSHMEM_DISABLE_NVLS=1 \
  -v "$DEPLOY:/opt/deploy:ro" -v "$CERT_DIR:/cert" -w /workspace "$IMAGE" \
  bash /opt/deploy/multinode-smoke.sh "$@" &
wait $!
