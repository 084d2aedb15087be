"""Declared overrides and left-out distributions: `lock` proves each override needed and hiding nothing else, and
leaves a left-out distribution resolved but unpinned, with the real uv against a local index of made-up wheels (gamma
is pinned 1.0 by alpha and 2.0 by beta); the committed locks name them and `lock --check` holds them; the rule judges
their form offline."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from mcore_images.catalogue.components import LOCK_LAYERS
from mcore_images.catalogue.stacks import LeftOut, Override, Stack
from mcore_images.errors import InputError
from mcore_images.resolve import declared_overrides, lock_check, lock_files, lock_update, pypi, rules, uv_compile
from tests.unit.conftest import variant

GAMMA_2 = Override("gamma==2.0", "alpha", "alpha's exact pin is stricter than its code; beta needs 2.0")


def _wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    folder = index / name
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                       + "".join(f"Requires-Dist: {r}\n" for r in requires))
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(links)
    (index / "index.html").write_text("".join(f'<a href="{d.name}/">{d.name}</a>\n' for d in sorted(index.iterdir())
                                              if d.is_dir()))


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local simple index that uv (lock) and pip (the metadata reads) both ask, and nothing else."""
    root = tmp_path / "simple"
    _wheel(root, "alpha", "1.0", ("gamma==1.0",))
    _wheel(root, "beta", "1.0", ("gamma==2.0",))
    _wheel(root, "delta", "1.0", ("gamma<2",))
    _wheel(root, "gamma", "1.0")
    _wheel(root, "gamma", "2.0")
    monkeypatch.setattr(pypi, "PYPI_SIMPLE", root.as_uri())
    monkeypatch.setattr(uv_compile, "repo_root", lambda: tmp_path)  # uv's reasoning log goes under tmp_path/build
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    declared_overrides._metadata.cache_clear()
    return root


def _stack(stacks: dict[str, Stack], *overrides: Override) -> Stack:
    return variant(stacks["debian"], overrides=overrides, constraints=())


def _inputs(*requirements: str) -> dict[str, list[str]]:
    return {layer: list(requirements) if layer == "base" else [] for layer in LOCK_LAYERS}


def test_without_a_needed_override_the_lock_fails_naming_the_conflict(index: Path, stacks: dict[str, Stack]) -> None:
    with pytest.raises(InputError) as caught:
        uv_compile.compile_layer(_stack(stacks), ["alpha==1.0", "beta==1.0"], {})
    assert "gamma==1.0" in str(caught.value) and "gamma==2.0" in str(caught.value)
    assert "unsatisfiable" in str(caught.value)


def test_a_needed_override_resolves_and_the_lock_names_it(index: Path, stacks: dict[str, Stack]) -> None:
    stack = _stack(stacks, GAMMA_2)
    declared_overrides.prove(stack, _inputs("alpha==1.0", "beta==1.0"))
    text = uv_compile.compile_layer(stack, ["alpha==1.0", "beta==1.0"], {})
    assert lock_files.pins(text)["gamma"] == "2.0"
    assert declared_overrides.named(declared_overrides.header_lines(stack, lock_files.pins(text))) == [("gamma==2.0",
                                                                                                  "alpha")]


def test_an_unneeded_override_is_refused(index: Path, stacks: dict[str, Stack]) -> None:
    with pytest.raises(InputError, match=r"override gamma==2.0 \(over alpha\) is not needed: its locks resolve "
                                         "without it; remove it"):
        declared_overrides.prove(_stack(stacks, GAMMA_2), _inputs("beta==1.0"))


def test_an_override_that_also_overrides_another_packages_requirement_is_refused(index: Path,
                                                                                 stacks: dict[str, Stack]) -> None:
    # uv's --override replaces delta's gamma<2 too; the lock must not hide it.
    with pytest.raises(InputError, match=r"also overrides delta 1.0's requirement gamma<2; hold delta"):
        declared_overrides.prove(_stack(stacks, GAMMA_2), _inputs("alpha==1.0", "beta==1.0", "delta==1.0"))


