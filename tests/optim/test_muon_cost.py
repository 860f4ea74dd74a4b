"""Muon's cost formulas (optim/muon/cost.py, the registry row's planner hook): Newton-Schulz FLOPs as torch's
FLOP counter counts the implementation, the planner's per-rank exchange bytes equal the one-group formula
(which test_muon_state.py holds exact against comm), and the planner's optimizer bytes read the state dtype."""
import math

import pytest
import torch

from shardlab.optim.muon import cost
from shardlab.optim.muon.newton_schulz import flops, newton_schulz


@pytest.mark.parametrize("shape", [(64, 64), (256, 64), (48, 200)])
def test_newton_schulz_flops_are_what_torch_counts(shape):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        newton_schulz(torch.randn(*shape))
    assert counter.get_total_flops() == flops(shape)


def _tiny():
    from shardlab import config
    from shardlab.plan.from_config import model_spec

    return model_spec(config.validate(config.load(None, ["model.preset=small", "train.seq_len=128"]), 1))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_one_level_per_rank_is_the_group_formula(n):
    mats = cost.matrices_of(_tiny())
    shapes = [s for s, _ in mats]
    for r in range(n):
        got = cost.per_rank(mats, (n, 1), (r, 0))
        want = cost.exchange_bytes(shapes, n, r)
        assert (got[cost.GATHER], got[cost.SCATTER]) == (want[cost.GATHER], want[cost.SCATTER])
    total = sum(cost.per_rank(mats, (n, 1), (r, 0))["ns_flops"] for r in range(n))
    assert total == sum(flops(s) for s in shapes)  # each matrix orthogonalised once


def test_the_planner_reads_muon_and_the_state_dtype():
    from shardlab import config
    from shardlab.plan.from_config import from_config
    from shardlab.plan.memory import state_bytes

    def planned(*extra):
        cfg = config.validate(config.load(None, ["model.preset=small", "parallel.strategy=zero3", *extra]), 2)
        return from_config(cfg, 2)

    m, t, lay = planned("train.optimizer=muon")
    assert t.optimizer == "muon"
    muon = sum(math.prod(s) for s, _ in cost.matrices_of(m))
    k = t.optimizer_bytes_of(m, lay)
    assert k == pytest.approx(4 * (muon + 2 * (m.params - muon)) / m.params)
    m, t16, lay = planned("train.optimizer=muon", "train.optim_dtype=bf16")
    assert t16.optimizer_bytes_of(m, lay) == pytest.approx(k / 2)
    m, ta, lay = planned("train.optim_dtype=bf16")
    assert ta.optimizer_bytes == 4 and state_bytes(m, ta, lay)["optimizer"] * 2 == \
        state_bytes(*planned())["optimizer"]


def test_the_planner_steps_an_moe_and_latent_attention_model_with_muon():
    """Muon's plan of a DeepSeek-style model (experts, a shared expert, latent attention): every block linear weight
    is a Muon matrix (the router not), experts and the latents' down-projections whole on every TP rank, the
    up-projections cut by rows, the shared expert as the MLP; its state bytes count the rank's view (E / ep
    experts). It had stopped at the first expert (no role for mlp.experts.0.down)."""
    from shardlab.model import anatomy
    from shardlab.plan.layout import Layout
    from shardlab.plan.model import ModelSpec
    from shardlab.plan.train_spec import TrainSpec

    m = ModelSpec("ds-tiny", n_layer=3, d_model=64, n_head=4, vocab=256, seq=32, arch="llama", ffn=128, head_dim=16,
                  moe_experts=8, moe_top_k=2, moe_ffn=32, moe_shared_ffn=32, moe_first_dense=1, mla_kv_rank=16,
                  mla_q_rank=24, mla_rope_dim=8, mla_v_dim=16)
    view = m.expert_view(4)
    names = sorted(cost.hidden_matrices(anatomy.by_arch("llama"), dict(view.param_shapes()), view.linear_roles()))
    mats = dict(zip(names, (d for _, d in cost.matrices_of(view, tp=2))))  # matrices_of lists them in name order
    assert "blocks.0.mlp.router.weight" not in mats and "blocks.1.mlp.router.weight" not in mats
    assert mats["blocks.1.mlp.experts.0.down.weight"] == [0, None] and mats["blocks.1.attn.q_down.weight"] == [0, None]
    assert mats["blocks.1.attn.kv_up.weight"] == [0, 0] and mats["blocks.1.mlp.shared.down.weight"] == [0, 1]
    assert mats["blocks.0.mlp.gate.weight"] == [0, 0] and len([f for f in mats if ".experts." in f]) == 2 * 2 * 3
    train = TrainSpec(global_batch=8, micro_batch=1, seq=32, precision="bf16-mixed", optimizer="muon")
    lay = Layout(dp=4, tp=2, strategy="zero1", ep=4)
    k = train.optimizer_bytes_of(view, lay)
    psi = sum(int(p) for _, p in view.param_shapes())
    muon = sum(math.prod(s) for s, _ in cost.matrices_of(view))
    assert k == pytest.approx(4 + 4 * (muon + 2 * (psi - muon)) / psi) and 4 + 4 < k < 4 + 8
    assert cost.plan(view, train, lay)["ns_flops"] > 0
    # whole parameters per rank (Megatron-Core's layer-wise optimizer, torch-zero1): the experts dealt over their
    # own group, edp = 1 here, so every rank orthogonalises all of its experts' matrices
    whole = Layout(dp=4, strategy="zero1", zero_partition="params", ep=4)
    experts = sum(flops(s) for f, (s, _) in zip(names, cost.matrices_of(view)) if ".experts." in f)
    got = cost.plan(view, train, whole)["ns_flops"]
    assert got >= experts > 0
    assert got == max(cost.zero_redundancy_flops(view, 4, experts_over=1))
