"""What uv resolves for a stack, and what its answer says."""

from __future__ import annotations

from mcore_images.resolve import lock_files, uv_compile


def test_ngc_lock_drops_what_the_base_provides() -> None:
    text = ("numpy==2.0 \\\n    --hash=sha256:aa\ntorch==2.11.0 \\\n    --hash=sha256:bb\n"
            "nvidia-nccl-cu13==2 \\\n    --hash=sha256:cc\n")
    kept = lock_files.pins(uv_compile.drop_base_provided(text))
    assert kept == {"numpy": "2.0"}


def test_uvs_reason_is_its_conclusion_not_the_hint_after_it() -> None:
    stderr = ("  × No solution found when resolving dependencies:\n"
              "  ╰─▶ Because a==1 depends on b>2 and you require b<2, we can conclude that your requirements are "
              "unsatisfiable.\n\nhint: You require CPython 3.12 (`cp312`), but we only found wheels for x: `cp311`\n")
    assert uv_compile.uv_reason(stderr).endswith("we can conclude that your requirements are unsatisfiable.")
    assert uv_compile.uv_reason("error: no such index\n") == "error: no such index"
    assert uv_compile.uv_reason("") == "no output"
