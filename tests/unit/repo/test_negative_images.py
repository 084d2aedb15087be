"""The image tests' negative images (tests/image/utils/negatives.py) planned without an engine: the negatives the
selected tests name, each once; one bake definition for all of them on one shared context, FROM the pinned image,
with their secrets and files; a defect that does not apply skips its test and is not built."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.image.utils import docker, negatives
from tests.image.utils.negatives import Negative, NegativeImages, Under

IMAGE = docker.ImageInfo(ref="mcore-images-test:pin-0123", id="sha256:" + "0" * 64, labels={}, env={}, size=0,
                         content_size=0, layers=(), name="mcore-images:runtime-debian")
HOOK = Negative("startup-hook", "RUN touch /hook\n")
SECRET = Negative("secret", "RUN --mount=type=secret,id=leak cp /run/secrets/leak /x\nCOPY r.conf /etc/r.conf\n",
                  parent=lambda _: "mcore-images/base-debian:trixie", secrets={"leak": b"token"},
                  files={"r.conf": "nameserver 10.1.1.1\n"})
APP_ONLY = Negative("app", "RUN pip uninstall -y ray\n", skip=lambda u: f"a {u.image.layer} image")


class Item:
    def __init__(self, *marked: Negative, skipped: bool = False) -> None:
        self.marked, self.skipped = marked, skipped

    def get_closest_marker(self, name: str) -> Any:
        return object() if name == "skip" and self.skipped else None

    def iter_markers(self, name: str) -> list[Any]:
        return [SimpleNamespace(args=self.marked)] if name == negatives.MARK else []


def test_the_selected_tests_negatives_each_once_and_none_of_a_skipped_test() -> None:
    assert negatives.marked([Item(HOOK, SECRET), Item(HOOK), Item(APP_ONLY, skipped=True)]) == [HOOK, SECRET]
    with pytest.raises(ValueError, match="two negatives are named startup-hook"):
        negatives.marked([Item(HOOK), Item(Negative("startup-hook", "RUN true\n"))])
    with pytest.raises(ValueError, match="lower-case letters"):
        Negative("Bad Name", "RUN true\n")


def test_one_bake_definition_for_every_negative_that_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def bake(cmd: list[str], **kwargs: Any) -> Any:
        calls.append(cmd)
        definition = json.loads(Path(cmd[cmd.index("-f") + 1]).read_text())
        bake.seen = definition  # type: ignore[attr-defined]
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(negatives.subprocess, "run", bake)
    monkeypatch.setattr(docker, "platform_args", lambda ref: [])
    removed: list[str] = []
    monkeypatch.setattr(docker, "remove_image", removed.append)
    group = NegativeImages(Under(IMAGE, lambda name: None), [HOOK, SECRET, APP_ONLY])
    with pytest.raises(pytest.skip.Exception, match="a None image"):
        group.ref(APP_ONLY)
    hook = group.ref(HOOK)
    assert group.ref(SECRET).startswith("mcore-images-negative:secret-") and hook.startswith(
        "mcore-images-negative:startup-hook-")
    assert len(calls) == 1 and calls[0][:3] == ["docker", "buildx", "bake"]  # one call for the group
    targets = bake.seen["target"]  # type: ignore[attr-defined]
    assert sorted(targets) == ["secret", "startup-hook"] and bake.seen["group"]["default"]["targets"] == sorted(targets)
    assert targets["startup-hook"]["dockerfile-inline"] == "FROM mcore-images-test:pin-0123\nRUN touch /hook\n"
    assert targets["secret"]["dockerfile-inline"].startswith("FROM mcore-images/base-debian:trixie\n")
    assert {t["context"] for t in targets.values()} == {"context"} and all(t["no-cache"] for t in targets.values())
    source = targets["secret"]["secret"][0].split("src=")[1]
    assert Path(source).read_bytes() == b"token" and (group.folder / "context" / "r.conf").is_file()
    with pytest.raises(AssertionError, match=r"not named by the test's @pytest\.mark\.negatives"):
        group.ref(Negative("other", "RUN true\n"))
    group.remove()
    assert sorted(removed) == sorted([hook, group.tags["secret"]]) and not group.folder.exists()
