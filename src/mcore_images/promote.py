"""`mcore-images promote`, `tags` and `matrix`: give a certified candidate its public tags.

A candidate is pushed by a build under ``candidate-<git sha>-<target>`` and certified by digest on a
GPU runner (`mcore-images certify`). `promote` then refuses, before touching the registry, unless:

- the certificate is well-formed (schema ``mcore-images/smoke-certificate/v1``);
- it passed: the smoke, the image tests (not skipped), on at least one GPU;
- it was made for this very digest, a registry digest (not a local image ID);
- it is at most ``--max-age-days`` old (default 7: the driver, NCCL and runner change under a digest);
- the image's labels name the ``--stack`` given and a certifiable layer (runtime or app), carry the
  pins env/stacks.json holds for that stack (so the public tags computed from env/ describe it), and
  agree with the versions the certificate recorded.

Then it prints (dry run, the default) or runs (``--execute``) exactly two commands:

1. ``oras attach`` the certificate (JSON and Markdown) to the digest as an OCI referrer, so whoever
   pulls a public tag can fetch the certificate of the very digest it resolves to;
2. ``docker buildx imagetools create --tag <public tags> REPO@DIGEST``, which points the public tags at
   the digest (the index, with its SBOM and provenance attestations, is copied as it is).

The certificate goes first: a public tag never points at a digest without its certificate. A refused
certificate runs neither command, so the public tags stay where they were.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcore_images import release_matrix, tags
from mcore_images.errors import InputError
from mcore_images.stacks import NONE, Stack, get_stack, load_stacks
from mcore_images.versions import major_minor, release

Runner = Callable[..., subprocess.CompletedProcess]
Inspector = Callable[["ImageRef"], dict[str, str]]

CERT_SCHEMA = "mcore-images/smoke-certificate/v1"
"""smoke/certificate.py's SCHEMA (tests/unit/test_promote.py keeps the two equal)."""
MAX_AGE_DAYS = 7.0
CLOCK_SKEW = dt.timedelta(hours=1)
ARTIFACT_TYPE = "application/vnd.mcore-images.certificate.v1+json"
LABEL = "io.mcore-images."
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

# label key → (env/stacks.json field, certificate package key; None: the smoke does not record it)
COMPONENTS: dict[str, tuple[str, str | None]] = {
    "python": ("python", "python"),
    "cuda": ("cuda", None),  # compared with the certificate's environment.cuda (torch.version.cuda)
    "torch": ("torch", "torch"),
    "te": ("te", "transformer-engine"),
    "apex": ("apex", "apex"),
    "mcore": ("mcore", "megatron-core"),
    "mbridge": ("mbridge", "mbridge"),
    "megatron-bridge": ("megatron_bridge", "megatron-bridge"),
    "verl": ("verl", None),
}


# ---------------------------------------------------------------------------------------------
# The image


@dataclass(frozen=True)
class ImageRef:
    """An image named by digest: ``repository@sha256:…`` (a tag written before ``@`` is dropped)."""

    repository: str
    digest: str

    @property
    def ref(self) -> str:
        return f"{self.repository}@{self.digest}"

    @property
    def registry(self) -> str:
        """``ghcr.io/acme`` of ``ghcr.io/acme/mcore-images`` (empty for a bare name)."""
        return self.repository.rsplit("/", 1)[0] if "/" in self.repository else ""

    @property
    def repo(self) -> str:
        return self.repository.rsplit("/", 1)[-1]


def parse_image(ref: str) -> ImageRef:
    name, _, digest = ref.partition("@")
    if not name or not _DIGEST.match(digest) or name.startswith("-"):
        raise InputError(f"--image {ref!r} must name the candidate by digest (REPO@sha256:<64 hex>); "
                         "build.yml's summary and its bake-metadata artifact give it")
    last = name.rsplit("/", 1)[-1]
    repository = name.rsplit(":", 1)[0] if ":" in last else name
    return ImageRef(repository, digest)


def _docker(cmd: list[str], run: Runner, what: str) -> str:
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as exc:
        raise InputError("docker is not installed or not on PATH: install Docker with buildx to promote") from exc
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise InputError(f"{what} failed ({why[-1] if why else f'exit {proc.returncode}'}): log in to the "
                         "registry (docker login) and check the digest")
    return proc.stdout


