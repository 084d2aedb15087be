#!/usr/bin/env bash
# The release path end to end against a real local registry (.ci/registry.sh), one command:
#
#   build the group, push candidate tags by digest → certify REGISTRY/REPO@DIGEST (image tests, the smoke on
#   CPU with several ranks and its parity checks, the bridge check) → attach the certificate to the digest
#   (OCI referrer) → sign it with cosign → promote (policy ci) → delete every local copy → docker pull the
#   public tag → the pulled digest is the promoted one → mcore-images verify the tag.
#
#   A multi-platform stack builds this machine's platform here (candidate-<sha>-<target>.<arch>), which
#   `mcore-images index` joins into the target's index: its platform manifest is certified and the index
#   promoted (the ci policy takes the platforms an index holds; the release policy wants all of the stack's).
#
#   .ci/release-local.sh                 GROUP (default ci), REGISTRY (default 127.0.0.1:$MCORE_REGISTRY_PORT)
#   STACK=debian-verl .ci/release-local.sh   one stack's layers instead of a group
#
# On the local registry, CI signs as that registry's release authority: one cosign key pair made on its first
# release and kept with its storage ($MCORE_REGISTRY_STATE/release/keys; `.ci/registry.sh stop --purge` deletes
# both), so its signed ledger goes on from run to run as a site's does; the authority's record of its last ledger
# write (it builds only on that one) and the ledger versions this machine saw live there too ($MCORE_REGISTRY_STATE/
# release/state). Another REGISTRY gets a key pair of this run (build/release-local/keys). A site signs with
# its own key or a KMS URI (docs/release.md). Each step says when it starts and what it acted on (the digest), as
# `::release-local m:ss …` lines (m:ss: the time since this script started); the build, the pulls and certify print
# their own progress between them.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
GROUP="${GROUP:-ci}"
REGISTRY="${REGISTRY:-127.0.0.1:${MCORE_REGISTRY_PORT:-5000}}"
REPO="${IMAGE_REPO:-mcore-images}"
OUT="build/release-local"
SMOKE_ARGS=(--cpu --nproc "${SMOKE_RANKS:-4}")
started=$(date +%s)

