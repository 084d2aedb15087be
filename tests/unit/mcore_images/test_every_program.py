"""Every program the tool ships, walked, so that the next one cannot forget the rules the others keep: each console
command (`mcore-images COMMAND`) and each `python -m` program found under src/mcore_images.

- Every option or argument that names a path is in OPTIONS, as an input or an output; a new program, or a new option
  with a path's metavar (FILE, DIR, PATH, KEY, …) or a path's name, fails here until it is.
- An output pointed at a user's file is refused in one line with exit 2, the file byte for byte as it was; pointed
  beside a user's ``NAME.tmp``, it leaves that file as it was and nothing else beside the target.
- An input pointed at /dev/zero (a device that never ends a read) or at a FIFO (which blocks a read until someone
  writes) is refused in one line with exit 2, at once: before, kube-manifest read /dev/zero until the kernel's
  out-of-memory killer came, and a FIFO hung it.
- Every parser gives one line for a bad option, and refuses an empty value (an unset shell variable) in one line.

Each program runs as a process of its own, without torch (hidden, whatever this machine has), in a temporary folder;
no real system file is ever given to a program that writes.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mcore_images import cli
from mcore_images.command import Parser, configure
from mcore_images.options import OneLineParser
from tests.support.host import without_modules
from tests.unit.conftest import PYTHONPATH, ROOT

SRC = ROOT / "src"
DIGEST = "sha256:" + "0" * 64
IMAGE = f"registry.invalid/mcore-images@{DIGEST}"
PUBLIC_KEY = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
PRIVATE_KEY = ("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n"
               "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")


@dataclass(frozen=True)
class Use:
    """How an option that names a path is used: ``kind`` is what it is (an input file, folder or either; an output
    file or folder) and ``args`` the rest of a command line that reaches it (``{pub}``, ``{key}``, ``{empty}``,
    ``{model}``, ``{batch}`` and ``{tmp}`` filled in per test)."""

    kind: str
    args: tuple[str, ...] = ()
    positional: bool = False
    note: str = ""


IN_FILE, IN_FOLDER, IN_PATH, OUT_FILE, OUT_FOLDER = "in-file", "in-folder", "in-path", "out-file", "out-folder"
DRY = ("--", "--dry-run")

OPTIONS: dict[tuple[str, str], Use] = {
    # the console command, `mcore-images COMMAND`
    ("mcore-images doctor", "--hf-config"): Use(IN_PATH, ("--only", "bridge.hf-config")),
    ("mcore-images smoke", "--out"): Use(OUT_FOLDER, DRY),
    ("mcore-images bridge", "--out"): Use(OUT_FOLDER, DRY),
    ("mcore-images bridge", "--certificate"): Use(IN_FOLDER, DRY),
    ("mcore-images bench", "--out"): Use(OUT_FOLDER, DRY),
    ("mcore-images bench", "--certificate"): Use(IN_FOLDER, DRY),
    ("mcore-images run", "--out"): Use(OUT_FOLDER, ("mcore-images:runtime-debian", "--print"),
                                       note="the folder mounted at /out; the programs in it claim their own"),
    ("mcore-images certify", "--out"): Use(OUT_FOLDER, ("registry.invalid/none:1",)),
    ("mcore-images attach", "--certificate"): Use(IN_FOLDER, (IMAGE, "--key", "{key}")),
    ("mcore-images attach", "--key"): Use(IN_FILE, (IMAGE, "--certificate", "{empty}")),
    ("mcore-images promote", "--key"): Use(IN_FILE, (IMAGE, "--stack", "debian")),
    ("mcore-images promote", "--policy-file"): Use(IN_FILE, (IMAGE, "--stack", "debian", "--key", "{pub}")),
    ("mcore-images promote", "--sign-key"): Use(IN_FILE, (IMAGE, "--stack", "debian", "--key", "{pub}")),
    ("mcore-images verify", "--key"): Use(IN_FILE, (IMAGE,)),
    ("mcore-images verify", "--policy-file"): Use(IN_FILE, (IMAGE, "--key", "{pub}")),
    ("mcore-images ledger", "--key"): Use(IN_FILE, ("registry.invalid/mcore-images",)),
    ("mcore-images ledger", "--refresh"): Use(IN_FILE, ("registry.invalid/mcore-images", "--key", "{pub}")),
    ("mcore-images ledger", "--start-over"): Use(IN_FILE, ("registry.invalid/mcore-images", "--key", "{pub}")),
    ("mcore-images matrix", "--candidates"): Use(IN_FOLDER, ("--promotions",)),
    ("mcore-images index", "--candidates"): Use(IN_FOLDER, ("--sha", "0123456"),
                                                note="also where index.json goes: test_platform_index holds that"),
    ("mcore-images build-timing", "--out"): Use(OUT_FILE, ("--stack", "no-such-stack", "--scenarios", "warm")),
    ("mcore-images report", "inputs"): Use(IN_PATH, ("--out", "{tmp}/site"), positional=True),
    ("mcore-images report", "--out"): Use(OUT_FOLDER, ()),
    ("mcore-images report", "--build-timings"): Use(IN_FILE, ("--out", "{tmp}/site")),
    ("mcore-images kube-manifest", "--job"): Use(IN_FILE, ("registry.invalid/mcore-images:1",)),
    # the `python -m` programs (those that run inside the images among them)
    ("mcore_images.doctor", "--hf-config"): Use(IN_PATH, ("--only", "bridge.hf-config")),
    ("mcore_images.smoke", "--out"): Use(OUT_FOLDER, ("--cpu", "--nproc", "1")),
    ("mcore_images.smoke", "--checkpoint-dir"): Use(OUT_FOLDER, ("--cpu", "--nproc", "1"),
                                                    note="a working folder: each round trip makes its own inside"),
    ("mcore_images.smoke", "--timings"): Use(IN_FILE, ("--dry-run",)),
    ("mcore_images.smoke.attention", "--out"): Use(OUT_FILE, ("--cpu",)),
    ("mcore_images.smoke.attention.merge", "sections"): Use(IN_FILE, (), positional=True),
    ("mcore_images.smoke.bench", "--out"): Use(OUT_FOLDER, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bench", "--certificate"): Use(IN_FOLDER, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bench", "--baselines"): Use(IN_FILE, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bench", "--write-baselines"): Use(OUT_FILE, ("--cpu", "--dry-run"),
                                                           note="a baselines file is merged into, nothing else"),
    ("mcore_images.smoke.bridge", "--hf-config"): Use(IN_PATH, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bridge", "--out"): Use(OUT_FOLDER, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bridge", "--certificate"): Use(IN_FOLDER, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.bridge", "--keep"): Use(OUT_FOLDER, ("--cpu", "--dry-run")),
    ("mcore_images.smoke.verl_step", "--out"): Use(OUT_FOLDER, ("--dry-run",)),
    ("mcore_images.smoke.verl_step", "--certificate"): Use(IN_FOLDER, ("--dry-run",)),
    ("mcore_images.smoke.verl_step", "--keep"): Use(OUT_FOLDER, ("--dry-run",)),
    ("mcore_images.smoke.verl_step.engine_case", "--model"): Use(
        IN_FOLDER, ("--backend", "fused", "--bridge", "mbridge", "--batch", "{batch}", "--out", "{tmp}/record.json")),
    ("mcore_images.smoke.verl_step.engine_case", "--batch"): Use(
        IN_FILE, ("--backend", "fused", "--bridge", "mbridge", "--model", "{model}", "--out", "{tmp}/record.json")),
    ("mcore_images.smoke.verl_step.engine_case", "--out"): Use(
        OUT_FILE, ("--backend", "fused", "--bridge", "mbridge", "--model", "{model}", "--batch", "{batch}")),
    ("mcore_images.smoke.projection", "certificate"): Use(IN_FILE, (), positional=True),
    ("mcore_images.smoke.bench.goals", "benches"): Use(IN_FILE, (), positional=True),
    ("mcore_images.smoke.verl_step.trainer_imports", "--wheels"): Use(IN_FOLDER, ()),
}
"""Every option of every program that names a path, and how the walk reaches it."""


def _command_parser(module: str) -> argparse.ArgumentParser:
    command = importlib.import_module(module).COMMANDS[0]
    parser = Parser(prog=command.name) if module.endswith(".jobs") else OneLineParser(prog=command.name)
    configure(parser, command)
    return parser


def _parser_of(module: str, attribute: str = "build_parser") -> Callable[[], argparse.ArgumentParser]:
    return lambda: getattr(importlib.import_module(module), attribute)()


PARSERS: dict[str, Callable[[], argparse.ArgumentParser] | None] = {
    "mcore_images": None,  # the console command, walked command by command
    "mcore_images.doctor": lambda: _command_parser("mcore_images.doctor.command"),
    "mcore_images.image_build.jobs": lambda: _command_parser("mcore_images.image_build.jobs"),
    "mcore_images.smoke": _parser_of("mcore_images.smoke.args"),
    "mcore_images.smoke.attention": _parser_of("mcore_images.smoke.attention.cli"),
    "mcore_images.smoke.attention.merge": _parser_of("mcore_images.smoke.attention.merge"),
    "mcore_images.smoke.bench": _parser_of("mcore_images.smoke.bench.cli"),
    "mcore_images.smoke.bridge": _parser_of("mcore_images.smoke.bridge.cli"),
    "mcore_images.smoke.projection": _parser_of("mcore_images.smoke.projection"),
    "mcore_images.smoke.verl_step": _parser_of("mcore_images.smoke.verl_step.cli"),
    "mcore_images.smoke.verl_step.engine_case": _parser_of("mcore_images.smoke.verl_step.engine_case"),
    "mcore_images.smoke.verl_step.trainer_imports": _parser_of("mcore_images.smoke.verl_step.trainer_imports"),
    "mcore_images.smoke.bench.goals": _parser_of("mcore_images.smoke.bench.goals"),
    "mcore_images.smoke.wgrad_fusion": _parser_of("mcore_images.smoke.wgrad_fusion.cli"),
    "mcore_images.doctor.worker": None,  # one JSON request from the doctor, no options
    "mcore_images.doctor.fatbin": None,  # takes no arguments
    "mcore_images.catalogue.constraints": None,  # takes no arguments
}
"""Every `python -m` program, and its parser (None: it takes no option)."""
PLANNER = "mcore_images.image_build.jobs"
"""The one program on command.Parser: the build's compile steps run it, and its files stay as they are so that an
edit elsewhere keeps them cached (the Dockerfile's planner stage)."""


def python_m_programs() -> set[str]:
    """Every module `python -m` runs: a package with __main__.py, or a module with a ``__main__`` block."""
    found = set()
    for path in (SRC / "mcore_images").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if path.name == "__main__.py":
            found.add(name.removesuffix(".__main__"))
        elif any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
                 for node in ast.parse(path.read_text()).body):
            found.add(name)
    return found


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every program's parser, by its name in OPTIONS."""
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = {f"mcore-images {name}": parser for name, parser in sub.choices.items()}
    out.update({name: make() for name, make in PARSERS.items() if make is not None})
    return out


