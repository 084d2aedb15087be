"""The checks fail against deliberately wrong images built on top of --image.

Throwaway images are built FROM the image under test with plain `docker build` and removed afterwards: one
whose label disagrees with what is installed, one declaring a GPU architecture its kernels lack, one with a
package uninstalled and a dirty build left in it, one whose build leaked a secret into a layer that a later
layer deletes, one without the run-time toolchain, one with an installed file edited, one whose PATH others can
write into, and one with a private key and a credential file outside the home folders.
Each check's function must report a problem, and the image tests themselves (run in a subprocess
with `--image <wrong image>`) must fail, naming the checks that caught it.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcore_images.catalogue import components, gpu_archs
from mcore_images.catalogue.images import label
from tests.image.shared_checks import archs, environment, hygiene, installed, versions
from tests.image.shared_checks import layers as layer_checks
from tests.image.shared_checks.hygiene import REPO
from tests.image.utils import docker, layers, probing, saved_layers
from tests.image.utils.fake_wheel import FAKE_WHEEL

HERE = Path(__file__).parent
TAG = "mcore-images-negative"


@pytest.fixture
def wrong_images() -> Iterator[list[str]]:
    """Tags built during a test; removed afterwards whatever happens."""
    tags: list[str] = []
    try:
        yield tags
    finally:
        for tag in tags:
            docker.remove_image(tag)


def _tag(kind: str) -> str:
    return f"{TAG}:{kind}-{uuid.uuid4().hex[:8]}"


def _failed_tests(ref: str, select: str) -> tuple[int, set[str], str]:
    """Run the image tests against `ref` in a subprocess: (exit code, names of failed tests, output)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE),
        "--image",
        ref,
        "-k",
        select,
        "-q",
        "-rf",
        "-p",
        "no:cacheprovider",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, cwd=REPO)
    output = proc.stdout + proc.stderr
    failed = set(re.findall(r"^FAILED \S+::(\S+)", output, re.M))
    return proc.returncode, failed, output


def failures_on(image_ref: str, steps: str, kind: str, select: str) -> tuple[int, set[str], str]:
    """Build a negative image (``FROM image_ref`` plus ``steps``), run the image tests ``select`` names against it,
    remove it: (exit code, names of failed tests, output)."""
    ref = docker.build_image(f"FROM {image_ref}\n{steps}", _tag(kind))
    try:
        return _failed_tests(ref, select)
    finally:
        docker.remove_image(ref)


def test_negative_label_disagrees(image: docker.ImageInfo, facts: dict[str, Any], wrong_images: list[str]) -> None:
    """LABEL io.mcore-images.<top component>=9.9.9 and a size budget of 1 MB: the version, pin and size
    checks fail."""
    key = layers.first_labelled(image, ("mcore", "te", "torch"))
    assert key, "the image labels none of megatron-core, TE, torch"
    dockerfile = f"FROM {image.ref}\nLABEL {label(key)}=9.9.9 {label('size-budget-gb')}=0.001\n"
    wrong = docker.inspect_image(docker.build_image(dockerfile, _tag("label")))
    wrong_images.append(wrong.ref)
    assert wrong.layers == image.layers, "a LABEL-only build must keep the layers (so the facts are the same)"

    comp = components.BY_LABEL[key]
    assert versions.version_problems(comp, wrong.labels, facts), f"version check passed with {key}=9.9.9"
    stack = layers.stack_for(image)
    if stack is not None:
        assert versions.label_pin_problems(wrong, stack), "labels-vs-env/stacks.json check passed with 9.9.9"
    assert hygiene.size_problems(wrong), "size check passed with a 1 MB budget"
    assert not versions.version_problems(comp, image.labels, facts), "the check must pass on the original image"

    rc, failed, output = _failed_tests(wrong.ref, "version_label_matches_installed or labels_match or size")
    expected = {f"test_version_label_matches_installed[{key}]", "test_size_within_budget"}
    if stack is not None:
        expected.add("test_labels_match_stacks_json")
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"


