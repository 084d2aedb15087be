"""The bridge check's torch side: checkpoint, Megatron model through the bridge, round trip, logits, fwd-bwd.

Imported by ``smoke.bridge`` after the CPU shim (``--cpu``) is installed, so megatron-core's device
picks already point at the CPU. One process, world size 1 (gloo on CPU, NCCL on GPU), set up and torn
down by the kit's bootstrap (smoke.kit.bootstrap).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import json
import math
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mcore_images import reading
from mcore_images.errors import InputError
from mcore_images.smoke.bridge.spec import (
    ARCHITECTURES,
    FAULTS,
    Unsupported,
    checkpoint_shapes,
    init_stats,
    judge,
    known_cause,
    logit_delta,
    mcore_incompatible_message,
    new_result,
    packages,
    unsupported_message,
)
from mcore_images.smoke.kit import bootstrap, envinfo, seeds
from mcore_images.smoke.kit.errors import CouldNotRun
from mcore_images.smoke.kit.gpt_builder import causal_mask, torch_dtype
from mcore_images.smoke.kit.numerics import Tolerance, rel_delta
from mcore_images.smoke.kit.seeds import seed_for

BATCH, SEQ = 2, 32
HF_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16"}


# ---------------------------------------------------------------------------------------------
# Process setup.


def setup(cpu: bool, seed: int, timeout_s: float) -> torch.device:
    """One-rank process group and megatron's parallel state (tp = pp = ep = 1)."""
    if cpu:
        from mcore_images.smoke.kit import cpu_shim

        cpu_shim.patch_megatron()
    bootstrap.init_process_group(cpu, timeout_s)
    bootstrap.init_parallel(cpu=cpu, timeout_s=timeout_s, seed=seed)
    return torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())


def teardown() -> None:
    bootstrap.teardown()


# ---------------------------------------------------------------------------------------------
# The Hugging Face checkpoint, written here (no hub).


def write_config(folder: Path, cfg: dict[str, Any], dtype: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**cfg, "torch_dtype": HF_DTYPE_NAMES[dtype]}, indent=2) + "\n")


def write_weights(folder: Path, cfg: dict[str, Any], dtype: str, seed: int) -> dict[str, torch.Tensor]:
    """model.safetensors with name-seeded random values in the compute dtype (so that Megatron's copy
    holds exactly these values and the round trip can be compared bit for bit)."""
    from safetensors.torch import save_file

    try:
        shapes = checkpoint_shapes(cfg)
    except KeyError:
        raise CouldNotRun(f"no checkpoint layout for model_type '{cfg['model_type']}' in "
                          f"src/mcore_images/smoke/bridge/spec.py (known: {', '.join(ARCHITECTURES)}); add it there "
                          "to check this architecture") from None
    tensors = {}
    for name, shape in shapes.items():
        mean, std = init_stats(name, shape)
        gen = torch.Generator().manual_seed(seed_for(name, seed))
        tensors[name] = (torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean).to(torch_dtype(dtype))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return tensors


def plant_fault(folder: Path, original: dict[str, torch.Tensor], fault: str) -> Path:
    """A copy of the checkpoint with FAULTS[fault]'s two tensors exchanged, for the bridge to read."""
    from safetensors.torch import save_file

    a, b = FAULTS[fault]
    planted = folder.with_name(folder.name + "-" + fault)
    planted.mkdir(parents=True, exist_ok=True)
    (planted / "config.json").write_text((folder / "config.json").read_text())
    save_file({**original, a: original[b], b: original[a]}, str(planted / "model.safetensors"),
              metadata={"format": "pt"})
    return planted


def inputs(vocab: int, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seeds.data_seed("bridge-tokens", seed))
    tokens = torch.randint(0, vocab, (BATCH, SEQ + 1), generator=gen)
    return {
        "tokens": tokens[:, :-1].contiguous().to(device),
        "labels": tokens[:, 1:].contiguous().to(device),
        "position_ids": torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ).contiguous().to(device),
        "attention_mask": causal_mask(SEQ, device),
    }


# ---------------------------------------------------------------------------------------------
# The two bridges behind one small interface.


