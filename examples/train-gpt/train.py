"""Train a small GPT with megatron-core: flags or a TOML config, a synthetic token stream, loss and
throughput logged, distributed checkpoints every N steps, and resume, also in another parallel layout.

    torchrun --nproc-per-node 2 train.py --config config.toml --tp 2 --save ckpt
    torchrun --nproc-per-node 2 train.py --config config.toml --pp 2 --load ckpt --save ckpt

The data is a stream of arithmetic sequences modulo the vocabulary (a pattern the model can learn, so
the loss falls): sample ``i`` is a function of the seed and ``i`` alone, so a resumed run sees exactly the
samples the interrupted one would have. Checkpoints are megatron-core's ``torch_dist`` format (the image's
``smoke.kit.checkpointing``: model and optimizer, checked before anything is loaded); ``DIR/latest`` names
the newest complete one and is written only once its files are.

The --save folder is checked writable at start and held by this job alone (``smoke.kit.folders``: a
second job that would write there stops before it writes). A save that fails, on a full disk too, ends
the job with one line naming the step lost and the step ``latest`` still names. SIGTERM (which Slurm
sends before it kills) lets a background save in flight finish, for up to TERM_GRACE_S, names it in
``latest`` and ends the job.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, NoReturn

from mcore_images import create_only, reading
from mcore_images.errors import InputError
from mcore_images.options import OneLineParser, number, whole
from mcore_images.smoke.kit import folders

TERM_GRACE_S = 20.0
"""How long SIGTERM waits for a background save in flight. Slurm sends SIGKILL KillWait (30 s by default)
after SIGTERM, and torchrun its own SIGKILL 30 s after it passes SIGTERM on to the ranks: 20 s leaves 10
for the last collectives, ``latest`` and the exit."""
STOPPED = 128 + signal.SIGTERM
"""The exit code after SIGTERM, the one a shell reports for a process that SIGTERM ended."""
PEER_WAIT_S = 5.0
"""How long a rank other than 0 waits for rank 0, whose exit ends the wait (torchrun's SIGTERM, sent once a rank
exits): in ``fail``, before it ends quietly on a problem rank 0 says; and before it speaks of a save that failed on
it alone (``Checkpoints.failed``), since a rank 0 that failed too has said so."""
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
"""How gloo reports a collective whose peer rank has exited: that rank has said why (or torchrun will)."""
TERM = threading.Event()
"""Set by SIGTERM; the training loop stops at the next step every rank agrees on."""
AT_EXIT: list[Any] = []
"""What ``fail`` stops before it ends the process (os._exit runs no finalizers)."""

DEFAULTS: dict[str, Any] = {
    "tp": 1, "pp": 1, "ep": 1, "layers": 4, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 128, "seq": 64,
    "experts": 0, "global_batch": 8, "steps": 20, "lr": 3e-3, "seed": 1234, "save": None, "load": None,
    "save_interval": 0, "async_save": False, "log_interval": 1, "log_file": None, "cpu": False,
}
LEAST: dict[str, int] = {"experts": 0, "save_interval": 0, "seed": 0}
"""The least value of each whole-number option (1 for the others: a size, a count of ranks or of steps)."""
SEEDS = 2**32
"""Seeds are 0 … SEEDS - 1: torch takes 64 bits, and megatron-core adds its per-rank offsets."""
MAX_CONFIG_BYTES = 1 << 20
"""The largest --config read (a config is a few hundred bytes; /dev/zero never ends)."""


def rank_zero() -> bool:
    """Whether this process speaks for the job: torchrun's rank 0 (RANK is set before any process group starts),
    or a run without torchrun."""
    return os.environ.get("RANK", "0") == "0"


class Parser(OneLineParser):
    """The one-line parser (mcore_images.options), said once for the job: by rank 0, the others ending quietly."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message}; see `train.py --help`", say=rank_zero())


def option_type(name: str, default: Any) -> Any:
    """How an option's text is read: whole numbers in range, a learning rate finite and above 0, paths as text."""
    if name == "lr":
        return number(0, above=True, example="3e-3")
    if name == "seed":
        return whole(0, SEEDS - 1, example="1234")
    if isinstance(default, int):
        return whole(LEAST.get(name, 1), example=str(default or 1))
    return str