def _labels_of(config: Any) -> dict[str, str]:
    if not isinstance(config, dict):
        return {}
    inner = config.get("config") or config.get("Config") or {}
    return dict(inner.get("Labels") or {}) if isinstance(inner, dict) else {}


def registry_labels(image: ImageRef, run: Runner = subprocess.run) -> dict[str, str]:
    """The image's labels as the registry holds them (nothing is pulled): the image config of the
    digest, or of each platform of an index (which must agree)."""
    out = _docker(["docker", "buildx", "imagetools", "inspect", image.ref, "--format", "{{json .Image}}"], run,
                  f"docker buildx imagetools inspect {image.ref}")
    try:
        data = json.loads(out)
    except ValueError as exc:
        raise InputError(f"imagetools inspect {image.ref} printed no JSON: update docker buildx") from exc
    configs = [data] if isinstance(data, dict) and ("config" in data or "rootfs" in data) else (
        list(data.values()) if isinstance(data, dict) else [])
    found = [labels for labels in map(_labels_of, configs) if labels]
    if not found:
        return {}
    if any(labels != found[0] for labels in found[1:]):
        raise InputError(f"the platforms of {image.ref} carry different labels: promote one platform's digest")
    return found[0]


def local_labels(image: ImageRef, run: Runner = subprocess.run) -> dict[str, str]:
    """The labels of the image as pulled here (``docker image inspect``)."""
    out = _docker(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image.ref], run,
                  f"docker image inspect {image.ref}")
    try:
        return dict(json.loads(out) or {})
    except (ValueError, TypeError) as exc:
        raise InputError(f"docker image inspect {image.ref} printed no label JSON: check Docker") from exc


# ---------------------------------------------------------------------------------------------
# The certificate


def load_certificate(path: Path) -> dict[str, Any]:
    """certificate.json as `mcore-images certify` writes it; InputError naming what is malformed."""
    try:
        cert = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"certificate {path} not found: download the gpu-smoke run's certificate artifact "
                         "(or run `mcore-images certify IMAGE@DIGEST`)") from None
    except ValueError as exc:
        raise InputError(f"certificate {path} is malformed (not JSON: {exc}): use the certificate.json "
                         "that `mcore-images certify` wrote, unedited") from None
    problems = shape_problems(cert)
    if problems:
        raise InputError(f"certificate {path} is malformed ({'; '.join(problems)}): use the certificate.json "
                         "that `mcore-images certify` wrote, unedited")
    return cert


def shape_problems(cert: Any) -> list[str]:
    """What promotion reads from a certificate, and its types (empty when all is there)."""
    if not isinstance(cert, dict):
        return ["not a JSON object"]
    if cert.get("schema") != CERT_SCHEMA:
        return [f"schema {cert.get('schema')!r} is not {CERT_SCHEMA!r}"]
    wanted: list[tuple[str, Any, type | tuple[type, ...]]] = [
        ("status", cert.get("status"), str),
        ("exit_code", cert.get("exit_code"), int),
        ("created", cert.get("created"), str),
        ("runs", cert.get("runs"), list),
        ("image", cert.get("image"), dict),
        ("certify", cert.get("certify"), dict),
        ("image_tests", cert.get("image_tests"), dict),
        ("environment", cert.get("environment"), dict),
    ]
    problems = [f"{key} missing or not {getattr(t, '__name__', t)}" for key, value, t in wanted
                if not isinstance(value, t)]
    if problems:
        return problems
    image, env = cert["image"], cert["environment"]
    if not isinstance(image.get("digest"), str) or not isinstance(image.get("digest_source"), str):
        problems.append("image.digest / image.digest_source missing (certify binds them)")
    if not isinstance(cert["certify"].get("status"), str):
        problems.append("certify.status missing")
    if not isinstance(env.get("packages"), dict):
        problems.append("environment.packages missing")
    if created(cert) is None:
        problems.append(f"created {cert['created']!r} is not an ISO 8601 time with a zone")
    return problems


def created(cert: Mapping[str, Any]) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(str(cert.get("created")))
    except ValueError:
        return None
    return when if when.tzinfo else None


