"""The parallel core: degrees from config, the named mesh's arithmetic, world != dp, one set-up path.

The 2 x 2 x 2 layout (pp x dp x tp, world 8) is checked as pure arithmetic (no processes); the real
runs are world 2 with dp = 1 (an identity tensor-parallel layer registered for the test: every rank of
the "tp" group computes the same thing) and the layers' microbatches-in-flight parity.
"""
from __future__ import annotations

import json

import pytest
import torch

from shardlab import comm, config
from shardlab.data import GlobalSampler, val_indices_for_rank
from shardlab.errors import ConfigError
from shardlab.parallel import layers
from shardlab.parallel.mesh import ParallelDims, resolve


def _degrees(world, **kw):
    p = config.ParallelConfig()
    for k, v in kw.items():
        setattr(p, k, v)
    return resolve(p, world).degrees


# --- degrees from config ---------------------------------------------------------------------------------

def test_strategy_alone_fills_the_world_as_before():
    assert _degrees(4, strategy="ddp") == dict(pp=1, dp_replicate=4, dp_shard=1, cp=1, tp=1)
    assert _degrees(4, strategy="zero3") == dict(pp=1, dp_replicate=1, dp_shard=4, cp=1, tp=1)
    assert _degrees(4, strategy="torch-zero1") == dict(pp=1, dp_replicate=1, dp_shard=4, cp=1, tp=1)


def test_dp_key_is_the_strategy_key():
    cfg = config.load(None, ["parallel.dp=zero2"])
    assert cfg.parallel.strategy == "zero2" and cfg.parallel.dp == "zero2"
    assert "parallel.dp" in config.all_keys()


def test_minus_one_fills_the_world_around_fixed_degrees():
    assert _degrees(8, strategy="ddp", tp=2, pp=2) == dict(pp=2, dp_replicate=2, dp_shard=1, cp=1, tp=2)
    assert _degrees(8, strategy="zero3", dp_shard=2, tp=-1) == dict(pp=1, dp_replicate=1, dp_shard=2, cp=1, tp=4)


