"""Muon's sharded step, what it moves and what it keeps: the bytes comm records for the exchange equal
`exchange_bytes` on every rank (zero1, zero3, own TP, torch-fsdp2, DTensor TP), and a checkpoint carries Muon's momentum (sharded
like AdamW's state): resuming is bitwise, and a zero2 checkpoint continues under other layouts."""
import pytest
import torch

from ckpt_harness import assert_params_equal, continue_from, train_run
from shardlab.checkpoint import manifest as mf

MUON = ["train.optimizer=muon", "train.muon_lr=0.02"]
BASE = ["model.preset=tiny", "train.seq_len=16", "train.global_batch=4", "train.micro_batch=2",
        "train.lr=1e-2", "ckpt.final=false", *MUON]


def exchange_recorded(overrides):
    """(bytes by tag recorded in one step's exchange, bytes the formula gives) on this rank."""
    import step_driver
    from shardlab import comm
    from shardlab.model import anatomy
    from shardlab.optim.muon.exchange import GATHER, SCATTER, exchange_bytes
    from shardlab.optim.muon.optimizer import hidden_matrices

    cfg, par = step_driver.build(overrides, BASE)
    comm.RECORDER.reset_step()
    step_driver.train(par, cfg, 1)
    got = {t: b for t, b in comm.RECORDER.step_stats()["bytes_by_tag"].items() if t in (GATHER, SCATTER)}
    opt = par.optimizer
    shapes = [m.shape for m in opt.matrices]  # the whole matrices, in the order the layer handed them
    assert {m.fqn for m in opt.matrices} == hidden_matrices(anatomy.of(cfg.model), [m.fqn for m in opt.matrices])
    # the planner's figure (optim/muon/cost.py on plan/'s model of the config), on this rank's (dp, tp) coordinates
    from shardlab.optim.muon import cost
    from shardlab.plan.from_config import from_config

    model, _, lay = from_config(cfg, comm.world_size())
    sizes = (lay.shard if lay.strategy != "ddp" else 1, lay.tp)
    coords = tuple(comm.rank(par.dims.group(g)) if n > 1 else 0 for g, n in zip(("dp_cp", "tp"), sizes))
    planned = cost.per_rank(cost.matrices_of(model, lay.tp), sizes, coords)
    if all(len(m.levels) == 1 for m in opt.matrices):  # one layer cuts each: one group's formula
        group = opt.matrices[0].levels[0][1].group
        want = exchange_bytes(shapes, comm.world_size(group), comm.rank(group), elem=4)
        assert {t: planned[t] for t in want} == want, (planned, want)
    return got, {t: planned[t] for t in (GATHER, SCATTER)}


@pytest.mark.parametrize("layout", [["parallel.strategy=zero1"], ["parallel.strategy=zero3"], ["parallel.tp=2"],
                                    ["parallel.strategy=torch-fsdp2"], ["parallel.tp=2", "parallel.tp_impl=dtensor"],
                                    ["parallel.strategy=torch-fsdp2", "model.d_model=63", "model.n_head=7"]],
                         ids=["zero1", "zero3", "tp2", "torch-fsdp2", "dtensor-tp2", "torch-fsdp2-uneven"])
def test_exchange_bytes_match_the_formula(pool2, layout):
    for got, formula in pool2.run(exchange_recorded, layout, timeout=240):
        assert got == formula and got["muon.gather"] > 0, (got, formula)


def zero_redundancy_recorded():
    """torch-zero1: (bytes the exchange recorded, NS FLOPs of the matrices this rank's partition holds, the
    planner's NS FLOPs for this rank, the planner's exchange bytes)."""
    import step_driver
    from shardlab import comm
    from shardlab.optim.muon import cost
    from shardlab.optim.muon.exchange import GATHER, SCATTER
    from shardlab.optim.muon.newton_schulz import flops
    from shardlab.plan.from_config import from_config

    cfg, par = step_driver.build(["parallel.strategy=torch-zero1"], BASE)
    comm.RECORDER.reset_step()
    step_driver.train(par, cfg, 1)
    got = {t: b for t, b in comm.RECORDER.step_stats()["bytes_by_tag"].items() if t in (GATHER, SCATTER)}
    local = par.optimizer.optim  # ZeroRedundancyOptimizer's optimizer over this rank's partition
    assert all(not m.levels for m in local.matrices)  # whole matrices
    model, train, lay = from_config(cfg, comm.world_size())
    planned = cost.plan(model, train, lay)
    return (got, sum(flops(m.shape) for m in local.matrices),
            cost.zero_redundancy_flops(model, comm.world_size())[comm.rank()], planned)


def test_torch_zero1_steps_its_partition_whole_as_planned(pool2):
    """ZeroRedundancyOptimizer hands each rank whole parameters: Muon exchanges nothing, and each rank
    orthogonalises the matrices torch's greedy partition gives it, as the planner's model of it says."""
    results = pool2.run(zero_redundancy_recorded, timeout=240)
    for got, measured, planned, plan in results:
        assert got == {} and plan["muon.gather"] == plan["muon.scatter"] == 0
        assert measured == planned > 0
    assert plan["ns_flops"] == max(r[1] for r in results)


@pytest.mark.parametrize("layout", [["parallel.tp=2", "parallel.strategy=zero3"],
                                    ["parallel.tp=2", "parallel.tp_impl=dtensor", "parallel.strategy=torch-fsdp2"]],
                         ids=["tp2-zero3", "fsdp2-dtensor-tp2"])
def test_two_level_exchange_bytes_match_the_planner(pool4, layout):
    """4 ranks, each matrix cut by a shard group around a TP group: what comm records on every rank is the
    planner's per-rank count (cost.per_rank: the dp level's pieces, then the TP level's among the owners)."""
    for got, formula in pool4.run(exchange_recorded, layout, timeout=300):
        assert got == formula and got["muon.gather"] > 0, (got, formula)


COMMON = ["model.preset=tiny", "train.steps=6", *MUON]


def test_resume_is_bitwise_and_the_momentum_reshards(pool2, tmp_path):
    straight = pool2.run(train_run, tmp_path / "straight", COMMON + ["parallel.strategy=zero2"], 2)
    run = tmp_path / "resumed"
    pool2.run(train_run, run, COMMON + ["parallel.strategy=zero2", "ckpt.every=3"], 2, stop_after=3)
    assert mf.read_latest(run / "checkpoints").name == "step_000003"
    resumed = pool2.run(train_run, run, COMMON + ["parallel.strategy=zero2", "ckpt.resume=latest"], 2, rng_seed=7)
    for r in range(2):
        assert resumed[r]["start"] == 3
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
    ckpt = run / "checkpoints" / "step_000003"
    want = [straight[0]["losses"][s] for s in range(4, 7)]
    for layout in (["parallel.strategy=zero3"], ["parallel.strategy=ddp"], ["parallel.strategy=torch-fsdp2"]):
        got = pool2.run(continue_from, [ckpt], COMMON + layout, 2)[0][str(ckpt)]
        assert got == pytest.approx(want, rel=1e-5), layout  # fp32, another layout: rounding apart
