"""The checks fail against deliberately wrong images built on top of --image.

Negative images (tests/image/utils/negatives.py) are built FROM the image under test, together in one bake call,
and removed at the end of the session: one whose label disagrees with what is installed, one declaring a GPU
architecture its kernels lack, one with a package uninstalled and a dirty build left in it, one whose build leaked a
secret into a layer that a later layer deletes, one without the run-time toolchain, one with an installed file
edited, one whose PATH others can write into, and one with a private key and a credential file outside the home
folders. On each, the image tests it is aimed at (run in a subprocess with `--image <wrong image>`) must fail, each
naming what its check found; the checks that read no container (labels, the size, the layer scan) are also called
directly.
"""

from __future__ import annotations

import base64
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import components, gpu_archs
from mcore_images.catalogue.images import label
from mcore_images.resolve.layer_requirements import needs_prebuilt_dlpack_addon
from tests.image import test_versions
from tests.image.app import test_ray, test_verl, test_verl_example, test_verl_user
from tests.image.base import test_base_hygiene, test_base_labels, test_base_versions
from tests.image.kernels import test_gpu_archs
from tests.image.runtime import test_runtime, test_startup, test_toolchain
from tests.image.shared_checks import archs, hygiene, versions
from tests.image.shared_checks import layers as layer_checks
from tests.image.utils import docker, layers, negatives, probing, runtime_paths, saved_layers
from tests.image.utils.fake_wheel import FAKE_WHEEL
from tests.image.utils.negatives import Negative, Under, failures, node

TOP = ("mcore", "te", "torch")
"""The components whose label a defect aims at: the highest the image carries."""


def _top(under: Under) -> str | None:
    return layers.first_labelled(under.image, TOP)


def _no_top(under: Under) -> str | None:
    return None if _top(under) else "the image labels none of megatron-core, TE, torch"


def _failed(ref: str, *tests: Any) -> tuple[set[str], str]:
    """Run only ``tests`` against ``ref``: the names of those that failed, and the output; the run must fail."""
    rc, failed, output = failures(ref, *tests)
    assert rc == 1, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"
    return failed, output


LABEL_WRONG = Negative(
    "label", lambda u: f"LABEL {label(_top(u) or 'torch')}=9.9.9 {label('size-budget-gb')}=0.001\n", skip=_no_top)
"""LABEL io.mcore-images.<top component>=9.9.9 and a size budget of 1 MB."""


@pytest.mark.negatives(LABEL_WRONG)
def test_negative_label_disagrees(image: docker.ImageInfo, facts: dict[str, Any],
                                  negative_images: negatives.NegativeImages) -> None:
    """The version, pin and size checks fail, directly and through the test files."""
    wrong = docker.inspect_image(negative_images.ref(LABEL_WRONG))
    key = layers.first_labelled(image, TOP)
    assert key and wrong.layers == image.layers, "a LABEL-only build must keep the layers (so the facts are the same)"
    comp = components.BY_LABEL[key]
    assert versions.version_problems(comp, wrong.labels, facts), f"version check passed with {key}=9.9.9"
    stack = layers.stack_for(image)
    if stack is not None:
        assert versions.label_pin_problems(wrong, stack), "labels-vs-env/stacks.json check passed with 9.9.9"
    assert hygiene.size_problems(wrong), "size check passed with a 1 MB budget"
    assert not versions.version_problems(comp, image.labels, facts), "the check must pass on the original image"

    aimed = [node(test_versions.test_version_label_matches_installed, key), test_base_hygiene.test_size_within_budget]
    if stack is not None:
        aimed.append(test_base_labels.test_labels_match_stacks_json)
    failed, output = _failed(wrong.ref, *aimed)
    expected = {f"test_version_label_matches_installed[{key}]", "test_size_within_budget"}
    if stack is not None:
        expected.add("test_labels_match_stacks_json")
    assert expected <= failed, f"failed {sorted(failed)}:\n{output[-3000:]}"


