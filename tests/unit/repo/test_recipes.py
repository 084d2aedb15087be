"""The recipes of docs/contributing.md, each done the way the guide says, in a copy of the checkout."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.doctor import model
from mcore_images.image_build import bake_file, regions
from mcore_images.smoke import layouts
from tests.support.host import need
from tests.unit.conftest import ROOT
from tests.unit.repo import test_layout as layout
from tests.unit.repo.test_layout import SMOKE_MAY_IMPORT


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """env/, the Dockerfile, the bake files (docker-bake.hcl, docker-bake.json), every file with a generated region
    (docs/stacks.md, docs/rules.md, the verl example's README, …) and the files bake passes as secrets copied; the
    tooling reads and writes them there."""
    shutil.copytree(ROOT / "env", tmp_path / "env")
    secrets = re.findall(r'"id=\w+,src=([^"$]+)"', (ROOT / "docker-bake.hcl").read_text())
    for name in sorted({region.path for region in regions.REGIONS}
                       | {"Dockerfile", "docker-bake.hcl", bake_file.PATH, *secrets}):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setenv("MCORE_IMAGES_ROOT", str(tmp_path))
    return tmp_path


def edit_stacks(root: Path, change: Callable[[list[dict]], None]) -> None:
    path = root / "env" / "stacks.json"
    doc = json.loads(path.read_text())
    change(doc["stacks"])
    path.write_text(json.dumps(doc, indent=2) + "\n")


def test_bump_a_pin(checkout: Path, capsys: pytest.CaptureFixture) -> None:
    """One edit in env/stacks.json; `make update` re-resolves the runtime lock alone, the layers below
    stay byte for byte, and `make validate` is clean again."""
    need("pypi")  # the recipe resolves locks
    locks = checkout / "env" / "locks" / "debian"
    before = {p.name: p.read_bytes() for p in locks.glob("*.txt")}
    edit_stacks(checkout, lambda stacks: next(s for s in stacks if s["name"] == "debian").update(mcore="0.16.0"))
    assert cli.main(["validate"]) == 1
    stale = capsys.readouterr().err
    assert "docs/stacks.md" in stale and "megatron-core is 0.16.1, env/stacks.json pins 0.16.0" in stale
    assert cli.main(["update"]) == 0
    assert "debian: locks re-resolved from layer 'runtime' up" in capsys.readouterr().out
    after = {p.name: p.read_bytes() for p in locks.glob("*.txt")}
    changed = {name for name in before if before[name] != after[name]}
    assert "runtime.txt" in changed and changed <= {"runtime.txt", "app.txt"}, changed
    assert "megatron-core==0.16.0" in after["runtime.txt"].decode()
    table = (checkout / "docs" / "stacks.md").read_text()
    assert "| `debian` |" in table and "0.16.0" in table
    assert cli.main(["validate"]) == 0


def test_add_a_stack(checkout: Path, capsys: pytest.CaptureFixture) -> None:
    """One entry in env/stacks.json: plan knows it at once, bake once `make update` has rewritten docker-bake.json;
    validate names the locks to write."""
    def add(stacks: list[dict]) -> None:
        stacks.append({**next(s for s in stacks if s["name"] == "debian"), "name": "debian-next", "groups": []})

    edit_stacks(checkout, add)
    assert cli.main(["plan", "--stack", "debian-next", "--format", "names"]) == 0
    assert capsys.readouterr().out.strip() == "debian-next"
    assert cli.main(["update", "--no-locks"]) == 0
    assert f"rewrote the generated part of {bake_file.PATH}" in capsys.readouterr().out
    assert "| `debian-next` |" in (checkout / "docs" / "stacks.md").read_text()
    assert cli.main(["validate"]) == 1
    assert "env/locks/debian-next/base.txt is missing; run `mcore-images lock --stack debian-next`" in \
        capsys.readouterr().err
    need("docker")
    printed = subprocess.run(["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", bake_file.PATH,
                              "--print", "runtime-debian-next"], cwd=checkout, capture_output=True, text=True,
                             check=True).stdout
    assert json.loads(printed)["target"]["runtime-debian-next"]["args"]["STACK"] == "debian-next"


GROUPED_GEMM = """\
    # grouped-gemm, compiled from its sdist in a stage of its own (the recipe's example of a compiled component).
    Component("grouped_gemm", "grouped-gemm", "grouped-gemm", "kernels", "builder",
              distributions=("grouped-gemm",),
              modules=("grouped_gemm",), certificate="grouped-gemm", build_arg="GROUPED_GEMM_VERSION",
              in_tag=TagPart("gg", 32, until="kernels"), compile_profile="apex"),
"""

GROUPED_GEMM_STEPS = {  # the Dockerfile lines the recipe adds: its compile stage with its ARG, its wheels among the
    # kernels layer's, its ARG where it is checked, the check
    "# The compiled wheels, together":
        "FROM builder AS grouped-gemm-build\nARG GROUPED_GEMM_VERSION\n"
        'RUN mkdir -p /wheels && if [ "${GROUPED_GEMM_VERSION}" != none ]; then echo "compile grouped-gemm '
        '${GROUPED_GEMM_VERSION}"; fi\n\n# The compiled wheels, together',
    "COPY --from=apex-build /wheels /wheels\n":
        "COPY --from=apex-build /wheels /wheels\nCOPY --from=grouped-gemm-build /wheels /wheels\n",
    "FROM base AS kernels\nARG LAYERS_STACK\nARG TE_VERSION\n":
        "FROM base AS kernels\nARG LAYERS_STACK\nARG TE_VERSION\nARG GROUPED_GEMM_VERSION\n",
    '/mnt/build/check-version.sh transformer-engine "${TE_VERSION}"':
        '/mnt/build/check-version.sh transformer-engine "${TE_VERSION}" \\\n'
        ' && /mnt/build/check-version.sh grouped-gemm "${GROUPED_GEMM_VERSION}"',
}


def tool(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`mcore-images ARGS` as the copy's own code runs it on the copy's files."""
    return subprocess.run([sys.executable, "-m", "mcore_images", *args], cwd=tree, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tree / "src"), "MCORE_IMAGES_ROOT": str(tree)},
                          timeout=120)