def test_requirers_are_read_from_uvs_via_notes_not_from_its_list_of_packages_left_out() -> None:
    text = ("gamma==2.0 \\\n    --hash=sha256:00\n    # via\n    #   --override overrides.txt\n    #   alpha\n"
            "    #   beta\nalpha==1.0 \\\n    --hash=sha256:11\n    # via -r requirements.in\nbeta==3 \\\n"
            "    --hash=sha256:22\n    # via -c constraints.txt\n"
            "# The following packages were excluded from the output:\n# torch\n")
    assert declared_overrides.requirers(text, "gamma") == {"alpha": "1.0", "beta": "3"}
    assert declared_overrides.requirers(text, "beta") == {}


def test_the_committed_locks_name_their_overrides_and_check_catches_a_drift(tmp_path: Path, root: Path,
                                                                            stacks: dict[str, Stack]) -> None:
    cuda = stacks["cuda"]
    assert cuda.overrides and not lock_check.check_locks(cuda, root)
    shutil.copytree(root / "env" / "locks", tmp_path / "env" / "locks")
    runtime = tmp_path / "env" / "locks" / "cuda" / "runtime.txt"
    text = runtime.read_text()
    runtime.write_text("".join(line for line in text.splitlines(keepends=True) if not line.startswith("# Override:")))
    assert any("runtime.txt: its header names overrides []" in p for p in lock_check.check_locks(cuda, tmp_path))
    runtime.write_text(text)
    bumped = variant(cuda, overrides=(Override("flashinfer-python==0.6.13", "megatron-bridge", "why"),
                                      *cuda.overrides[1:]))
    assert any("it pins flashinfer-python 0.6.12, the stack's override flashinfer-python==0.6.13" in p
               for p in lock_check.check_locks(bumped, tmp_path))
    unheld = variant(cuda, overrides=(*cuda.overrides, Override("left-pad==1.0", "vllm", "why")))
    assert any("override left-pad==1.0 pins a distribution no lock of the stack holds" in p
               for p in lock_check.check_locks(unheld, tmp_path))


@pytest.mark.parametrize("override,expected", [
    (Override("gamma==2.0", "alpha", " "), "says no why"),
    (Override("gamma==2.0", "gamma", "why"), "itself"),
    (Override("torch==2.12.0", "vllm", "why"), "pins torch, a component of the stack"),
    (Override("transformers==4.57.1", "mbridge", "why"), "a constraint of the stack both pin transformers"),
])
def test_the_rule_refuses_a_malformed_override(stacks: dict[str, Stack], override: Override, expected: str) -> None:
    stack = variant(stacks["debian"], overrides=(override,))
    assert any(v.rule == "overrides" and expected in v.message for v in rules.check(stack))


def test_the_rule_refuses_two_overrides_of_one_package(stacks: dict[str, Stack]) -> None:
    stack = variant(stacks["debian"], overrides=(GAMMA_2, Override("gamma==3.0", "beta", "why")))
    assert any(v.rule == "overrides" and "two overrides pin gamma" in v.message for v in rules.check(stack))


GAMMA_OUT = LeftOut("Gamma", "alpha requires it and nothing imports it")


def _wheels_listed(index: Path):
    """The index's file list for one release, read from the local index folder (what PyPI's JSON API lists)."""

    def files_of(name: str, version: str) -> list[dict[str, str]]:
        return [{"filename": p.name} for p in (index / name).glob(f"{name}-{version}-*.whl")]

    return files_of