def _arch_plan(under: Under) -> tuple[list[str], str | None, str | None]:
    """The declared architectures, one no kernel binary serves, and why the defect does not apply."""
    image = under.image
    if not layers.layer_applies("kernels", image.layer or "base"):
        return [], None, f"a {image.layer} image carries no kernels layer"
    stack = layers.stack_for(image)
    if stack is None:
        return [], None, f"stack '{image.stack_name}' is not in env/stacks.json of this checkout"
    binaries = under.fixture("kernel_binaries")
    extra = archs.unserved(binaries)
    if extra is None:
        return [], None, f"every kernel binary serves every architecture of the table: {binaries}"
    return archs.declared(image, stack)[0], extra, None


ARCH_UNSERVED = Negative(
    "archs", lambda u: f'LABEL {label(gpu_archs.LABEL)}="{";".join([*_arch_plan(u)[0], _arch_plan(u)[1] or ""])}"\n',
    skip=lambda u: _arch_plan(u)[2])
"""LABEL io.mcore-images.cuda-archs=<the declared list>;<an architecture a kernel binary has no cubin for> (a
LABEL-only image: the same binaries)."""


@pytest.mark.negatives(ARCH_UNSERVED)
def test_negative_declared_arch_not_carried(image: docker.ImageInfo, kernel_binaries: list[dict[str, Any]],
                                            negative_images: negatives.NegativeImages) -> None:
    """The fatbin check fails, directly and through the test file."""
    wrong = docker.inspect_image(negative_images.ref(ARCH_UNSERVED))
    stack = layers.stack_for(image)
    assert stack is not None
    declared, _ = archs.declared(image, stack)
    compiled = archs.compiled_here(stack)
    assert not archs.problems(kernel_binaries, declared, compiled), "the check must pass on the original image"
    extra = archs.unserved(kernel_binaries)
    assert wrong.layers == image.layers, "a LABEL-only build must keep the layers (so the binaries are the same)"
    wrong_declared, where = archs.declared(wrong, stack)
    assert wrong_declared == [*declared, extra] and where.startswith("label"), (wrong_declared, where)
    found = archs.problems(kernel_binaries, wrong_declared, compiled)
    assert any(f"sm_{extra}" in p for p in found), found
    failed, output = _failed(wrong.ref, test_gpu_archs.test_kernels_carry_the_declared_archs)
    assert "test_kernels_carry_the_declared_archs" in failed and f"sm_{extra}" in output, output[-3000:]


def _drifted(under: Under) -> tuple[str | None, dict[str, str]]:
    """A transitive package of the locks that no label names (filelock, which torch needs), and the locks' pins."""
    stack = layers.stack_for(under.image)
    locked = versions.locked_pins(stack, under.image.layer or "base", under.image.machine) if stack else {}
    return next((name for name in ("filelock", "typing-extensions", "numpy") if name in locked), None), locked


def _missing_and_dirty(under: Under) -> str:
    key = _top(under) or "torch"
    comp = components.BY_LABEL[key]
    facts = under.fixture("facts")
    # TE is several distributions (meta, core wheel, compiled extension): remove every one the catalogue names.
    dists = sorted(n for n in facts["dists"] if n in {probing.normalize(d) for d in comp.distributions})
    drifted, _ = _drifted(under)
    maker = f"import base64; exec(base64.b64decode('{base64.b64encode(FAKE_WHEEL.encode()).decode()}'))"  # one line
    drift = (f"&& mkdir -p /tmp/fake && python -c {shlex.quote(maker)} {drifted} 0.0.1 /tmp/fake "
             "&& PIP_CONSTRAINT='' python -m pip install -q --no-deps --no-index /tmp/fake/*.whl && rm -rf /tmp/fake "
             if drifted else "")
    return (
        f"RUN python -m pip uninstall -y {' '.join(dists)} {drift}"
        "&& mkdir -p /root/.cache/pip/http /opt/src/thing/.git && echo cached > /root/.cache/pip/http/blob "
        "&& printf 'machine pypi.example login ci password tok\\n' > /root/.netrc "
        "&& mkdir -p /root/.ssh && printf -- '-----BEGIN OPENSSH PRIVATE KEY-----\\nAAAA\\n' > /root/.ssh/id_ed25519 "
        "&& cp /bin/true /usr/local/bin/helper && chmod 4755 /usr/local/bin/helper "
        "&& mkdir -p /opt/shared && chmod 0777 /opt/shared && touch /opt/orphan && chown 4242:4242 /opt/orphan\n"
        "ENV CUDA_DEVICE_MAX_CONNECTIONS=8 PIP_CONSTRAINT=\n"
    )


