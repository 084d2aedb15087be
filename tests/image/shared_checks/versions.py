"""Versions and imports: each component the image's labels name is installed and imports as labelled (the
component catalogue says which distribution and modules a label describes; the labels say which version)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from mcore_images.catalogue import components, gpu_archs, versions
from mcore_images.catalogue.components import FROM_BASE, NONE, Component
from mcore_images.catalogue.images import label
from mcore_images.catalogue.stacks import Stack
from tests.image.utils.docker import ImageInfo
from tests.image.utils.probing import installed, normalize

SHA40 = re.compile(r"^[0-9a-f]{40}$")


def version_problems(comp: Component, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
    """The version in the component's label is what the image has installed (its sibling wheels too)."""
    pinned = labels.get(comp.oci_label)
    if pinned is None:
        return [f"label {comp.oci_label} is missing; every {comp.layer}+ image carries it"]
    if comp.key == "python":
        have = facts["python"]["major_minor"]
        return [] if have == pinned else [f"{comp.oci_label}={pinned} but the interpreter is Python {have}"]
    if comp.key == "gcc":
        have = (facts.get("gcc") or {}).get("version")
        ok = versions.pin_satisfied(comp.pin, pinned, have)
        return [] if ok else [f"{comp.oci_label}={pinned} but gcc on PATH is {have or 'missing'}"]
    if comp.key == "cuda":
        torch = facts.get("torch")
        if not torch:
            return [f"{comp.oci_label}={pinned} but torch does not import, so its CUDA version is unknown"]
        have = torch.get("cuda") or "none (a CPU build of torch)"
        ok = versions.pin_satisfied(comp.pin, pinned, torch.get("cuda"))
        return [] if ok else [f"{comp.oci_label}={pinned} but torch.version.cuda is {have}"]
    if comp.key == "cudnn":
        return cudnn_problems(comp, pinned, labels, facts)
    dist = comp.distribution
    assert dist is not None, comp.key
    have = installed(facts, dist)
    if not versions.pin_satisfied(comp.pin, pinned, have):
        if have is None:
            return [f"{comp.oci_label}={pinned} but {dist} is not installed"]
        return [f"{comp.oci_label}={pinned} but {dist} {have} is installed"]
    problems = []
    for sibling in comp.distributions[1:]:
        version = installed(facts, sibling)
        if pinned != NONE and version is not None and not versions.same(pinned, version):
            problems.append(f"{comp.oci_label}={pinned} but {sibling} {version} is installed")
    return problems


