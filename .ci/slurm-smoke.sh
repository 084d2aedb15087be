#!/usr/bin/env bash
# The smoke as a 2-node Slurm job on the one-host cluster of .ci/slurm.sh: deploy/slurm/smoke.sbatch with
# LAUNCH=docker, two tasks standing in for two nodes, each running torchrun --nnodes 2 (c10d rendezvous)
# with one CPU rank. Two jobs:
#   1. the CPU smoke on every 2-rank layout          → must end COMPLETED, its certificate passed on 2 nodes
#   2. the same with rank 1 raising at step 1        → must end FAILED within the smoke's timeout, leaving no
#                                                       container or rank behind
# Prints each job's sacct state, exit code and elapsed time, and sbatch's wall time.
#   IMAGE   the runtime image to run (default mcore-images:runtime-debian, what `make build` tags)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-mcore-images:runtime-debian}"
TIMEOUT=60
log() { printf '[slurm-smoke] %s\n' "$*"; }
die() { printf '[slurm-smoke] error: %s\n' "$*" >&2; exit 1; }

docker image inspect "$IMAGE" >/dev/null 2>&1 || die "image $IMAGE is not local: run make build first (or set IMAGE)"
bash .ci/slurm.sh start
out="$(mktemp -d /tmp/mcore-slurm-smoke.XXXXXX)"
chmod 755 "$out"

# sbatch JOB-NAME EXPECTED-STATE SMOKE-ARGS...: submit, wait, and check sacct's final state.
submit() {
  local name="$1" expect="$2"
  shift 2
  local port start rc=0 job state="" i
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  start=$(date +%s.%N)
  job=$(sbatch --parsable --wait --job-name="$name" --nodes=1 --ntasks=2 --ntasks-per-node=2 --gpus-per-node=0 \
          --time=10 --output="$out/%x-%j.out" \
          --export="ALL,LAUNCH=docker,IMAGE=$IMAGE,OUT=$out/$name,RDZV_PORT=$port,DOCKER_MEMLOCK=" \
          deploy/slurm/smoke.sbatch --cpu --timeout "$TIMEOUT" "$@") || rc=$?
  local wall
  wall=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start")
  job="${job%%;*}"
  [[ -n "$job" ]] || die "sbatch gave no job id for $name (exit $rc)"
  for i in $(seq 1 30); do  # accounting records the end a moment after sbatch --wait returns
    state=$(sacct -X -n -P -j "$job" -o State,ExitCode,Elapsed | head -n 1)
    [[ "$state" == COMPLETED* || "$state" == FAILED* || "$state" == CANCELLED* || "$state" == TIMEOUT* ]] && break
    sleep 1
    [[ $i == 30 ]] && die "job $job ($name) has no final state in sacct after 30 s: $state"
  done
  log "job $job $name: sacct State|ExitCode|Elapsed = $state; sbatch --wait returned $rc after ${wall} s"
  [[ "${state%%|*}" == "$expect" ]] || { cat "$out/$name-$job.out" >&2; die "job $job ($name) ended ${state%%|*}, expected $expect"; }
  left=$(docker ps -q --filter "name=mcore-smoke-$job-")
  [[ -z "$left" ]] || die "job $job left containers running: $left"
  if pgrep -f "rdzv-id $job" >/dev/null; then die "job $job left launcher processes: $(pgrep -af "rdzv-id $job")"; fi
  JOB="$job"
}

submit smoke-2nodes COMPLETED
python3 - "$out/smoke-2nodes/certificate.json" <<'EOF'
import json, sys
cert = json.load(open(sys.argv[1]))
settings, runs = cert["settings"], [r for r in cert["runs"] if r["status"] != "skipped"]
print(f"[slurm-smoke] certificate: {cert['status']}, {settings['world_size']} ranks on {settings['nodes']} nodes, "
      f"{len(runs)} runs, wall {cert['timing']['wall_s']:.1f} s")
assert cert["status"] == "passed", cert["error"]
assert settings["nodes"] == 2 and settings["world_size"] == 2, settings
EOF
submit smoke-2nodes-fault FAILED --layouts tp2 --models dense --steps 3 --inject-fault raise --fault-rank 1
grep -h "injected fault" "$out/smoke-2nodes-fault-$JOB.out" | head -n 2
log "both jobs ended as expected; logs and certificates in $out"
