"""Memory under Megatron-Core's pipeline layout (Layout.pp_layout): every rank's own blocks, ends and micro batches
in flight, and the largest rank's lines as the plan's peak."""
from dataclasses import fields, replace

import pytest

from shardlab.parallel.pp import registry
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.memory import memory_lines
from shardlab.plan.pipeline_rank import PEAK_RANK, RankLayout, first_rank_numels, in_flight
from shardlab.plan.model import ModelSpec
from shardlab.plan.step import evaluate
from shardlab.plan.train_spec import TrainSpec

# five blocks, the first dense, the rest MoE, one MTP depth: "Et*2|t*2|tmL" puts the embedding and blocks 0-1 on
# rank 0, blocks 2-3 on rank 1, block 4, the MTP depth and the loss on rank 2
MOE = ModelSpec("pp-moe", n_layer=5, d_model=64, n_head=4, vocab=512, seq=32, arch="llama", n_kv_heads=2, ffn=128,
                moe_experts=4, moe_top_k=2, moe_ffn=64, moe_first_dense=1, mtp_layers=1)
LAYOUT = "Et*2|t*2|tmL"


def _rank(lay: Layout, r: int) -> RankLayout:
    return RankLayout(**{f.name: getattr(lay, f.name) for f in fields(Layout)}, pp_rank=r)


def _params(model: ModelSpec, keep) -> int:
    return sum(int(n) for name, n in model.param_shapes() if keep(name))


def test_each_rank_holds_its_own_blocks_and_ends():
    lay = Layout(dp=1, pp=3, pp_layout=LAYOUT)
    blocks = lambda *ids: lambda name: any(name.startswith(f"blocks.{i}.") for i in ids)  # noqa: E731
    assert sum(first_rank_numels(MOE, _rank(lay, 0))) == _params(MOE, lambda n: n == "wte.weight" or blocks(0, 1)(n))
    assert sum(first_rank_numels(MOE, _rank(lay, 1))) == _params(MOE, blocks(2, 3))
    assert sum(first_rank_numels(MOE, _rank(lay, 2))) == _params(
        MOE, lambda n: blocks(4)(n) or n.startswith("mtp.") or n in ("ln_f.weight", "lm_head.weight"))


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("interleaved", 2)])
def test_micro_batches_in_flight_by_rank(schedule, v):
    """1F1B: rank r holds p - r micro batches; Megatron-Core's interleaved schedule warms up (p - r - 1) x 2 +
    (v - 1) x p chunks on rank r (schedules.py get_num_warmup_microbatches) and holds one more, in units of the
    rank's v chunks; rank 0's count is the first stage's (the registry's)."""
    p, m = 4, 32
    lay = Layout(dp=1, pp=p, v=v, schedule=schedule, pp_layout="|".join(["t"] * (p * v)))
    got = [in_flight(_rank(lay, r), m) for r in range(p)]
    assert got[0] == registry.in_flight(schedule, p, m, v)
    want = [p - r for r in range(p)] if v == 1 else [((p - r - 1) * 2 + (v - 1) * p + 1) / v for r in range(p)]
    assert got == pytest.approx(want)


def test_the_plan_shows_the_largest_rank():
    train = TrainSpec(global_batch=64, micro_batch=1, seq=32, precision="bf16-mixed", flash_attention=True)
    lay = Layout(dp=1, pp=3, pp_layout=LAYOUT)
    lines = memory_lines(MOE, train, lay, 64)
    totals = [sum(ln.bytes for ln in memory_lines(MOE, train, _rank(lay, r), 64)) for r in range(3)]
    note = lines[-1]
    assert note.name == PEAK_RANK and note.bytes == 0
    assert sum(ln.bytes for ln in lines) == pytest.approx(max(totals))
    assert f"rank {totals.index(max(totals))} of 3" in note.formula
    last = memory_lines(MOE, train, _rank(lay, 2), 64)
    assert any(ln.name == "loss stage" and ln.bytes > 0 for ln in last)  # the logits and the MTP depth's block
    plan = evaluate(MOE, train, lay, load_cluster("H100-SXM", 3))
    assert plan.mem_total == pytest.approx(max(totals))


def test_without_a_layout_the_first_rank_as_before():
    train = TrainSpec(global_batch=64, micro_batch=1, seq=32, precision="bf16-mixed", flash_attention=True)
    for lay in (Layout(dp=1, pp=3), replace(Layout(dp=1, pp=3), pp_split="ends-as-blocks")):
        assert all(ln.name != PEAK_RANK for ln in memory_lines(MOE, train, lay, 64))