class BridgeRun:
    """Build a Megatron model from the checkpoint folder, load it, export it back as HF tensors."""

    name = ""

    def __init__(self, cpu: bool, dtype: str) -> None:
        self.cpu, self.dtype = cpu, dtype
        self.swapped: dict[str, str] = {}
        self.cpu_overrides: dict[str, Any] = {}

    @property
    def version(self) -> str | None:
        return envinfo.package_version(self.name)

    def check_supported(self, folder: Path) -> None:
        """Raise Unsupported (one line) when the bridge has no conversion for this config's architecture."""
        raise NotImplementedError

    def convert_config(self, folder: Path) -> None:
        """HF config → the bridge's Megatron TransformerConfig (what 'config conversion' means)."""
        raise NotImplementedError

    def build_and_load(self, folder: Path) -> list[torch.nn.Module]:
        raise NotImplementedError

    def export(self, models: list[torch.nn.Module]) -> Iterator[tuple[str, torch.Tensor]]:
        raise NotImplementedError


def _ddp_config() -> dict[str, Any]:
    # Plain DDP: one rank, no distributed optimizer; NaN check on, as in the smoke suite.
    return bootstrap.ddp_options(dist_opt=False)


def _hf_config(folder: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(folder))


class MBridgeRun(BridgeRun):
    name = "mbridge"

    def auto_bridge(self) -> Any:
        """The AutoBridge this run converts with (imported when it runs: mbridge imports megatron)."""
        from mbridge import AutoBridge

        return AutoBridge

    def check_supported(self, folder: Path) -> None:
        cfg = _hf_config(folder)
        supported = self.auto_bridge().list_supported_models()
        if cfg.model_type not in supported:
            hf_class = (getattr(cfg, "architectures", None) or [cfg.model_type])[0]
            raise Unsupported(unsupported_message(cfg.model_type, hf_class, self.name, self.version, supported))

    def convert_config(self, folder: Path) -> None:
        cfg = _hf_config(folder)
        try:
            bridge = self.auto_bridge().from_config(cfg, dtype=torch_dtype(self.dtype))
        except Exception as exc:
            raise RuntimeError(f"config conversion failed: {type(exc).__name__}: {exc}") from exc
        if self.cpu:
            bridge = self._cpu_bridge(type(bridge), cfg)
        self.bridge = bridge

    def _cpu_bridge(self, cls: type, cfg: Any) -> Any:
        """The same bridge class, whose layer spec has TE classes swapped for CPU stand-ins; and the
        token dispatcher megatron runs on gloo (alltoall creates CUDA streams when built)."""
        from mcore_images.smoke.bridge.cpu import cpu_spec

        parent = cls._get_transformer_layer_spec
        swapped = self.swapped

        def _get_transformer_layer_spec(self: Any, vp_stage: int | None = None) -> Any:
            return cpu_spec(parent(self, vp_stage), swapped)

        sub = type(f"Cpu{cls.__name__}", (cls,), {"_get_transformer_layer_spec": _get_transformer_layer_spec})
        bridge = sub(cfg, dtype=torch_dtype(self.dtype))
        # megatron's local attention (the stand-in for TE's) would pick a CUDA softmax kernel in bf16.
        self.cpu_overrides = {"masked_softmax_fusion": False}
        bridge.set_extra_args(**self.cpu_overrides)
        return bridge

    def build_and_load(self, folder: Path) -> list[torch.nn.Module]:
        try:
            models = self.bridge.get_model(wrap_with_ddp=True, bf16=self.dtype == "bf16", fp16=False,
                                           ddp_config=_ddp_config(), data_parallel_random_init=False)
        except AttributeError as exc:
            if "encoder_and_decoder" in str(exc):
                mcore = envinfo.package_version("megatron-core")
                raise CouldNotRun(mcore_incompatible_message(self.name, self.version, mcore,
                                                             f"AttributeError: {exc}")) from exc
            raise
        self.bridge.load_weights(models, str(folder))
        return models

    def export(self, models: list[torch.nn.Module]) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self.bridge.export_weights(models)


class VerlMBridgeRun(MBridgeRun):
    """mbridge through verl: the AutoBridge verl's Megatron engine imports (verl.models.mcore.mbridge, which
    applies verl's patches to mbridge first), converting and building exactly as verl does."""

    name = "verl-mbridge"

    @property
    def version(self) -> str | None:
        verl = envinfo.package_version("verl")
        return f"verl {verl}, mbridge {envinfo.package_version('mbridge')}" if verl else None

    def auto_bridge(self) -> Any:
        from verl.models.mcore.mbridge import AutoBridge

        return AutoBridge


