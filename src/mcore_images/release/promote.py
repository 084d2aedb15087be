"""`mcore-images attach` and `promote`: a certificate goes onto a digest, signed; only then may tags move.

The release path, each step a command:

1. `mcore-images build … --candidate SHA --registry R` pushes candidate tags only (candidate-<sha>-<target>);
2. `mcore-images certify R/REPO@DIGEST` runs the image tests, the smoke and the bridge check in it and
   writes certificate.json bound to that digest;
3. `mcore-images attach R/REPO@DIGEST --certificate DIR --key cosign.key` attaches the certificate to the
   digest as an OCI referrer and signs that artifact with cosign, the image digest inside the signature;
4. `mcore-images promote R/REPO@DIGEST --stack S --key cosign.pub [--policy release] --execute` finds the
   attached certificates in the registry, keeps the one signed with the key, judges it with policy.py
   (verify.check) and the image's labels against env/stacks.json, and only then tags the digest: the
   moving tags (the full content tag and the short alias, which follow the newest certified build) and
   an immutable tag that never moves (the content tag, the certificate's date and the digest).

A multi-platform stack's candidate is an index (`mcore-images index` joins each platform's candidate): each
platform's image is certified and its certificate attached to that platform's manifest digest (steps 2 and 3 per
platform), and the index is promoted once every platform it holds passes (the release policy also requires every
platform the stack lists, so no public tag loses the Grace hosts' arm64 image).

Nothing else in the project moves a public tag: `registry.retag` is called from here alone, after a
passing verdict (tests/unit/repo/test_push_paths.py walks every make target and command to show it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from mcore_images import reading
from mcore_images.catalogue import images, tags
from mcore_images.catalogue.images import ImageRef
from mcore_images.catalogue.stacks import get_stack, load_stacks
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.release import authority, ledger, policy, registry, verify
from mcore_images.release.registry import Runner


def by_digest(ref: str, option: str = "IMAGE") -> ImageRef:
    """A candidate named by digest (a tag written before ``@`` is dropped)."""
    try:
        parsed = images.parse(ref)
    except ValueError as exc:
        raise InputError(f"{option}: {exc}; name the candidate as REPO@sha256:<64 hex>") from None
    if not parsed.digest:
        raise InputError(f"{option} {ref!r} must name the candidate by digest (REPO@sha256:<64 hex>): certificates "
                         "and promotions are bound to a digest, never to a tag that can move")
    return parsed.with_digest(parsed.digest)


# ---------------------------------------------------------------------------------------------
# attach


def attach(image_ref: str, folder: Path, key: str, run: Runner | None = None) -> tuple[registry.Referrer, str]:
    """Attach and sign; returns (the certificate artifact, how the registry keeps referrers). A passing
    certificate also gets the image digest itself signed, naming it (stock `cosign verify REPO@DIGEST`)."""
    kwargs = {"run": run} if run else {}
    image = by_digest(image_ref)
    if problem := registry.key_problem(key, private=True):
        raise InputError(problem)
    if problem := reading.folder_problem(folder, "--certificate"):
        raise InputError(f"{problem}: give the folder `mcore-images certify` wrote")
    path = folder / "certificate.json"
    cert = policy.load_certificate(path)
    if cert["image"]["digest"] != image.digest:
        # An index's certificates are its platforms': attach one to the platform manifest it certifies.
        children = registry.platform_children(image, **kwargs) or {}
        child = next((c for c in children.values() if c.digest == cert["image"]["digest"]), None)
        if child is None:
            raise InputError(f"{path} certifies {cert['image']['digest']}, not {image.digest}"
                             + (" nor one of its platforms' manifests" if children else "")
                             + ": attach it to the digest it names, or certify this one")
        image = child
    # The release authority's turn: the ledger's head is its own last write (else refused before anything is attached).
    with authority.writing(image.repository, key, run) as writer:
        referrer = registry.attach(image, path, **kwargs)
        registry.sign(image, referrer, key, **kwargs)
        status = str((cert.get("certify") or {}).get("status"))
        if status == "passed":
            # the image's own labels, as the registry holds them: what a pull of the tag gets
            registry.sign_image(image, referrer, key,
                                claims=binding_claims(registry.registry_labels(image, **kwargs)), **kwargs)
        # The signed record of every certificate the digest carries: removing a referrer or its signature (a failed
        # verdict) is noticed.
        writer.commit(ledger.recorded_certificate(image.digest or "", referrer.digest, status,
                                                  str(cert.get("created"))))
    return referrer, registry.referrers_mode(image, **kwargs)


def binding_claims(labels: dict[str, str]) -> dict[str, str]:
    """What the image's own signature names besides its certificate, so stock cosign binds a tag to it: the
    stack and layer its labels give, the alias and content tag those make (`cosign verify -a
    io.mcore-images.alias=runtime-ngc … REPO:runtime-ngc` passes only for an image signed as that alias)."""
    stack_name, layer = labels.get(images.label("stack")), labels.get(images.label("layer"))
    if not stack_name or not layer:
        return {}
    claims = {"io.mcore-images.stack": stack_name, "io.mcore-images.layer": layer}
    stack = load_stacks().get(stack_name)
    if stack is not None and layer in stack.built_layers:
        claims["io.mcore-images.alias"] = tags.target(layer, stack)
        claims["io.mcore-images.content-tag"] = tags.layer_tag(layer, stack)
    return claims


def _attach_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="the certified image by digest: REPO@sha256:… (or the index holding it: the "
                   "certificate goes to the platform manifest it certifies)")
    p.add_argument("--certificate", required=True, metavar="DIR", help="the folder `mcore-images certify` wrote")
    p.add_argument("--key", required=True, help="cosign private key file (COSIGN_PASSWORD in the environment) or "
                   "KMS URI (awskms://…, gcpkms://…, hashivault://…)")


def _attach(args: argparse.Namespace) -> int:
    referrer, mode = attach(args.image, Path(args.certificate), args.key)
    certified = policy.load_certificate(Path(args.certificate) / "certificate.json")["image"]["digest"]
    if certified != by_digest(args.image).digest:
        args.image = f"{by_digest(args.image).repository}@{certified}"  # the platform manifest of the index
    schema = ("the registry's referrers API" if mode == "referrers API" else
              "the referrers tag schema (the registry has no referrers API: an index under the tag "
              f"sha256-{by_digest(args.image).digest.removeprefix('sha256:')})")
    print(f"attached {args.certificate}/certificate.json to {args.image} as {referrer.digest}, through {schema}")
    print(f"signed {referrer.digest} with {args.key} (the signature names {by_digest(args.image).digest})")
    if (policy.load_certificate(Path(args.certificate) / "certificate.json").get("certify") or {}).get(
            "status") == "passed":
        print(f"signed {by_digest(args.image).digest} itself, naming {referrer.digest}: `cosign verify --key <public "
              f"key> --insecure-ignore-tlog {args.image}` checks it")
    return 0


# ---------------------------------------------------------------------------------------------
# promote


@dataclass
class Promotion:
    image: str
    stack: str
    layer: str
    moving_tags: list[str]
    immutable_tag: str
    verdict: dict

    @property
    def all_tags(self) -> list[str]:
        return [*self.moving_tags, self.immutable_tag]


def rollback_problem(image: ImageRef, alias: str, created: dt.datetime, key: str, chosen: policy.Policy,
                     now: dt.datetime | None, run: Runner | None, record: ledger.Ledger | None = None) -> str | None:
    """Why moving ``alias`` to this image would take it back in time: the digest the alias names (by the signed
    release ledger where there is one: never by what the tag points at now, which anyone who can push may move
    first) has a newer signed certificate. A tag that is new, or names an image without a signed certificate of
    ours, may move."""
    entry = record.tags.get(alias) if record is not None else None
    if entry is not None:
        there = image.with_digest(str(entry["digest"]))
    else:
        try:
            there = registry.resolve(image.with_tag(alias), **({"run": run} if run else {}))
        except registry.RegistryError:
            return None  # no such tag yet
    if there.digest == image.digest:
        return None
    verdict, _, _ = verify.check(f"{image.repository}@{there.digest}", key,
                                 dataclasses.replace(chosen, max_age_days=float("inf")), now, run)
    if verdict.created is None or dt.datetime.fromisoformat(verdict.created) <= created:
        return None
    return (f"{alias} names {there.digest}, certified {verdict.created}, newer than this certificate "
            f"({created.isoformat()}): moving it here would roll it back; pass --allow-rollback to mean it")


def plan(image_ref: str, stack_name: str, key: str, chosen: policy.Policy, layer: str | None = None,
         now: dt.datetime | None = None, run: Runner | None = None, allow_rollback: bool = False) -> Promotion:
    """Every check against the registry and env/; InputError (exit 2) when something cannot be checked,
    Refused (exit 1) listing every refusal. Nothing is changed here."""
    ref = by_digest(image_ref)
    stack = get_stack(stack_name, load_stacks())
    verdict, image, labels = verify.check(ref.ref, key, chosen, now, run)
    if verdict.status == "could-not-check":
        raise InputError(f"cannot check {ref.ref}: {'; '.join(verdict.problems)}")
    image_layer, more = policy.image_problems(labels, stack, layer)
    problems = verdict.problems + more
    if problems:
        ignored = f" (ignored: {'; '.join(verdict.ignored)})" if verdict.ignored else ""
        raise Refused(f"refusing to promote {ref.ref}, its tags untouched: " + "; ".join(problems) + ignored)
    assert image is not None and verdict.created is not None
    created = dt.datetime.fromisoformat(verdict.created)
    full = tags.layer_tag(image_layer, stack)
    record = ledger.accepted(image.repository, key, now or dt.datetime.now(dt.UTC), run)
    if not allow_rollback and (back := rollback_problem(image, f"{image_layer}-{stack.name}", created, key, chosen,
                                                        now, run, record)):
        raise Refused(f"refusing to promote {ref.ref}, its tags untouched: {back}")
    return Promotion(ref.ref, stack.name, image_layer, [full, f"{image_layer}-{stack.name}"],
                     tags.immutable_tag(full, image.digest or "", created), verify.as_dict(verdict))


class Refused(InputError):
    """A certificate or image that may not be promoted: exit 1, the reasons in one line."""

    exit_code = 1


def execute(promotion: Promotion, sign_key: str, run: Runner | None = None) -> None:
    """Move the tags, then record where they point in the release ledger, signed with ``sign_key``."""
    image = images.parse(promotion.image)
    with authority.writing(image.repository, sign_key, run) as writer:  # refused before a tag moves
        registry.retag(image, promotion.all_tags, **({"run": run} if run else {}))
        writer.commit(ledger.recorded_tags({t: image.digest or "" for t in promotion.all_tags}))


def _promote_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="the certified candidate by digest: REPO@sha256:…")
    p.add_argument("--stack", required=True, help="the stack it was built for (checked against its labels)")
    p.add_argument("--key", required=True, help="cosign public key (file or KMS URI) its certificate must be "
                   "signed with")
    p.add_argument("--policy", default="release",
                   help="the release policy to judge by (default: release: GPUs required; ci accepts CPU certificates)")
    p.add_argument("--policy-file", type=Path, metavar="FILE",
                   help="read the policies from FILE instead of the ones mcore-images ships")
    p.add_argument("--layer", default=None, help="assert the image's layer (default: read from its labels)")
    p.add_argument("--execute", action="store_true", help="move the tags (default: print what would happen)")
    p.add_argument("--sign-key", metavar="KEY", help="with --execute: the cosign private key (or KMS URI) that "
                   "signs the release ledger recording where the tags now point (the key `attach` signs with)")
    p.add_argument("--allow-rollback", action="store_true",
                   help="move the alias even when the digest it names carries a newer signed certificate")


def _promote(args: argparse.Namespace) -> int:
    if args.execute and not args.sign_key:
        raise InputError("promote --execute records where the tags point in the signed release ledger: give "
                         "--sign-key (the private key `attach` signs with; --key is its public half)")
    if args.sign_key and (problem := registry.key_problem(args.sign_key, "--sign-key", private=True)):
        raise InputError(problem)
    promotion = plan(args.image, args.stack, args.key, policy.load_policy(args.policy, args.policy_file), args.layer,
                     allow_rollback=args.allow_rollback)
    image = images.parse(promotion.image)
    command = ["oras", "tag", *(["--plain-http"] if registry.plain_http(image) else []), promotion.image,
               *promotion.all_tags]
    if args.json:
        print_json({**asdict(promotion), "executed": args.execute, "command": command})
    else:
        judged = promotion.verdict.get("platforms") or {}
        if judged:  # an index: one certificate per platform, each on its platform's manifest
            print(f"every platform of {promotion.image} (stack {promotion.stack}, layer {promotion.layer}) passed "
                  f"policy '{args.policy}':")
            print("\n".join(f"  {name}: certificate {sub['certificate']} (signed) on {sub['digest']}"
                            for name, sub in judged.items()))
        else:
            print(f"certificate {promotion.verdict['certificate']} (signed) passed policy '{args.policy}' for "
                  f"{promotion.image} (stack {promotion.stack}, layer {promotion.layer})")
        print("moving tags:\n" + "\n".join(f"  {image.repository}:{t}" for t in promotion.moving_tags))
        print(f"immutable tag:\n  {image.repository}:{promotion.immutable_tag}")
    if not args.execute:
        if not args.json:
            print("dry run; with --execute this runs:\n  " + shlex.join(command))
        return 0
    execute(promotion, args.sign_key)
    if not args.json:
        print(f"promoted {promotion.image} to {', '.join(promotion.all_tags)}", file=sys.stdout)
    return 0


COMMANDS = (
    Command("attach", "Attach a certificate to the digest it certifies, signed with cosign.",
            _attach_arguments, _attach),
    Command("promote", "Tag a digest whose signed certificate passes the policy (a dry run unless --execute).",
            _promote_arguments, _promote, prints_data=True,
            description="Refuse (exit 1) unless the registry holds a certificate for IMAGE's digest, signed with "
            "KEY, that passes POLICY, and the image is the stack's pins; then point the moving tags and an "
            "immutable tag at the digest. Exit 2 when it cannot check."),
)
