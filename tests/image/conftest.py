"""Image tests: `pytest tests/image --image TAG` (or `make test-image IMAGE=TAG`).

One container is started from the image for the whole session and always removed. What to expect
comes from the image's labels (`docker image inspect`) and env/stacks.json. Tests live in one folder
per layer (base/, kernels/, runtime/, app/); the image's io.mcore-images.layer label decides which
folders apply: a runtime image runs the base, kernels and runtime tests (docker-stacks' pattern).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from mcore_images.catalogue import platforms
from mcore_images.catalogue.stacks import LAYERS, Stack
from mcore_images.image_build.bake import SYSTEM_CA
from mcore_images.launch import emulation
from tests.image.shared_checks import archs, hygiene
from tests.image.utils import docker, layers, negatives, probing, saved_layers


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcore-images image tests")
    group.addoption(
        "--image",
        metavar="TAG",
        default=None,
        help="the image to test (a local tag or id); without it the image tests are skipped",
    )
    group.addoption(
        "--secret-file",
        metavar="PATH",
        action="append",
        default=None,
        help="a file the build received as a secret, to look for in every layer (repeatable; "
        "default: $CA_BUNDLE or the system CA bundle, as `make build` passes it, "
        "and $PIP_INDEX_URL_FILE when set)",
    )
    group.addoption(
        "--base-image",
        metavar="TAG",
        default=None,
        help="the base-layer image to compare torch with (default: mcore-images:base-<stack>)",
    )


def _image_info(config: pytest.Config) -> docker.ImageInfo | None:
    """Inspect the image once per session; a wrong --image ends the run with one line, before any test."""
    ref = config.getoption("--image")
    if not ref:
        return None
    cached = getattr(config, "_mcore_image", None)
    if cached is not None:
        return cached
    if not shutil.which("docker"):
        raise pytest.UsageError("docker is not installed; run `make docker-engine` first")
    if not docker.image_exists(ref):
        raise pytest.UsageError(
            f"image '{ref}' is not in the local image store; build it (`make build`) "
            "or `docker pull` it, then pass its tag to --image"
        )
    info = docker.inspect_image(ref)
    if info.layer not in LAYERS:
        raise pytest.UsageError(
            f"image '{ref}' has no valid io.mcore-images.layer label ({info.layer!r}): the image tests "
            "read what to expect from the labels docker-bake.json sets; test an mcore-images image "
            "or one built FROM it"
        )
    foreign = platforms.BY_NAME.get(info.platform)
    if foreign is not None and (problem := emulation.problem(foreign)):
        raise pytest.UsageError(f"image '{ref}' is {info.platform}: {problem}")
    pinned = docker.pin_image(info.id)
    config._mcore_pin = pinned  # type: ignore[attr-defined]
    info = dataclasses.replace(info, ref=pinned, name=ref)
    config._mcore_image = info  # type: ignore[attr-defined]
    return info


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{negatives.MARK}(NEGATIVE, ...): the negative images a test builds on --image "
                            "(tests/image/utils/negatives.py), built together once per session")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The negatives the selected tests name: built in one group when the first of them is asked for."""
    session.config._mcore_negatives = negatives.marked(session.items)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    group = getattr(config, "_mcore_negative_images", None)
    if group is not None and group.tags:
        terminalreporter.write_line(f"negative images: {', '.join(sorted(group.tags))} built in one bake call in "
                                    f"{group.seconds} s")


def pytest_unconfigure(config: pytest.Config) -> None:
    pinned = getattr(config, "_mcore_pin", None)
    if pinned:
        docker.unpin_image(pinned)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    info = _image_info(config)
    for item in items:
        try:
            rel = item.path.relative_to(here)
        except ValueError:
            continue  # not an image test
        if info is None:
            item.add_marker(
                pytest.mark.skip(reason="no --image given: run `pytest tests/image --image TAG` (CI always passes one)")
            )
            continue
        folder = rel.parts[0]
        if folder in LAYERS and not layers.layer_applies(folder, info.layer or ""):
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{folder} tests apply to {folder} images and their children; {info.shown} is a "
                    f"{info.layer} image"
                )
            )


def pytest_report_collectionfinish(config: pytest.Config, start_path: Path, items: list[pytest.Item]) -> list[str]:
    """After collection (pytest_report_header is not called for a conftest below the rootdir)."""
    info = getattr(config, "_mcore_image", None)
    if info is None:
        return []
    return [
        f"image: {info.shown} = {info.id[:19]} (pinned as {info.ref} for the session), layer {info.layer}, "
        f"stack {info.stack_name}, {info.content_size / docker.GB:.2f} GB content, "
        f"{info.size / docker.GB:.2f} GB unpacked"
    ]


