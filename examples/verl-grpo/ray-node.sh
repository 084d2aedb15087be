#!/usr/bin/env bash
# A Ray node in the app image, the way verl's multi-node jobs start: the head on the first node, a worker on
# every other one (host networking, so Ray's and NCCL's ports are the host's).
#   bash ray-node.sh head                 # on node 0: Ray head on port 6379, then returns
#   HEAD=node0 bash ray-node.sh worker    # on the others: join node0:6379 and stay until Ray stops there
#   bash ray-node.sh job [OVERRIDE…]      # grpo.sbatch, on every node: node 0 ($SLURM_NODEID) starts the head, gives
#                                         # the others JOIN_WAIT_S (20) to join and runs grpo-megatron.sh with the
#                                         # overrides; the others are workers
#   bash ray-node.sh check [N]            # a head on loopback, wait until it sees N CPUs (default 1), stop it
set -euo pipefail
role="${1:?give head, worker, job or check}"
port="${RAY_PORT:-6379}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
start_head() { ray start --head --port "$port" --include-dashboard false --disable-usage-stats; }
# --block: the worker stays in the foreground, so its container lives as long as Ray runs on the node.
join_head() { exec ray start --address "${HEAD:?give HEAD=<the head node>}:$port" --disable-usage-stats --block; }
case "$role" in
  head) start_head ;;
  worker) join_head ;;
  job)
    shift
    [[ "${SLURM_NODEID:-}" =~ ^[0-9]+$ ]] || { echo "ray-node.sh: job needs SLURM_NODEID (srun sets it)" >&2; exit 2; }
    [[ "$SLURM_NODEID" != 0 ]] && join_head
    start_head
    sleep "${JOIN_WAIT_S:-20}"
    exec bash "$here/grpo-megatron.sh" "$@"
    ;;
  check)
    want="${2:-1}"
    ray start --head --port "$port" --node-ip-address 127.0.0.1 --num-cpus "$want" --include-dashboard false \
      --disable-usage-stats >/dev/null
    trap 'ray stop --force >/dev/null 2>&1 || true' EXIT
    python3 - "$want" <<'PY'
import sys, time
import ray
ray.init(address="auto")
deadline = time.time() + 60
while ray.cluster_resources().get("CPU", 0) < float(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.5)
cpus = ray.cluster_resources().get("CPU", 0)
print(f"ray {ray.__version__}: {len(ray.nodes())} node(s), {cpus:g} CPU(s)")
sys.exit(0 if cpus >= float(sys.argv[1]) else 1)
PY
    ;;
  *) echo "ray-node.sh: unknown role '$role': give head, worker, job or check" >&2; exit 2 ;;
esac