def test_add_a_compiled_component(checkout: Path) -> None:
    """The guide's steps for a component a kernels stage compiles, in a copy of the tree, its code included: the
    catalogue entry, a pin in every stack, `make update`, the Dockerfile lines `make validate` names; bake then
    passes its build arg, labels it and names it in the kernels tag as tags.py does. Nothing is built."""
    shutil.copytree(ROOT / "src", checkout / "src", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    catalogue = checkout / "src" / "mcore_images" / "catalogue" / "components.py"
    text = catalogue.read_text()
    assert text.count("\n)\n\nBY_KEY") == 1
    catalogue.write_text(text.replace("\n)\n\nBY_KEY", "\n" + GROUPED_GEMM + ")\n\nBY_KEY"))

    # 1. the entry: every stack must now pin it
    assert "stack 'ngc': no pin for grouped_gemm" in tool(checkout, "validate").stderr

    # 2. its pin in every stack ('none' where a stack does not carry it)
    def pin(stacks: list[dict]) -> None:
        for s in stacks:
            s["grouped_gemm"] = "2.8.3" if "debian" in (s["name"], s.get("layers_from")) else "none"
    edit_stacks(checkout, pin)

    # 3. `make update`, then `make validate` names each Dockerfile line still missing
    assert tool(checkout, "update", "--no-locks").stdout.splitlines() == [
        "rewrote the generated part of docs/stacks.md", "rewrote the generated part of docs/tags.md",
        "rewrote the generated part of README.md", f"rewrote the generated part of {bake_file.PATH}"]
    missing = tool(checkout, "validate")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        "error: Dockerfile: bake passes GROUPED_GEMM_VERSION (components.py's grouped_gemm) but no stage declares it; "
        "add `ARG GROUPED_GEMM_VERSION` to the stage that reads it, or drop it there",
        "error: Dockerfile: no stage of the kernels layer reads GROUPED_GEMM_VERSION (grouped-gemm); read it where the "
        "layer installs or checks it, or drop build_arg from components.py",
        "error: Dockerfile stage kernels does not check grouped-gemm's release: add `/mnt/build/check-version.sh "
        'grouped-gemm "${GROUPED_GEMM_VERSION}"` to its install step']

    # 4. its compile step and version check in the Dockerfile
    dockerfile = checkout / "Dockerfile"
    text = dockerfile.read_text()
    for old, new in GROUPED_GEMM_STEPS.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    dockerfile.write_text(text)
    assert tool(checkout, "validate").returncode == 0

    need("docker")
    printed = subprocess.run(["docker", "buildx", "bake", "-f", "docker-bake.hcl", "-f", bake_file.PATH, "--print",
                              "kernels-debian", "runtime-debian", "kernels-cuda"], cwd=checkout, capture_output=True,
                             text=True, check=True).stdout
    targets = json.loads(printed)["target"]
    kernels = targets["kernels-debian"]
    assert kernels["args"]["GROUPED_GEMM_VERSION"] == "2.8.3"
    assert kernels["labels"]["io.mcore-images.grouped-gemm"] == "2.8.3"
    assert "-apexnone-gg2.8.3-torch" in kernels["tags"][0]
    assert targets["kernels-cuda"]["args"]["GROUPED_GEMM_VERSION"] == "none"
    assert "-gg" not in targets["runtime-debian"]["tags"][0]  # until="kernels": the runtime tag does not name it
    assert targets["runtime-debian"]["labels"]["io.mcore-images.grouped-gemm"] == "2.8.3"
    ours = json.loads(tool(checkout, "tags", "--stack", "debian", "--json").stdout)
    assert {name: targets[name]["tags"] for name in ("kernels-debian", "runtime-debian")} == {
        name: ours[name] for name in ("kernels-debian", "runtime-debian")}