def cudnn_problems(comp: Component, pinned: str, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
    """cuDNN as labelled: torch's wheel of the image's CUDA major (nvidia-cudnn-cu12 / -cu13) at the pinned
    version and no other CUDA's, or the base image's own ('base', NGC: no wheel); either way the cuDNN torch
    loads is that release (another copy first on the loader's path is the trap that makes TE go unfused)."""
    torch = facts.get("torch")
    if not torch:
        return [f"{comp.oci_label}={pinned} but torch does not import, so the cuDNN it loads is unknown"]
    loaded = torch.get("cudnn")
    if isinstance(loaded, str):
        return [f"{comp.oci_label}={pinned} but torch refuses the cuDNN it finds: {loaded}"]
    if pinned == FROM_BASE:
        return [] if loaded else [f"{comp.oci_label}=base but torch loads no cuDNN"]
    cuda = labels.get(components.BY_KEY["cuda"].oci_label, "")
    dist = comp.distribution_for(cuda)
    if dist is None:
        return [f"{comp.oci_label}={pinned} but no {comp.title} wheel is known for CUDA {cuda or '(unlabelled)'}"]
    have = installed(facts, dist)
    problems = [] if versions.pin_satisfied(comp.pin, pinned, have) else [
        f"{comp.oci_label}={pinned} but {dist} is {'not installed' if have is None else f'{have}'}"]
    problems += [f"{comp.oci_label}={pinned} but {other} {installed(facts, other)} (another CUDA's wheel) is installed"
                 for other in comp.distributions if other != dist and installed(facts, other) is not None]
    if pinned != NONE and loaded:
        release = components.cudnn_release(loaded)
        if Version(release).release != Version(pinned).release[:3]:
            problems.append(f"{comp.oci_label}={pinned} but torch loads cuDNN {release}")
    return problems


def apex_commit_problems(labels: Mapping[str, str], facts: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """(problems, reason-it-cannot-be-compared). apex records its commit only when pip installed it
    from git (direct_url.json vcs_info) or a version carries it; a wheel built from a source folder
    records neither, and then the commit cannot be checked from inside the image."""
    pinned = labels.get(label("apex"), "")
    if not SHA40.match(pinned):
        return [], f"io.mcore-images.apex is '{pinned}': no commit to compare"
    entry = facts["dists"].get("apex")
    if entry is None:
        return [f"io.mcore-images.apex={pinned} but apex is not installed"], None
    vcs = ((entry.get("direct_url") or {}).get("vcs_info") or {}).get("commit_id")
    if vcs:
        return ([] if vcs == pinned else [f"io.mcore-images.apex={pinned} but apex was installed from {vcs}"]), None
    local = re.findall(r"[0-9a-f]{7,40}", entry["version"].partition("+")[2])
    if local:
        ok = any(pinned.startswith(part) for part in local)
        return ([] if ok else [f"io.mcore-images.apex={pinned} but apex's version is {entry['version']}"]), None
    return [], (
        f"apex {entry['version']} was installed from a wheel that records no commit "
        f"(direct_url: {(entry.get('direct_url') or {}).get('url', 'none')})"
    )


def import_problems(comp: Component, labels: Mapping[str, str], facts: Mapping[str, Any]) -> list[str]:
    """Each module of the component imports where it is labelled; where 'none', each import fails
    with ModuleNotFoundError (any other error means a broken leftover, not an absent package)."""
    pinned = labels.get(comp.oci_label)
    if pinned is None:
        return [f"label {comp.oci_label} is missing"]
    problems = []
    for module in comp.modules:
        result = facts["imports"].get(module)
        if result is None:
            problems.append(f"the probe did not try `import {module}`")
        elif pinned != NONE and not result["ok"]:
            problems.append(f"{comp.oci_label}={pinned} but `import {module}` fails: {result['error']}")
        elif pinned == NONE and result["ok"]:
            problems.append(f"{comp.oci_label}=none but `import {module}` works")
        elif pinned == NONE and result["error_type"] != "ModuleNotFoundError":
            problems.append(
                f"{comp.oci_label}=none and `import {module}` fails, but with {result['error']} "
                "(a leftover of the package, not its absence)"
            )
    return problems


def duplicate_problems(facts: Mapping[str, Any]) -> list[str]:
    """A distribution installed twice in one folder is a broken install; one of the labelled components
    installed in two folders (a venv over NGC's system packages) means one copy shadows the other."""
    labelled = {normalize(d) for c in components.CATALOGUE for d in c.distributions}
    problems = []
    for name, copies in sorted(facts["duplicates"].items()):
        folders = [os.path.dirname(c["path"]) for c in copies]
        where = ", ".join(f"{c['version']} in {c['path']}" for c in copies)
        if len(set(folders)) < len(folders):
            problems.append(f"{name} is installed twice in one folder: {where}")
        elif name in labelled:
            problems.append(f"{name} is installed in several folders, one shadowing the other: {where}")
    return problems


def mcore_floor_problems(facts: Mapping[str, Any], floor: str = "0.13") -> list[str]:
    """verl asserts megatron-core >= 0.13 (its oldest supported release)."""
    have = installed(facts, "megatron-core")
    if have is None:
        return ["megatron-core is not installed"]
    return [] if Version(have) >= Version(floor) else [f"megatron-core {have} < {floor} (verl's minimum)"]


def python_floor_problems(facts: Mapping[str, Any]) -> list[str]:
    """megatron-core >= 0.17 needs Python >= 3.12, and Python satisfies megatron-core's Requires-Python."""
    entry = facts["dists"].get("megatron-core")
    if entry is None:
        return ["megatron-core is not installed"]
    python = Version(facts["python"]["version"])
    problems = []
    if Version(entry["version"]) >= Version("0.17") and python < Version("3.12"):
        problems.append(f"megatron-core {entry['version']} needs Python >= 3.12, the image has {python}")
    try:
        spec = SpecifierSet(entry.get("requires_python") or "")
    except InvalidSpecifier:
        return [*problems, f"megatron-core's Requires-Python is unreadable: {entry['requires_python']!r}"]
    if python not in spec:
        problems.append(f"megatron-core {entry['version']} requires Python {spec}, the image has {python}")
    return problems


def label_pin_problems(image: ImageInfo, stack: Stack) -> list[str]:
    """Every io.mcore-images.* label that names a pin equals env/stacks.json for the labelled stack."""
    expected = {"stack": stack.name, "flavor": stack.flavor, "base": stack.base_image}
    for comp in components.CATALOGUE:
        expected[comp.label] = stack.pins[comp.key]
    if image.layer in stack.size_budget_gb:
        expected["size-budget-gb"] = str(stack.size_budget_gb[image.layer])
    expected[gpu_archs.LABEL] = stack.cuda_archs
    expected[gpu_archs.GPUS_LABEL] = gpu_archs.serves(stack.cuda_archs)
    problems = []
    for key, want in expected.items():
        have = image.label(key)
        if have is None:
            continue  # which labels a layer must carry is checked per component, in its layer's folder
        same = float(have) == float(want) if key == "size-budget-gb" else have == want
        if not same:
            problems.append(f"label {label(key)}={have} but env/stacks.json pins {want} for stack {stack.name}")
    return problems


NOT_LOCKED = {"pip": "the venv's own installer", "mcore-images": "this project's tooling wheel (runtime layer)"}
"""Distributions an image holds beyond its locks, and why."""


def compiled_here(stack: Stack) -> set[str]:
    """The distributions the kernels layer builds instead of taking them from a lock: TE's extension where it is
    compiled, and whichever provides gradient accumulation fusion (apex, or this project's module where apex is
    absent)."""
    from mcore_images.catalogue import wgrad_fusion

    out = {"transformer-engine-torch"} if stack.te_source == "build" else set()
    return out | ({wgrad_fusion.expected_provider(stack)} if stack.apex != "base" else set())


def locked_pins(stack: Stack, layer: str, machine: str = "x86_64") -> dict[str, str]:
    """Distribution -> version over the locks of every published layer up to ``layer`` on the image's machine (the
    builder's toolchain is a side branch that never reaches an image)."""
    from mcore_images.resolve import lock_files

    pins: dict[str, str] = {}
    for name in components.LOCK_LAYERS[: components.LOCK_LAYERS.index(layer) + 1]:
        path = lock_files.lock_path(stack, name, machine=machine)
        if name not in lock_files.SIDE_LAYERS and path.is_file():
            pins.update({normalize(k): v for k, v in lock_files.pins(path.read_text()).items()})
    return pins


def lock_problems(facts: Mapping[str, Any], stack: Stack, layer: str, machine: str = "x86_64") -> list[str]:
    """The installed distributions are exactly the union of the image's locks (its machine's): none missing, none
    at another version, none extra (a transitive package that drifted, or one a layer installed unlocked)."""
    want = locked_pins(stack, layer, machine)
    have = {name: entry["version"] for name, entry in facts["dists"].items()}
    compiled = compiled_here(stack) if layer != "base" else set()
    problems = [f"{name} {want[name]} is in the locks but not installed" for name in sorted(set(want) - set(have))]
    problems += [f"{name} is {have[name]}, the locks pin {want[name]}" for name in sorted(set(want) & set(have))
                 if have[name] != want[name]]
    problems += [f"{name} {have[name]} is installed but in no lock" for name in sorted(set(have) - set(want))
                 if name not in NOT_LOCKED and name not in compiled]
    return problems
