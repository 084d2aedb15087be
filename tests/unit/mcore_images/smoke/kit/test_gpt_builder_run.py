"""The GPT builder with the real megatron-core and Transformer Engine: where TE imports, megatron-core would give a
local layer spec TE's final norm, and the models the bench and the smoke build under the local spec hold no TE
module all the same.

The host's unit-test Python has neither, so these skip there; they run wherever both import, inside a runtime image
(`docker run -v $PWD:/src -w /src IMAGE python -m pytest tests/unit/mcore_images/smoke/kit/test_gpt_builder_run.py`), on
CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit.conftest import PYTHONPATH

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

SCRIPT = r"""
import json, os
os.environ["TORCH_COMPILE_DISABLE"] = "1"
from mcore_images.smoke.kit import cpu_shim
cpu_shim.install()
import megatron.core
cpu_shim.patch_megatron()
from megatron.core.transformer import transformer_block
from mcore_images.smoke.bench import cli as bench, model as bench_model
from mcore_images.smoke.kit import bootstrap, gpt_builder, seeds, transformer_engine as te
from mcore_images.smoke.layouts import CPU_SHAPE, Layout, Run
from mcore_images.smoke.train import Settings, build

def final_norm(model):
    return type(model.decoder.final_layernorm).__module__ + "." + type(model.decoder.final_layernorm).__name__

bootstrap.init_process_group(True, 120)
out = {"te_imports": te.state(True)[0],
       "layer_spec_final_norm_is_te": te.is_te_class(getattr(transformer_block, "LayerNormImpl", object)),
       "models": {}}
args = bench.build_parser().parse_args(["--cpu"])
for name in ("tiny", "tiny-moe"):
    cfg = bench_model.CONFIGS[name]
    for variant in ("defaults", "production"):
        bootstrap.init_parallel(cpu=True, timeout_s=120, seed=args.seed)
        settings, _ = bench_model.resolve_variant(bench_model.VARIANTS[variant], moe=cfg.size.moe, te=False, cpu=True,
                                                  apex=False)
        model = bench.gpt(cfg, "local", args)
        config, _ = gpt_builder.transformer_config(model, **settings)
        (chunk,) = gpt_builder.build(model, config)
        out["models"][f"bench {name}/{variant}"] = [final_norm(chunk), gpt_builder.te_modules(chunk.named_modules())]
st = Settings(cpu=True, dtype="fp32", steps=2, global_batch=2, shape=CPU_SHAPE, seed=seeds.DEFAULT_SEED, lr=3e-3,
              timeout_s=120, dist_opt=False)
for kind in ("dense", "moe"):
    bootstrap.init_parallel(cpu=True, timeout_s=120, seed=st.seed)
    (chunk,), _ = build(Run(Layout(), kind, "local"), st)
    out["models"][f"smoke {kind}"] = [final_norm(chunk), gpt_builder.te_modules(chunk.named_modules())]
bootstrap.teardown()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def built() -> dict:
    # this checkout first; then what the caller's path adds (megatron-core installed beside the image's venv)
    path = os.pathsep.join(p for p in (PYTHONPATH, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": ""}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_where_te_imports_megatron_would_give_a_layer_spec_tes_final_norm(built: dict) -> None:
    if not built["te_imports"]:
        pytest.skip("Transformer Engine does not import here: megatron-core picks no TE norm to avoid")
    assert built["layer_spec_final_norm_is_te"]


def test_the_local_models_of_the_bench_and_the_smoke_hold_no_te_module(built: dict) -> None:
    assert set(built["models"]) == {"bench tiny/defaults", "bench tiny/production", "bench tiny-moe/defaults",
                                    "bench tiny-moe/production", "smoke dense", "smoke moe"}
    for name, (norm, te_modules) in built["models"].items():
        assert te_modules == [], name
        # megatron-core's WrappedTorchNorm builds torch's own LayerNorm / RMSNorm; apex's where apex is installed
        assert norm.startswith(("torch.nn.modules.normalization.", "megatron.core.fusions.fused_layer_norm.")), (
            name, norm)
