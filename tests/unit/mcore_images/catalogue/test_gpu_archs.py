"""The GPU architecture table and its spellings (cuda_archs, TORCH_CUDA_ARCH_LIST, the gpus label)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mcore_images.catalogue import gpu_archs


def test_parse_and_number() -> None:
    assert gpu_archs.parse(" 80; 90;;100a ") == ["80", "90", "100a"]
    assert [gpu_archs.number(a) for a in ("90", "100a", "120f", "sm_90", "9.0")] == [90, 100, 120, None, None]
    assert gpu_archs.known("103a") is gpu_archs.BY_SM[103]
    assert gpu_archs.known("95") is None


def test_serves_names_the_gpus_of_each_arch() -> None:
    assert gpu_archs.serves("90;100;103;120") == (
        "sm_90 H100/H200/GH200; sm_100 B200/GB200; sm_103 B300/GB300; sm_120 RTX PRO 6000 Blackwell/RTX 50xx")
    assert gpu_archs.serves("") == ""


@pytest.mark.parametrize(("arch", "torch"), [("80", "8.0"), ("90a", "9.0a"), ("100", "10.0"), ("103", "10.3"),
                                             ("120", "12.0"), ("121", "12.1")])
def test_torch_arch(arch: str, torch: str) -> None:
    assert gpu_archs.torch_arch(arch) == torch


def test_apex_build_spells_every_arch_as_torch_does(root: Path) -> None:
    """docker/build-apex.sh turns NVTE_CUDA_ARCHS into TORCH_CUDA_ARCH_LIST with sed; it must agree with
    torch_arch for every architecture of the table (it once wrote 100 as 1.00, which torch refuses)."""
    line = next(line for line in (root / "docker" / "build-apex.sh").read_text().splitlines()
                if line.startswith("arch_list="))
    archs = ";".join(f"{a.sm}" for a in gpu_archs.TABLE) + ";90a"
    out = subprocess.run(["sh", "-c", f'{line}\nprintf %s "$arch_list"'], capture_output=True, text=True, check=True,
                         env={"NVTE_CUDA_ARCHS": archs, "PATH": "/usr/bin:/bin"})
    assert out.stdout == ";".join(gpu_archs.torch_arch(a) for a in gpu_archs.parse(archs))


def test_declared_reads_the_stacks_entry(tmp_path: Path) -> None:
    path = tmp_path / "stacks.json"
    path.write_text(json.dumps({"stacks": [{"name": "a", "cuda_archs": "90;100"}]}))
    assert gpu_archs.declared("a", path) == "90;100"
    assert gpu_archs.declared("b", path) is None
    assert gpu_archs.declared(None, path) is None
    assert gpu_archs.declared("a", tmp_path / "missing.json") is None
    path.write_text("not json")
    assert gpu_archs.declared("a", path) is None
