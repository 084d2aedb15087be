#!/usr/bin/env bash
# Run one CI phase, print its duration and compare it with its budget (.ci/budget.tsv, the one table):
#
#   phase.sh NAME COMMAND...   run COMMAND as phase NAME
#   phase.sh --report          the phases of this run, those over budget, and the total against the budget
#
# Within a run that .ci/run started (it exports CI_STARTED, the epoch second it began, and CI_PHASES, the file each
# phase's time is added to), a phase still running when the run reaches the budget's `stop` row is stopped, with
# everything it started, and the run ends naming it (exit 124), instead of being cut off silently at CI's limit.
# Outside such a run a phase is timed and compared, and nothing stops it.
set -uo pipefail
BUDGET="${CI_BUDGET:-$(dirname "${BASH_SOURCE[0]}")/budget.tsv}"
GRACE_S=30  # between the TERM that stops a phase and the KILL

budget() { awk -F'\t' -v key="$1" '$1 == key { print $2; exit }' "$BUDGET"; }

report() {
  [[ -s "${CI_PHASES:-}" ]] || { echo "::ci no phase ran (${CI_PHASES:-CI_PHASES unset})"; return 0; }
  local name seconds rc limit total=0 over=()
  printf '::ci %-16s %8s %8s %5s\n' phase seconds budget exit
  while IFS=$'\t' read -r name seconds rc; do
    limit="$(budget "$name")"
    printf '::ci %-16s %8s %8s %5s\n' "$name" "$seconds" "${limit:--}" "$rc"
    total=$((total + seconds))
    if [[ -n "$limit" ]] && ((seconds > limit)); then over+=("$name $seconds s (budget $limit s)"); fi
  done <"$CI_PHASES"
  if ((${#over[@]})); then
    printf '::ci over budget: %s\n' "${over[@]}"
  else
    echo "::ci over budget: none"
  fi
  if [[ -n "${CI_STARTED:-}" ]]; then total=$(( $(date +%s) - CI_STARTED )); fi  # with the time between phases
  echo "::ci total: ${total} s (budget $(budget total) s)"
}

if [[ "${1:-}" == --report ]]; then
  report
  exit 0
fi
name="${1:?usage: phase.sh NAME COMMAND... | phase.sh --report}"
shift
(($#)) || { echo "phase.sh: give the command of phase ${name}" >&2; exit 2; }
limit="$(budget "$name")"
start=$(date +%s)
echo "::phase ${name}: start $(date -u +%H:%M:%S)${limit:+ (budget ${limit} s)}"

stopped=""
if [[ -n "${CI_STARTED:-}" ]]; then
  deadline=$((CI_STARTED + $(budget stop)))
  # Job control gives the phase a process group of its own: the stop reaches everything it started.
  set -m
  "$@" &
  pid=$!
  set +m
  trap 'kill -TERM -- "-$pid" 2>/dev/null' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    if (($(date +%s) >= deadline)); then
      stopped=1
      kill -TERM -- "-$pid" 2>/dev/null
      for _ in $(seq "$GRACE_S"); do kill -0 "$pid" 2>/dev/null && sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null
      break
    fi
    sleep 1
  done
  wait "$pid"
  rc=$?
else
  "$@"
  rc=$?
fi
seconds=$(( $(date +%s) - start ))
[[ -n "$stopped" ]] && rc=124
echo "::phase ${name}: ${seconds} s (exit ${rc})${limit:+, budget ${limit} s}$([[ -n "$limit" ]] && ((seconds > limit)) \
  && echo ": OVER BUDGET")"
[[ -n "${CI_PHASES:-}" ]] && printf '%s\t%s\t%s\n' "$name" "$seconds" "$rc" >>"$CI_PHASES"
if [[ -n "$stopped" ]]; then
  echo "::ci stopped: the run reached $(budget stop) s ($(( $(budget stop) / 60 )) min) in phase ${name}, which ran" \
    "${seconds} s against its budget of ${limit:-no} s; the later phases did not run" >&2
fi
exit "$rc"