def test_negative_declared_arch_not_carried(image: docker.ImageInfo, host: Any, wrong_images: list[str]) -> None:
    """LABEL io.mcore-images.cuda-archs=<the declared list>;<an architecture a kernel binary has no cubin for> (a
    LABEL-only image: the same binaries): the fatbin check fails, directly and through the test file."""
    if not layers.layer_applies("kernels", image.layer or "base"):
        pytest.skip(f"a {image.layer} image carries no kernels layer")
    stack = layers.stack_for(image)
    if stack is None:
        pytest.skip(f"stack '{image.stack_name}' is not in env/stacks.json of this checkout")
    declared, _ = archs.declared(image, stack)
    binaries = archs.scan(host.run)
    compiled = archs.compiled_here(stack)
    assert not archs.problems(binaries, declared, compiled), "the check must pass on the original image"
    extra = archs.unserved(binaries)
    assert extra, f"every kernel binary serves every architecture of the table: {binaries}"
    dockerfile = f'FROM {image.ref}\nLABEL {label(gpu_archs.LABEL)}="{";".join([*declared, extra])}"\n'
    wrong = docker.inspect_image(docker.build_image(dockerfile, _tag("archs")))
    wrong_images.append(wrong.ref)
    assert wrong.layers == image.layers, "a LABEL-only build must keep the layers (so the binaries are the same)"

    wrong_declared, where = archs.declared(wrong, stack)
    assert wrong_declared == [*declared, extra] and where.startswith("label"), (wrong_declared, where)
    found = archs.problems(binaries, wrong_declared, compiled)
    assert any(f"sm_{extra}" in p for p in found), found
    rc, failed, output = _failed_tests(wrong.ref, "kernels_carry_the_declared_archs")
    assert rc == 1 and "test_kernels_carry_the_declared_archs" in failed, f"exit {rc}, failed {sorted(failed)}:\n" \
        f"{output[-3000:]}"