class MegatronBridgeRun(BridgeRun):
    name = "megatron-bridge"

    def check_supported(self, folder: Path) -> None:
        from megatron.bridge import AutoBridge

        cfg = _hf_config(folder)
        if not AutoBridge.can_handle(str(folder)):
            hf_class = (getattr(cfg, "architectures", None) or [cfg.model_type])[0]
            raise Unsupported(unsupported_message(cfg.model_type, hf_class, self.name, self.version,
                                                  AutoBridge.list_supported_models()))

    def convert_config(self, folder: Path) -> None:
        from megatron.bridge import AutoBridge

        kw = "dtype" if _transformers_major() >= 5 else "torch_dtype"
        try:
            self.bridge = AutoBridge.from_hf_pretrained(str(folder), **{kw: torch_dtype(self.dtype)})
            provider = self.bridge.to_megatron_provider(load_weights=True)
        except Exception as exc:
            raise RuntimeError(f"config conversion failed: {type(exc).__name__}: {exc}") from exc
        provider.tensor_model_parallel_size = 1
        provider.pipeline_model_parallel_size = 1
        provider.expert_model_parallel_size = 1
        provider.context_parallel_size = 1
        provider.sequence_parallel = False
        provider.params_dtype = torch_dtype(self.dtype)
        provider.pipeline_dtype = torch_dtype(self.dtype)
        provider.bf16, provider.fp16 = self.dtype == "bf16", False
        if self.cpu:
            self._cpu_provider(provider)
        self.provider = provider

    def _cpu_provider(self, provider: Any) -> None:
        from megatron.core.transformer.spec_utils import ModuleSpec

        from mcore_images.smoke.bridge.cpu import cpu_spec

        original = provider.transformer_layer_spec
        swapped = self.swapped

        def spec(config: Any, vp_stage: int | None = None) -> Any:
            built = original
            if not isinstance(original, ModuleSpec) and callable(original):
                takes_vp = "vp_stage" in inspect.signature(original).parameters
                built = original(config, vp_stage=vp_stage) if takes_vp else original(config)
            return cpu_spec(built, swapped)

        provider.transformer_layer_spec = spec
        self.cpu_overrides = {"masked_softmax_fusion": False}
        for key, value in self.cpu_overrides.items():
            setattr(provider, key, value)

    def build_and_load(self, folder: Path) -> list[torch.nn.Module]:
        from megatron.core.distributed import DistributedDataParallelConfig

        if hasattr(self.provider, "finalize"):
            self.provider.finalize()
        return self.provider.provide_distributed_model(
            ddp_config=DistributedDataParallelConfig(**_ddp_config()), wrap_with_ddp=True,
            bf16=self.dtype == "bf16", fp16=False, data_parallel_random_init=False)

    def export(self, models: list[torch.nn.Module]) -> Iterator[tuple[str, torch.Tensor]]:
        for item in self.bridge.export_hf_weights(models, cpu=True, show_progress=False):
            yield item[0], item[1]


RUNNERS: dict[str, type[BridgeRun]] = {"mbridge": MBridgeRun, "megatron-bridge": MegatronBridgeRun,
                                       "verl-mbridge": VerlMBridgeRun}


def _transformers_major() -> int:
    return int((envinfo.distribution_version("transformers") or "0").split(".")[0])