def parse(argv: list[str]) -> argparse.Namespace:
    """The options, from flags and --config (flags win), each judged here, on every rank, before any process group
    starts: a bad one is one line from rank 0 and exit 2 (before: `--tp 0`, `--lr nan`, `--global-batch 0` ended in a
    traceback on every rank)."""
    parser = Parser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="TOML file with any of the options below (flags win)")
    for name, default in DEFAULTS.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=None)
        else:
            parser.add_argument(flag, type=option_type(name, default), default=None)
    args = parser.parse_args(argv)
    values = dict(DEFAULTS)
    if args.config:
        values.update(read_config(args.config))
    values.update({k: v for k, v in vars(args).items() if k in DEFAULTS and v is not None})
    return argparse.Namespace(**values)


def read_config(path: str) -> dict[str, Any]:
    """--config's options, each read as its flag would read it; one line naming the file and the key otherwise."""
    try:
        text = reading.read_text(path, "--config", "give a TOML file", max_bytes=MAX_CONFIG_BYTES)
    except InputError as exc:
        fail(str(exc), say=rank_zero())
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        fail(f"{path} is not valid TOML: {exc}", say=rank_zero())
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        fail(f"{path}: unknown option(s) {', '.join(unknown)}; known: {', '.join(DEFAULTS)}", say=rank_zero())
    for name, value in config.items():
        if problem := value_problem(name, value):
            fail(f"{path}: {name} = {value!r}: {problem}", say=rank_zero())
    return config


def value_problem(name: str, value: Any) -> str | None:
    """Why a config file's value cannot stand for its option (None: it can)."""
    default = DEFAULTS[name]
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "give true or false"
    if default is None:
        return None if isinstance(value, str) and value else "give a path (a non-empty string)"
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(default, int)
                                                                          and not isinstance(value, int)):
        return f"give {'a number' if name == 'lr' else 'a whole number'}"
    try:
        option_type(name, default)(str(value))
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return None


def fail(message: str, code: int = 2, *, say: bool = True) -> NoReturn:
    """One line naming the problem, then exit: 2 (the default) when nothing was trained or loaded. ``say``
    is False on the ranks whose rank 0 reports the same problem, so that it is said once. Such a rank that
    torchrun started waits up to PEER_WAIT_S first: torchrun ends every rank once one exits, and a quiet rank that
    left first had rank 0 ended before it said why. Rank 0's exit ends the wait (torchrun's SIGTERM)."""
    if say:
        print(f"train-gpt: {message}", file=sys.stderr, flush=True)
    elif "LOCAL_RANK" in os.environ:
        TERM.wait(PEER_WAIT_S)
    for end in AT_EXIT:
        end()
    os._exit(code)


def batch(args: argparse.Namespace, step: int, dp_rank: int, dp_size: int, device: Any) -> dict[str, Any]:
    """This data-parallel rank's share of the global batch of ``step``."""
    import torch

    per_rank = args.global_batch // dp_size
    rows = []
    for i in range(step * args.global_batch + dp_rank * per_rank, step * args.global_batch + (dp_rank + 1) * per_rank):
        gen = torch.Generator().manual_seed(args.seed * 1_000_003 + i)
        start, stride = torch.randint(0, args.vocab, (2,), generator=gen).tolist()
        rows.append((start + (stride % 7 + 1) * torch.arange(args.seq + 1)) % args.vocab)
    tokens = torch.stack(rows)
    mask = torch.triu(torch.ones(args.seq, args.seq, dtype=torch.bool), diagonal=1)[None, None]
    return {"tokens": tokens[:, :-1].to(device), "labels": tokens[:, 1:].to(device),
            "position_ids": torch.arange(args.seq)[None].expand(per_rank, -1).to(device),
            "attention_mask": mask.to(device)}


def layout_problem(args: argparse.Namespace, world: int) -> str | None:
    """Why this layout cannot hold the model on ``world`` ranks (checked before anything is built)."""
    if world % (args.tp * args.pp * args.ep):
        return f"--tp {args.tp} × --pp {args.pp} × --ep {args.ep} must divide the {world} rank(s)"
    dp = world // (args.tp * args.pp)
    for what, size, by in (("--heads", args.heads, args.tp), ("--vocab", args.vocab, args.tp),
                           ("--ffn", args.ffn, args.tp), ("--layers", args.layers, args.pp),
                           ("--global-batch", args.global_batch, dp), ("--experts", args.experts, args.ep)):
        if size % by:
            return f"{what} {size} does not divide into {by} parts: choose another layout"
    if args.ep > 1 and not args.experts:
        return "--ep needs --experts"
    if args.experts and args.tp > 1 and args.cpu:
        return "MoE with --tp > 1 needs sequence parallelism, which needs Transformer Engine: not on --cpu"
    return None


