"""megatron-core itself: found the way verl looks for it, new enough, importable, and only once."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mcore_images.catalogue.upstream import MCORE_TORCH, VERL_MCORE
from mcore_images.catalogue.versions import at_least
from mcore_images.doctor import probes
from mcore_images.doctor.model import Context, Outcome, Status, check, ok, skip, trip


def import_fix(error: str, package: str = "megatron-core") -> str:
    """Name the fix for the import errors we have met; `package` is what failed to import."""
    if probes.not_retried(error):
        return f"fix the import named there first (its own check says how); {package} depends on it"
    if "No module named 'triton'" in error:
        return "pip install triton (megatron-core imports it unconditionally)"
    if "No module named 'torch'" in error:
        return f"install torch first (a CUDA build, >= {MCORE_TORCH})"
    if "transformer-engine" in error or "transformer_engine" in error or "TE core package" in error:
        return (
            "a half-installed Transformer Engine raises on import and takes this import down with it: "
            "complete it (see te.import) or pip uninstall it"
        )
    if "undefined symbol" in error:
        return "a compiled extension was built against another torch: rebuild it against the installed torch"
    if missing := re.search(r"No module named '([\w]+)", error):
        return f"pip install {missing.group(1)} ({package} needs it)"
    return f"reinstall {package} in this environment: pip install --force-reinstall {package}"


def too_old(version: str, where: Path) -> Outcome:
    return trip(
        f"megatron-core {version} at {where} is older than {VERL_MCORE} (verl asserts >= {VERL_MCORE})",
        f"pip install -U 'megatron-core>={VERL_MCORE}'",
        version=version,
        path=where,
    )


@check(
    "megatron.core",
    Status.FAIL,
    f"pip install 'megatron-core>={VERL_MCORE}', or put a Megatron-LM checkout on PYTHONPATH",
    isolated=True,
)
def megatron_core(ctx: Context) -> Outcome:
    """megatron.core is found (importlib.util.find_spec, as verl checks), is a release verl runs on
    (catalogue.upstream.VERL_MCORE), and imports."""
    where = probes.locate("megatron.core")
    if where is None:
        return trip("megatron.core not found: importlib.util.find_spec('megatron.core') is None")
    version = probes.mcore_version(where)
    if version and not at_least(version, VERL_MCORE):  # read before importing: an old copy may not import
        return too_old(version, where)
    if error := probes.import_error(ctx, "megatron.core"):
        return trip(
            f"megatron-core {version or '(no version)'} found at {where} but `import megatron.core` fails: "
            f"{error}",
            import_fix(error),
            version=version,
            path=where,
        )
    if version is None:
        version = probes.module_version(probes.imported(ctx, "megatron.core"))
        if version is None:
            return trip(
                f"megatron/core at {where} imports but has no version (no package_info.py, no __version__, "
                "no megatron-core dist-info for this copy): a partial or foreign copy, not verifiably "
                f">= {VERL_MCORE}",
                f"pip install --force-reinstall 'megatron-core>={VERL_MCORE}', or use a complete Megatron-LM "
                "checkout (it has megatron/core/package_info.py)",
                path=where,
            )
        if not at_least(version, VERL_MCORE):
            return too_old(version, where)
    return ok(f"megatron-core {version} imports from {where}", version=version, path=where)


def megatron_copies(paths: list[str]) -> list[Path]:
    """Distinct megatron/core packages reachable from sys.path, in the order Python searches them."""
    copies: list[Path] = []
    for entry in paths:
        candidate = Path(entry or ".") / "megatron" / "core"
        if (candidate / "__init__.py").is_file() and candidate.resolve() not in [c.resolve() for c in copies]:
            copies.append(candidate)
    return copies


CHECKOUT_VAR = "MEGATRON_LM_CHECKOUT"
"""Names a Megatron-LM checkout that is meant to shadow the image's megatron-core (docs/megatron-lm.md)."""


def declared_checkout(ctx: Context, copies: list[Path], versions: dict[str, str]) -> Outcome | None:
    """The verdict when $MEGATRON_LM_CHECKOUT declares the checkout in front; None when nothing is declared."""
    declared = ctx.environ.get(CHECKOUT_VAR, "")
    if not declared:
        return None
    root = Path(declared)
    ours = [c for c in copies if c.resolve().is_relative_to(root.resolve())]
    if not ours:
        return trip(
            f"${CHECKOUT_VAR}={declared} but no megatron/core on sys.path is inside it",
            f"put the checkout on PYTHONPATH (PYTHONPATH={declared}), or unset {CHECKOUT_VAR}",
            copies=versions,
        )
    if ours[0] != copies[0]:
        return trip(
            f"${CHECKOUT_VAR}={declared} is on sys.path behind {copies[0]}, which is what imports",
            f"put {declared} first on PYTHONPATH",
            copies=versions,
        )
    mine, others = versions[str(copies[0])], [versions[str(c)] for c in copies[1:]]
    differ = [v for v in others if v != mine]
    if differ:
        return trip(
            f"the declared Megatron-LM checkout {declared} is megatron-core {mine}, the image's is {differ[0]}: "
            "its training scripts then run against a megatron-core the image was not certified with",
            f"check out the Megatron-LM release of megatron-core {differ[0]} (git checkout core_v{differ[0]}), "
            "or use an image of your checkout's version",
            copies=versions,
        )
    return ok(f"megatron/core from the declared Megatron-LM checkout {declared} ({mine}) is in front, as "
              f"${CHECKOUT_VAR} says, over the image's same release", copies=versions)


@check(
    "megatron.shadow",
    Status.FAIL,
    "keep one copy: remove the Megatron-LM checkout from PYTHONPATH, or pip uninstall megatron-core; a "
    f"checkout meant to be in front is declared with {CHECKOUT_VAR}",
)
def megatron_shadow(ctx: Context) -> Outcome:
    """Only one megatron/core on sys.path: a PYTHONPATH checkout silently shadows the pip copy (verl #82),
    unless $MEGATRON_LM_CHECKOUT declares it (then it must be in front and of the same release)."""
    copies = megatron_copies(list(sys.path))
    if not copies:
        return skip("no megatron/core directory on sys.path")
    versions = {str(c): probes.mcore_version(c) or "?" for c in copies}
    if (declared := declared_checkout(ctx, copies, versions)) is not None:
        return declared
    if len(copies) > 1:
        pythonpath = ctx.environ.get("PYTHONPATH", "")
        shadows = ", ".join(f"{c} ({versions[str(c)]})" for c in copies[1:])
        return trip(
            f"{len(copies)} copies of megatron/core: {copies[0]} ({versions[str(copies[0])]}) is "
            f"imported and hides {shadows}",
            copies=versions,
            PYTHONPATH=pythonpath,
        )
    return ok(f"one megatron/core: {copies[0]}", copies=versions)
