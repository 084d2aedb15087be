"""README's "Get an image", the one place that says where images are published and with which key, held to what
the release workflow and the local release really use: the registry and key variables the workflows read, the
image `make release-local` promotes and the key it signs with, and the way to install the tool when PyPI has none."""

from __future__ import annotations

import re
import shlex

from mcore_images.catalogue.stacks import load_stacks
from mcore_images.release import registry
from tests.unit.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    heading = registry.PUBLISHER.split('"')[1]
    assert f"\n## {heading}\n" in text, f"README.md has no section {heading!r}, which errors point users to"
    start = text.index(f"\n## {heading}\n")
    return text[start:text.index("\n## ", start + 1)]


def default(script: str, variable: str) -> str:
    """The default a shell script gives ``variable`` (``NAME="${VARIABLE:-default}"``)."""
    found = re.search(rf'"\$\{{{variable}:-([^}}]+)\}}"', script)
    assert found, variable
    return found.group(1)


def test_it_names_the_registry_and_key_the_release_workflow_uses() -> None:
    """Before: the README's lines named REGISTRY/… and cosign.pub, and said nowhere that nothing is published."""
    said = section()
    assert 'registry="${REGISTRY:-ghcr.io/${GITHUB_REPOSITORY_OWNER,,}}"' in (WORKFLOWS / "build.yml").read_text()
    promote = (WORKFLOWS / "promote.yml").read_text()
    assert "vars.REGISTRY" in promote and "vars.COSIGN_PUBLIC_KEY" in promote
    assert "repository variable `REGISTRY` (default\n`ghcr.io/<repository owner>`)" in said
    assert "`COSIGN_PUBLIC_KEY`" in said and "No release has been published yet" in said


def test_its_local_release_is_what_release_local_promotes_and_signs() -> None:
    said = section()
    block = re.search(r"```bash\n(.*?)```", said, re.S)
    assert block, "no commands in the section"
    lines = block.group(1).splitlines()
    assert lines[0] == "make setup docker-engine release-local"
    verify = shlex.split(lines[1])
    script = (ROOT / ".ci" / "registry.sh").read_text()
    host = f"127.0.0.1:{default(script, 'MCORE_REGISTRY_PORT')}"
    (ci,) = [s for s in load_stacks().values() if "ci" in s.groups]  # what `release-local` builds by default
    assert verify[:3] == ["mcore-images", "verify", f"{host}/mcore-images:app-{ci.name}"], verify
    key = f"{default(script, 'MCORE_REGISTRY_STATE')}/release/keys/cosign.pub"
    assert verify[verify.index("--key") + 1] == key and verify[-2:] == ["--policy", "ci"]
    release_local = (ROOT / ".ci" / "release-local.sh").read_text()
    assert 'GROUP="${GROUP:-ci}"' in release_local and 'KEYS="$MCORE_REGISTRY_RELEASE/keys"' in release_local
    assert lines[2].startswith(f"docker pull {host}/mcore-images@sha256:")


def test_it_says_pypi_has_no_release_and_how_to_install_the_wheel() -> None:
    said = section()
    assert "not on PyPI" in said and "pip wheel --no-deps -w dist . && pip install dist/mcore_images-*.whl" in said
    assert "pip install mcore-images " not in (ROOT / "README.md").read_text().replace("`pip install mcore-images`", "")


def test_no_message_or_page_sends_a_user_to_pypi_for_the_tool() -> None:
    """Before: the smoke wrapper said `pip install mcore-images` and the report `pip install 'mcore-images[report]'`,
    which find nothing: the tool is installed from a checkout's wheel."""
    pypi = re.compile(r"pip install '?mcore[-_]images(\[[a-z]+\])?'?(?!`? finds nothing)")
    files = [*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in files
             for match in pypi.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found
