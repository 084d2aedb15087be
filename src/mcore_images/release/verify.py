"""`mcore-images verify REF`: is the image REF resolves to certified, by a certificate signed with our key?

For the digest REF resolves to: find the certificate artifacts attached to it (OCI referrers), keep
those whose cosign signature verifies with the given public key and names this digest, read them, and judge
the newest by its own signed `created` with policy.py: well-formed, passed, made for this digest, fresh, from GPUs where
the policy asks, made on the image's platform, and measuring what the image's labels say. A multi-platform index is
judged per platform: each platform's image manifest carries its own certificates, and the index passes when every
platform it holds passes (and, where the policy requires it, it holds every platform its stack lists). The verdict
is printed (or ``--json``), per platform for an index; exit 0 passed, 1 refused, 2 could not check (no such image,
registry unreachable, tools missing). promote.py calls the same `check` before it moves a tag.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mcore_images.catalogue import images, tags
from mcore_images.catalogue.images import ImageRef
from mcore_images.catalogue.stacks import load_stacks
from mcore_images.command import Command, print_json
from mcore_images.errors import InputError
from mcore_images.options import number
from mcore_images.release import ledger, policy, registry
from mcore_images.release.registry import Runner


@dataclass
class Verdict:
    image: str
    digest: str | None = None
    status: str = "could-not-check"  # passed | refused | could-not-check
    policy: str = ""
    certificate: str | None = None  # the signed certificate artifact's digest
    created: str | None = None
    age_days: float | None = None
    gpus: int | None = None
    stack: str | None = None
    layer: str | None = None
    referrers: str | None = None  # how the registry keeps referrers (referrers API or tag schema)
    platform: str | None = None  # the image's os/architecture (a single manifest's, or one platform of an index)
    platforms: dict[str, dict[str, Any]] = field(default_factory=dict)  # an index: each platform's verdict
    problems: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # attached certificates whose signature does not verify
    earlier: list[str] = field(default_factory=list)  # older signed certificates of the digest that did not pass
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {"passed": 0, "refused": 1}.get(self.status, 2)

    def lines(self) -> list[str]:
        head = f"{self.status.upper()}: {self.image}" + (f" = {self.digest}" if self.digest else "")
        out = [head]
        if self.platform:
            out.append(f"  platform {self.platform}")
        for name, sub in self.platforms.items():
            gpus = f"GPUs: {sub['gpus']}" if sub.get("gpus") else "CPU only"
            judged = (f"certificate {sub['certificate']} (signed), created {sub['created']}, {gpus}"
                      if sub.get("certificate") else "no signed certificate judged")
            out.append(f"  {name}: {sub['status'].upper()} = {sub['digest']}; {judged}")
        if self.certificate:
            out.append(f"  certificate {self.certificate} (signed), created {self.created}, "
                       f"{self.age_days:.2f} days old, {'GPUs: ' + str(self.gpus) if self.gpus else 'CPU only'}, "
                       f"stack {self.stack}, layer {self.layer}")
        if self.referrers:
            out.append(f"  referrers kept by the registry's {self.referrers}")
        out.append(f"  policy {self.policy}")
        out += [f"  - {p}" for p in self.problems]
        out += [f"  ignored: {p}" for p in self.ignored]
        out += [f"  earlier: {p}" for p in self.earlier]
        out += [f"  note: {p}" for p in self.notes]
        return out


def tag_problem(tag: str, digest: str, labels: dict[str, str]) -> str | None:
    """Whether ``tag`` is one mcore-images writes for the image it names (its labels are part of the digest's
    content): the alias ``<layer>-<stack>``, the content tag, the immutable tag of this digest, or a candidate
    tag. A certificate binds a digest; the tag says which stack and layer a user asked for, and pointing it
    at another certified digest (another stack, another layer) must not pass."""

    stack_name, layer = labels.get(images.label("stack"), ""), labels.get(images.label("layer"), "")
    alias = tags.target(layer, stack_name)
    if tag == alias or tags.is_candidate_tag_of(tag, alias):
        return None
    stack = load_stacks().get(stack_name)
    if stack is None or layer not in stack.built_layers:
        return (f"tag {tag} cannot be bound to this image: it is stack '{stack_name}', layer '{layer}', which "
                f"env/stacks.json here does not define; verify it by digest or as {alias}")
    content = tags.layer_tag(layer, stack)
    if tag == content or tags.is_immutable_tag_of(tag, content, digest):
        return None
    return (f"tag {tag} is not a tag of what it points to: {digest} is stack '{stack_name}', layer '{layer}', "
            f"whose tags are {alias}, {content} and {tags.immutable_form(content, digest)}; the tag was moved to "
            "another image")


def check(ref: str, key: str, chosen: policy.Policy, now: dt.datetime | None = None,
          run: Runner | None = None) -> tuple[Verdict, ImageRef | None, dict[str, str]]:
    """The verdict for REF, the image by digest, and its labels (promote reuses both)."""
    kwargs = {"run": run} if run else {}
    verdict = Verdict(image=ref, policy=chosen.name)
    if problem := images.reference_problem(ref, example=images.REGISTRY_EXAMPLE):
        raise InputError(problem)
    parsed = images.parse(ref)
    if problem := registry.key_problem(key):
        raise InputError(problem)
    try:
        image = registry.resolve(parsed, **kwargs)
        verdict.digest = image.digest
        record = ledger.accepted(image.repository, key, now or dt.datetime.now(dt.UTC), run)
        if record is not None and parsed.tag and (moved := ledger.tag_problem(record, parsed.tag, image.digest or "")):
            verdict.status = "refused"
            verdict.problems.append(moved)
            return verdict, None, {}
        labels = registry.registry_labels(image, **kwargs)
        children = registry.platform_children(image, **kwargs)
        if children is None:
            verdict.platform = registry.image_platform(image, **kwargs)
    except (registry.IntegrityError, registry.ConfusedManifest, ledger.LedgerRefused) as exc:
        verdict.status = "refused"
        verdict.problems.append(str(exc))
        return verdict, None, {}
    except registry.RegistryError as exc:
        verdict.problems.append(str(exc))
        return verdict, None, {}
    if record is not None:
        verdict.notes.append(f"release ledger version {record.version} (signed, expires {record.expires})")
    if children is None:
        if _judge(verdict, image, labels, key, chosen, now, kwargs, record) and parsed.tag and (
                moved := tag_problem(parsed.tag, image.digest or "", labels)):
            verdict.problems.insert(0, moved)
            verdict.status = "refused"
        present = [verdict.platform] if verdict.platform else []
    else:
        _judge_index(verdict, children, labels, key, chosen, now, kwargs, record)
        if parsed.tag and (moved := tag_problem(parsed.tag, image.digest or "", labels)):
            verdict.problems.insert(0, moved)
        present = list(children)
    if verdict.status != "could-not-check":

        stack = load_stacks().get(labels.get(images.label("stack"), ""))
        if children is not None:  # an index answers for the platforms of its tag
            verdict.problems += policy.coverage_problems(stack, present, chosen)
        elif stack is not None:  # one platform's image, judged as one image: its platform is one the stack lists
            verdict.problems += [f"the image is {p}, which stack '{stack.name}' is not built for (its platforms: "
                                 f"{', '.join(stack.platforms)}); promote one of its platforms' images"
                                 for p in present if p not in stack.platforms]
            if stack.multi_platform:
                verdict.notes.append(f"one platform's image ({', '.join(present)}); stack '{stack.name}' is built for "
                                     f"{', '.join(stack.platforms)}: its index (`mcore-images index`) serves them all")
        verdict.status = "refused" if verdict.problems else "passed"
    return verdict, image, labels


def _judge_index(verdict: Verdict, children: dict[str, ImageRef], labels: dict[str, str], key: str,
                 chosen: policy.Policy, now: dt.datetime | None, kwargs: dict[str, Any],
                 record: ledger.Ledger | None = None) -> None:
    """Each platform of an index judged as an image of its own (its manifest's certificates, made on that
    platform); the index's problems are theirs, each named by its platform, and it is as fresh as its oldest."""
    subs = []
    for name, child in children.items():
        sub = Verdict(image=child.ref, policy=chosen.name, platform=name)
        sub.digest = child.digest
        _judge(sub, child, labels, key, chosen, now, kwargs, record)
        verdict.platforms[name] = as_dict(sub)
        verdict.problems += [f"{name}: {p}" for p in sub.problems]
        verdict.ignored += [f"{name}: {p}" for p in sub.ignored]
        verdict.earlier += [f"{name}: {p}" for p in sub.earlier]
        subs.append(sub)
    if not subs:
        verdict.problems.append("the index holds no image manifest; assemble it again (`mcore-images index`)")
    verdict.referrers = next((s.referrers for s in subs if s.referrers), None)
    verdict.stack = labels.get(images.label("stack"))
    verdict.layer = labels.get(images.label("layer"))
    if any(s.status == "could-not-check" for s in subs):
        verdict.status = "could-not-check"
        return
    judged = [s for s in subs if s.created is not None]
    if judged and len(judged) == len(subs):
        oldest = min(judged, key=lambda s: dt.datetime.fromisoformat(str(s.created)))
        verdict.created, verdict.age_days = oldest.created, oldest.age_days
        verdict.gpus = min(s.gpus or 0 for s in subs)
    verdict.status = "refused" if verdict.problems else "passed"