MISSING_AND_DIRTY = Negative("missing", _missing_and_dirty, skip=_no_top)
"""`pip uninstall -y` the top labelled package, plus a pip cache file, a .git folder, credentials (a netrc token
and an ssh key), a setuid copy of true, a world-writable folder and a file of an unknown uid, a wrong
CUDA_DEVICE_MAX_CONNECTIONS, a transitive package replaced by another release with the constraint turned off
(filelock, which torch needs: no label names it) and PIP_CONSTRAINT cleared."""


@pytest.mark.negatives(MISSING_AND_DIRTY)
def test_negative_package_missing_and_dirty(image: docker.ImageInfo, facts: dict[str, Any],
                                            negative_images: negatives.NegativeImages) -> None:
    """The version, import, hygiene, credential, permission, lock and env checks fail through the test files, each
    naming what it found."""
    ref = negative_images.ref(MISSING_AND_DIRTY)
    key = layers.first_labelled(image, TOP)
    assert key
    stack = layers.stack_for(image)
    drifted, locked = _drifted(Under(image, lambda name: facts))
    runtime = layers.layer_applies("runtime", image.layer or "base")  # the required env is the runtime layer's
    lock_checked = drifted is not None and stack is not None and stack.flavor != "ngc"
    aimed: list[Any] = [node(test_versions.test_version_label_matches_installed, key),
                        node(test_versions.test_imports, key), test_base_hygiene.test_no_build_leftovers,
                        test_base_hygiene.test_no_build_trees_or_git, test_base_hygiene.test_no_credentials,
                        test_base_hygiene.test_file_permissions]
    if runtime:
        aimed += [test_runtime.test_required_env_in_image_config, test_runtime.test_required_env_inside_container]
    if lock_checked:
        aimed.append(test_base_versions.test_installed_distributions_equal_the_locks)
    failed, output = _failed(ref, *aimed)
    expected = {f"test_version_label_matches_installed[{key}]", f"test_imports[{key}]", "test_no_build_leftovers",
                "test_no_build_trees_or_git", "test_no_credentials", "test_file_permissions"}
    needles = ["/root/.netrc", "id_ed25519", "world-writable: /opt/shared", "(uid 4242, gid 4242): /opt/orphan",
               "in no OS package: /usr/local/bin/helper", "/root/.cache/pip/http/blob", "/opt/src/thing/.git"]
    if runtime:
        expected |= {"test_required_env_in_image_config", "test_required_env_inside_container"}
        needles += ["CUDA_DEVICE_MAX_CONNECTIONS=8", "PIP_CONSTRAINT=,"]
    if lock_checked:
        assert drifted is not None
        expected.add("test_installed_distributions_equal_the_locks")
        needles.append(f"{drifted} is 0.0.1, the locks pin {locked[drifted]}")
    assert expected <= failed, f"failed {sorted(failed)}:\n{output[-3000:]}"
    for needle in needles:
        assert needle in output, (needle, output[-3000:])


EDIT = "; p.write_text(p.read_text() + '# edited' + chr(10))"


def _edited_module(under: Under) -> str:
    comp = components.BY_LABEL[_top(under) or "torch"]
    return f"import importlib.util as u, pathlib; p = pathlib.Path(u.find_spec('{comp.modules[0]}').origin)"


FILE_EDITED = Negative(
    "edited", lambda u: f"RUN python -c {shlex.quote(_edited_module(u) + EDIT)}\n", skip=_no_top)
"""One line (`# edited`) appended to the top labelled package's __init__.py (megatron-core's from the runtime layer
up): the same version and the same RECORD."""


@pytest.mark.negatives(FILE_EDITED)
def test_negative_installed_file_edited(image: docker.ImageInfo, host: Any,
                                        negative_images: negatives.NegativeImages) -> None:
    """Only the RECORD check sees it, naming the distribution and the file."""
    ref = negative_images.ref(FILE_EDITED)
    under = Under(image, lambda name: None)
    comp = components.BY_LABEL[_top(under) or "torch"]
    path = host.run(f"python -c {shlex.quote(_edited_module(under) + '; print(p)')}").stdout.strip()
    failed, output = _failed(ref, test_base_hygiene.test_installed_files_match_their_records)
    dist = probing.normalize(comp.distribution or "")
    assert "test_installed_files_match_their_records" in failed, output[-3000:]
    assert f"{dist}: {path}: hash differs (RECORD)" in output, (path, output[-3000:])


