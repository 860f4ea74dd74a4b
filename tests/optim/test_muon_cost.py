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