def _judge(verdict: Verdict, image: ImageRef, labels: dict[str, str], key: str, chosen: policy.Policy,
           now: dt.datetime | None, kwargs: dict[str, Any], record: ledger.Ledger | None = None) -> bool:
    """Judge one image manifest by the certificates attached to it, into ``verdict`` (whose ``platform`` it must
    have been made on, where known); True when a signed, well-formed certificate was judged. Every certificate the
    release ledger records for the digest must still be attached and signed: one removed, or its signature deleted
    (a failed verdict hidden), refuses."""
    try:
        found = registry.certificates(image, **kwargs)
        verdict.referrers = registry.referrers_mode(image, **kwargs)
        if record is not None and (gone := ledger.missing_certificates(record, image.digest or "",
                                                                      {r.digest for r in found})):
            verdict.status = "refused"
            verdict.problems += gone
            return False
        if not found:
            verdict.status = "refused"
            verdict.problems.append("no certificate is attached to this digest; certify it (mcore-images certify) "
                                    "and attach the signed certificate (mcore-images attach)")
            return False
        signed, unsigned = [], {}
        for referrer in found:  # every one: a certificate that does not verify is reported, never judged
            problem = registry.signature_problem(image, referrer, key, **kwargs)
            if problem is None:
                signed.append(referrer)
            else:
                unsigned[referrer.digest] = problem
        if record is not None and (lost := ledger.unsigned_certificates(record, image.digest or "", unsigned, key)):
            verdict.status = "refused"  # a recorded verdict whose signature is gone is as hidden as a removed one
            verdict.problems += lost
            return False
        verdict.ignored += [f"certificate {digest}: {problem}" for digest, problem in unsigned.items()]
        if not signed:
            verdict.status = "refused"
            verdict.problems.append(f"no attached certificate is signed with {key}; sign it (mcore-images attach "
                                    "--key) or verify with the key that signed it")
            return False
        # Judged: the newest by the signed content's own `created` (the index's annotations are not signed,
        # and anyone with push rights can reorder them).
        fetched = [(referrer, registry.fetch_certificate(image, referrer, **kwargs)) for referrer in signed]
        fetched.sort(key=lambda pair: policy.created(pair[1]) or dt.datetime.min.replace(tzinfo=dt.UTC),
                     reverse=True)
        chosen_referrer, cert = fetched[0]
        for referrer, other in fetched[1:]:
            status = (other.get("certify") or {}).get("status") if isinstance(other, dict) else None
            if status != "passed":
                verdict.earlier.append(f"certificate {referrer.digest} (created {other.get('created')}) is signed "
                                       f"and {status or 'malformed'}; a newer one is judged")
    except registry.IntegrityError as exc:
        verdict.status = "refused"
        verdict.problems.append(str(exc))
        return False
    except registry.RegistryError as exc:
        verdict.problems.append(str(exc))
        return False
    verdict.certificate = chosen_referrer.digest
    shape = policy.shape_problems(cert)
    if shape:
        verdict.status = "refused"
        verdict.problems.append(f"the signed certificate is malformed: {'; '.join(shape)}")
        return False
    now = now or dt.datetime.now(dt.UTC)
    when = policy.created(cert)
    verdict.created = cert["created"]
    verdict.age_days = None if when is None else round((now - when).total_seconds() / 86400, 3)
    verdict.gpus = (cert["environment"].get("gpu") or {}).get("count") or 0
    verdict.stack = labels.get(images.label("stack"))
    verdict.layer = labels.get(images.label("layer"))
    verdict.problems += policy.certificate_problems(cert, image, now, chosen)
    if verdict.platform and (made := policy.platform_problem(cert, verdict.platform)):
        verdict.problems.append(made)
    verdict.problems += policy.measured_problems(labels, cert)
    verdict.status = "refused" if verdict.problems else "passed"
    return True