PATH_OPENED = (
    "RUN mkdir -p /opt/team/bin && chmod 0775 /opt/team/bin "
    "&& printf 'PATH=\"$PATH:/var/tmp/tools/bin\"\\n' > /etc/profile.d/zz-tools.sh\n"
    "ENV PATH=/tmp:/opt/team/bin:$PATH\n"
)
"""PATH entries others can write: /tmp (world-writable, sticky) and a group-writable folder in the image config,
and, in a login shell's PATH only, a folder that does not exist in world-writable /var/tmp."""


PATH_WRITABLE = Negative("path", PATH_OPENED)


@pytest.mark.negatives(PATH_WRITABLE)
def test_negative_path_writable_by_others(negative_images: negatives.NegativeImages) -> None:
    """The PATH check names each entry others can write and where it comes from, through the test."""
    failed, output = _failed(negative_images.ref(PATH_WRITABLE),
                             test_base_hygiene.test_path_entries_not_writable_by_others)
    assert "test_path_entries_not_writable_by_others" in failed, output[-3000:]
    for needle in ("PATH entry /tmp (image config, docker exec, bash -i) is writable by group or others (mode 1777)",
                   "PATH entry /opt/team/bin (image config, docker exec, bash -i) is writable by group or others "
                   "(mode 775)",
                   "PATH entry /var/tmp/tools/bin (bash -l) does not exist, and /var/tmp"):
        assert needle in output, (needle, output[-3000:])


KEYS_PLANTED = (
    "RUN mkdir -p /srv/app && printf -- '-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n-----END PRIVATE KEY-----\\n' "
    "> /srv/app/key.pem && printf 'machine pypi.example login ci password tok\\n' > /srv/app/.netrc "
    "&& torch=\"$(python -c 'import importlib.util as u, os; print(os.path.dirname(u.find_spec(\"torch\").origin))')\" "
    "&& cp /srv/app/key.pem \"$torch/../deploy-key.pem\" "
    "&& printf '# -----BEGIN RSA PRIVATE KEY-----\\n' >> \"$torch/version.py\" "
    "&& printf '# -----BEGIN EC PRIVATE KEY-----\\n' >> /etc/bash.bashrc\n"
)
"""A private key and a netrc under /srv; a key among the installed packages that no RECORD lists; a key line
appended to a file pip installed (torch's version.py) and to one an OS package installed (bash's bashrc, a
conffile): none is what a package shipped."""
KEYS_FOUND = {
    "/srv/app/key.pem": "PEM private key",
    "/srv/app/.netrc": "credential file",
    "deploy-key.pem": "PEM private key",
    "torch/version.py": "PEM private key",
    "/etc/bash.bashrc": "PEM private key",
}


KEYS_OUTSIDE_HOMES = Negative("keys", KEYS_PLANTED)


@pytest.mark.negatives(KEYS_OUTSIDE_HOMES)
def test_negative_private_key_outside_homes(host: Any, negative_images: negatives.NegativeImages) -> None:
    """The credential check walks the whole file system and exempts only files a package ships unchanged: each
    planted or edited file is named through test_no_credentials, and what the image itself ships stays exempt (no
    finding names it)."""
    exempt = [path for path, owner in hygiene.credential_findings(host.run).items() if owner]
    failed, output = _failed(negative_images.ref(KEYS_OUTSIDE_HOMES), test_base_hygiene.test_no_credentials)
    assert "test_no_credentials" in failed, output[-3000:]
    problems = [line for line in output.splitlines() if " in the image: " in line]
    for needle, kind in KEYS_FOUND.items():
        assert any(f"{kind} in the image: " in p and needle in p for p in problems), (needle, problems)
    lost = [path for path in exempt if any(p.rstrip().endswith(path) for p in problems)]
    assert not lost, f"files the image ships lost their exemption: {lost}"