@pytest.mark.parametrize("world, kw, needle", [
    (4, dict(strategy="ddp", dp_replicate=3), "must equal the world"),
    (6, dict(strategy="zero3", tp=4), "not divisible"),
    (4, dict(strategy="zero3", dp_shard=-1, tp=-1), "at most one degree"),
    (4, dict(strategy="ddp", dp_shard=2), "dp_shard must be 1"),
    (4, dict(strategy="ddp", tp=0), "positive degree"),
    (4, dict(strategy="zero2", dp_replicate=4), "would shard nothing"),  # HSDP needs dp_shard > 1
])
def test_impossible_layouts_are_one_line_config_errors(world, kw, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        _degrees(world, **kw)
    assert "\n" not in str(e.value)


def test_layers_not_built_yet_are_named(monkeypatch):
    """A dimension whose layer table is empty is refused in one line (every dimension is built today:
    an empty table is simulated)."""
    assert layers.not_built(dict(tp=2, pp=2, cp=2)) is None  # tensor, pipeline and context parallelism are built
    monkeypatch.setitem(layers.TABLES, "cp", {})
    assert "context parallelism is not implemented yet" in layers.not_built(dict(cp=4))
    assert layers.not_built(dict(tp=1, pp=1, cp=1)) is None
    cfg = config.load(None, ["parallel.cp=2", "parallel.strategy=ddp"])
    with pytest.raises(ConfigError, match="parallel.cp=2"):
        cfg = config.validate(cfg, 4)


def test_global_batch_counts_data_parallel_ranks_only():
    cfg = config.load(None, ["parallel.tp=2", "train.micro_batch=4", "train.grad_accum=2"])
    cfg = config.validate(cfg, 8)
    assert cfg.train.global_batch == 4 * 2 * 4  # micro x accum x dp (= 8 / tp)


# --- the 2 x 2 x 2 layout, pure arithmetic ----------------------------------------------------------------

def _mesh222(rank=0):
    return ParallelDims(pp=2, dp_replicate=2, tp=2, rank=rank)


def test_222_coordinates_are_row_major_tp_innermost():
    d = _mesh222()
    assert d.world_size == 8 and d.dp_size == 2
    assert [tuple(d.coords(r)[n] for n in ("pp", "dp_replicate", "tp")) for r in range(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert d.ranks("tp", 5) == [4, 5] and d.ranks("dp", 5) == [5, 7] and d.ranks("pp", 5) == [1, 5]
    assert d.ranks("dp_cp", 2) == [0, 2]
    for r in range(8):
        assert d.rank_of(d.coords(r)) == r
        assert _mesh222(r).dp_rank == d.coord("dp", r) == d.coords(r)["dp_replicate"]


def test_222_sampler_and_eval_shard_by_dp_rank():
    """Ranks of one tp/pp group get the same batch; the dp ranks together get the global batch once."""
    d = _mesh222()
    shares = {r: GlobalSampler(1000, 8, seed=3, world_size=d.dp_size, rank=_mesh222(r).dp_rank).next_batch()
              for r in range(8)}
    for r in range(8):
        for peer in d.ranks("tp", r) + d.ranks("pp", r):
            assert shares[peer] == shares[r]
    whole = GlobalSampler(1000, 8, seed=3).next_batch()
    assert shares[0] + shares[2] == whole  # dp rank 0 then dp rank 1: the world-1 order
    vals = {r: val_indices_for_rank(100, d.dp_size, _mesh222(r).dp_rank, limit=10) for r in range(8)}
    assert vals[0] == vals[1] == vals[4] and sorted(vals[0] + vals[2]) == val_indices_for_rank(100, 1, 0, limit=10)


def test_222_groups_without_processes_are_none_only_for_size_one():
    d = ParallelDims(pp=2, dp_replicate=1, dp_shard=2, tp=2)
    assert d.group("cp") is None and d.group("dp_replicate") is None
    with pytest.raises(RuntimeError, match="mesh is not built"):
        d.group("tp")


# --- world 2, dp = 1: every rank of the (identity) tp group trains on the same batch -------------------

def _identity_tp(part, cfg, dims):
    """A stand-in tensor-parallel layer that shards nothing: both ranks hold and compute everything. Its
    handle contributes nothing (the layer contract's defaults)."""
    from shardlab.parallel.layer import Layer

    return Layer("tp", part)


TINY_RUN = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2",
            "train.steps=3", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=3",
            "train.eval_seqs=8", "doctor.hang_timeout_s=0"]


def _run(run_dir, overrides):
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, TINY_RUN + overrides)
    cfg = config.validate(cfg, comm.world_size())
    trainer = Trainer(cfg, run_dir)
    summary = trainer.run()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if comm.rank() == 0 else None
    return summary, rows, {k: v.clone() for k, v in trainer.par.full_parameters().items()}, trainer.dims.dp_rank


def _dp1_fn(run_dir):
    real = layers.TENSOR_PARALLEL["own"]
    layers.TENSOR_PARALLEL["own"] = "test_parallel:_identity_tp"
    try:
        return _run(run_dir, ["parallel.tp=2"])
    finally:
        layers.TENSOR_PARALLEL["own"] = real


def test_world2_with_dp1_trains_what_one_process_trains(pool2, tmp_path):
    (s0, rows, p0, dp0), (s1, _, p1, dp1) = pool2.run(_dp1_fn, tmp_path / "tp2", timeout=180)
    ref_summary, ref_rows, ref_params, _ = _run(tmp_path / "single", ["parallel.strategy=single"])
    assert dp0 == dp1 == 0 and s0["world_size"] == 2
    assert s0["tokens_per_step"] == ref_summary["tokens_per_step"] == 4 * 32
    # Same samples, same loss weight (dp size 1), no dp reduction: the same numbers as one process, exactly.
    assert [(r.get("loss"), r.get("grad_norm"), r.get("val_loss")) for r in rows] == \
        [(r.get("loss"), r.get("grad_norm"), r.get("val_loss")) for r in ref_rows]
    for k in ref_params:
        assert torch.equal(p0[k], ref_params[k]) and torch.equal(p1[k], ref_params[k]), k
    assert s0["ranks_consistent"] is True  # no data-parallel replicas: nothing compared, nothing diverged


# --- microbatches in flight: forwards first, backwards in reverse, == the plain loop ----------------------

@pytest.mark.parity
@pytest.mark.parametrize("name", ["ddp", "zero1", "zero2", "zero3", "torch-fsdp2"])
def test_microbatches_in_flight_equal_the_plain_loop(pool2, name):
    """torch-ddp and torch-zero1 are not here: torch DDP prepares its reducer in forward, so it allows
    one forward in flight per synchronised backward (the plain loop sets the sync flag before forward)."""
    from zero_harness import in_flight

    for rank_rounds in pool2.run(in_flight, name):
        for plain, flight in rank_rounds:
            assert plain.keys() == flight.keys() and plain
            scale = max(g.abs().max().item() for g in plain.values())
            for k in plain:
                # The same three microbatch gradients, accumulated in the reverse order: equal up to the
                # rounding of fp32 additions (relative 1e-6; absolute 1e-6 of the largest entry where
                # terms cancel, e.g. the key biases, whose true gradient is 0).
                torch.testing.assert_close(flight[k], plain[k], rtol=1e-6, atol=1e-6 * scale, msg=k)


# --- the DeviceMesh agrees with the arithmetic -------------------------------------------------------------

def _mesh_groups_fn(degrees):
    import torch.distributed as dist

    dims = ParallelDims(**degrees)
    dims.build_mesh("cpu")
    out = {}
    for name in ("pp", "dp_replicate", "dp_shard", "tp", "dp", "dp_cp"):
        group = dims.group(name)
        out[name] = (dist.get_process_group_ranks(group) if group is not None else None, dims.ranks(name))
    return out


@pytest.mark.parametrize("degrees", [dict(dp_replicate=2, tp=2), dict(pp=2, dp_shard=2)])
def test_mesh_groups_are_the_ranks_the_arithmetic_names(pool4, degrees):
    for by_name in pool4.run(_mesh_groups_fn, degrees):
        for name, (members, expected) in by_name.items():
            if len(expected) == 1:
                assert members is None, name  # a dimension of size one has no group
            else:
                assert members == expected, name
