"""The composition builds the model on the meta device and allocates only each rank's part: measured.

Every storage a rank allocates on the host while `parallel.build` runs is traced (a dispatch mode, as the
dry run's allocation trace does it), and its peak stays under a cap below the whole model: at zero3 over two
ranks a rank holds half the parameters, and the host draws one whole parameter at a time beside them. The
values equal the single-device model's for the same seed (model/init.py: a per-parameter seeded draw).
"""
from __future__ import annotations

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