def _scan_parent(under: Under) -> str:
    """What the leaking build starts from: the image's own OS base when Docker has it (the debian flavor's
    debootstrap image), so that the layers the scan must read are its few and the three added here. Without the
    base, the image itself, its layers passed over unread."""
    base = under.image.label("base")
    return base if base and docker.image_exists(base) else under.image.ref


LEAKED = base64.b64encode(os.urandom(48 * 20)).decode()
"""The body of a private certificate, new in every session: the secret the leaking build is given."""
LEAKED_PEM = ("-----BEGIN CERTIFICATE-----\n" + "\n".join(LEAKED[i : i + 64] for i in range(0, len(LEAKED), 64))
              + "\n-----END CERTIFICATE-----\n")
SECRET_LEAKED = Negative(
    "secret",
    "RUN --mount=type=secret,id=leak cp /run/secrets/leak /root/leaked.pem\n"
    "RUN --mount=type=secret,id=leak grep -v -- ----- /run/secrets/leak | tr -d '\\n' > /opt/joined.txt\n"
    "RUN rm /root/leaked.pem\n"
    "RUN mkdir -p /root/.aws && printf '[default]\\naws_secret_access_key = x\\n' > /root/.aws/credentials "
    "&& printf -- '-----BEGIN EC PRIVATE KEY-----\\nMHcC\\n' > /etc/deploy.key\n"
    "RUN rm -r /root/.aws /etc/deploy.key\n"
    "COPY host-resolv.conf /etc/resolv.conf\n",
    parent=_scan_parent, secrets={"leak": LEAKED_PEM.encode()},
    files={"host-resolv.conf": "nameserver 10.11.12.13\nsearch build.example\n"})
"""A build that copies its secret into a layer (deleted again by a later layer, so the final filesystem is clean)
and writes part of it, reshaped, elsewhere; a cloud credentials file and a private key, deleted again; the build
host's resolv.conf in the last layer."""


@pytest.mark.negatives(SECRET_LEAKED)
def test_negative_secret_in_deleted_layer(image: docker.ImageInfo, layer_scan: saved_layers.LayerScan,
                                          tmp_path: Path, negative_images: negatives.NegativeImages) -> None:
    """The layer scan finds the deleted copy and the reshaped content, the other credentials, and the host-identity
    check names the resolv.conf."""
    ref = negative_images.ref(SECRET_LEAKED)
    secret_file = tmp_path / "site-ca.pem"
    secret_file.write_text(LEAKED_PEM)
    secret = saved_layers.make_secret(secret_file, public=[])
    assert secret.probes, "a private certificate yields a probe"
    final = docker.docker(
        "run", "--rm", *docker.platform_args(ref), "--network", "none", "--entrypoint", "sh", ref, "-c",
        "ls /root/leaked.pem 2>&1 || true"
    )
    assert "No such file" in final, "the leaked copy must be gone from the final filesystem"

    scan = saved_layers.scan_image(ref, [secret], skip_blobs=layer_scan.layers)
    problems = layer_checks.secret_problems(scan)
    paths = {path for _, path, _ in scan.hits}
    assert "/root/leaked.pem" in paths, f"the deleted copy was not found: {problems}"
    assert "/opt/joined.txt" in paths, f"the reshaped content was not found: {problems}"
    assert any(path == "/root/.aws/credentials" and "credential file" in what for _, path, what in scan.hits), problems
    assert any(path == "/etc/deploy.key" and "private key" in what for _, path, what in scan.hits), problems
    assert problems
    identity = layer_checks.host_identity_problems(scan)
    assert any("/etc/resolv.conf holds 'nameserver 10.11.12.13" in p for p in identity), identity


TOOLCHAIN_REMOVED = (
    "RUN rm -f /usr/bin/gcc* /usr/bin/g++* /usr/bin/cc /usr/bin/c++ /usr/bin/*-linux-gnu-gcc* "
    "/usr/bin/*-linux-gnu-g++* /usr/bin/make "
    "&& rm -rf /usr/include/python3* "
    "&& python -m pip uninstall -y ninja transformers "
    "&& rm -f \"$(python -c 'import megatron.core.datasets as d, os; print(os.path.dirname(d.__file__))')/Makefile\"\n"
)
"""What the runtime layer adds for run-time compiles, taken away again: the compilers, make, the Python
headers, ninja, transformers and the datasets Makefile."""