def test_negative_package_missing_and_dirty(
    image: docker.ImageInfo, facts: dict[str, Any], wrong_images: list[str]
) -> None:
    """`pip uninstall -y mbridge` (or the top labelled package), plus a pip cache file, a .git folder,
    credentials (a netrc token and an ssh key), a setuid copy of true, a world-writable folder and a file of an
    unknown uid, a wrong CUDA_DEVICE_MAX_CONNECTIONS, a transitive package
    replaced by another release with the constraint turned off (filelock, which torch needs: no label names
    it) and PIP_CONSTRAINT cleared: the version, import, hygiene, credential, permission, lock and env checks
    fail."""
    key = layers.first_labelled(image, ("mbridge", "megatron-bridge", "mcore", "te", "torch"))
    assert key, "the image labels no removable package"
    comp = components.BY_LABEL[key]
    dist = comp.distribution or ""
    # TE is several distributions (meta, core wheel, compiled extension): remove every one the catalogue names.
    dists = sorted(n for n in facts["dists"] if n in {probing.normalize(d) for d in comp.distributions})
    stack = layers.stack_for(image)
    locked = versions.locked_pins(stack, image.layer or "base", image.machine) if stack else {}
    drifted = next((name for name in ("filelock", "typing-extensions", "numpy") if name in locked), None)
    maker = f"import base64; exec(base64.b64decode('{base64.b64encode(FAKE_WHEEL.encode()).decode()}'))"  # one line
    drift = (f"&& mkdir -p /tmp/fake && python -c {shlex.quote(maker)} {drifted} 0.0.1 /tmp/fake "
             "&& PIP_CONSTRAINT='' python -m pip install -q --no-deps --no-index /tmp/fake/*.whl && rm -rf /tmp/fake "
             if drifted else "")
    dockerfile = (
        f"FROM {image.ref}\n"
        f"RUN python -m pip uninstall -y {' '.join(dists)} {drift}"
        "&& mkdir -p /root/.cache/pip/http /opt/src/thing/.git && echo cached > /root/.cache/pip/http/blob "
        "&& printf 'machine pypi.example login ci password tok\\n' > /root/.netrc "
        "&& mkdir -p /root/.ssh && printf -- '-----BEGIN OPENSSH PRIVATE KEY-----\\nAAAA\\n' > /root/.ssh/id_ed25519 "
        "&& cp /bin/true /usr/local/bin/helper && chmod 4755 /usr/local/bin/helper "
        "&& mkdir -p /opt/shared && chmod 0777 /opt/shared && touch /opt/orphan && chown 4242:4242 /opt/orphan\n"
        "ENV CUDA_DEVICE_MAX_CONNECTIONS=8 PIP_CONSTRAINT=\n"
    )
    ref = docker.build_image(dockerfile, _tag("missing"))
    wrong_images.append(ref)
    wrong = docker.inspect_image(ref)
    wrong_facts = probing.probe_image(ref)

    assert probing.installed(wrong_facts, dist) is None, f"{dist} is still installed"
    assert versions.version_problems(comp, wrong.labels, wrong_facts), f"version check passed without {dist}"
    assert versions.import_problems(comp, wrong.labels, wrong_facts), f"import check passed without {dist}"
    runtime = layers.layer_applies("runtime", wrong.layer or "base")  # the required env is the runtime layer's
    if runtime:
        env_found = environment.env_problems(wrong.env, wrong.stack_name, "config")
        assert any(p.startswith("config: CUDA_DEVICE_MAX_CONNECTIONS=8") for p in env_found), env_found
        assert any(p.startswith("config: PIP_CONSTRAINT=,") for p in env_found), env_found
    lock_checked = drifted is not None and stack is not None and stack.flavor != "ngc"
    if lock_checked:
        assert stack is not None and drifted is not None
        drift_found = versions.lock_problems(wrong_facts, stack, image.layer or "base", image.machine)
        assert f"{drifted} is 0.0.1, the locks pin {locked[drifted]}" in drift_found, drift_found

    with probing.container_host(ref) as host:
        found = hygiene.credential_problems(host.run)
        permissions = hygiene.permission_problems(host.run)
    assert any("/root/.netrc" in p for p in found) and any("id_ed25519" in p for p in found), found
    for needle in ("world-writable: /opt/shared", "(uid 4242, gid 4242): /opt/orphan",
                   "in no OS package: /usr/local/bin/helper"):
        assert any(needle in p for p in permissions), (needle, permissions)
    select = "version_label_matches_installed or test_imports or leftovers or git or credentials or permissions"
    expected = {
        f"test_version_label_matches_installed[{key}]",
        f"test_imports[{key}]",
        "test_no_build_leftovers",
        "test_no_build_trees_or_git",
        "test_no_credentials",
        "test_file_permissions",
    }
    if runtime:
        select += " or required_env"
        expected |= {"test_required_env_in_image_config", "test_required_env_inside_container"}
    if lock_checked:
        select += " or equal_the_locks"
        expected.add("test_installed_distributions_equal_the_locks")
    rc, failed, output = _failed_tests(ref, select)
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"


def test_negative_installed_file_edited(
    image: docker.ImageInfo, facts: dict[str, Any], wrong_images: list[str]
) -> None:
    """One line appended to the top labelled package's __init__.py (megatron-core's from the runtime layer up): the
    same version and the same RECORD, so only the RECORD check sees it, naming the distribution and the file."""
    key = layers.first_labelled(image, ("mcore", "te", "torch"))
    assert key, "the image labels none of megatron-core, TE, torch"
    comp = components.BY_LABEL[key]
    where = f"import importlib.util as u, pathlib; p = pathlib.Path(u.find_spec('{comp.modules[0]}').origin)"
    edit = f"{where}; p.write_text(p.read_text() + '# edited' + chr(10))"
    ref = docker.build_image(f"FROM {image.ref}\nRUN python -c {shlex.quote(edit)}\n", _tag("edited"))
    wrong_images.append(ref)
    with probing.container_host(ref) as host:
        path = host.run(f"python -c {shlex.quote(where + '; print(p)')}").stdout.strip()
        found = installed.record_problems(installed.verify_records(host.run), facts)
    dist = probing.normalize(comp.distribution or "")
    assert f"{dist}: {path}: hash differs (RECORD)" in found, (path, found)
    rc, failed, output = _failed_tests(ref, "test_installed_files_match_their_records")
    assert rc == 1 and "test_installed_files_match_their_records" in failed, (
        f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}")