def available_bridges() -> tuple[list[str], dict[str, str]]:
    """Bridges that import here, and why each other one does not."""
    found, why = [], {}
    for name, module in (("mbridge", "mbridge"), ("megatron-bridge", "megatron.bridge"),
                         ("verl-mbridge", "verl.models.mcore.mbridge")):
        try:
            __import__(module)
            found.append(name)
        except Exception as exc:
            why[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return found, why


# ---------------------------------------------------------------------------------------------
# The checks.


def compare_roundtrip(original: dict[str, torch.Tensor], exported: Iterator[tuple[str, torch.Tensor]]
                      ) -> dict[str, Any]:
    """Every exported tensor equals the checkpoint's bit for bit (same name, dtype, shape and bytes)."""
    seen: dict[str, torch.Tensor] = {}
    duplicates = []
    for name, tensor in exported:
        if name in seen:
            duplicates.append(name)
        seen[name] = tensor.detach().to("cpu")
    mismatched = []
    for name in sorted(set(original) & set(seen)):
        a, b = original[name], seen[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            mismatched.append({"name": name, "why": f"{tuple(b.shape)} {b.dtype} vs {tuple(a.shape)} {a.dtype}"})
        elif not torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)):
            diff = float((a.double() - b.double()).abs().max())
            mismatched.append({"name": name, "why": f"values differ (max |Δ| {diff:.3g})"})
    missing = sorted(set(original) - set(seen))
    extra = sorted(set(seen) - set(original))
    return {"tensors": len(original), "exported": len(seen), "mismatched": mismatched, "missing": missing,
            "extra": extra, "duplicates": duplicates,
            "exact": not (mismatched or missing or extra or duplicates)}


def hf_logits(folder: Path, dtype: str, device: torch.device, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """transformers' logits of the same checkpoint and tokens (eager attention on CPU, SDPA on GPU)."""
    from transformers import AutoModelForCausalLM

    kw = "dtype" if _transformers_major() >= 5 else "torch_dtype"
    model, info = AutoModelForCausalLM.from_pretrained(
        str(folder), output_loading_info=True, attn_implementation="eager" if device.type == "cpu" else "sdpa",
        **{kw: torch_dtype(dtype)})
    problems = {k: sorted(map(str, v)) for k, v in info.items() if v}
    if problems:
        raise RuntimeError(f"transformers did not load the checkpoint cleanly: {problems}")
    model.to(device).eval()
    with torch.no_grad():
        out = model(input_ids=batch["tokens"]).logits.float()
    del model
    return out


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "module"):
        model = model.module
    return model


