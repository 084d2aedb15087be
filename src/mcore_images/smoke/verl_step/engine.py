"""The engine part: the same batch through verl's worker and Megatron engine under each attention backend (each
in a process of its own: engine_case.py), judged against transformers' fp32 log-probs of the same weights and
against each other, with the tolerance of smoke.kit.numerics.verl_logprobs.

The reference is computed another way on purpose: a kernel that runs and lets the loss fall can still be wrong
(FlashAttention 4's measured output); transformers' eager attention in fp32 on the CPU shares no kernel with TE.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcore_images import create_only, reading
from mcore_images.smoke.kit.numerics import Tolerance
from mcore_images.smoke.verl_step import spec


def make_batch(seed: int) -> dict[str, Any]:
    """The engine part's batch (spec.ENGINE_BATCH), seeded: random tokens of the vocabulary past the specials,
    prompts left-padded with pad (0), responses right-padded, positions counted over the kept tokens; fixed
    advantages for the update."""
    import torch

    shape = spec.ENGINE_BATCH
    n, p, r = shape["sequences"], shape["prompt"], shape["response"]
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(spec.SPECIAL_TOKENS), spec.VOCAB_SIZE, (n, p + r), generator=gen)
    mask = torch.ones(n, p + r, dtype=torch.int64)
    left = torch.randint(0, p // 2, (n,), generator=gen)
    kept = torch.randint(r // 2, r + 1, (n,), generator=gen)
    for i in range(n):
        mask[i, : int(left[i])] = 0
        mask[i, p + int(kept[i]):] = 0
    ids = ids * mask  # padding is token 0
    position_ids = torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids, "prompts": ids[:, :p],
            "responses": ids[:, p:], "response_mask": mask[:, p:],
            "advantages": torch.randn(n, r, generator=gen)}


def reference(model: Path, batch: dict[str, Any]) -> dict[str, Any]:
    """transformers' log-probs of each response token in fp32 on the CPU (eager attention), and the largest
    |logit| over the positions that predict kept response tokens (the tolerance's scale)."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32, attn_implementation="eager")
    hf.eval()
    r = batch["responses"].shape[1]
    with torch.no_grad():
        logits = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"]).logits.float()
    predicting = logits[:, -r - 1: -1, :]
    logp = torch.log_softmax(predicting, dim=-1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    kept = batch["response_mask"].bool()
    return {"logprobs": logp.tolist(), "max_logit": float(predicting[kept].abs().max())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case_env(port: int) -> dict[str, str]:
    """One rank of world size 1, as verl's worker reads it (Worker: RANK, WORLD_SIZE, MASTER_ADDR/PORT)."""
    env = dict(os.environ)
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), CUDA_DEVICE_MAX_CONNECTIONS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def run_case(backend: str, bridge: str, model: Path, batch_file: Path, workdir: Path, timeout: float) -> dict[str, Any]:
    """Run engine_case.py for ``backend``; its record, or one naming how the process ended without one."""
    out = workdir / f"engine-{backend}.json"
    argv = [sys.executable, "-m", "mcore_images.smoke.verl_step.engine_case", "--backend", backend, "--bridge", bridge,
            "--model", str(model), "--batch", str(batch_file), "--out", str(out)]
    try:
        proc = subprocess.run(argv, env=case_env(free_port()), timeout=timeout, stdout=sys.stderr, stderr=sys.stderr,
                              check=False)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        rc = None
    if out.is_file():
        record = reading.read_json(out, "the engine case's record", "")
        record.pop(create_only.WRITTEN_BY, None)  # the file's mark (create_only.py), not a part of the record
        return record
    ended = f"timed out after {timeout:.0f} s" if rc is None else f"exited {rc} without a record"
    return {"backend": backend, "bridge": bridge, "stage": "process", "error": f"engine_case {ended}"}


def judge(cases: dict[str, dict[str, Any]], ref: dict[str, Any], tol: Tolerance) -> dict[str, Any]:
    """Each backend against the reference and the tolerance, flash against fused, and the part's status."""
    judged = {}
    for name, case in cases.items():
        if not case.get("error"):
            case = {**case, "max_logit": ref["max_logit"],
                    "vs_reference": spec.logprob_delta(case["logprobs"], ref["logprobs"], case["response_mask"])}
        judged[name] = spec.judge_case(case, tol)
    agreed = spec.agreement(judged, tol)
    status, reason = spec.engine_status(judged, agreed)
    slim = {name: {k: v for k, v in c.items() if k not in ("logprobs", "response_mask")} for name, c in judged.items()}
    return {"status": status, "reason": reason, "reference": {"how": "transformers, fp32, eager attention, CPU",
                                                              "max_logit": ref["max_logit"]},
            "cases": slim, "agreement": agreed}


def run(model: Path, bridge: str, workdir: Path, seed: int, tol: Tolerance, timeout: float) -> dict[str, Any]:
    """The engine part, end to end (see the module docstring)."""
    import torch

    batch = make_batch(seed)
    batch_file = workdir / "engine-batch.pt"
    torch.save(batch, batch_file)
    ref = reference(model, batch)
    cases = {backend: run_case(backend, bridge, model, batch_file, workdir, timeout) for backend in spec.BACKENDS}
    return judge(cases, ref, tol)