PATH_METAVARS = {"FILE", "DIR", "PATH", "KEY", "SIGN_KEY", "INPUT", "CERTIFICATE"}
PATH_WORDS = re.compile(r"(^|_)(out|file|dir|path|certificate|key|config|job|baselines|timings|keep|candidates|"
                        r"model|batch|inputs|sections|load|save|log)(_|$)")
NOT_PATHS = {("mcore_images.smoke.bench", "--micro-batch")}
"""Options whose names look like a path's and are not (a micro-batch size)."""


def path_options() -> set[tuple[str, str]]:
    """(program, option) of every option or argument whose metavar or name says it names a path."""
    found = set()
    for program, parser in parsers().items():
        for action in parser._actions:
            if action.nargs == 0 or isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            name = action.option_strings[-1] if action.option_strings else action.dest
            if (action.metavar in PATH_METAVARS or action.type is Path or PATH_WORDS.search(action.dest)) \
                    and (program, name) not in NOT_PATHS:
                found.add((program, name))
    return found


def test_every_python_m_program_is_walked() -> None:
    """A new `python -m` program fails here until PARSERS names its parser (or says it takes no option)."""
    assert python_m_programs() == set(PARSERS)


def test_every_option_that_names_a_path_is_an_input_or_an_output() -> None:
    """A new option that names a path fails here until OPTIONS says how it is used (and so the walk below runs it)."""
    found = path_options()
    assert found - set(OPTIONS) == set(), "classify these in OPTIONS"
    assert set(OPTIONS) - found == set(), "OPTIONS names options no parser has"