mcore() { "$PYTHON" -m mcore_images "$@"; }
elapsed() { local s=$(( $(date +%s) - started )); printf '%d:%02d' $(( s / 60 )) $(( s % 60 )); }
say() { printf '::release-local %s %s\n' "$(elapsed)" "$*"; }
die() { printf '[release-local] error: %s\n' "$*" >&2; exit 1; }
json() { "$PYTHON" -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

new_key_pair() { mkdir -p "$1" && (cd "$1" && COSIGN_PASSWORD="" cosign generate-key-pair >/dev/null); }

bash .ci/registry.sh start
eval "$(bash .ci/registry.sh env)"
rm -rf "$OUT" build/candidates
mkdir -p "$OUT"
export COSIGN_PASSWORD=""
if [[ "$REGISTRY" == "$MCORE_REGISTRY" ]]; then
  KEYS="$MCORE_REGISTRY_RELEASE/keys"
  export MCORE_IMAGES_STATE="$MCORE_REGISTRY_RELEASE/state"
  if [[ -d "$MCORE_REGISTRY_RELEASE/seen" && ! -e "$MCORE_IMAGES_STATE" ]]; then
    mv "$MCORE_REGISTRY_RELEASE/seen" "$MCORE_IMAGES_STATE"  # where it was kept before the authority's record
  fi
  if [[ ! -f "$KEYS/cosign.key" ]]; then
    ledger_tag="$("$PYTHON" -c 'from mcore_images.release.ledger import TAG; print(TAG)')"
    if oras repo tags --plain-http "$REGISTRY/$REPO" 2>/dev/null | grep -qxF "$ledger_tag"; then
      # Releases signed by a key that is gone: nobody can extend their ledger, and a new key must not pretend to.
      say "the registry holds a release ledger whose key is gone: purging its storage to start a new authority"
      bash .ci/registry.sh stop --purge
      bash .ci/registry.sh start
    fi
    new_key_pair "$KEYS"
    say "signing key: new cosign key pair $KEYS/cosign.{key,pub}, the release authority of $REGISTRY"
  else
    say "signing key: $KEYS/cosign.{key,pub}, the release authority of $REGISTRY since $(date -r "$KEYS/cosign.key" -u +%FT%TZ)"
    # A ledger signed before the authority kept its last write is adopted once; a record it has is never replaced,
    # and a head that is not its last write is refused here, before anything is built.
    adopted="$(mcore ledger "$REGISTRY/$REPO" --key "$KEYS/cosign.pub" --adopt)"
    say "release ledger: $adopted"
  fi
else
  KEYS="$OUT/keys"
  export MCORE_IMAGES_STATE="$OUT/state"
  new_key_pair "$KEYS"
  say "signing key: cosign key pair of this run $KEYS/cosign.{key,pub}"
fi

sha="$(git rev-parse HEAD)"
say "build: ${STACK:+stack $STACK}${STACK:-group $GROUP}, pushed as candidates to $REGISTRY"
if [[ -n "${STACK:-}" ]]; then
  mcore build --stack "$STACK" --candidate "$sha" --registry "$REGISTRY"
else
  mcore build --group "$GROUP" --candidate "$sha" --registry "$REGISTRY"
fi
# A multi-platform stack's candidates (one platform here) become its targets' indexes (none: nothing to do).
mcore index --candidates build/candidates --sha "$sha"
# One certificate per stack and platform, of its top layer (an app image carries its runtime layer and runs its
# tests); one promotion per stack, of that layer's index or image.
mcore matrix --candidates build/candidates --top-only --pretty >"$OUT/candidates.json"
mcore matrix --candidates build/candidates --top-only --promotions --pretty >"$OUT/promotions.json"
count="$(json 'len(d["include"])' <"$OUT/candidates.json")"
[[ "$count" -gt 0 ]] || die "the build pushed no certifiable candidate; see build/candidates/bake-metadata.json"

for i in $(seq 0 $((count - 1))); do
  image="$(json "d['include'][$i]['image']" <"$OUT/candidates.json")"
  target="$(json "d['include'][$i]['target']" <"$OUT/candidates.json")"
  index="$(json "d['include'][$i]['index']" <"$OUT/candidates.json")"
  arch="$(json "d['include'][$i]['arch']" <"$OUT/candidates.json")"
  digest="${image#*@}"
  cert="$OUT/$target"
  [[ -z "$index" ]] || cert="$OUT/$target.$arch"  # one certificate per platform of an index
  say "push: $target ($arch) → $image${index:+ (in $index)}"

  say "certify $((i + 1))/$count: pulling $image"
  docker pull "$image" >&2  # a line per layer (no terminal here)
  t=$(date +%s)
  say "certify $((i + 1))/$count: $image (image tests, the frameworks' own tests, the smoke, the bridge check)"
  mcore certify "$image" --out "$cert" -- "${SMOKE_ARGS[@]}" || die "certify $image failed: $cert/certificate.md"
  say "certify: $image passed in $(( $(date +%s) - t )) s ($cert/certificate.json)"

  mcore attach "${index:-$image}" --certificate "$cert" --key "$KEYS/cosign.key" | tee "$cert/attach.txt"
  say "attach+sign: $(grep -o 'as sha256:[0-9a-f]*' "$cert/attach.txt" | cut -c4-) signed for $digest"
  # Every local copy goes (all tags of the image), so the pull below must come from the registry.
  id="$(docker image inspect --format '{{.Id}}' "$image")"
  docker image rm -f "$id" >/dev/null
  docker image inspect "$image" >/dev/null 2>&1 && die "a local copy of $image is left"
done

count="$(json 'len(d["include"])' <"$OUT/promotions.json")"
for i in $(seq 0 $((count - 1))); do
  image="$(json "d['include'][$i]['image']" <"$OUT/promotions.json")"
  stack="$(json "d['include'][$i]['stack']" <"$OUT/promotions.json")"
  target="$(json "d['include'][$i]['target']" <"$OUT/promotions.json")"
  digest="${image#*@}"
  mkdir -p "$OUT/$target"
  say "promote $((i + 1))/$count: $image"
  mcore promote "$image" --stack "$stack" --key "$KEYS/cosign.pub" --policy ci --execute \
    --sign-key "$KEYS/cosign.key" --json \
    >"$OUT/$target/promotion.json"
  alias="$(json 'd["moving_tags"][1]' <"$OUT/$target/promotion.json")"
  say "promote: $digest → $(json '", ".join(d["moving_tags"] + [d["immutable_tag"]])' <"$OUT/$target/promotion.json")"

  say "pull: $REGISTRY/$REPO:$alias"
  docker pull "$REGISTRY/$REPO:$alias" >&2
  pulled="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$REGISTRY/$REPO:$alias" \
    | grep -F "$REGISTRY/$REPO@" | head -n 1)"
  [[ "${pulled#*@}" == "$digest" ]] || die "pulled $REGISTRY/$REPO:$alias is ${pulled#*@}, promoted was $digest"
  say "pull: $REGISTRY/$REPO:$alias → ${pulled#*@} (the promoted digest)"

  mcore verify "$REGISTRY/$REPO:$alias" --key "$KEYS/cosign.pub" --policy ci
  say "verify: $REGISTRY/$REPO:$alias passed"
  printf '%s\n' "$REGISTRY/$REPO:$alias" >>"$OUT/certified.txt"  # what CI's later phases run
done
say "phase wall time: $(( $(date +%s) - started )) s"