def megatron_logits(models: list[torch.nn.Module], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model = models[0]
    model.eval()
    with torch.no_grad():
        out = model(batch["tokens"], batch["position_ids"], batch["attention_mask"])
    model.train()
    return out.float()


def forward_backward(models: list[torch.nn.Module], batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """One training micro-batch through megatron's schedule, then megatron's grad finalisation: loss and
    every gradient finite, every non-expert weight with a non-zero gradient."""
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

    def loss_func(output: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = output.float().mean()
        return loss, {"lm loss": loss.detach()}

    def step(data: Iterator[dict[str, torch.Tensor]], model: torch.nn.Module) -> tuple[torch.Tensor, Callable]:
        mb = next(data)
        return model(mb["tokens"], mb["position_ids"], mb["attention_mask"], labels=mb["labels"]), loss_func

    for model in models:
        model.zero_grad_buffer()
    reduced = get_forward_backward_func()(
        forward_step_func=step, data_iterator=iter([batch]), model=models, num_microbatches=1, seq_length=SEQ,
        micro_batch_size=BATCH, forward_only=False)
    finalize_model_grads(models)
    loss = float(reduced[0]["lm loss"]) if reduced else math.nan
    total, count, zero, bad = 0.0, 0, [], []
    for model in models:
        for name, param in _unwrap(model).named_parameters():
            grad = getattr(param, "main_grad", None)
            grad = param.grad if grad is None else grad
            count += 1
            if grad is None:
                bad.append(f"{name}: no gradient")
                continue
            g = grad.detach().double()
            if not torch.isfinite(g).all():
                bad.append(f"{name}: non-finite gradient")
            norm2 = float((g * g).sum())
            total += norm2
            if norm2 == 0.0 and ".experts." not in name:
                zero.append(name)
    grad_norm = math.sqrt(total)
    problem = None
    if not math.isfinite(loss):
        problem = f"loss {loss} is not finite"
    elif bad:
        problem = "; ".join(bad[:5])
    elif zero:
        problem = f"{len(zero)} weight(s) got a zero gradient: {', '.join(zero[:5])}"
    elif not (math.isfinite(grad_norm) and grad_norm > 0):
        problem = f"grad norm {grad_norm}"
    return {"ok": problem is None, "problem": problem, "loss": loss, "grad_norm": grad_norm, "params": count}


# ---------------------------------------------------------------------------------------------
# One (architecture, bridge) record.


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:600] if not isinstance(exc, (CouldNotRun, Unsupported)) else text[:800]


def check(arch_cfg: dict[str, Any], bridge: str, cpu: bool, dtype: str, tol: Tolerance, device: torch.device,
          workdir: Path, seed: int, fault: str | None = None) -> dict[str, Any]:
    """Run every stage for one architecture through one bridge; never raises."""
    arch = arch_cfg["model_type"]
    runner = RUNNERS[bridge](cpu, dtype)
    result = new_result(arch, bridge, runner.version, tol)
    result["hf_class"] = (arch_cfg.get("architectures") or [None])[0]
    result["moe"] = any(arch_cfg.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts"))
    start = time.perf_counter()
    models: list[torch.nn.Module] = []
    stage = "config"
    try:
        folder = workdir / f"{arch}-{bridge}"
        write_config(folder, arch_cfg, dtype)
        runner.check_supported(folder)
        stage = "checkpoint"
        original = write_weights(folder, arch_cfg, dtype, seed)
        source = plant_fault(folder, original, fault) if fault else folder
        if fault:
            result["injected_fault"] = fault
        stage = "config-conversion"
        runner.convert_config(source)
        stage = "build"
        models = runner.build_and_load(source)
        stage = "roundtrip"
        rt = compare_roundtrip(original, runner.export(models))
        result["roundtrip"], result["roundtrip_exact"] = rt, rt["exact"]
        batch = inputs(arch_cfg["vocab_size"], seed, device)
        stage = "transformers"
        ref = hf_logits(folder, dtype, device, batch)
        stage = "logits"
        got = megatron_logits(models, batch)
        if got.shape != ref.shape:
            raise RuntimeError(f"Megatron logits {tuple(got.shape)} vs transformers {tuple(ref.shape)}")
        diff = float((got - ref).abs().max())
        scale = float(ref.abs().max())
        result.update(max_logit_diff=diff, logit_scale=scale, logit_rel_diff=logit_delta(diff, scale),
                      mean_logit_diff=float((got - ref).abs().mean()))
        ref_loss = float(F.cross_entropy(ref.reshape(-1, ref.shape[-1]), batch["labels"].reshape(-1)))
        stage = "forward-backward"
        fb = forward_backward(models, batch)
        result["forward_backward"] = fb
        result["loss"] = {"megatron": fb["loss"], "transformers": ref_loss, "rel_diff": rel_delta(fb["loss"], ref_loss)}
        problems = judge(result, tol)
        result["stage"] = "done"
        result["status"] = "failed" if problems else "passed"
        result["reason"] = "; ".join(problems) or None
    except CouldNotRun as exc:
        result.update(status="could-not-run", stage=stage, reason=_one_line(exc))
    except Unsupported as exc:
        result.update(status="failed", stage=stage, reason=_one_line(exc))
    except Exception as exc:
        traceback.print_exc()
        reason = _one_line(exc)
        cause = known_cause(reason, bridge, runner.version, packages(), _loaded_config(workdir / f"{arch}-{bridge}"))
        result.update(status="failed", stage=stage, reason=f"{reason} — {cause}" if cause else reason)
    finally:
        result["passed"] = result["status"] == "passed"
        result["seconds"] = round(time.perf_counter() - start, 2)
        if runner.swapped:
            result["cpu_stand_ins"] = dict(sorted(runner.swapped.items()))
        if runner.cpu_overrides:
            result["cpu_overrides"] = runner.cpu_overrides
        del models
        gc.collect()
        if device.type == "cuda":
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    return result


def _loaded_config(folder: Path) -> dict[str, Any]:
    """The config as transformers loaded it (attributes with their defaults), for known_cause()."""
    try:
        return _hf_config(folder).to_dict()
    except Exception:
        return {}


def arch_configs(names: tuple[str, ...], hf_config: str | None) -> list[dict[str, Any]]:
    if hf_config:
        path = Path(hf_config)
        path = path / "config.json" if path.is_dir() else path
        try:
            return [reading.read_json_object(path, "--hf-config", "give a HF config.json or its folder",
                                             f"--hf-config {path} is not a HF config (a JSON object)")]
        except InputError as exc:
            raise CouldNotRun(str(exc)) from None
    return [ARCHITECTURES[n].config() for n in names]
