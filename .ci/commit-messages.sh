#!/usr/bin/env bash
# Commit messages read well in `git log --oneline`: a subject of at most 72 characters, then, when there is a body,
# a blank line before it (git's own convention; `git shortlog`, `format-patch` and every log viewer cut there).
#
#   .ci/commit-messages.sh [BASE]   check every commit after BASE up to HEAD (merges too)
#
# BASE defaults to FIRST, the commit this check landed on: the history before it keeps its messages as they were
# written. Each message that breaks a rule is one line (the commit, what is wrong); exit 1 when any does, 2 when
# BASE is not in this clone or HEAD does not descend from it, 0 otherwise. `make lint` runs it.
set -euo pipefail
# shellcheck source=.ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" commit-messages  # log
export LC_ALL=C.UTF-8  # ${#subject} counts characters, not bytes

FIRST=9c0f7a88f60fd2f97f28502dde03bd092b274b48
MAX_SUBJECT=72

base="${1:-$FIRST}"
if ! git cat-file -e "${base}^{commit}" 2>/dev/null; then
  log "error: commit ${base} is not in this clone: fetch the whole history (git fetch --unshallow; in a workflow," \
    "actions/checkout with fetch-depth: 0)"
  exit 2
fi
if ! git merge-base --is-ancestor "$base" HEAD; then
  log "error: HEAD does not descend from ${base}, the first commit these rules hold for: rebase onto it"
  exit 2
fi

bad=0
count=0
while IFS= read -r commit; do
  count=$((count + 1))
  message="$(git log -1 --format=%B "$commit")"
  subject="${message%%$'\n'*}"
  short="$(git rev-parse --short "$commit")"
  if ((${#subject} > MAX_SUBJECT)); then
    log "${short}: the subject is ${#subject} characters, over ${MAX_SUBJECT}: '${subject:0:60}…'; say it" \
      "shorter and put the rest in the body"
    bad=$((bad + 1))
  fi
  if [[ "$message" == *$'\n'* ]]; then
    rest="${message#*$'\n'}"
    if [[ -n "${rest%%$'\n'*}" ]]; then
      log "${short}: no blank line between the subject and the body: '${subject:0:60}'; add one after the subject"
      bad=$((bad + 1))
    fi
  fi
done < <(git rev-list "${base}..HEAD")

if ((bad)); then
  log "${bad} problem(s) in the ${count} commit message(s) after ${base:0:12}: reword them (git rebase -i ${base:0:12})"
  exit 1
fi
log "${count} commit message(s) after ${base:0:12}: subjects of at most ${MAX_SUBJECT} characters, bodies apart"