PATH_OPENED = (
    "RUN mkdir -p /opt/team/bin && chmod 0775 /opt/team/bin "
    "&& printf 'PATH=\"$PATH:/var/tmp/tools/bin\"\\n' > /etc/profile.d/zz-tools.sh\n"
    "ENV PATH=/tmp:/opt/team/bin:$PATH\n"
)
"""PATH entries others can write: /tmp (world-writable, sticky) and a group-writable folder in the image config,
and, in a login shell's PATH only, a folder that does not exist in world-writable /var/tmp."""


def test_negative_path_writable_by_others(image: docker.ImageInfo, wrong_images: list[str]) -> None:
    """The PATH check names each entry others can write and where it comes from, directly and through the test."""
    wrong = docker.inspect_image(docker.build_image(f"FROM {image.ref}\n{PATH_OPENED}", _tag("path")))
    wrong_images.append(wrong.ref)
    with probing.container_host(wrong.ref) as host:
        sources = hygiene.path_sources(wrong.env, host.run)
        found = hygiene.path_problems(sources, host.run)
    for needle in ("PATH entry /tmp (image config, docker exec, bash -i) is writable by group or others (mode 1777)",
                   "PATH entry /opt/team/bin (image config, docker exec, bash -i) is writable by group or others "
                   "(mode 775)",
                   "PATH entry /var/tmp/tools/bin (bash -l) does not exist, and /var/tmp"):
        assert any(p.startswith(needle) for p in found), (needle, found)
    rc, failed, output = _failed_tests(wrong.ref, "test_path_entries_not_writable_by_others")
    assert rc == 1 and "test_path_entries_not_writable_by_others" in failed, (
        f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}")


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


def test_negative_private_key_outside_homes(image: docker.ImageInfo, host: Any, wrong_images: list[str]) -> None:
    """The credential check walks the whole file system and exempts only files a package ships unchanged: each
    planted or edited file is named, directly and through test_no_credentials, and what the image itself holds
    stays exempt."""
    exempt = {path: owner for path, owner in hygiene.credential_findings(host.run).items() if owner}
    ref = docker.build_image(f"FROM {image.ref}\n{KEYS_PLANTED}", _tag("keys"))
    wrong_images.append(ref)
    with probing.container_host(ref) as wrong_host:
        findings = hygiene.credential_findings(wrong_host.run)
    problems = hygiene.unshipped_credentials(findings)
    for needle, kind in KEYS_FOUND.items():
        assert any(p.startswith(f"{kind} in the image: ") and needle in p for p in problems), (needle, problems)
    assert {path: findings.get(path) for path in exempt} == exempt, "a file the image ships lost its exemption"
    rc, failed, output = _failed_tests(ref, "test_no_credentials")
    assert rc == 1 and "test_no_credentials" in failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"


def _scan_parent(image: docker.ImageInfo) -> str:
    """What the leaking build starts from: the image's own OS base when Docker has it (the debian flavor's
    debootstrap image). The scan streams the whole saved image, and the layers that must be found are the
    three added here; saving the image under test again would stream its tens of GB a second time (about
    5 minutes for an app image). Without the base, the image itself, its layers skipped unread."""
    base = image.label("base")
    return base if base and docker.image_exists(base) else image.ref