def build(args: argparse.Namespace) -> list[Any]:
    import torch
    import torch.nn.functional as F
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe = {} if not args.experts else {
        "num_moe_experts": args.experts, "moe_router_topk": 2, "moe_token_dispatcher_type": "allgather",
        "moe_aux_loss_coeff": 0.0, "moe_router_load_balancing_type": "none", "moe_grouped_gemm": False}
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads, ffn_hidden_size=args.ffn,
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False, hidden_dropout=0.0,
        attention_dropout=0.0, tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
        expert_model_parallel_size=args.ep, pipeline_dtype=torch.float32 if args.cpu else torch.bfloat16,
        bf16=not args.cpu, params_dtype=torch.float32, use_cpu_initialization=args.cpu,
        calculate_per_token_loss=True, batch_p2p_comm=not args.cpu, sequence_parallel=args.tp > 1 and not args.cpu,
        **moe)
    spec = gpt_layer_specs.get_gpt_decoder_block_spec(config, use_transformer_engine=not args.cpu)
    model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=args.vocab, max_sequence_length=args.seq,
                     pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                     position_embedding_type="learned_absolute" if args.cpu else "rope")
    if not args.cpu:
        model.cuda(torch.cuda.current_device())
    return [model], config


def main(argv: list[str]) -> int:
    if "LOCAL_RANK" in os.environ:  # a rank of torchrun's, which starts it in a session of its own: end with it
        from mcore_images.smoke.kit import lifetime

        lifetime.die_with_parent()
    try:
        args = parse(argv)
        resume = judged_first(args)
        return train(args, resume)
    except Exception as exc:
        if any(sign in str(exc) for sign in PEER_GONE):  # a peer ended first, and has said why
            os._exit(1)
        raise


def judged_first(args: argparse.Namespace) -> Path | None:
    """What can be judged before any process group starts, on every rank alike (rank 0 says it): the layout on
    WORLD_SIZE ranks, the checkpoint --load names, that no other job holds --save, and that no save would move
    --save's ``latest`` back. Returns the checkpoint to resume from (None: step 0)."""
    say = rank_zero()
    if problem := layout_problem(args, int(os.environ.get("WORLD_SIZE", "1"))):
        fail(problem, say=say)
    resume = None
    if args.load:
        try:
            resume = to_load(Path(args.load))
        except NothingToResume as exc:
            fail(str(exc), say=say)
        if resume is None and say:
            print(f"--load {args.load}: no checkpoint there yet, starting from step 0", flush=True)
    if args.save:  # a job writing there now is named before what it has written is judged
        try:
            folders.check_not_held(Path(args.save))
        except folders.FolderBusy as exc:
            fail(f"--save {args.save}: {exc}", say=say)
    if args.save and args.save_interval and (problem := backwards_problem(Path(args.save), resume, args.steps)):
        fail(problem, say=say)
    if args.log_file and os.path.lexists(args.log_file) and (problem := reading.file_problem(
            args.log_file, "--log-file", max_bytes=None)):
        fail(f"{problem}: pass a file to append the log to", say=say)
    return resume


def step_of(checkpoint: Path) -> int:
    """The step a checkpoint this script saved holds (its train_state.json)."""
    state = reading.read_json(checkpoint / "train_state.json", "", "pass the --save folder of an earlier run")
    return int(state["step"])


def latest_step(folder: Path) -> int | None:
    """The step ``folder/latest`` names (None: no complete checkpoint there)."""
    latest = folder / "latest"
    if not latest.is_file():
        return None
    text = reading.read_text(latest, "", "", max_bytes=4096).strip()
    return int(text.removeprefix("iter_")) if text.removeprefix("iter_").isdigit() else None