def certificate_problems(cert: Mapping[str, Any], image: ImageRef, now: dt.datetime,
                         max_age_days: float = MAX_AGE_DAYS) -> list[str]:
    """Why this (well-formed) certificate cannot promote this digest, each with its fix."""
    problems = []
    verdict, smoke = cert["certify"]["status"], cert["status"]
    if verdict != "passed" or smoke != "passed":
        error = f": {cert['error']}" if cert.get("error") else ""
        problems.append(f"the certificate did not pass (certify {verdict}, smoke {smoke}, exit "
                        f"{cert['exit_code']}{error}); fix the image and certify it again")
    tests = cert["image_tests"]
    if tests.get("skipped"):
        problems.append("the image tests were skipped (--skip-image-tests); certify again without it")
    elif not tests.get("passed"):
        problems.append(f"the image tests failed ({tests.get('summary', '')}); fix them and certify again")
    gpus = (cert["environment"].get("gpu") or {}).get("count") or 0
    if not isinstance(gpus, int) or gpus < 1:
        problems.append("the smoke ran on no GPU (a --cpu run?); certify on a GPU runner")
    if cert["image"]["digest"] != image.digest:
        problems.append(f"the certificate is for {cert['image']['digest']}, not {image.digest}; certify this "
                        "digest (gpu-smoke.yml) or promote the digest the certificate names")
    elif not cert["image"]["digest_source"].startswith("RepoDigests"):
        problems.append("the certificate bound a local image ID, not a registry digest; certify the candidate "
                        "pulled by digest")
    when = created(cert)
    assert when is not None  # shape_problems checked it
    age = now - when
    if age < -CLOCK_SKEW:
        problems.append(f"the certificate was created in the future ({cert['created']}); check the GPU "
                        "runner's clock and certify again")
    elif age > dt.timedelta(days=max_age_days):
        problems.append(f"the certificate is stale: {age.total_seconds() / 86400:.1f} days old (created "
                        f"{cert['created']}), the limit is {max_age_days:g} days; certify again (gpu-smoke.yml) "
                        "or pass --max-age-days")
    return problems


def _same_version(key: str, pinned: str, have: str) -> bool:
    """'1.2.0a0' matches '1.2.0a0+8145d630e8' (a local tag); Python/CUDA '3.12' matches '3.12.3'; '1.2', '1.2.0'."""
    if key in ("python", "cuda"):
        try:
            return major_minor(have) == major_minor(pinned)
        except ValueError:
            return False
    public = have.split("+", 1)[0]
    if public == pinned:
        return True
    plain = re.compile(r"^\d+(\.\d+)*$")
    if plain.match(public) and plain.match(pinned):
        a, b = release(public), release(pinned)
        width = max(len(a), len(b))
        return a + (0,) * (width - len(a)) == b + (0,) * (width - len(b))
    return False


def image_problems(labels: Mapping[str, str], stack: Stack, cert: Mapping[str, Any],
                   layer: str | None = None) -> tuple[str, list[str]]:
    """(layer, problems): the image is the stack and layer asked for, built from env/'s pins, and is
    what the certificate measured."""
    label_stack = labels.get(LABEL + "stack")
    if not label_stack:
        return "", ["the image carries no io.mcore-images.stack label: it is not an mcore-images build"]
    if label_stack != stack.name:
        return "", [f"the image is stack '{label_stack}', not '{stack.name}'; pass --stack {label_stack} "
                    f"or the digest of a '{stack.name}' candidate"]
    image_layer = labels.get(LABEL + "layer", "")
    problems = []
    if image_layer not in release_matrix.CERTIFIED_LAYERS:
        problems.append(f"layer '{image_layer}' carries no megatron-core, so no smoke certificate; promote a "
                        f"{' or '.join(release_matrix.CERTIFIED_LAYERS)} image")
    if layer and layer != image_layer:
        problems.append(f"the image is layer '{image_layer}', not '{layer}'; drop --layer or pass its digest")
    packages = cert["environment"].get("packages") or {}
    for key, (field, cert_key) in COMPONENTS.items():
        label = labels.get(LABEL + key)
        if label is None:
            continue  # this layer does not carry the component
        pinned = getattr(stack, field)
        if label != pinned:
            problems.append(f"the image says {key}={label} but env/stacks.json pins {pinned} for '{stack.name}'; "
                            "promote from the commit that built it")
        if cert_key is None and key != "cuda":
            continue  # the smoke does not record it
        have = cert["environment"].get("cuda") if key == "cuda" else packages.get(cert_key)
        if label == NONE:
            ok = have is None
        elif key == "apex":
            ok = bool(have)  # a commit or 'base': presence is what an installed version can tell
        else:
            ok = have is not None and _same_version(key, label, str(have))
        if not ok:
            problems.append(f"the certificate measured {cert_key or key} {have or 'absent'} but the image is "
                            f"labelled {key}={label}; the certificate is not for this image")
    return image_layer, problems


