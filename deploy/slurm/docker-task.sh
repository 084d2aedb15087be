#!/usr/bin/env bash
# One Slurm task's container: `docker run` of IMAGE on this node, for the jobs here that run one container per node
# (deploy/slurm/smoke.sbatch's LAUNCH=docker mode, examples/verl-grpo/grpo.sbatch). Host networking (the rendezvous,
# Ray and NCCL reach the other nodes directly), host IPC, the stack limit NVIDIA's containers ask for and NVLink
# multicast off. The container is named after the job and the task and runs in the background, so that Slurm's
# SIGTERM (scancel, srun --wait, a failed task with --kill-on-bad-exit) reaches the trap at once, and it is removed
# with the task: a cancelled or failed job leaves nothing running on the node, and no container holds its GPUs.
# (A `docker run` killed with its client leaves its container running: the daemon owns it.)
#
#   docker-task.sh NAME [DOCKER-RUN-OPTION…] -- COMMAND [ARG…]
#
# NAME: the container's name is NAME-<job id>-<task id>. Options before `--` reach `docker run` after these ones.
# Environment: IMAGE; GPUS (1, the default: all the node's GPUs; 0: none); DOCKER_MEMLOCK (the memlock ulimit RDMA
# needs, e.g. -1; empty or unset: Docker's default, for engines whose own limit refuses it).
set -euo pipefail
die() { echo "docker-task.sh: $*" >&2; exit 2; }
usage="give NAME [DOCKER-RUN-OPTION…] -- COMMAND [ARG…]"
(($#)) && [[ "$1" != -* ]] || die "$usage"
name="$1-${SLURM_JOB_ID:-local}-${SLURM_PROCID:-0}"
shift
options=()
while (($#)) && [[ "$1" != -- ]]; do options+=("$1"); shift; done
(($# > 1)) || die "no command after --: $usage"
shift
[[ -n "${IMAGE:-}" ]] || die "set IMAGE to the image to run"
[[ "${GPUS:-1}" =~ ^[01]$ ]] || die "GPUS must be 1 (all the node's GPUs) or 0 (none), got '${GPUS}'"
gpus=()
[[ "${GPUS:-1}" == 1 ]] && gpus=(--gpus all)
memlock=()
[[ -n "${DOCKER_MEMLOCK:-}" ]] && memlock=(--ulimit "memlock=$DOCKER_MEMLOCK")
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT TERM INT
docker run --rm --name "$name" --network host --ipc=host --ulimit stack=67108864 "${memlock[@]}" "${gpus[@]}" \
  -e NCCL_NVLS_ENABLE=0 -e TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -e NVSHMEM_DISABLE_NVLS=1 \
  "${options[@]}" "$IMAGE" "$@" &
wait $!
