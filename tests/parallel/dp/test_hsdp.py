"""HSDP at world 4 (dp_replicate 2 x dp_shard 2): own zero1/2/3 and torch-fsdp2 compute what ddp computes
over 10 steps; their state is the ZeRO formulas with N = dp_shard; the own strategies' collectives carry
the analytic bytes in each group, and `shardlab plan` predicts the same bytes for the same layout.

One run per strategy (two microbatches per step, so accumulation and the once-per-step all-reduce across
replicas are both exercised), shared by the tests below.
"""
import contextlib
import io
import json

import pytest
import torch

from shardlab.plan import cli as plan_cli
from shardlab.testing import assert_float64_equal, in_float64
from zero_harness import TINY, train, unit_shard_numels

R, S = 2, 2  # dp_replicate x dp_shard
ACCUM, MICRO = 2, 2
NAMES = ["zero1", "zero2", "zero3", "torch-fsdp2"]
_runs: dict = {}
_runs64: dict = {}


@pytest.fixture(scope="module")
def run(pool4):
    def get(name):
        if name not in _runs:
            kw = {} if name == "ddp" else {"dp_replicate": R}
            _runs[name] = pool4.run(train, name, steps=10, accum=ACCUM, micro=MICRO, timeout=300, **kw)
        return _runs[name]
    yield get
    _runs.clear()


@pytest.fixture(scope="module")
def run64(pool4):
    def get(name):
        if name not in _runs64:
            kw = {} if name == "ddp" else {"dp_replicate": R}
            _runs64[name] = pool4.run(in_float64, train, name, steps=10, accum=ACCUM, micro=MICRO, timeout=300, **kw)
        return _runs64[name]
    yield get
    _runs64.clear()


@pytest.mark.parity
@pytest.mark.parametrize("name", NAMES)
def test_hsdp_equals_ddp(run64, name):
    """Same losses on every rank for 10 steps and the same final parameters as ddp over all 4 ranks
    (float64, to compare.py's FP64_TOL, as the zero tests)."""
    out, ref = run64(name), run64("ddp")
    for rank_out, rank_ref in zip(out, ref):  # every rank saw its own microbatches: compare rank by rank
        assert_float64_equal(rank_out["losses"], rank_ref["losses"], "losses")
    assert_float64_equal(out[0]["params"], ref[0]["params"])


@pytest.mark.parametrize("name", NAMES)
def test_hsdp_state_bytes_are_the_zero_formulas_with_n_dp_shard(run, name):
    """TINY has no padding at N = 2: per rank zero1 4Ψ+4Ψ+8Ψ/N, zero2 4Ψ+4Ψ/N+8Ψ/N, zero3 and FSDP2 16Ψ/N."""
    out = run(name)
    psi = out[0]["psi"]
    want = {"zero1": (4 * psi, 4 * psi, 8 * psi // S), "zero2": (4 * psi, 4 * psi // S, 8 * psi // S),
            "zero3": (4 * psi // S, 4 * psi // S, 8 * psi // S),
            "torch-fsdp2": (4 * psi // S, 4 * psi // S, 8 * psi // S)}[name]
    for rank in out:
        st = rank["state"]
        assert (st["params"], st["grads"], st["optimizer"]) == want
        for key, held in rank["held"].items():
            assert st[key] == held, key


def _expected(name: str) -> dict:
    """{(group, op): (bytes, wire bytes, calls)} of one step. A unit's full flat buffer is 4*S*S_u bytes:
    reduce-scattered in the shard group (every microbatch for zero2/3, the last for zero1), its shard
    4*S_u all-reduced across the replicas once per step; all-gathers in the shard group as without HSDP."""
    units = unit_shard_numels(TINY, "block", S)
    full = {u: 4 * S * s for u, s in units.items()}
    reps = 1 if name == "zero1" else ACCUM
    gathers = list(full.values()) if name != "zero3" else \
        (list(full.values()) + [b for u, b in full.items() if u != "root"]) * ACCUM
    calls = {("dp_shard", "reduce_scatter"): list(full.values()) * reps,
             ("dp_shard", "all_gather"): gathers,
             ("dp_shard", "all_reduce"): [4],  # the grad norm's partial sums: shards differ, replicas not
             ("dp_replicate", "all_reduce"): [4 * s for s in units.values()]}
    factor = {"reduce_scatter": (S - 1) / S, "all_gather": (S - 1) / S}
    out = {}
    for (group, op), sizes in calls.items():
        f = factor.get(op, 2 * ((S if group == "dp_shard" else R) - 1) / (S if group == "dp_shard" else R))
        out[(group, op)] = (sum(sizes), sum(int(b * f) for b in sizes), len(sizes))
    return out


def _plan(name: str) -> dict:
    """`shardlab plan --json` for the same model and layout: {(group, op): (payload, calls)}."""
    argv = [f"n_layer={TINY['n_layer']}", f"d_model={TINY['d_model']}", f"n_head={TINY['n_head']}",
            f"vocab={TINY['vocab_size']}", f"seq={TINY['max_seq_len']}", f"strategy={name}", f"dp={R * S}",
            f"dp_replicate={R}", f"micro_batch={MICRO}", f"global_batch={ACCUM * MICRO * R * S}",
            "precision=fp32", "health_check=false", "--json"]  # the layer's collectives only: the doctor's check is not in `groups`
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert plan_cli.main(argv) == 0
    plan = json.loads(buf.getvalue())
    assert plan["micro_batches"] == ACCUM
    return {(c["group"], c["op"]): (c["payload"], c["calls"]) for c in plan["comm"]["collectives"]}


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_hsdp_collective_bytes_per_group_equal_analytic_and_plan(run, name):
    want = _expected(name)
    for rank in run(name):
        assert rank["groups"] == want
    assert _plan(name) == {k: (float(b), c) for k, (b, _, c) in want.items()}


@pytest.mark.parametrize("args, needle", [
    (["parallel.strategy=zero3", "parallel.dp_replicate=3", "--nproc", "4"], "world size 4 is not divisible by dp_replicate=3"),
    (["parallel.strategy=zero2", "parallel.dp_replicate=4", "--nproc", "4"], "would shard nothing"),
    (["parallel.strategy=torch-ddp", "parallel.dp_replicate=2", "--nproc", "4"], "multiply to dp_replicate=2"),
])
def test_impossible_hsdp_layout_is_one_line_exit_2(tmp_path, capsys, args, needle):
    from shardlab import cli

    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