def test_negative_secret_in_deleted_layer(
    image: docker.ImageInfo, layer_scan: saved_layers.LayerScan, tmp_path: Path, wrong_images: list[str]
) -> None:
    """A build that copies its secret into a layer (deleted again by a later layer, so the final
    filesystem is clean) and writes part of it, reshaped, elsewhere: the layer scan finds both. Credentials
    of other kinds (a cloud credentials file, a private key), deleted again, are found too, and the last
    layer's build-host resolv.conf is named by the host-identity check."""
    body = base64.b64encode(os.urandom(48 * 20)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    secret_file = tmp_path / "site-ca.pem"
    secret_file.write_text("-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n")
    secret = saved_layers.make_secret(secret_file, public=[])
    assert secret.probes, "a private certificate yields a probe"
    parent = _scan_parent(image)
    dockerfile = (
        f"FROM {parent}\n"
        "RUN --mount=type=secret,id=leak cp /run/secrets/leak /root/leaked.pem\n"
        "RUN --mount=type=secret,id=leak grep -v -- ----- /run/secrets/leak | tr -d '\\n' > /opt/joined.txt\n"
        "RUN rm /root/leaked.pem\n"
        "RUN mkdir -p /root/.aws && printf '[default]\\naws_secret_access_key = x\\n' > /root/.aws/credentials "
        "&& printf -- '-----BEGIN EC PRIVATE KEY-----\\nMHcC\\n' > /etc/deploy.key\n"
        "RUN rm -r /root/.aws /etc/deploy.key\n"
        "COPY host-resolv.conf /etc/resolv.conf\n"
    )
    context = tmp_path / "context"
    context.mkdir()
    (context / "host-resolv.conf").write_text("nameserver 10.11.12.13\nsearch build.example\n")
    ref = docker.build_image(dockerfile, _tag("secret"), secrets={"leak": secret_file}, context=context)
    wrong_images.append(ref)
    final = docker.docker(
        "run", "--rm", *docker.platform_args(ref), "--network", "none", "--entrypoint", "sh", ref, "-c",
        "ls /root/leaked.pem 2>&1 || true"
    )
    assert "No such file" in final, "the leaked copy must be gone from the final filesystem"

    scan = saved_layers.scan_saved_image(ref, [secret], skip_blobs=layer_scan.layers if parent == image.ref else ())
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


def test_negative_no_runtime_toolchain(image: docker.ImageInfo, wrong_images: list[str], slowdown: float) -> None:
    """An image without the run-time toolchain (as every runtime image was before it had one): each of the
    run-time paths fails, directly and through the test file, and each passes on the image itself."""
    if not layers.layer_applies("runtime", image.layer or "base"):
        pytest.skip(f"a {image.layer} image carries no runtime layer")
    from tests.image.runtime.test_toolchain import run_paths
    from tests.image.utils import runtime_paths

    ref = docker.build_image(f"FROM {image.ref}\n{TOOLCHAIN_REMOVED}", _tag("toolchain"))
    wrong_images.append(ref)
    with probing.container_host(ref) as host:
        results = run_paths(host.run, list(runtime_paths.PATHS), slowdown)
    passed = sorted(name for name, got in results.items() if got["ok"])
    assert not passed, f"these run-time paths still work without the toolchain: {passed}"
    rc, failed, output = _failed_tests(ref, "test_runtime_toolchain and not negative")
    expected = {f"test_runtime_toolchain[{name}]" for name in runtime_paths.PATHS}
    assert rc == 1 and expected <= failed, f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}"


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


def _app_image(image: docker.ImageInfo) -> None:
    if image.layer != "app" or image.label("verl") in (None, "none"):
        pytest.skip(f"a {image.layer} image without verl: the app checks do not apply")


def test_negative_app_checks_fail_on_a_broken_verl_image(image: docker.ImageInfo, wrong_images: list[str]) -> None:
    """Every check of what a verl user needs fails on an app image that breaks it, each for its own defect."""
    _app_image(image)
    ref = docker.build_image(f"FROM {image.ref}\n{APP_BROKEN}", _tag("app"))
    wrong_images.append(ref)
    names = sorted({name.split("[")[0] for name in APP_CHECKS})
    rc, failed, output = _failed_tests(ref, " or ".join(names))
    missing = {name: why for name, why in APP_CHECKS.items() if name not in failed}
    assert rc == 1 and not missing, f"exit {rc}; these passed although {missing}:\n{output[-3000:]}"


def test_negative_verl_finds_no_megatron_core(image: docker.ImageInfo, wrong_images: list[str]) -> None:
    """verl's own find_spec("megatron.core") check fails where a `megatron` package without `core` shadows it."""
    _app_image(image)
    ref = docker.build_image(f"FROM {image.ref}\n{SHADOWED_MEGATRON}", _tag("shadow"))
    wrong_images.append(ref)
    rc, failed, output = _failed_tests(ref, "test_verl_finds_megatron_core")
    assert rc == 1 and "test_verl_finds_megatron_core" in failed, (
        f"exit {rc}, failed {sorted(failed)}:\n{output[-3000:]}")
