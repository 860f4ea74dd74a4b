"""The composition builds the model on the meta device and allocates only each rank's part: measured.

Every storage a rank allocates on the host while `parallel.build` runs is traced (a dispatch mode, as the
dry run's allocation trace does it), and its peak stays under a cap below the whole model: at zero3 over two
ranks a rank holds half the parameters, and the host draws one whole parameter at a time beside them. The
values equal the single-device model's for the same seed (model/init.py: a per-parameter seeded draw).
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from storage_trace import StorageTrace
from shardlab import config, parallel
from shardlab.model.gpt import build_model, resolve_model_config

# 8 blocks of d=128: the blocks dominate (the largest single parameter, 128 x 512, is ~1/50 of the model)
BASE = ["model.preset=tiny", "model.n_layer=8", "model.d_model=128", "model.n_head=4", "train.seq_len=32",
        "train.global_batch=4", "train.micro_batch=2", "train.seed=5"]


def _whole(cfg) -> tuple[int, int, dict]:
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed)
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    return sum(sizes), max(sizes), {n: p.detach().clone() for n, p in model.named_parameters()}


def build_peak(overrides):
    cfg = config.validate(config.load(None, BASE + overrides), 2)
    with StorageTrace() as trace:
        par = parallel.build(cfg, torch.device("cpu"))
    held = sum(p.numel() * p.element_size() for p in {id(p): p for p in par.dp.model.parameters()}.values())
    full = {n: p.detach().clone() for n, p in par.full_parameters().items()}
    return trace.peak, held, full


@pytest.mark.parametrize("overrides", [["parallel.strategy=zero3"], ["parallel.tp=2"]], ids=["zero3", "tp2"])
def test_build_peak_is_a_shard_not_the_model(pool2, overrides):
    cfg = config.load(None, BASE + overrides)
    whole, largest, reference = _whole(cfg)
    out = pool2.run(build_peak, overrides, timeout=300)
    cap = whole // 2 + 2 * largest  # a rank's half, one whole parameter drawn on the host, and slack for it
    for peak, held, full in out:
        print(f"build peak {peak:,} B, held {held:,} B, whole model {whole:,} B, cap {cap:,} B")
        assert peak < cap < whole, (peak, cap, whole)  # never the whole model
        assert held < 0.6 * whole
        # every shard holds the single-device initialisation's slice, bit for bit
        assert set(full) == set(reference)
        for name, value in full.items():
            assert torch.equal(value.to(reference[name].dtype), reference[name]), name


# In a fresh process (this one may hold torch._dynamo already): GPT, Llama and an MoE GPT built on meta.
_META_BUILD = """
import sys, torch
from shardlab import config
from shardlab.model.gpt import build_model, resolve_model_config
from shardlab.model.init import parameters_on_meta
for over in (["model.preset=tiny"], ["model.preset=llama-tiny"], ["model.preset=tiny", "model.moe_experts=4"]):
    cfg = config.load(None, over)
    model = build_model(resolve_model_config(cfg.model, 32), 0, meta=True)
    assert all(p.is_meta for p in model.parameters()), over
with parameters_on_meta():  # a tensor that is not on meta is still drawn
    t = torch.nn.init.normal_(torch.zeros(64))
    u = torch.zeros(64).normal_()
assert t.abs().sum() > 0 and u.abs().sum() > 0
print("dynamo" if "torch._dynamo" in sys.modules else "ok")
"""


def test_a_meta_build_does_not_import_torch_dynamo():
    """The constructors' normal draws on meta parameters are skipped (model/init.py): run, torch's meta kernel of
    normal_ imports torch._dynamo (~1 s) in every process that builds on meta, for a draw that changes nothing.
    Real tensors are still drawn inside."""
    out = subprocess.run([sys.executable, "-c", _META_BUILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.stdout, out.stderr[-2000:])
