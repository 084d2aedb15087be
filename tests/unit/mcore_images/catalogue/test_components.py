"""The component catalogue is the one place a component is described: a made-up component added to it (and
pinned in a copy of env/stacks.json) reaches every consumer — stacks, bake's labels, locks, overrides, the
README table, promotion, the image tests and the certificate."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mcore_images.catalogue import components
from mcore_images.catalogue.stacks import Stack, load_stacks
from mcore_images.errors import InputError
from mcore_images.image_build import bake, bake_file, jobs, regions
from mcore_images.release import policy
from mcore_images.resolve import layer_requirements, overrides, plan
from mcore_images.smoke.kit import envinfo
from tests.image.shared_checks import versions as image_versions
from tests.support.host import need
from tests.unit.conftest import ROOT

MADE_UP = components.Component(
    "made_up", "made-up", "made-up", "kernels", "kernels", distributions=("made-up",),
    modules=("made_up",), requirements=("made-up=={version}",), certificate="made-up")


def test_the_catalogue_is_consistent() -> None:
    assert components.check() == []
    assert [c.key for c in components.CATALOGUE] == list(components.KEYS)


@pytest.fixture
def with_made_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The catalogue with MADE_UP added, and a copy of the checkout's env/ that pins it, its bake files and the files
    with a generated region."""
    catalogue = (*components.CATALOGUE, MADE_UP)
    monkeypatch.setattr(components, "CATALOGUE", catalogue)
    monkeypatch.setattr(components, "BY_KEY", {c.key: c for c in catalogue})
    monkeypatch.setattr(components, "BY_LABEL", {c.label: c for c in catalogue})
    monkeypatch.setattr(components, "KEYS", tuple(c.key for c in catalogue))
    shutil.copytree(ROOT / "env", tmp_path / "env")
    secrets = set(re.findall(r'"id=\w+,src=([^"$]+)"', (ROOT / "docker-bake.hcl").read_text()))  # bake reads them
    for name in sorted({region.path for region in regions.REGIONS} | {"docker-bake.hcl", bake_file.PATH} | secrets):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    path = tmp_path / "env" / "stacks.json"
    doc = json.loads(path.read_text())
    for entry in doc["stacks"]:
        shares = entry.get("layers_from") == "debian"  # a stack on debian's kernels layer carries it too
        entry["made_up"] = "2.8.3" if entry["name"] == "debian" or shares else "none"
    path.write_text(json.dumps(doc, indent=2))
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    return tmp_path


def test_every_consumer_picks_up_a_new_component(with_made_up: Path) -> None:
    debian = load_stacks()["debian"]
    assert debian.made_up == "2.8.3" and debian.versions()["made_up"] == "2.8.3"
    assert "made-up==2.8.3" in layer_requirements.layer_inputs(debian)["kernels"]
    assert layer_requirements.expected_pins(debian)["kernels"]["made-up"] == "2.8.3"
    assert overrides.first_lock_layer("made_up") == "kernels" and "made_up" in overrides.overridable()
    table = plan.render_markdown(plan.make_plan([debian]))
    assert "| made-up |" in table.splitlines()[0] and "| 2.8.3 |" in table.splitlines()[2]
    assert "made-up" in components.certificate_packages() and "made-up" in envinfo.packages()

    # bake labels it, from the regenerated docker-bake.json; README's image table names it in runtime-debian
    assert regions.update(with_made_up) == ["docs/stacks.md", "README.md"]
    assert bake_file.write(load_stacks().values(), with_made_up / bake_file.PATH)
    assert "made-up 2.8.3" in (with_made_up / "README.md").read_text()
    assert regions.stale(with_made_up) == [] and bake_file.stale(load_stacks().values(), with_made_up) == []
    need("docker")
    printed = subprocess.run(["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", bake_file.PATH,
                              "--print", "kernels-debian", "runtime-ngc", "base-debian"], cwd=with_made_up,
                             capture_output=True, text=True, check=True).stdout
    targets = json.loads(printed)["target"]
    assert targets["kernels-debian"]["labels"]["io.mcore-images.made-up"] == "2.8.3"
    assert targets["runtime-ngc"]["labels"]["io.mcore-images.made-up"] == "none"
    assert "io.mcore-images.made-up" not in targets["base-debian"]["labels"]

    # promotion compares it with the image's label and what the certificate measured
    labels = {"io.mcore-images.stack": "debian", "io.mcore-images.layer": "runtime",
              **{c.oci_label: debian.pins[c.key] for c in components.labelled_in("runtime")}}
    packages = {"made-up": "2.8.3"}
    cert = {"environment": {"packages": packages, "cuda": debian.cuda}}
    assert not [p for p in policy.measured_problems(labels, cert) if "made-up" in p]
    packages["made-up"] = "2.7.0"
    assert any("made-up 2.7.0" in p for p in policy.measured_problems(labels, cert))
    _, problems = policy.image_problems({**labels, "io.mcore-images.made-up": "2.7.0"}, debian)
    assert any("the image says made-up=2.7.0 but env/stacks.json pins 2.8.3" in p for p in problems)

    # the image tests check its label against what is installed and importable
    assert MADE_UP in components.of_layer("kernels")
    facts = {"dists": {"made-up": {"version": "2.8.3"}}, "imports": {"made_up": {"ok": True}}}
    assert image_versions.version_problems(MADE_UP, labels, facts) == []
    assert image_versions.import_problems(MADE_UP, labels, facts) == []
    facts["dists"]["made-up"]["version"] = "2.7.0"
    assert image_versions.version_problems(MADE_UP, labels, facts)