# ---------------------------------------------------------------------------------------------
# Fixtures.


@pytest.fixture(scope="session")
def image(pytestconfig: pytest.Config) -> docker.ImageInfo:
    info = _image_info(pytestconfig)
    if info is None:
        pytest.skip("no --image given")
    return info


@pytest.fixture(scope="session")
def labels(image: docker.ImageInfo) -> dict[str, str]:
    return image.labels


@pytest.fixture(scope="session")
def stack(image: docker.ImageInfo) -> Stack:
    found = layers.stack_for(image)
    if found is None:
        pytest.skip(
            f"stack '{image.stack_name}' (label io.mcore-images.stack) is not in env/stacks.json of "
            "this checkout; check out the revision the image was built from"
        )
    return found


@pytest.fixture(scope="session")
def container(image: docker.ImageInfo) -> Iterator[str]:
    """One container for the session from `docker run -d --entrypoint sleep IMAGE`, always removed."""
    cid = docker.start_container(image.ref)
    try:
        yield cid
    finally:
        docker.remove_container(cid)


@pytest.fixture(scope="session")
def host(container: str) -> Any:
    return testinfra.get_host(f"docker://{container}")


@pytest.fixture(scope="session")
def slowdown(image: docker.ImageInfo) -> float:
    """What a test's time limit is multiplied by: 1 for an image of this machine's platform, emulation.SLOWDOWN for
    one that runs under QEMU (an arm64 image on an x86_64 machine)."""
    return emulation.slowdown(platforms.BY_NAME.get(image.platform))


@pytest.fixture(scope="session")
def facts(host: Any) -> dict[str, Any]:
    """Versions, install records, import results and environment, from one probe run in the image."""
    return probing.run_probe(host.run)


@pytest.fixture(scope="session")
def fs_trees(host: Any) -> list[str]:
    return list(docker.iter_lines(host.run(hygiene.FIND_TREES).stdout))


@pytest.fixture(scope="session")
def secrets(pytestconfig: pytest.Config, host: Any) -> list[saved_layers.Secret]:
    paths = pytestconfig.getoption("--secret-file")
    if not paths:
        paths = [os.environ.get("CA_BUNDLE") or str(SYSTEM_CA)]
        if os.environ.get("PIP_INDEX_URL_FILE"):
            paths.append(os.environ["PIP_INDEX_URL_FILE"])
    files = [Path(p) for p in paths if p and Path(p).is_file()]
    if not files:
        pytest.fail(f"no secret file to look for ({', '.join(paths)} missing); pass --secret-file PATH")
    image_roots = host.run("find /usr/share/ca-certificates -name '*.crt' -type f -exec cat {} + 2>/dev/null")
    public = [*saved_layers.public_roots_host(), image_roots.stdout.encode()]
    return [saved_layers.make_secret(f, public) for f in files]


@pytest.fixture(scope="session")
def layer_scan(image: docker.ImageInfo, secrets: list[saved_layers.Secret]) -> saved_layers.LayerScan:
    """One pass over every layer (read from the engine's content store): secret content in any layer, and which
    layers touch torch."""
    return saved_layers.scan_image(image.ref, secrets, watch={"torch": saved_layers.TORCH_PATHS})


@pytest.fixture(scope="session")
def kernel_binaries(host: Any) -> list[dict[str, Any]]:
    """Every kernel binary in the image and the architectures it serves. Here, not in the test file that uses it:
    the negative group is built on the first request, which may come from any test file, and a negative's plan
    (test_negative.py's ARCH_UNSERVED) asks for it."""
    return archs.scan(host.run)


@pytest.fixture(scope="session")
def negative_images(request: pytest.FixtureRequest, image: docker.ImageInfo) -> Iterator[negatives.NegativeImages]:
    """The negative images of the selected tests, built on the pinned image in one bake call on the first request
    and removed at the end of the session."""
    wanted = getattr(request.config, "_mcore_negatives", [])
    group = negatives.NegativeImages(negatives.Under(image, request.getfixturevalue), wanted)
    request.config._mcore_negative_images = group  # type: ignore[attr-defined]
    try:
        yield group
    finally:
        group.remove()