def _runtime_only(under: Under) -> str | None:
    image = under.image
    return None if layers.layer_applies("runtime", image.layer or "base") else f"a {image.layer} image carries no " \
        "runtime layer"


NO_TOOLCHAIN = Negative("toolchain", TOOLCHAIN_REMOVED, skip=_runtime_only)


@pytest.mark.negatives(NO_TOOLCHAIN)
def test_negative_no_runtime_toolchain(negative_images: negatives.NegativeImages) -> None:
    """An image without the run-time toolchain (as every runtime image was before it had one): each of the run-time
    paths fails through the test file (and each passes on the image itself, in the full suite)."""
    failed, output = _failed(negative_images.ref(NO_TOOLCHAIN), test_toolchain.test_runtime_toolchain)
    expected = {f"test_runtime_toolchain[{name}]" for name in runtime_paths.PATHS}
    assert expected <= failed, (f"these run-time paths still work without the toolchain: {sorted(expected - failed)}"
                                f"\n{output[-3000:]}")


APP_BROKEN = (
    # Ray gone: verl's workers are Ray actors.
    "RUN python -m pip uninstall -y ray "
    # vLLM's engine arguments no longer import.
    "&& python -c \"import importlib.util as u, pathlib; "
    "p = pathlib.Path(u.find_spec('vllm').submodule_search_locations[0], 'engine', 'arg_utils.py'); "
    "p.write_text(p.read_text() + chr(10) + 'raise ImportError(\\\"broken on purpose\\\")' + chr(10))\" "
    # verl's Megatron trainer config and its mbridge entry point removed.
    "&& python -c \"import importlib.util as u, pathlib; "
    "v = pathlib.Path(u.find_spec('verl').submodule_search_locations[0]); "
    "(v / 'trainer' / 'config' / 'ppo_megatron_trainer.yaml').unlink(); "
    "(v / 'models' / 'mcore' / 'mbridge.py').unlink()\" "
    # megatron-core says it is 0.12.1, below verl's floor of 0.13.0.
    "&& python -c \"import importlib.util as u, pathlib; "
    "p = pathlib.Path(u.find_spec('megatron.core').submodule_search_locations[0], 'package_info.py'); "
    "p.write_text(p.read_text().replace('MINOR = ', 'MINOR = 12  # ', 1))\" "
    # The rollout engine is no longer held by the image's constraints.
    "&& sed -i '/^vllm==/d' \"$PIP_CONSTRAINT\" "
    # torch's install record changed, as a reinstall by the app layer would change it.
    "&& python -c \"import importlib.metadata as m, pathlib; "
    "p = pathlib.Path(m.distribution('torch')._path, 'RECORD'); p.write_text(p.read_text() + 'torch/x.py,,\\n')\"\n"
)
"""One defect for each check of a verl app image: Ray uninstalled, vLLM's engine arguments broken, verl's Megatron
trainer config and mbridge module removed, megatron-core's version below verl's assertion, vLLM dropped from
PIP_CONSTRAINT, torch's RECORD changed."""

APP_CHECKS = {
    "test_the_rollout_engine_and_ray_import": "ray is gone",
    "test_vllm_engine_arguments_parse_without_a_gpu": "vllm.engine.arg_utils raises",
    "test_the_constraints_refuse_to_move[vllm]": "vllm is not constrained",
    "test_verl_composes_its_megatron_ppo_config": "ppo_megatron_trainer.yaml is gone",
    "test_verl_converts_hf_configs_and_builds_models_through_mbridge": "verl.models.mcore.mbridge is gone",
    "test_verl_mcore_version_assertion_holds": "megatron-core reports 0.12.1",
    "test_torch_unchanged_since_the_runtime_image": "torch's RECORD differs",
    "test_the_smoke_runs_as_ray_actors[2]": "ray is gone",
    "test_the_smoke_runs_as_ray_actors[4]": "ray is gone",
    "test_a_rank_that_raises_in_its_actor_fails_the_run_in_seconds": "ray is gone",
    "test_a_ray_head_starts_and_sees_its_cpus": "ray is gone",
    "test_the_grpo_launch_composes_verls_megatron_config": "ppo_megatron_trainer.yaml is gone",
}
"""The app-layer tests and the defect of APP_BROKEN that must make each fail."""