def as_dict(verdict: Verdict) -> dict[str, Any]:
    return {**asdict(verdict), "exit_code": verdict.exit_code}


def age_policy(ref: str, chosen: policy.Policy, max_age_days: float | None) -> tuple[policy.Policy, str | None]:
    """The policy verify judges by, and a note when it does not judge age. Freshness is a promotion rule and
    one for moving tags (re-certified on a schedule): a digest or an immutable tag keeps verifying after the
    policy's age unless ``--max-age`` asks for one."""
    if max_age_days is not None:
        return dataclasses.replace(chosen, max_age_days=max_age_days), None
    try:
        parsed = images.parse(ref)
    except ValueError:
        return chosen, None  # check() names the bad reference
    if parsed.digest or (parsed.tag and tags.is_immutable(parsed.tag)):
        return (dataclasses.replace(chosen, max_age_days=float("inf")),
                "age not judged: a pinned reference (digest or immutable tag); pass --max-age DAYS to judge it")
    return chosen, None


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("image", help="the image: registry/repo:tag or registry/repo@sha256:…")
    p.add_argument("--key", required=True, help="cosign public key (a file, or a KMS URI) the certificate must be "
                   "signed with")
    p.add_argument("--policy", default="release", help="the release policy to judge by (default: release, which "
                   "requires GPUs; ci accepts CPU certificates)")
    p.add_argument("--policy-file", type=Path, metavar="FILE",
                   help="read the policies from FILE instead of the ones mcore-images ships")
    p.add_argument("--max-age", type=number(0, above=True, example="7"), metavar="DAYS",
                   help="refuse a certificate older than this; default: the policy's age for a moving tag, none "
                   "for a digest or an immutable tag (their certificate stays what it was)")


def _run(args: argparse.Namespace) -> int:
    chosen, note = age_policy(args.image, policy.load_policy(args.policy, args.policy_file), args.max_age)
    verdict, _, _ = check(args.image, args.key, chosen)
    if note:
        verdict.notes.append(note)
    if args.json:
        print_json(as_dict(verdict))
    else:
        print("\n".join(verdict.lines()))
    return verdict.exit_code


COMMANDS = (Command("verify", "Check that an image carries a passing certificate signed with your key.",
                    _arguments, _run, prints_data=True,
                    description="Exit 0 passed, 1 refused (the reasons are listed), 2 could not check."),)