def test_cudnn_names_the_wheel_of_the_stacks_cuda() -> None:
    cudnn = components.BY_KEY["cudnn"]
    assert cudnn.distribution_for("12.8") == "nvidia-cudnn-cu12"
    assert cudnn.distribution_for("13.0") == "nvidia-cudnn-cu13"
    assert cudnn.distribution_for("11.8") is None
    assert components.BY_KEY["te"].distribution_for("13.0") == "transformer-engine"
    assert [components.cudnn_release(code) for code in (91900, 91002, 90100, 8902)] == \
        ["9.19.0", "9.10.2", "9.1.0", "8.9.2"]


def test_the_catalogue_refuses_a_follower_with_requirements_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = components.Component("odd", "odd", "odd", "base", None, distributions=("odd",), requirements=("odd",),
                               follows="torch")
    monkeypatch.setattr(components, "CATALOGUE", (*components.CATALOGUE, odd))
    assert any(p.startswith("odd: follows 'torch'") for p in components.check())


@pytest.mark.parametrize(("changes", "problem"), [
    ({"build_arg": "made_up"}, "made_up: build_arg 'made_up' is not an ARG name such as 'TE_VERSION'"),
    ({"build_arg": "TE_VERSION"}, "two components share a build_arg"),
    ({"in_tag": components.TagPart("te", 33)}, "two components share a tag prefix"),
    ({"in_tag": components.TagPart("fa", 30)}, "two components share a tag rank"),
    ({"in_tag": components.TagPart("made-up", 33)},
     "made_up: tag prefix 'made-up' is not lowercase letters and digits, e.g. 'te'"),
    ({"in_tag": components.TagPart("fa", 33, until="base")},
     "made_up: in_tag until 'base' must be a layer from its own ('kernels') up"),
])
def test_the_catalogue_refuses_a_build_edge_it_cannot_name(monkeypatch: pytest.MonkeyPatch, changes: dict,
                                                           problem: str) -> None:
    """Build args and tag parts reach bake's args and tags: each must be one bake and the tags can tell apart."""
    monkeypatch.setattr(components, "CATALOGUE", (*components.CATALOGUE, dataclasses.replace(MADE_UP, **changes)))
    assert components.check() == [problem]


