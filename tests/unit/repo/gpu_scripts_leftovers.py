"""What the network or the GPU would have left for the next step of a GPU script, where a stand-in took their
place (the downloaded wheels, a check's JSON), and what a step is given besides its arguments: small fixtures that
test_gpu_scripts runs before, with or after a step (HOOKS)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.image.utils.fake_wheel import FAKE_WHEEL
from tests.support.gpu_host import SYSTEM_PATH
from tests.unit.conftest import ROOT
from tests.unit.repo.gpu_scripts_calls import CUDA, GOOD, PAIR, Box, Step, ready_dir

PAIR_FOLDERS = {"te-2.20": [("transformer-engine-cu13", "2.20.2"), ("transformer-engine", "2.20.2"),
                            ("pydantic", "2.11.0")],
                "dsl-4.8.1": [("nvidia-cutlass-dsl", "4.8.1")], "fa4-4.0.0b36": [("flash-attn-4", "4.0.0b36")],
                f"needs-{PAIR}": [("quack-kernels", "0.2.0")]}
"""What `prepare` downloads for PAIR, in the folders it names them by (te-<TE>, dsl-<DSL>, fa4-<FA4>, needs-<PAIR>)."""
PAIR_TE = "2.20.2"
"""The TE release of the te2.20 series `prepare` found (the measured one)."""


def wheels(folder: Path, dists: list[tuple[str, str]]) -> None:
    """Metadata-only wheels of ``dists`` (name, version) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in dists:
        subprocess.run([sys.executable, "-c", FAKE_WHEEL, name, version, str(folder)], check=True,
                       capture_output=True)


def sdist(folder: Path, name: str, version: str) -> None:
    """A source distribution of ``name`` holding its PKG-INFO."""
    info = folder / "PKG-INFO"
    info.write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    with tarfile.open(folder / f"{name}-{version}.tar.gz", "w:gz") as tar:
        tar.add(info, f"{name}-{version}/PKG-INFO")
    info.unlink()


def _tar(source: Path, members: list[str], target: Path) -> bytes:
    with tarfile.open(target, "w") as tar:
        for member in members:
            tar.add(source / member, member)
    return target.read_bytes()


def locks_downloaded(box: Box, ctx: dict[str, str]) -> None:
    """The stack's wheels in the parts `locks` splits them into (two, to be joined), and the sdists it carries."""
    folder, parts = Path(ctx["dir"]), Path(ctx["dir"], "parts")
    wheels(folder / "wheels", [("transformer-engine-cu13", CUDA.te), ("pybind11", "2.13.6"), ("ninja", "1.13.0"),
                               ("megatron-core", CUDA.mcore)])
    data = _tar(folder / "wheels", [f"./{p.name}" for p in (folder / "wheels").iterdir()], box.root / "wheels.tar")
    half = len(data) // 2
    (parts / f"{CUDA.name}-wheels.tar.part.000").write_bytes(data[:half])
    (parts / f"{CUDA.name}-wheels.tar.part.001").write_bytes(data[half:])
    sdist(parts, "transformer_engine_torch", CUDA.te)
    sdist(parts, "a_release_without_wheels", "1.0")


def replica_stashed(box: Box, ctx: dict[str, str]) -> None:
    """replica-stack.sh's header: the parts stashed on the GPU machine (image-env-replica.sh stash) before `all`."""
    if Path(ctx["replica"], "parts").is_dir():
        return
    done = box.run(Step(".ci/image-env-replica.sh", "stash", ("FILE…",)), GOOD["FILE"](ctx), ctx)
    assert done.rc == 0, done.text