# ---------------------------------------------------------------------------------------------
# Running them


@dataclass
class Place:
    """A temporary folder with what the command lines name: a public and a private key, an empty folder, a model
    folder and a batch file (engine_case), torch hidden."""

    tmp: Path
    hidden: str = field(default="")

    def __post_init__(self) -> None:
        (self.tmp / "cosign.pub").write_text(PUBLIC_KEY)
        (self.tmp / "cosign.key").write_text(PRIVATE_KEY)
        (self.tmp / "empty").mkdir()
        (self.tmp / "model").mkdir()
        (self.tmp / "model" / "config.json").write_text("{}")
        (self.tmp / "batch.pt").write_bytes(b"not a batch")
        self.hidden = without_modules(self.tmp / "hidden", "torch")

    def fill(self, args: tuple[str, ...]) -> list[str]:
        names = {"pub": self.tmp / "cosign.pub", "key": self.tmp / "cosign.key", "empty": self.tmp / "empty",
                 "model": self.tmp / "model", "batch": self.tmp / "batch.pt", "tmp": self.tmp}
        return [a.format(**{k: str(v) for k, v in names.items()}) for a in args]

    def run(self, program: str, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """The program as a user starts it, in its own process group (killed whole if it hangs)."""
        command = ["-m", "mcore_images", *program.split()[1:]] if program.startswith("mcore-images ") \
            else ["-m", program]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(PYTHONPATH=os.pathsep.join([self.hidden, PYTHONPATH]), CUDA_VISIBLE_DEVICES="",
                   MCORE_IMAGES_STATE=str(self.tmp / "state"))
        proc = subprocess.Popen([sys.executable, *command, *argv], cwd=self.tmp, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            pytest.fail(f"{program} {' '.join(argv)} did not end within {timeout:g} s")
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return Place(tmp_path)


def argv_for(place: Place, program: str, option: str, value: str) -> list[str]:
    use = OPTIONS[(program, option)]
    given = [value] if use.positional else [option, value]
    base = place.fill(use.args)
    if "--" in base:  # what goes to the program a console command runs stays last
        cut = base.index("--")
        return [*base[:cut], *given, *base[cut:]]
    return [*given, *base]


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


INPUTS = sorted(key for key, use in OPTIONS.items() if use.kind.startswith("in"))
OUTPUTS = sorted(key for key, use in OPTIONS.items() if use.kind.startswith("out"))


@pytest.mark.parametrize(("program", "option"), INPUTS, ids=[" ".join(k) for k in INPUTS])
@pytest.mark.parametrize("what", ["/dev/zero", "a FIFO"])
def test_an_input_that_is_a_device_or_a_fifo_is_one_line_at_once(place: Place, program: str, option: str,
                                                                  what: str) -> None:
    if what == "a FIFO":
        path = place.tmp / "fifo"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    done = place.run(program, argv_for(place, program, option, str(path)))
    line = one_line(done)
    assert done.returncode == 2, done.stderr
    assert str(path) in line or path.name in line, line


@pytest.mark.parametrize(("program", "option"), OUTPUTS, ids=[" ".join(k) for k in OUTPUTS])
def test_an_output_at_a_users_file_is_refused_and_the_file_kept(place: Place, program: str, option: str) -> None:
    users = place.tmp / "mine" / "notes.json"
    users.parent.mkdir()
    users.write_bytes(b'{"mine": true, "notes": "a user\'s own file"}\n')
    before = digest(users)
    done = place.run(program, argv_for(place, program, option, str(users)))
    one_line(done)
    assert done.returncode == 2, done.stderr
    assert digest(users) == before
    assert sorted(p.name for p in users.parent.iterdir()) == ["notes.json"]


@pytest.mark.parametrize(("program", "option"), OUTPUTS, ids=[" ".join(k) for k in OUTPUTS])
def test_an_output_beside_a_users_tmp_file_leaves_it_and_nothing_else(place: Place, program: str,
                                                                      option: str) -> None:
    """Before: `python -m mcore_images.smoke.attention --out DIR/attention.json` consumed the user's
    attention.json.tmp (its fixed temporary name), and given a folder left a half-made FOLDER.tmp beside it."""
    folder = place.tmp / "here"
    folder.mkdir()
    name = "attention.json" if OPTIONS[(program, option)].kind == OUT_FILE else "out"
    users = folder / f"{name}.tmp"
    users.write_bytes(b"a user's own file, named as a temporary one\n")
    before = digest(users)
    done = place.run(program, argv_for(place, program, option, str(folder / name)))
    assert "Traceback" not in done.stderr, done.stderr
    assert digest(users) == before
    assert {p.name for p in folder.iterdir()} <= {name, users.name}, sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------------------------
# Every parser


@pytest.mark.parametrize("program", sorted(parsers()))
def test_every_parser_is_one_line_on_a_bad_option(program: str, capsys: pytest.CaptureFixture) -> None:
    parser = parsers()[program]
    if program != PLANNER:
        assert isinstance(parser, OneLineParser), f"{program}: build its parser with options.OneLineParser"
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["--no-such-option"])
    assert ended.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def value_options() -> list[tuple[str, str]]:
    return sorted((program, action.option_strings[-1] if action.option_strings else action.dest)
                  for program, parser in parsers().items() if program != PLANNER for action in parser._actions
                  if action.nargs != 0 and not isinstance(action, argparse._HelpAction | argparse._SubParsersAction))


@pytest.mark.parametrize(("program", "option"), value_options(), ids=[" ".join(k) for k in value_options()])
def test_an_empty_value_is_refused_in_one_line(program: str, option: str, capsys: pytest.CaptureFixture) -> None:
    """Before: `ledger … --refresh ''` (an unset shell variable) read the ledger instead, `--adopt ''` adopted what
    the registry holds, `--key ''` skipped the key check, `run --out ''` mounted the current folder."""
    parser = parsers()[program]
    with pytest.raises(SystemExit) as ended:
        parser.parse_args([option, ""] if option.startswith("-") else [""])
    err = capsys.readouterr().err.strip()
    assert ended.value.code == 2 and len(err.splitlines()) == 1 and "is empty" in err, err