# ---------------------------------------------------------------------------------------------
# The commands


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    cwd: Path | None = None

    def __str__(self) -> str:
        line = shlex.join(self.argv)
        return f"(cd {shlex.quote(str(self.cwd))} && {line})" if self.cwd else line


def commands(image: ImageRef, public: Sequence[str], certificate: Path, cert: Mapping[str, Any]) -> list[Command]:
    """Attach the certificate to the digest, then point the public tags at it."""
    files = [f"{certificate.name}:application/json"]
    markdown = certificate.with_suffix(".md")
    if markdown.is_file():
        files.append(f"{markdown.name}:text/markdown")
    attach = Command((
        "oras", "attach", "--artifact-type", ARTIFACT_TYPE,
        "--annotation", f"io.mcore-images.certificate.status={cert['certify']['status']}",
        "--annotation", f"org.opencontainers.image.created={cert['created']}",
        image.ref, *files,
    ), certificate.resolve().parent)
    retag = Command(("docker", "buildx", "imagetools", "create",
                     *(arg for tag in public for arg in ("--tag", tag)), image.ref))
    return [attach, retag]


@dataclass
class Promotion:
    image: ImageRef
    stack: Stack
    layer: str
    public_tags: list[str]
    commands: list[Command]


def plan_promotion(certificate: Path, image: str, stack_name: str, layer: str | None = None,
                   max_age_days: float = MAX_AGE_DAYS, now: dt.datetime | None = None,
                   inspect: Inspector | None = None, stacks: dict[str, Stack] | None = None) -> Promotion:
    """Every check, cheapest first; InputError listing every refusal. Nothing is changed here."""
    if max_age_days <= 0:
        raise InputError(f"--max-age-days {max_age_days:g} must be positive (default {MAX_AGE_DAYS:g})")
    ref = parse_image(image)
    stack = get_stack(stack_name, stacks if stacks is not None else load_stacks())
    cert = load_certificate(certificate)
    now = now or dt.datetime.now(dt.UTC)
    problems = certificate_problems(cert, ref, now, max_age_days)
    labels = (inspect or registry_labels)(ref)
    image_layer, more = image_problems(labels, stack, cert, layer)
    problems += more
    if problems:
        raise InputError(f"refusing to promote {ref.ref}, public tags untouched: " + "; ".join(problems))
    public = tags.tags(image_layer, stack, ref.registry, ref.repo)
    return Promotion(ref, stack, image_layer, public, commands(ref, public, certificate, cert))


def execute(promotion: Promotion, run: Runner = subprocess.run) -> int:
    for i, command in enumerate(promotion.commands):
        print(f"+ {command}", flush=True)
        try:
            rc = run(list(command.argv), cwd=command.cwd).returncode
        except FileNotFoundError as exc:
            raise InputError(f"{command.argv[0]} not found: install it (oras: oras.land; docker with buildx)"
                             + ("" if i == 0 else "; the certificate is attached, the tags did not move")) from exc
        if rc != 0:
            state = ("nothing changed" if i == 0
                     else "the certificate is attached, the public tags did not move; run promote again")
            print(f"error: {command.argv[0]} exited {rc}: {state}", file=sys.stderr)
            return 1
    print(f"promoted {promotion.image.ref} to {', '.join(promotion.public_tags)}")
    return 0


# ---------------------------------------------------------------------------------------------
# CLI