def test_what_a_stack_compiles_follows_the_catalogue(stacks: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """compile_profile names a profile of the job planner; a component is compiled where it is pinned, not taken from
    the base image, and (where it names a source field) built here. A new compiled component needs nothing else:
    `build` judges an explicit MAX_JOBS against its profile and the builder lock gets the compile toolchain."""
    assert {c.compile_profile for c in components.CATALOGUE if c.compile_profile} <= set(jobs.PROFILES)
    te, apex = components.BY_KEY["te"], components.BY_KEY["apex"]
    assert te.compiled(stacks["debian"]) and not te.compiled(stacks["ngc"])  # te_source build / base
    assert not te.compiled(stacks["debian"].replace(te_source="pypi"))
    assert apex.compiled(stacks["cuda"]) and not apex.compiled(stacks["debian"])  # a commit / none

    def pinned(stack: Stack, version: str) -> Stack:
        return dataclasses.replace(stack, pins={**stack.pins, "made_up": version})

    fa = dataclasses.replace(MADE_UP, lock_layer="builder", requirements=(), compile_profile="flash-attn")
    monkeypatch.setattr(components, "CATALOGUE", (*components.CATALOGUE, fa))
    plain = stacks["debian"].replace(te_source="pypi")  # compiles nothing
    assert "pybind11" not in layer_requirements.layer_inputs(pinned(plain, "none"))["builder"]
    assert "pybind11" in layer_requirements.layer_inputs(pinned(plain, "2.8.3"))["builder"]

    # 4 CPUs and 8 GiB: two TE jobs fit, two made-up jobs (flash-attn's profile: 5 GiB per nvcc thread) do not
    monkeypatch.setattr(jobs, "detect", lambda: jobs.Resources(4, 8.0, "test", "test"))
    request = bake.BuildRequest(stack="debian", max_jobs="2")
    bake.check_job_counts(request, [pinned(stacks["debian"], "none")])
    with pytest.raises(InputError, match=r"^stack debian: MAX_JOBS=2 flash-attn compile jobs may need"):
        bake.check_job_counts(request, [pinned(stacks["debian"], "2.8.3")])


def cudnn_facts(wheels: dict[str, str], loaded: object = 91900) -> dict:
    return {"dists": {name: {"version": v} for name, v in wheels.items()},
            "torch": {"version": "2.11.0", "cuda": "13.0", "cudnn": loaded}}


@pytest.mark.parametrize(("cuda", "pin", "facts", "problem"), [
    ("13.0", "9.19.0.56", cudnn_facts({"nvidia-cudnn-cu13": "9.19.0.56"}), None),
    ("12.8", "9.10.2.21", cudnn_facts({"nvidia-cudnn-cu12": "9.10.2.21"}, 91002), None),
    ("13.0", "base", cudnn_facts({}, 92000), None),
    ("13.0", "9.19.0.56", cudnn_facts({"nvidia-cudnn-cu13": "9.18.1.3"}),
     "io.mcore-images.cudnn=9.19.0.56 but nvidia-cudnn-cu13 is 9.18.1.3"),
    ("12.8", "9.10.2.21", cudnn_facts({"nvidia-cudnn-cu13": "9.10.2.21"}, 91002),
     "io.mcore-images.cudnn=9.10.2.21 but nvidia-cudnn-cu12 is not installed"),
    ("13.0", "9.19.0.56", cudnn_facts({"nvidia-cudnn-cu13": "9.19.0.56", "nvidia-cudnn-cu12": "9.10.2.21"}),
     "nvidia-cudnn-cu12 9.10.2.21 (another CUDA's wheel) is installed"),
    ("13.0", "9.19.0.56", cudnn_facts({"nvidia-cudnn-cu13": "9.19.0.56"}, 91400),
     "io.mcore-images.cudnn=9.19.0.56 but torch loads cuDNN 9.14.0"),
    ("13.0", "9.19.0.56", cudnn_facts({"nvidia-cudnn-cu13": "9.19.0.56"}, "error: cuDNN version incompatibility"),
     "but torch refuses the cuDNN it finds: error: cuDNN version incompatibility"),
    ("13.0", "base", cudnn_facts({}, None), "io.mcore-images.cudnn=base but torch loads no cuDNN"),
])
def test_the_image_check_of_cudnn_reads_the_wheel_of_the_images_cuda_and_what_torch_loads(
        cuda: str, pin: str, facts: dict, problem: str | None) -> None:
    cudnn = components.BY_KEY["cudnn"]
    labels = {components.BY_KEY["cuda"].oci_label: cuda, cudnn.oci_label: pin}
    found = image_versions.version_problems(cudnn, labels, facts)
    assert (found == []) if problem is None else any(problem in p for p in found), found