def apex_root(box: Box, ctx: dict[str, str]) -> dict[str, str]:
    """An apex checkout holding the sources `apex-source` copies, and a tree whose cuda stack names its commit (the
    stack's own commit cannot be made here): MCORE_IMAGES_ROOT for the step."""
    sources = re.search(r"^APEX_SOURCES=\(([^)]*)\)", (ROOT / ".ci/gpu/replica-stack.sh").read_text(), re.M)
    assert sources, "replica-stack.sh has no APEX_SOURCES"
    checkout, env = Path(ctx["apex"]), {"PATH": SYSTEM_PATH, "HOME": ctx["tmp"], "GIT_CONFIG_NOSYSTEM": "1"}
    for name in sources[1].split():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(f"// {name}\n")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]):
        subprocess.run(["git", "-C", str(checkout), *command], env=env, check=True, capture_output=True)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], env=env, check=True,
                            capture_output=True, text=True).stdout.strip()
    data = json.loads((ROOT / "env" / "stacks.json").read_text())
    next(s for s in data["stacks"] if s["name"] == CUDA.name)["apex"] = commit
    tree = box.root / "apex-root"
    (tree / "env").mkdir(parents=True)
    (tree / "env" / "stacks.json").write_text(json.dumps(data))
    return {"MCORE_IMAGES_ROOT": str(tree)}


def megatron_lm_checkout(box: Box, ctx: dict[str, str]) -> None:
    """A Megatron-LM checkout tagged with the cuda stack's megatron-core release (core_vX.Y.Z), and DIR as `locks`
    leaves it: what `megatron-lm-source` archives."""
    checkout, env = Path(ctx["megatron_lm"]), {"PATH": SYSTEM_PATH, "HOME": ctx["tmp"], "GIT_CONFIG_NOSYSTEM": "1"}
    (checkout / "pretrain_gpt.py").write_text("# Megatron-LM's entry point\n")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"],
                    ["tag", f"core_v{CUDA.mcore}"]):
        subprocess.run(["git", "-C", str(checkout), *command], env=env, check=True, capture_output=True)
    ready_dir(ctx)


def replica_installed(box: Box, ctx: dict[str, str]) -> None:
    """The replica an earlier step installed, where `measure` looks for it (REPLICA): the headers run bench-variants.sh
    on the machine replica-stack.sh installed."""
    installed = [p for p in (box.root / "replica-stack", box.root / "image-env-replica") if (p / "bin/python").exists()]
    assert installed, "no earlier step installed a replica"
    Path(ctx["replica"]).symlink_to(installed[0])


def pairs_downloaded(box: Box, ctx: dict[str, str]) -> None:
    """What `prepare` packs for PAIR: its one part under .whl/carry/00."""
    source = box.root / "pairs-downloaded"
    for folder, dists in PAIR_FOLDERS.items():
        wheels(source / folder, dists)
    sdist(source / "te-2.20", "transformer_engine_torch", PAIR_TE)
    carry = Path(ctx["root"], ".whl", "carry", "00")
    carry.mkdir(parents=True)
    _tar(source, list(PAIR_FOLDERS), carry / "attention-pairs.tar.part.00")


def pair_checked(box: Box, ctx: dict[str, str]) -> None:
    """The JSON `check PAIR` leaves in PAIRS: the measured one."""
    measured = sorted(ROOT.glob(f"docs/measurements/*-attention-pairs/{PAIR}.json"))
    assert measured, f"no measured section {PAIR}.json under docs/measurements"
    shutil.copy(measured[-1], Path(ctx["pairs"], f"{PAIR}.json"))


HOOKS: dict[tuple[str, str], dict[str, Callable[..., Any]]] = {
    ("image-env-replica.sh", "locks"): {"after": locks_downloaded},
    ("replica-stack.sh", "apex-source"): {"env": apex_root},
    ("replica-stack.sh", "megatron-lm-source"): {"before": megatron_lm_checkout},
    ("bench-variants.sh", "measure"): {"before": replica_installed},
    ("replica-stack.sh", "all"): {"before": replica_stashed},
    ("attention-pairs.sh", "prepare"): {"after": pairs_downloaded},
    ("attention-pairs.sh", "check"): {"after": pair_checked},
}
"""By step: a fixture ``before`` it runs, one that gives its ``env``, one for what it would have left ``after``."""