def _promote(args: argparse.Namespace) -> int:
    inspect: Inspector = local_labels if args.local else registry_labels
    promotion = plan_promotion(Path(args.certificate), args.image, args.stack, args.layer, args.max_age_days,
                               inspect=inspect)
    print(f"certificate {args.certificate}: passed for {promotion.image.ref} "
          f"(stack {promotion.stack.name}, layer {promotion.layer})")
    print("public tags:\n" + "\n".join(f"  {t}" for t in promotion.public_tags))
    if not args.execute:
        print("dry run; with --execute these run:\n" + "\n".join(f"  {c}" for c in promotion.commands))
        return 0
    return execute(promotion)


def _tags(args: argparse.Namespace) -> int:
    stack = get_stack(args.stack)
    layers = [args.layer] if args.layer else list(stack.layers)
    if args.layer and args.layer not in stack.layers:
        raise InputError(f"stack '{stack.name}' has no layer '{args.layer}'; choose one of: {', '.join(stack.layers)}")
    out: dict[str, list[str]] = {}
    for layer in layers:
        target = tags.target(layer, stack)
        out[target] = ([tags.image(release_matrix.candidate_tag(target, args.candidate), args.registry, args.repo)]
                       if args.candidate else tags.tags(layer, stack, args.registry, args.repo))
    if args.format == "json":
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(tag for target_tags in out.values() for tag in target_tags))
    return 0


def _matrix(args: argparse.Namespace) -> int:
    if args.candidates:
        if args.group or args.registry or args.sha:
            raise InputError("--candidates reads the build's metadata; drop --group/--registry/--sha")
        matrix = release_matrix.certify_matrix(Path(args.candidates))
    else:
        matrix = release_matrix.build_matrix(args.group or "release", args.registry, args.repo, args.sha)
    print(json.dumps(matrix, indent=2 if args.pretty else None, separators=None if args.pretty else (",", ":")))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the ``promote``, ``tags`` and ``matrix`` subcommands to the CLI's subparsers."""
    p = sub.add_parser(
        "promote", help="give a certified candidate digest its public tags (dry run unless --execute)",
        description="Refuse unless CERTIFICATE passed for IMAGE's digest, is fresh, and the image is the stack's "
        "pins; then attach the certificate (oras attach) and retag (docker buildx imagetools create).",
    )
    p.add_argument("--certificate", required=True, help="certificate.json written by `mcore-images certify`")
    p.add_argument("--image", required=True, help="the candidate by digest: REPO@sha256:…")
    p.add_argument("--stack", required=True, help="the stack the image was built for (checked against its labels)")
    p.add_argument("--layer", default=None, help="assert the image's layer (default: read from its labels)")
    p.add_argument("--max-age-days", type=float, default=MAX_AGE_DAYS,
                   help=f"refuse certificates older than this (default {MAX_AGE_DAYS:g})")
    p.add_argument("--local", action="store_true", help="read labels with docker image inspect (pulled image)")
    p.add_argument("--execute", action="store_true", help="run the commands (default: print them)")
    p.set_defaults(func=_promote)

    p = sub.add_parser("tags", help="print the public (or candidate) tags of a stack's layers")
    p.add_argument("--stack", required=True)
    p.add_argument("--layer", default=None)
    p.add_argument("--registry", default="", help="e.g. ghcr.io/acme")
    p.add_argument("--repo", default=tags.DEFAULT_REPO)
    p.add_argument("--candidate", default="", metavar="SHA", help="print candidate-<SHA>-<target> tags instead")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=_tags)

    p = sub.add_parser("matrix", help="GitHub Actions matrix JSON for a bake group, or for built candidates")
    p.add_argument("--group", default=None, help="bake group (default: release)")
    p.add_argument("--registry", default="", help="with --sha: add candidate tags and the build cache ref")
    p.add_argument("--repo", default=tags.DEFAULT_REPO)
    p.add_argument("--sha", default="", help="the git commit being built")
    p.add_argument("--candidates", default=None, metavar="DIR",
                   help="folder of bake metadata JSON: print one entry per certifiable candidate instead")
    p.add_argument("--pretty", action="store_true", help="indent (default: one line, for $GITHUB_OUTPUT)")
    p.set_defaults(func=_matrix)


def main(argv: list[str] | None = None) -> int:
    """`python -m mcore_images.promote promote|tags|matrix …` (the same subcommands, on their own)."""
    top = argparse.ArgumentParser(prog="mcore-images")
    add_parsers(top.add_subparsers(dest="command", required=True))
    args = top.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
