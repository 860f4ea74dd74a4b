"""The planner's context parallelism: the ring counts grouped K/V heads (llama's GQA), Ulysses adds its
all-to-all buffers to memory, a rank computes its s/cp tokens (attention: s/cp queries against s keys), and
`plan search` / `layout=auto` consider cp layouts where the sequence is long enough to matter."""
from __future__ import annotations

from dataclasses import replace

from shardlab.plan import auto
from shardlab.plan.comm import tp_pp_collectives
from shardlab.plan.hardware import PRESETS
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.memory import memory_lines
from shardlab.plan.presets import model_from_args
from shardlab.plan.search import candidates, cp_layouts


def test_the_ring_counts_grouped_kv_heads():
    """llama-tiny: 4 query heads, 2 K/V heads of 16 -> a block is half GPT-2's width at the same d_model."""
    train = TrainSpec(global_batch=4, micro_batch=4, seq=32, precision="fp32")
    lay = Layout(cp=2)
    gpt, llama = (model_from_args(name, seq=32) for name in ("tiny", "llama-tiny"))
    ring = {m.arch: next(c for c in tp_pp_collectives(m, train, lay, 1) if c.group == "cp") for m in (gpt, llama)}
    block = 2 * 4 * 16 * 4  # 2 x b x s/cp x fp32 bytes, times the K/V width
    # forward 1 block, backward 1 block + 2 fp32 dK/dV, per layer (2 layers)
    assert ring["gpt2"].payload == 2 * (1 + 1 + 2) * block * 64
    assert ring["llama"].payload == 2 * (1 + 1 + 2) * block * 32


def test_ulysses_memory_has_its_all_to_all_buffers():
    model = model_from_args("llama-tiny", seq=1024)
    train = TrainSpec(global_batch=4, micro_batch=4, seq=1024, precision="fp32")
    ring = {ln.name: ln.bytes for ln in memory_lines(model, train, Layout(cp=4), 1)}
    uly = {ln.name: ln.bytes for ln in memory_lines(model, train, Layout(cp=4, cp_impl="ulysses"), 1)}
    assert "cp all-to-all buffers" not in ring
    local = 4 * 256 * 16 * 4  # b x s/cp x d_head x fp32
    # send + receive of q (4 heads), k, v (2 K/V heads replicated to 4), + the replicated copies x 2 layers
    assert uly["cp all-to-all buffers"] == 2 * local * (4 + 2 * 4) + 2 * local * (4 - 2) * 2


def test_search_considers_cp_only_for_long_sequences():
    assert cp_layouts(2048, 8) == [{}]
    got = cp_layouts(32768, 8)
    assert {"cp": 2, "cp_impl": "own"} in got and {"cp": 8, "cp_impl": "ulysses"} in got
    assert {"cp": 4, "cp_impl": "hybrid", "cp_ulysses": 2} in got
    model = model_from_args("llama3-8b", seq=32768)
    train = TrainSpec(global_batch=16, micro_batch=1, seq=32768, precision="bf16-mixed")
    cluster = replace(PRESETS["H100-SXM"], num_gpus=16)
    impls = {(lay.cp, lay.cp_impl) for lay, _ in candidates(model, train, cluster, 16)}
    assert {(2, "own"), (2, "ulysses"), (4, "hybrid"), (16, "ulysses")} <= impls


def test_cp_divides_a_ranks_compute():
    """tp=2 x cp=2 and tp=4 do the same per-rank block work (linears over 1/4 of the width or the tokens,
    attention over 1/4 of the (query, key) pairs)."""
    from shardlab.plan.compute import micro_batch_time

    model = model_from_args("llama3-8b", seq=32768)
    train = TrainSpec(global_batch=16, micro_batch=1, seq=32768, precision="bf16-mixed")
    cluster = PRESETS["H100-SXM"]
    a = micro_batch_time(model, train, Layout(dp=2, tp=4), cluster)
    b = micro_batch_time(model, train, Layout(dp=2, tp=2, cp=2), cluster)
    assert abs(a.fwd - b.fwd) / a.fwd < 0.05


def test_layout_auto_offers_cp_for_a_long_sequence():
    short = list(auto.candidates(4, 256))
    long = list(auto.candidates(4, 8192))
    assert all(c["parallel.cp"] == 1 for c in short)
    cps = {(c["parallel.cp"], c.get("parallel.cp_impl")) for c in long}
    assert {(2, "own"), (2, "ulysses"), (4, "own"), (4, "ulysses")} <= cps
    assert any(c.get("parallel.cp_ulysses") == 2 for c in long)


def test_zero_shards_over_dp_times_cp():
    """The runtime's data-parallel layer communicates over the flattened dp_cp group and a sharding layer
    shards over it (parallel/dp/apply.py, zero_state.py): the plan's ZeRO states split dp*cp ways and its
    gradient collectives run over dp*cp ranks."""
    from shardlab.plan.comm import dp_collectives
    model = model_from_args("small")
    train = TrainSpec(global_batch=4, micro_batch=2, seq=128)
    for strategy in ("zero1", "zero2", "zero3"):
        one = {ln.name: ln.bytes for ln in memory_lines(model, train, Layout(dp=4, strategy=strategy), 1)}
        cp = {ln.name: ln.bytes for ln in memory_lines(model, train, Layout(dp=2, cp=2, strategy=strategy), 1)}
        assert cp["optimizer"] == one["optimizer"], strategy
        grads = [c for c in dp_collectives(model, train, Layout(dp=2, cp=2, strategy=strategy), 1)
                 if c.op in ("reduce_scatter", "all_gather") and c.payload > 64]
        assert grads and all(c.n == 4 for c in grads), strategy
    ddp = [c for c in dp_collectives(model, train, Layout(dp=2, cp=2), 1) if c.op == "all_reduce"]
    assert ddp and all(c.n == 4 for c in ddp)
    # cp alone (dp=1) still syncs the replicas' gradients
    assert dp_collectives(model, train, Layout(dp=1, cp=2), 1)