@pytest.fixture
def locking(index: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`lock`'s own path (write_locks) over the local index, with alpha, beta and delta as the base's requirements."""
    monkeypatch.setattr(pypi, "release_files", _wheels_listed(index))
    monkeypatch.setattr(lock_update, "resolved_inputs", lambda stack: _inputs("alpha==1.0", "delta==1.0"))
    return index


def test_a_left_out_distribution_is_resolved_not_locked_and_every_layer_above_names_it(
        locking: Path, tmp_path: Path, stacks: dict[str, Stack]) -> None:
    stack = variant(_stack(stacks), left_out=(GAMMA_OUT,))
    written = lock_update.write_locks(stack, folder=tmp_path / "locks")
    texts = {path.stem: path.read_text() for path in written}
    assert lock_files.pins(texts["base"]) == {"alpha": "1.0", "delta": "1.0"}  # gamma 1.0 held alpha and delta
    line = "# Left out: gamma, resolved but not installed (env/stacks.json says why).\n"
    assert all(line in text for text in texts.values()), texts  # the base resolves it; every layer installs above it
    assert declared_overrides.named_left_out(texts["app"]) == ["gamma"]
    held = lock_files.held_by_layer(stack, texts)
    assert declared_overrides.problems(stack, held, texts) == {}
    assert declared_overrides.problems(_stack(stacks), held, texts)["base"] == [
        "its header names ['gamma'] left out, uv left out [] of the stack's left_out"]


def test_a_left_out_distribution_nothing_requires_is_refused_before_anything_is_written(
        locking: Path, tmp_path: Path, stacks: dict[str, Stack]) -> None:
    stack = variant(_stack(stacks), left_out=(GAMMA_OUT, LeftOut("beta", "why")))
    with pytest.raises(InputError, match=r"^stack 'debian': left_out names beta, which none of its locks resolves "
                                         r"\(no package of the stack requires it\); remove it"):
        lock_update.write_locks(stack, folder=tmp_path / "locks")
    assert not (tmp_path / "locks").exists()


def test_the_committed_locks_leave_out_what_the_stack_leaves_out_and_check_catches_a_drift(
        tmp_path: Path, root: Path, stacks: dict[str, Stack]) -> None:
    for name in ("cuda", "ngc"):
        stack = stacks[name]
        assert [o.name for o in stack.left_out] == ["fast-hadamard-transform"]
        for machine in stack.machines:
            texts = {layer: lock_files.lock_path(stack, layer, root, machine).read_text() for layer in LOCK_LAYERS}
            assert not any("fast-hadamard-transform" in lock_files.pins(text) for text in texts.values())
            assert [layer for layer, text in texts.items() if declared_overrides.named_left_out(text)] == \
                ["runtime", "app"]
    cuda = stacks["cuda"]
    shutil.copytree(root / "env" / "locks", tmp_path / "env" / "locks")
    app = tmp_path / "env" / "locks" / "cuda" / "app.txt"
    app.write_text("".join(line for line in app.read_text().splitlines(keepends=True)
                           if not line.startswith("# Left out:")))
    assert any("app.txt: its header names [] left out, uv left out ['fast-hadamard-transform']" in p
               for p in lock_check.check_locks(cuda, tmp_path))
    nothing = variant(cuda, left_out=(*cuda.left_out, LeftOut("left-pad", "why")))
    assert any("left_out names left-pad, which none of its locks resolves" in p
               for p in lock_check.check_locks(nothing, root))
    assert any("runtime.txt: its header names ['fast-hadamard-transform'] left out, uv left out [] of the stack's "
               "left_out" in p for p in lock_check.check_locks(variant(cuda, left_out=()), root))


@pytest.mark.parametrize("left_out,expected", [
    (LeftOut("gamma", " "), "left_out gamma says no why"),
    (LeftOut("torch", "why"), "left_out torch leaves out torch, a component of the stack"),
    (LeftOut("Transformers", "why"), "left_out Transformers and a constraint of the stack both pin transformers"),
])
def test_the_rule_refuses_a_malformed_left_out_entry(stacks: dict[str, Stack], left_out: LeftOut,
                                                     expected: str) -> None:
    stack = variant(stacks["debian"], left_out=(left_out,))
    assert any(v.rule == "overrides" and expected in v.message for v in rules.check(stack))


def test_the_rule_refuses_leaving_out_an_overridden_distribution_or_one_twice(stacks: dict[str, Stack]) -> None:
    stack = variant(stacks["debian"], overrides=(GAMMA_2,), left_out=(GAMMA_OUT, LeftOut("gamma", "why")))
    messages = [v.message for v in rules.check(stack) if v.rule == "overrides"]
    assert "left_out Gamma: an override pins it too" in messages and "left_out names gamma twice" in messages