def backwards_problem(save: Path, resume: Path | None, steps: int) -> str | None:
    """Why saving into ``save`` would move its ``latest`` back (None: it would not): a run starting below the step
    ``latest`` names would point it at an earlier checkpoint at its first save (before: a second run with --save on a
    finished run's folder and no --load moved latest from step 30 to step 4)."""
    try:
        newest = latest_step(save)
        start = step_of(resume) if resume is not None else 0
    except (InputError, KeyError, TypeError, ValueError):
        return None  # what --load holds is judged as it is loaded
    if newest is None or start >= newest or steps <= start:
        return None
    return (f"--save {save} holds a checkpoint at step {newest} (latest), and this run starts at step {start}: its "
            f"saves would move latest back; resume it with --load {save}, or pass another --save folder")


def train(args: argparse.Namespace, resume: Path | None) -> int:
    if args.cpu:  # gloo and CPU tensors: megatron-core assumes CUDA in a few places the image's shim covers
        from mcore_images.smoke.kit import cpu_shim

        cpu_shim.install()
        cpu_shim.hide_transformer_engine()
    import megatron.core  # noqa: F401  (the shim patches it)
    import torch

    if args.cpu:
        cpu_shim.patch_megatron()
    from megatron.core import parallel_state as ps

    from mcore_images.smoke.kit import bootstrap, checkpointing

    rank, world = bootstrap.init_process_group(args.cpu, 120)
    device = torch.device("cpu") if args.cpu else torch.device("cuda", torch.cuda.current_device())
    held = claim_outputs(args, rank, world)  # the --save folder stays this job's while `held` lives
    if args.save and args.async_save:
        AT_EXIT.append(checkpointing.writer_outlives_sigterm())
    bootstrap.init_parallel(tp=args.tp, pp=args.pp, ep=args.ep, cpu=args.cpu, timeout_s=120, seed=args.seed)
    models, config = build(args)
    chunks, opt = bootstrap.wrap(models, config, dist_opt=not args.cpu, cpu=args.cpu, lr=args.lr)
    step = 0
    if resume is not None:
        try:
            checkpointing.load(models, opt, resume, agree=lambda problem: agreed(problem, rank, world))
        except checkpointing.CheckpointError as exc:
            fail(str(exc))
        step = step_of(resume)
        if rank == 0:
            print(f"resumed from {resume} at step {step}", flush=True)
    dp_rank, dp_size = ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()
    log = held.get("log")
    saves = Checkpoints(Path(args.save), args, rank, device, models, opt) if args.save else None
    signal.signal(signal.SIGTERM, lambda *_: TERM.set())
    last = ps.is_pipeline_last_stage()
    while step < args.steps:
        t0 = time.perf_counter()
        reduced, grad_norm = bootstrap.train_step(chunks, opt, [batch(args, step, dp_rank, dp_size, device)],
                                                  seq=args.seq, micro_batch=args.global_batch // dp_size)
        pair = bootstrap.reduced_pair(reduced, ps.get_data_parallel_group()) if last else torch.zeros(2, device=device)
        if args.pp > 1:  # the loss lives on the last pipeline stage; rank 0 logs it
            torch.distributed.all_reduce(pair, group=ps.get_pipeline_model_parallel_group())
        loss = float(pair[0] / pair[1])
        seconds = time.perf_counter() - t0
        step += 1
        if rank == 0 and step % args.log_interval == 0:
            entry = {"step": step, "loss": loss, "grad_norm": grad_norm, "tokens_per_s": args.global_batch * args.seq
                     / seconds, "layout": f"tp{args.tp}-pp{args.pp}-ep{args.ep}-dp{dp_size}"}
            print(f"step {step:5d} | loss {loss:.5f} | grad norm {grad_norm:.4f} | "
                  f"{entry['tokens_per_s']:.0f} tokens/s", flush=True)
            if log:
                log.write(json.dumps(entry) + "\n")
                log.flush()
        if saves:
            saves.poll()
            if args.save_interval and (step % args.save_interval == 0 or step == args.steps):
                saves.start(step)
        if anyone(TERM.is_set(), device):  # every rank stops after the same step
            stop(saves, step, rank)
    if saves:
        saves.wait()
    torch.distributed.barrier()
    bootstrap.teardown()
    return 0


class NothingToResume(Exception):
    """A --load folder with files but no checkpoint this script can resume from; str() is one line with the fix."""


def to_load(folder: Path) -> Path | None:
    """The checkpoint ``--load`` names: the folder itself when it is one, else the one ``folder/latest`` names. None
    when the folder holds no checkpoint yet (missing, or empty but for this job's lock and write probes), so a first
    run with ``--save DIR --load DIR`` starts from step 0, as Megatron-LM's does. Anything else raises
    NothingToResume: a folder with files in it but no checkpoint is not silently trained over."""
    if (folder / "train_state.json").is_file():
        return folder
    latest = folder / "latest"
    if latest.is_file():
        named = folder / reading.read_text(latest, "", "pass the --save folder of an earlier run",
                                           max_bytes=4096).strip()
        if (named / "train_state.json").is_file():
            return named
        raise NothingToResume(f"{named} has no train_state.json: not a checkpoint this script saved (pass the --save "
                              "folder of an earlier run)")
    if not folder.exists():
        return None
    if not folder.is_dir():
        raise NothingToResume(f"--load {folder} is not a folder: pass the --save folder of an earlier run")
    held = sorted(p.name for p in folder.iterdir() if not folders.own_files(p.name))
    if not held:
        return None
    listed = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    raise NothingToResume(f"--load {folder} holds {listed} but no complete checkpoint (no latest): pass the --save "
                          "folder of an earlier run, or an empty folder to start from step 0")


def anyone(flag: bool, device: Any) -> bool:
    """Whether ``flag`` is set on any rank (a collective: every rank asks at the same points)."""
    import torch

    seen = torch.tensor([int(flag)], device=device)
    torch.distributed.all_reduce(seen, op=torch.distributed.ReduceOp.MAX)
    return bool(seen.item())


def stop(saves: Checkpoints | None, step: int, rank: int) -> None:
    """After SIGTERM: give a background save in flight TERM_GRACE_S to finish, say what ``latest`` names,
    and exit."""
    if saves is None:
        fail(f"SIGTERM after step {step}: stopped; nothing is saved without --save", STOPPED, say=rank == 0)
    step_saving = saves.in_flight
    if step_saving is None:
        said = f"no save in flight, {saves.latest_said()}"
    elif saves.wait(within=TERM_GRACE_S):
        said = f"finished the save of step {step_saving}, {saves.latest_said()}"
    else:
        said = (f"the save of step {step_saving} did not finish within {TERM_GRACE_S:.0f} s and is abandoned, "
                f"{saves.latest_said(still=True)}")
    fail(f"SIGTERM after step {step}: {said}; stopped (resume with --load {saves.root})", STOPPED, say=rank == 0)


def agreed(problem: str | None, rank: int, world: int) -> None:
    """Every rank's verdict (a collective): when any rank has a problem, the job exits 2 and rank 0 says
    the first, once. The line names the file at fault; the rank that read it is said after it, since the rank
    that checks a file is not the rank that wrote it."""
    import torch

    problems: list[Any] = [None] * world
    torch.distributed.all_gather_object(problems, problem)
    failed = [(r, p) for r, p in enumerate(problems) if p]
    if failed:
        r, first = failed[0]
        fail(first if r == 0 else f"{first} (read by rank {r})", say=rank == 0)


def claim_outputs(args: argparse.Namespace, rank: int, world: int) -> dict[str, Any]:
    """Before anything is built: every rank can write the --save folder, no other job writes into it (rank 0
    holds its lock until the job ends), rank 0 can write --log-file. Returns what it holds (``owner``,
    ``log``); one line and exit 2 otherwise, on every rank."""
    held: dict[str, Any] = {}
    problem = None
    try:
        if args.save:
            folders.prepare(Path(args.save))
            if rank == 0:
                held["owner"] = folders.Owner(Path(args.save), "train-gpt")
        if args.log_file and rank == 0:
            held["log"] = open(args.log_file, "a")  # noqa: SIM115  (written until the job ends)
    except folders.FolderBusy as exc:
        problem = f"--save {args.save}: {exc}"
    except folders.FolderError as exc:
        problem = f"--save {args.save}: {exc}: pass a folder this job can write"
    except OSError as exc:
        problem = f"--log-file {args.log_file}: cannot write it ({exc.strerror}): pass a writable path"
    agreed(problem, rank, world)
    if "owner" in held and held["owner"].warning:
        print(f"train-gpt: warning: {held['owner'].warning}", file=sys.stderr, flush=True)
    return held


class Checkpoints:
    """The --save folder: one save in flight at most; ``DIR/latest`` names the newest complete checkpoint
    and is replaced only once every rank's files of a newer one are written. A save that fails ends the
    job with one line (exit 1): the step it lost, and the step ``latest`` still names."""

    def __init__(self, root: Path, args: argparse.Namespace, rank: int, device: Any, models: list[Any],
                 opt: Any) -> None:
        self.root, self.args, self.rank, self.device, self.models, self.opt = root, args, rank, device, models, opt
        self.saving: Any = None
        self.in_flight: int | None = None

    def start(self, step: int) -> None:
        """Save ``step`` (in the background with --async-save), once the save before it is complete."""
        import torch

        from mcore_images.smoke.kit import checkpointing

        self.wait()
        name = f"iter_{step:07d}"
        self.in_flight = step
        if self.rank == 0:
            try:
                (self.root / name).mkdir(exist_ok=True)
            except OSError as exc:
                self.failed(exc, everywhere=False)
        torch.distributed.barrier()
        try:
            self.saving = checkpointing.Save(self.models, self.opt, self.root / name, background=self.args.async_save)
        except checkpointing.SaveFailed as exc:
            self.failed(exc, everywhere=exc.everywhere)
        if not self.args.async_save:
            self.wait()

    def poll(self) -> None:
        """Complete a background save whose files are written, without waiting (every rank, every step)."""
        self._finish(blocking=False)

    def wait(self, within: float | None = None) -> bool:
        """Complete the save in flight, waiting for its files (at most ``within`` seconds, the ranks agreeing
        when to give up); whether it is complete."""
        if within is None:
            return self._finish(blocking=True)
        deadline = time.monotonic() + within
        while not self._finish(blocking=False):
            if anyone(time.monotonic() > deadline, self.device):
                return False
            time.sleep(0.1)
        return True

    def _finish(self, blocking: bool) -> bool:
        import torch

        from mcore_images.smoke.kit import checkpointing

        if self.saving is None:
            return True
        try:
            if not self.saving.finish(blocking):
                return False
        except checkpointing.SaveFailed as exc:
            self.failed(exc, everywhere=exc.everywhere)
        torch.distributed.barrier()
        if self.rank == 0:
            name = f"iter_{self.in_flight:07d}"
            try:
                (self.root / name / "train_state.json").write_text(
                    json.dumps({"step": self.in_flight, "seed": self.args.seed}))
                checkpointing.seal(self.root / name)  # every file's sha256, checked before a load
                if (newest := latest_step(self.root)) is not None and newest > self.in_flight:
                    fail(f"latest in {self.root} names step {newest}, after step {self.in_flight} just saved: "
                         f"another run saved there meanwhile; latest left at step {newest}", 1)
                create_only.replace_text(self.root / "latest", name)  # a temporary file of its own, renamed
            except OSError as exc:
                self.failed(exc, everywhere=False)
            print(f"checkpoint {self.root / name} saved at step {self.in_flight}", flush=True)
        self.saving = self.in_flight = None
        return True

    def latest_said(self, still: bool = False) -> str:
        """The step ``latest`` names, in words."""
        latest = self.root / "latest"
        if not latest.is_file():
            return f"no checkpoint in {self.root} is complete yet"
        step = int(latest.read_text().strip().removeprefix("iter_"))
        return f"latest {'still ' if still else ''}points to step {step}"

    def failed(self, exc: BaseException, everywhere: bool) -> None:
        """End the job over the save in flight: one line, exit 1. When every rank knows, rank 0 says it;
        when this rank alone knows and it is not rank 0, it waits PEER_WAIT_S for rank 0 to say it first."""
        from mcore_images.smoke.kit import checkpointing

        if self.rank != 0 and not everywhere and TERM.wait(PEER_WAIT_S):
            fail("", 1, say=False)

        if isinstance(exc, checkpointing.SaveFailed):
            no_space, detail = exc.no_space, exc.detail
        else:
            no_space, detail = getattr(exc, "errno", None) == errno.ENOSPC, f"{type(exc).__name__}: {exc}"
        cause = f"no space left on {self.root}" if no_space else f"the save failed ({detail})"
        fail(f"{cause}: the checkpoint at step {self.in_flight} is incomplete; {self.latest_said(still=True)}"
             + (" (free space there, then resume with --load)" if no_space else ""), 1,
             say=self.rank == 0 or not everywhere)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