SHADOWED_MEGATRON = (
    "RUN mkdir -p /opt/shadow/megatron && touch /opt/shadow/megatron/__init__.py\n"
    "ENV PYTHONPATH=/opt/shadow\n"
)
"""A `megatron` package without `core` first on the path: verl's find_spec("megatron.core") finds nothing."""


def _app_image(under: Under) -> str | None:
    image = under.image
    if image.layer != "app" or image.label("verl") in (None, "none"):
        return f"a {image.layer} image without verl: the app checks do not apply"
    return None


APP_DEFECTS = Negative("app", APP_BROKEN, skip=_app_image)
SHADOWED = Negative("shadow", SHADOWED_MEGATRON, skip=_app_image)

APP_TESTS = (
    test_verl_user.test_the_rollout_engine_and_ray_import,
    test_verl_user.test_vllm_engine_arguments_parse_without_a_gpu,
    test_verl_user.test_the_constraints_refuse_to_move, test_verl_user.test_verl_composes_its_megatron_ppo_config,
    test_verl_user.test_verl_converts_hf_configs_and_builds_models_through_mbridge,
    test_verl.test_verl_mcore_version_assertion_holds, test_verl.test_torch_unchanged_since_the_runtime_image,
    test_ray.test_the_smoke_runs_as_ray_actors, test_ray.test_a_rank_that_raises_in_its_actor_fails_the_run_in_seconds,
    test_verl_example.test_a_ray_head_starts_and_sees_its_cpus,
    test_verl_example.test_the_grpo_launch_composes_verls_megatron_config,
)
"""The app-layer tests APP_CHECKS names, as pytest selects them."""


@pytest.mark.negatives(APP_DEFECTS)
def test_negative_app_checks_fail_on_a_broken_verl_image(negative_images: negatives.NegativeImages) -> None:
    """Every check of what a verl user needs fails on an app image that breaks it, each for its own defect."""
    assert sorted({n.split("[")[0] for n in APP_CHECKS}) == sorted(t.__name__ for t in APP_TESTS)
    failed, output = _failed(negative_images.ref(APP_DEFECTS), *APP_TESTS)
    missing = {name: why for name, why in APP_CHECKS.items() if name not in failed}
    assert not missing, f"these passed although {missing}:\n{output[-3000:]}"


@pytest.mark.negatives(SHADOWED)
def test_negative_verl_finds_no_megatron_core(negative_images: negatives.NegativeImages) -> None:
    """verl's own find_spec("megatron.core") check fails where a `megatron` package without `core` shadows it."""
    failed, output = _failed(negative_images.ref(SHADOWED), test_verl.test_verl_finds_megatron_core)
    assert "test_verl_finds_megatron_core" in failed, output[-3000:]


def _prebuilt_addon(under: Under) -> str | None:
    image = under.image
    torch, vllm, sglang = (image.label(name) or components.NONE for name in ("torch", "vllm", "sglang"))
    if torch == components.NONE or not needs_prebuilt_dlpack_addon(torch, vllm, sglang):
        return (f"torch {torch} with vllm {vllm}, sglang {sglang}: the app layer locks no prebuilt DLPack addon to "
                "take away")
    return None


NO_PREBUILT_ADDON = Negative("dlpack", "RUN python -m pip uninstall -y torch-c-dlpack-ext\n", skip=_prebuilt_addon)
"""torch-c-dlpack-ext uninstalled: tvm-ffi compiles its torch addon at every import again."""


@pytest.mark.negatives(NO_PREBUILT_ADDON)
def test_negative_megatron_core_compiles_at_import(negative_images: negatives.NegativeImages) -> None:
    """Without the prebuilt addon, importing megatron-core compiles one into tvm-ffi's cache, and the check says so."""
    failed, output = _failed(negative_images.ref(NO_PREBUILT_ADDON),
                             test_startup.test_importing_megatron_core_compiles_no_tvm_ffi_addon)
    assert "test_importing_megatron_core_compiles_no_tvm_ffi_addon" in failed, output[-3000:]
    assert "install torch-c-dlpack-ext" in output, output[-3000:]
