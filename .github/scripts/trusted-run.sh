#!/usr/bin/env bash
# A certificate of an earlier run is promoted only when that run is trusted: a run of this repository's
# gpu-smoke.yml or build.yml, on main, started by a push, a schedule or by hand — never a pull request's
# run, whose artifacts anyone who opens one can shape. Reads the run from the GitHub API.
#
#   RUN_ID=123 REPOSITORY=owner/repo GH_TOKEN=… .github/scripts/trusted-run.sh
set -euo pipefail
: "${RUN_ID:?the run id}" "${REPOSITORY:?owner/repo}" "${GH_TOKEN:?a token that reads actions}"
[[ "$RUN_ID" =~ ^[0-9]+$ ]] || { echo "error: run-id '$RUN_ID' is not a run number" >&2; exit 2; }
api="${GITHUB_API_URL:-https://api.github.com}/repos/$REPOSITORY/actions/runs/$RUN_ID"
run_json="$(curl -fsS -H "Authorization: Bearer $GH_TOKEN" -H "Accept: application/vnd.github+json" "$api")"
RUN_JSON="$run_json" python3 - <<'PY'
import json, os, sys

run = json.loads(os.environ["RUN_JSON"])
trusted = {"path": {".github/workflows/gpu-smoke.yml", ".github/workflows/build.yml"},
           "head_branch": {"main"}, "event": {"push", "schedule", "workflow_dispatch"}}
problems = [f"{key} is {run.get(key)!r}, not one of {sorted(allowed)}" for key, allowed in trusted.items()
            if run.get(key) not in allowed]
if (run.get("repository") or {}).get("full_name") != os.environ["REPOSITORY"] or \
        (run.get("head_repository") or {}).get("full_name") != os.environ["REPOSITORY"]:
    problems.append("the run is not of this repository's own branch")
if problems:
    print(f"error: run {run.get('id')} is not trusted: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"run {run['id']}: {run['path']} on {run['head_branch']} ({run['event']}), trusted")
PY