def test_record_a_models_need(checkout: Path, capsys: pytest.CaptureFixture) -> None:
    """One entry in env/needs.json: plan tells each stack below it, `update` lists it under the stacks table
    (docs/stacks.md)."""
    path = checkout / "env" / "needs.json"
    doc = json.loads(path.read_text())
    doc["needs"].append({"name": "long-context", "what": "128k-token training", "component": "te",
                         "requires": ">=2.18", "with": [], "why": "an example need", "source": "a test"})
    path.write_text(json.dumps(doc, indent=2) + "\n")
    assert cli.main(["plan", "--stack", "debian-verl"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "[need long-context]" in line]
    assert notes == ["  NOTE [need long-context] stack 'debian-verl' pins TE 2.16.0; 128k-token training needs TE "
                     ">=2.18 (why: `mcore-images plan --json`)"]
    assert cli.main(["plan", "--stack", "debian-verl", "--json"]) == 0
    assert "an example need" in capsys.readouterr().out
    assert cli.main(["validate"]) == 1 and "docs/stacks.md" in capsys.readouterr().err
    assert cli.main(["update", "--no-locks"]) == 0
    readme = (checkout / "docs" / "stacks.md").read_text()
    assert "- 128k-token training needs TE >=2.18 (a test): below it: `ngc` (pins TE 2.16.0)" in readme
    assert cli.main(["validate"]) == 0


def test_add_a_smoke_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name in layouts.CATALOGUE: planned on its machine size, skipped with a reason where it cannot run,
    compared with the dp-only run."""
    monkeypatch.setitem(layouts.CATALOGUE, 4, (*layouts.CATALOGUE[4], "tp2-cp2"))
    plan = layouts.plan(4, None, te=True)
    runs = {r.id: r for r in plan.runs}
    assert runs["tp2-cp2/dense/te"].skip is None and runs["tp2-cp2/dense/te"].baseline_id == "dp4/dense/te"
    assert "context parallelism needs Transformer Engine" in runs["tp2-cp2/dense/local"].skip
    assert any(r.layout.name == "dp2-tp2-cp2" for r in layouts.plan(8, None, te=True).runs)


SECTION_RECIPE = """
import json
from pathlib import Path
from mcore_images.smoke import certificate
cert = certificate.new(["python", "-m", "mcore_images.smoke"], "2026-12-06T00:00:00+00:00")
cert.update(status="passed", exit_code=0)
folder = Path(__import__("sys").argv[1])
certificate.write(cert, folder)
certificate.attach(folder, "recipe_example", {"schema": "mcore-images/recipe-example/v1", "verdict": "passed"})
print(json.dumps({"md": (folder / "certificate.md").read_text(),
                  "bad": certificate.validate({**cert, "recipe_example": {"verdict": 3}})}))
"""
"""A smoke program's run adding its section to a certificate, in a process of its own (the registry is its)."""


def test_add_a_section_to_the_smoke_certificate(tmp_path: Path) -> None:
    """A program package with a section.py and its definition in the schema, as the guide says: the certificate
    finds it, holds it to its shape and its identifier, and renders it; nothing else is edited."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "mcore_images", src / "mcore_images",
                    ignore=shutil.ignore_patterns("__pycache__"))
    program = src / "mcore_images" / "smoke" / "recipe_example"
    program.mkdir()
    (program / "__init__.py").write_text('"""An example program."""\n')
    (program / "section.py").write_text(
        "from mcore_images.smoke.kit import sections\n\n\n"
        "def markdown(section):\n    return ['', f\"## Recipe example: {section['verdict']}\"]\n\n\n"
        "SECTION = sections.register('recipe_example', markdown, schema='mcore-images/recipe-example/v1', "
        "program=__package__)\n")
    schema_path = src / "mcore_images" / "data" / "certificate.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["$defs"]["recipe_example"] = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    schema["$defs"]["fields"]["properties"]["recipe_example"] = {"$ref": "#/$defs/recipe_example"}
    schema_path.write_text(json.dumps(schema))
    done = subprocess.run([sys.executable, "-c", SECTION_RECIPE, str(tmp_path / "cert")], capture_output=True,
                          text=True, env={"PYTHONPATH": str(src)}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["md"].rstrip().endswith("## Recipe example: passed"), out["md"]
    assert [p.split(":")[0] for p in out["bad"]] == [
        "field recipe_example.verdict", "recipe_example section schema None is not 'mcore-images/recipe-example/v1'"]


@pytest.fixture
def extra_check() -> Iterator[str]:
    check_id = "env.recipe-example"

    @model.check(check_id, model.Status.WARN, "set RECIPE_EXAMPLE=1")
    def _example(ctx: model.Context) -> model.Outcome:
        """An example check registered the way docs/contributing.md says."""
        return model.ok("RECIPE_EXAMPLE is fine")

    yield check_id
    del model.REGISTRY[check_id]


def test_add_a_doctor_check(extra_check: str, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["doctor", "--list"]) == 0
    assert extra_check in capsys.readouterr().out
    assert cli.main(["doctor", "--json", "--only", extra_check]) == 0
    assert [f["id"] for f in json.loads(capsys.readouterr().out)["findings"]] == [extra_check]


# ---------------------------------------------------------------------------------------------
# The walls the guide states.

PURE = ("mcore_images.smoke.layouts", "mcore_images.smoke.shards", "mcore_images.smoke.judge",
        "mcore_images.smoke.certificate", "mcore_images.smoke.kit.errors",
        "mcore_images.smoke.kit.numerics", "mcore_images.smoke.kit.seeds", "mcore_images.smoke.kit.model_size",
        "mcore_images.smoke.kit.gpt_builder",
        "mcore_images.smoke.bridge.spec", "mcore_images.smoke.bench.model",
        "mcore_images.smoke.bench.gate", "mcore_images.smoke.attention.cases", "mcore_images.smoke.attention.table",
        "mcore_images.smoke.verl_step.spec", "mcore_images.smoke.verl_step.reward",
        "mcore_images.smoke.verl_step.flash_imports", "mcore_images.smoke.verl_step.cli",
        "mcore_images.smoke.kit.sections")


def test_the_pure_modules_import_without_torch() -> None:
    """The certificate's sections too: every program's ``section`` module, as the certificate finds them."""
    blocker = ("import sys\n"
               "class Block:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name.split('.')[0] in ('torch', 'megatron', 'transformer_engine'):\n"
               "            raise ImportError('blocked: ' + name)\n"
               "sys.meta_path.insert(0, Block())\n"
               f"import importlib\nfor m in {PURE!r}: importlib.import_module(m)\n"
               "from mcore_images.smoke.kit import sections\nassert len(sections.registered()) >= 4\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


BESIDE_THE_STANDARD_LIBRARY = {"packaging", "pip"}
"""What those modules may import besides the standard library: packaging, through catalogue.versions, which falls
back to pip's vendored copy where an image lacks it."""


def test_what_the_smoke_may_import_of_the_tooling_stands_on_the_standard_library_alone() -> None:
    """The smoke runs in images beside torch: what it takes from the tooling imports nothing else of it (no docker
    or registry code; relative imports and importlib's seen as the layout test sees them) and no third-party
    package."""
    offenders = [f"{e.source}: {e.target}" for e in layout.edges()
                 if e.source in SMOKE_MAY_IMPORT and e.target not in SMOKE_MAY_IMPORT]
    for name in sorted(SMOKE_MAY_IMPORT):
        path = layout.modules()[name]
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{name}: {n}" for n in names if n.split(".")[0] not in sys.stdlib_module_names
                          and n.split(".")[0] != "mcore_images" and n != "__future__"
                          and n.split(".")[0] not in BESIDE_THE_STANDARD_LIBRARY]
    assert not offenders, offenders

