"""A Megatron-LM checkout on the image, as docs/megatron-lm.md says to bring one: on PYTHONPATH, declared with
$MEGATRON_LM_CHECKOUT. The tests cannot fetch Megatron-LM, so the checkout's layout is made from the
megatron-core sdist of the image's own release on PyPI: that holds megatron/core (sources, helpers.cpp)
and nothing else, so Megatron-LM's megatron/training and pretrain_gpt.py are out of reach here. The datasets
Makefile a checkout carries is stood in for by data/checkout-datasets.mk, which asks the image what the
checkout's Makefile asks (`python3-config --extension-suffix`, `python3 -m pybind11 --includes`): before the
runtime layer linked python3-config, make wrote a bare `helpers_cpp` and the import failed."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.image.utils import docker, negatives
from tests.image.utils.negatives import Negative

from mcore_images.catalogue import images

CHECKOUT = "/tmp/Megatron-LM"
CHECKOUT_MAKEFILE = Path(__file__).parent / "data" / "checkout-datasets.mk"
PYPI_SIMPLE = "https://pypi.org/simple"
RUN = f"cd /tmp && MEGATRON_LM_CHECKOUT={CHECKOUT} PYTHONPATH={CHECKOUT} timeout 600 "

PIPELINE = r'''
import json, os, sys, tempfile
import numpy, torch
import megatron.core
from megatron.core.datasets.utils import compile_helpers
compile_helpers()  # what Megatron-LM's training runs on rank 0: builds helpers_cpp in the checkout
from megatron.core.datasets import helpers_cpp
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

class Tok:  # the few fields GPTDataset reads from a tokenizer
    eod, pad, vocab_size = 0, 1, 128
    unique_identifiers = {"class": "Tok"}

folder = tempfile.mkdtemp()
prefix = os.path.join(folder, "corpus")
builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.int32)
rng = numpy.random.default_rng(0)
for _ in range(64):
    tokens = torch.from_numpy(rng.integers(2, 128, size=int(rng.integers(20, 80)), dtype=numpy.int32))
    builder.add_document(tokens, [tokens.numel()])
builder.finalize(prefix + ".idx")
config = GPTDatasetConfig(random_seed=1234, sequence_length=32, blend=([prefix], None), split="90,5,5",
                          tokenizer=Tok(), reset_position_ids=False, reset_attention_mask=False,
                          eod_mask_loss=False, path_to_cache=os.path.join(folder, "cache"))
train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [16, 4, 4], lambda: True, config).build()
sample = train[0]
print(json.dumps({"core": megatron.core.__file__, "helpers": helpers_cpp.__file__, "samples": len(train),
                  "tokens": list(sample["tokens"].shape)}))
'''


def sdist(version: str, into: Path) -> Path:
    """megatron-core's sdist of `version`, fetched from PyPI's simple index (JSON) and checked against the
    index's sha256: the host downloads it (the container has no network) and builds nothing (pip download
    would run the sdist's setup, which needs pybind11 here)."""
    wanted = f"megatron_core-{version}.tar.gz"
    request = urllib.request.Request(f"{PYPI_SIMPLE}/megatron-core/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        files = json.load(reply)["files"]
    entry = next((f for f in files if f["filename"] == wanted), None)
    assert entry is not None, f"PyPI lists no {wanted}"
    path = into / wanted
    with urllib.request.urlopen(entry["url"], timeout=600) as reply:
        path.write_bytes(reply.read())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == entry["hashes"]["sha256"], f"{wanted}: sha256 {digest} is not the index's"
    return path


def checkout_tar(archive: Path, makefile: Path) -> bytes:
    """A tar of the checkout's layout (Megatron-LM/megatron/core/…) from the sdist, for `docker cp -`."""
    out = io.BytesIO()
    with tarfile.open(archive) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            rest = member.name.partition("/")[2]
            if rest.startswith("megatron/core") and (member.isfile() or member.isdir()):
                member.name = f"Megatron-LM/{rest}"
                member.pax_headers.pop("path", None)  # a long name's pax record would write the old path again
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        info = tarfile.TarInfo("Megatron-LM/megatron/core/datasets/Makefile")
        info.size = len(data := makefile.read_bytes())
        dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="module")
def checkout(image: docker.ImageInfo, container: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    version = image.labels.get(images.label("mcore"))
    if not version or version == "none":
        pytest.skip("the image carries no megatron-core")
    tar = checkout_tar(sdist(version, tmp_path_factory.mktemp("sdist")), CHECKOUT_MAKEFILE)
    copied = subprocess.run(["docker", "cp", "-", f"{container}:/tmp"], input=tar, capture_output=True,
                            check=False, timeout=300)
    assert copied.returncode == 0, copied.stderr.decode(errors="replace")[-800:]
    return version


def test_the_doctor_accepts_a_declared_checkout_of_the_same_release(host: Any, checkout: str) -> None:
    result = host.run(RUN + "python -m mcore_images doctor --only megatron.shadow --json")
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["status"] == "ok" and CHECKOUT in finding["finding"], finding
    undeclared = host.run(f"cd /tmp && PYTHONPATH={CHECKOUT} python -m mcore_images doctor --only megatron.shadow")
    assert undeclared.rc == 1 and "hides" in undeclared.stdout, undeclared.stdout[-1500:]


def test_a_checkout_builds_its_helpers_and_a_gpt_dataset_from_bin_idx(host: Any, checkout: str) -> None:
    """compile_helpers() compiles helpers.cpp in the checkout (the image's g++, pybind11, make), then
    IndexedDatasetBuilder writes .bin/.idx and BlendedMegatronDatasetBuilder builds GPTDatasets from it."""
    result = host.run(RUN + "python -c %s", PIPELINE)
    assert result.rc == 0, (result.stdout + result.stderr)[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["core"].startswith(CHECKOUT) and got["helpers"].startswith(CHECKOUT), got
    assert got["samples"] >= 16 and got["tokens"] == [32], got


NO_PYTHON3_CONFIG = Negative(
    "no-python3-config", "RUN rm -f \"$(command -v python3-config)\"\n",
    skip=lambda u: "the image carries no megatron-core" if u.image.labels.get(images.label("mcore")) in (None, "none")
    else None)


@pytest.mark.negatives(NO_PYTHON3_CONFIG)
def test_negative_without_python3_config_the_checkout_cannot_build_its_helpers(
        negative_images: negatives.NegativeImages) -> None:
    """An image without `python3-config` (as every runtime image was): the checkout's Makefile writes a bare
    helpers_cpp and the data path's import fails, through the test file."""
    rc, failed, output = negatives.failures(negative_images.ref(NO_PYTHON3_CONFIG),
                                            test_a_checkout_builds_its_helpers_and_a_gpt_dataset_from_bin_idx)
    assert rc == 1 and "test_a_checkout_builds_its_helpers_and_a_gpt_dataset_from_bin_idx" in failed, \
        f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
