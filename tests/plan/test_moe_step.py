"""MoE in the plan itself (ModelSpec's moe_* fields, Layout.ep): the parameters one rank holds are the model's as
shardlab builds it (names and sizes, GPT-2 and Llama), FLOPs per token are plan/moe.py's count, expert parallelism
divides the experts a rank holds and shards their optimizer states over the expert-data-parallel group, and the
step times the experts' grouped GEMMs and the token all-to-alls."""
from dataclasses import replace

import pytest

from shardlab.plan import moe
from shardlab.plan.comm import tp_pp_collectives
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.memory import state_bytes
from shardlab.plan.model import ModelSpec
from shardlab.plan.step import evaluate
from shardlab.plan.train_spec import TrainSpec

GPT = ModelSpec("tiny-moe", n_layer=2, d_model=32, n_head=4, vocab=256, seq=16)
LLAMA = ModelSpec("llama-moe", n_layer=2, d_model=32, n_head=4, vocab=256, seq=16, arch="llama", n_kv_heads=2,
                  ffn=64)


@pytest.mark.parametrize("every,k", [(1, 2), (2, 1)])
def test_gpt_moe_parameters_are_the_models_name_by_name(every, k):
    from shardlab.model.gpt import GPTConfig, build_model

    model = build_model(GPTConfig(n_layer=2, n_head=4, d_model=32, vocab_size=256, max_seq_len=16, moe_experts=4,
                                  moe_top_k=k, moe_every=every), seed=0)
    spec = replace(GPT, moe_experts=4, moe_top_k=k, moe_every=every)
    want = {n: p.numel() for n, p in model.named_parameters()}
    assert dict(spec.param_shapes()) == want
    assert spec.params == sum(want.values()) == moe.params(GPT, moe.MoESpec(4, k, every))["total"]
    # FLOPs: plan/moe.py's count (router + k experts per MoE block)
    assert 3 * spec.flops_fwd(1, 16) == pytest.approx(moe.flops_per_token(GPT, moe.MoESpec(4, k, every), 16))


def test_llama_moe_parameters_are_the_models_name_by_name():
    from shardlab.model.gpt import build_model
    from shardlab.model.llama import LlamaConfig

    model = build_model(LlamaConfig(n_layer=2, n_head=4, d_model=32, n_kv_heads=2, intermediate_size=64,
                                    moe_experts=4, moe_top_k=2), seed=0)
    spec = replace(LLAMA, moe_experts=4, moe_top_k=2)
    assert dict(spec.param_shapes()) == {n: p.numel() for n, p in model.named_parameters()}


def test_head_dim_widens_q_and_proj():
    """Qwen3's blocks: a x d (here 4 x 16 = 64) wider than h = 32; k and v n_kv_heads x d."""
    m = replace(LLAMA, head_dim=16)
    shapes = dict(m.param_shapes())
    assert shapes["blocks.0.attn.q.weight"] == 64 * 32 and shapes["blocks.0.attn.proj.weight"] == 32 * 64
    assert shapes["blocks.0.attn.k.weight"] == 2 * 16 * 32
    assert m.params == sum(shapes.values())


def test_expert_parallelism_holds_e_over_ep_experts_and_shards_their_optimizer_over_edp():
    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    train = TrainSpec(global_batch=8, micro_batch=1, seq=16, precision="bf16-mixed")
    per_expert = 3 * 64 * 32
    one, four = (sum(n for _, n in m.expert_view(ep).param_shapes()) for ep in (1, 4))
    assert one - four == 2 * (8 - 2) * per_expert  # 2 MoE blocks, 6 experts fewer each
    assert m.expert_view(4).params == m.params  # the model's size is the model's
    lay = Layout(dp=8, strategy="zero1", ep=4)
    lay.check(m)
    assert lay.edp == 2
    st = state_bytes(m.expert_view(4), train, lay)
    held = 2 * 2 * per_expert  # 2 experts in each of 2 blocks
    assert st["expert optimizer"] == pytest.approx(train.optimizer_bytes_of(m, lay) * held * (1 / 2 - 1 / 8))
    assert "expert grads" not in st and "expert params" not in st  # zero1: gradients and weights whole
    z3 = state_bytes(m.expert_view(4), train, Layout(dp=8, strategy="zero3", ep=4))
    assert z3["expert grads"] == pytest.approx(2 * held * (1 / 2 - 1 / 8))  # ZeRO-3: every expert state over edp
    assert z3["expert params"] == pytest.approx(2 * held * (1 / 2 - 1 / 8))
    assert "expert params" not in state_bytes(m.expert_view(4), train, Layout(dp=8, strategy="zero2", ep=4))


@pytest.mark.parametrize("strategy,ep", [("zero1", 4), ("zero1", 8), ("ddp", 4)])
def test_expert_gradients_go_over_the_expert_data_parallel_group(strategy, ep):
    """The experts' gradients (and ZeRO's gathers of them) go over the edp = dp / ep ranks holding the same experts,
    every ep-th rank; the rest (the router included) over dp, as before; nothing for the experts where edp = 1."""
    from shardlab.plan.comm import dp_collectives
    from shardlab.plan.comm_time import group_placement
    from shardlab.plan.geometry import is_expert, padded, units

    m = replace(LLAMA, moe_experts=8, moe_top_k=2).expert_view(ep)
    train = TrainSpec(global_batch=8, micro_batch=1, seq=16, precision="bf16-mixed")
    lay = Layout(dp=8, strategy=strategy, ep=ep)
    experts = [n for name, n in m.param_shapes() if is_expert(name)]
    dense = [n for name, n in m.param_shapes() if not is_expert(name)]
    assert (sum(map(sum, units(m, part="experts"))), sum(map(sum, units(m, part="dense")))) == (sum(experts), sum(dense))
    assert any(".router." in name and not is_expert(name) for name, _ in m.param_shapes())
    by = {(c.op, c.group): c for c in dp_collectives(m, train, lay, 1)}
    gb = train.grad_bytes
    if strategy == "ddp":
        assert by[("all_reduce", "dp")].payload == gb * sum(dense)
        assert by[("all_reduce", "edp")].payload == gb * sum(experts) and by[("all_reduce", "edp")].n == 2
    else:
        assert by[("reduce_scatter", "dp")].payload == gb * padded(dense, 8, lay.padding)
        edp = [c for c in by.values() if c.group == "edp"]
        if lay.edp == 1:
            assert edp == []
        else:
            assert by[("reduce_scatter", "edp")].payload == gb * padded(experts, 2, lay.padding)
            assert by[("all_gather", "edp")].n == 2
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8, gpus_per_node=4)
    assert group_placement("edp", lay, c) == max(1, min(lay.edp, 4 // ep))  # every ep-th rank
    p = evaluate(m, train, lay, c)
    if strategy == "zero1":  # the optimizer steps its dense shard (1/dp) and its experts' (1/edp)
        assert f"{padded(dense, 8, lay.padding) / 8 + padded(experts, lay.edp, lay.padding) / lay.edp:,.0f} params" \
            in p.explain["optimizer"]


def test_the_step_times_the_all_to_alls_and_the_grouped_experts():
    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    train = TrainSpec(global_batch=16, micro_batch=2, seq=16, precision="bf16-mixed")
    lay = Layout(dp=8, strategy="zero1", ep=4)
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8)
    a2a = [x for x in tp_pp_collectives(m, train, lay, 1) if x.group == "ep"]
    assert len(a2a) == 1
    # 4 all-to-alls (dispatch, combine; forward, backward) per MoE block, each of tokens x k rows of h in bf16
    assert (a2a[0].calls, a2a[0].payload) == (4 * 2, 4 * 2 * (2 * 16) * 2 * 32 * 2)
    p = evaluate(m, train, lay, c)
    line = next(cl for cl in p.comm if cl.c.group == "ep")
    assert line.time > 0 and p.times["tp_pp_comm"] >= line.time  # on the critical path
    dense = evaluate(replace(m, moe_experts=0), train, Layout(dp=8, strategy="zero1"), c)
    assert p.times["forward"] > dense.times["forward"]  # k = 2 experts a token, the router, the permutations
    with pytest.raises(ValueError, match="must divide moe_experts 8 and tp x cp x dp = 2"):
        Layout(dp=2, ep=4).check(m)


def test_ep_overlap_hides_the_all_to_alls_and_hybridep_holds_its_sms():
    """ep_overlap: each all-to-all beside its share of the other pass (only what outlasts it shows); a dispatcher
    holding its own SMs (ep_sms) costs its hidden time x ep_sms / SMs instead of NCCL's share."""
    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    train = TrainSpec(global_batch=64, micro_batch=2, seq=16, precision="bf16-mixed")  # 4 micro batches a rank
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8)
    plain, hidden, held = (evaluate(m, train, Layout(dp=8, strategy="zero1", ep=4, **kw), c)
                           for kw in ({}, {"ep_overlap": True}, {"ep_overlap": True, "ep_sms": 66}))
    a2a = [next(cl for cl in p.comm if cl.c.group == "ep") for p in (plain, hidden, held)]
    assert a2a[0].exposed == a2a[0].time and a2a[1].exposed < a2a[1].time
    assert held.times["comm_sm_cost"] - hidden.times["comm_sm_cost"] == pytest.approx(
        (a2a[2].time - a2a[2].exposed) * (66 / 132 - c.sm_share_comm))
    with pytest.raises(ValueError, match="ep_overlap needs ep > 1"):
        Layout(dp=8, ep_overlap=True).check(m)


def test_ep_overlap_pairs_only_the_steady_states_passes():
    """Megatron-Core's combined 1F1B pairs a forward with another micro batch's backward only in the steady state:
    the first rank's warm-up forwards (interleaved: 2(p - 1) + (v - 1)p, plus one for the overlap) and as many
    cool-down backwards run alone, their all-to-alls exposed; without a pipeline the first forward and last
    backward. The exposed time is the paired share's plus the unpaired share of the whole."""
    from shardlab.plan.critical import unpaired

    assert unpaired(Layout(dp=8, ep=8), 4) == 1 / 4
    assert unpaired(Layout(dp=8, pp=8, v=4, ep=8), 128) == (14 + 24 + 1) / 512
    assert unpaired(Layout(dp=8, pp=4, ep=8), 16) == 4 / 16 and unpaired(Layout(dp=8, pp=2, v=8, ep=8), 2) == 1.0
    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8)
    few, many = (evaluate(m, TrainSpec(global_batch=g, micro_batch=2, seq=16, precision="bf16-mixed"),
                          Layout(dp=8, strategy="zero1", ep=4, ep_overlap=True), c) for g in (16, 256))
    a, b = (next(cl for cl in p.comm if cl.c.group == "ep") for p in (few, many))
    assert a.exposed == a.time  # one micro batch: nothing to pair with
    assert b.time > b.exposed >= b.time / 16  # 16 micro batches: the first forward and last backward alone


def test_plan_search_chooses_ep_for_an_moe_model(capsys):
    """`plan search` takes an MoE model and tries every ep that divides its experts and a stage's ranks; the layout
    it prints plans as it says (ep in the arguments); a user's ep= is refused in one line (the search chooses it)."""
    from shardlab.plan.cli import main as plan_main
    from shardlab.plan.search import args_of, search

    m = replace(LLAMA, moe_experts=8, moe_top_k=2, seq=64)
    train = TrainSpec(global_batch=16, micro_batch=1, seq=64, precision="bf16-mixed")
    plans = search(m, train, replace(load_cluster("H100-SXM", 8), num_gpus=8), fitting_only=True)
    assert {p.layout.ep for p in plans} == {1, 2, 4, 8}
    p = next(p for p in plans if p.layout.ep == 4)
    assert "ep=4" in args_of(p) and "ep=4" in p.layout.describe()
    assert plan_main(["search", "model=llama-small", "gpus=8", "moe_experts=8", "ep=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chooses ep itself" in err[0]


def test_a_runs_plan_carries_its_moe_blocks_and_ep():
    """from_config (explain, parallel.layout=auto, the dry run): a run's model.moe_* and parallel.ep reach the plan,
    whose parameters are the built model's."""
    from shardlab import config
    from shardlab.model.gpt import build_model
    from shardlab.model.configs import resolve_model_config
    from shardlab.plan.from_config import from_config

    cfg = config.validate(config.load(None, ["model.preset=small", "train.seq_len=64", "model.moe_experts=4",
                                             "model.moe_top_k=1", "parallel.strategy=ddp", "parallel.ep=2"]), 2)
    model, _, lay = from_config(cfg, 2)
    assert (model.moe_experts, model.moe_top_k, lay.ep) == (4, 1, 2)
    built = build_model(resolve_model_config(cfg.model, 64), seed=0)
    assert model.params == sum(p.numel() for p in built.parameters())


# DeepSeek's MoE blocks in miniature: the experts narrower than the dense MLP, a shared expert, a leading dense block
DEEPSEEKISH = replace(LLAMA, n_layer=4, moe_experts=8, moe_top_k=2, moe_ffn=16, moe_shared_ffn=24, moe_first_dense=1)


def test_expert_width_shared_expert_and_leading_dense_blocks_count_their_parameters_and_flops():
    m = DEEPSEEKISH
    assert [m.is_moe(i) for i in range(4)] == [False, True, True, True] and m.mixed_blocks
    shapes = dict(m.param_shapes())
    h = 32
    assert shapes["blocks.0.mlp.gate.weight"] == 64 * h  # the dense block keeps ffn
    assert shapes["blocks.1.mlp.experts.7.down.weight"] == h * 16 and shapes["blocks.1.mlp.shared.up.weight"] == 24 * h
    assert "blocks.0.mlp.router.weight" not in shapes and shapes["blocks.3.mlp.router.weight"] == 8 * h
    assert m.params == sum(shapes.values())
    # forward FLOPs per token: each block's GEMMs as its kind is (router 2Eh, k experts and the shared one)
    dense_mlp, moe_mlp = 6 * 64 * h, 2 * 8 * h + 2 * 6 * 16 * h + 6 * 24 * h
    attn = 2 * (2 * m.q_width * h + 2 * m.kv_width * h) + 4 * 16 * m.q_width
    assert m.n_layer * m.flops_fwd_layer(1, 16) == pytest.approx(4 * attn + dense_mlp + 3 * moe_mlp)


def test_a_shared_expert_splits_as_the_mlp_under_tp_and_is_not_an_expert():
    from shardlab.plan.geometry import is_expert, tp_local

    shapes = dict(DEEPSEEKISH.param_shapes())
    down, up = "blocks.1.mlp.shared.down.weight", "blocks.1.mlp.shared.up.weight"
    assert tp_local(down, shapes[down], 2).row == 24 // 2 and tp_local(up, shapes[up], 2).rows == 24 // 2
    assert not is_expert(down) and is_expert("blocks.1.mlp.experts.0.down.weight")


def test_mixed_blocks_are_timed_and_stored_as_their_two_kinds_weighted():
    """moe_every > 1 and leading dense blocks: no longer planned as if every block were MoE (an upper bound)."""
    from shardlab.plan.compute import micro_batch_time
    from shardlab.plan.memory import stored_per_layer

    m = replace(DEEPSEEKISH, moe_first_dense=0, moe_every=2)  # blocks 1 and 3 MoE: half
    train = TrainSpec(global_batch=16, micro_batch=2, seq=16, precision="bf16-mixed")
    lay = Layout(dp=8, strategy="zero1", ep=4)
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8)
    mixed, moe_, dense = (micro_batch_time(x, train, lay, c) for x in (m, m.uniform(True), m.uniform(False)))
    assert mixed.fwd == pytest.approx((moe_.fwd + dense.fwd) / 2) and dense.fwd < mixed.fwd < moe_.fwd
    assert mixed.bwd == pytest.approx((moe_.bwd + dense.bwd) / 2)
    per = [stored_per_layer(x, train, lay)[0] for x in (m, m.uniform(True), m.uniform(False))]
    assert per[0] == pytest.approx((per[1] + per[2]) / 2) and per[2] != per[1]
    assert "2 of 4 blocks MoE" in evaluate(m, train, lay, c).explain["forward"]


def test_plan_cli_takes_the_expert_width_shared_expert_and_leading_dense_keys(capsys):
    from shardlab.plan.cli import main as plan_main

    args = ["model=llama-tiny", "gpus=4", "micro_batch=2", "seq=128", "moe_experts=4", "moe_top_k=2", "ep=2",
            "moe_ffn=64", "moe_shared_ffn=64", "moe_first_dense=1"]
    assert plan_main(args) in (0, 1)
    out = capsys.readouterr().out
    assert "E=4 k=2 f_e=64 shared=64 first 1 dense" in out
    assert plan_main(["model=tiny", "gpus=4", "moe_experts=4", "moe_ffn=64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arch llama only" in err[0], err


DSV3 = ModelSpec("deepseek-v3", n_layer=61, d_model=7168, n_head=128, vocab=129280, seq=4096, arch="llama", ffn=18432,
                 head_dim=128, moe_experts=256, moe_top_k=8, moe_ffn=2048, moe_shared_ffn=2048, moe_first_dense=3,
                 mla_kv_rank=512, mla_q_rank=1536, mla_rope_dim=64, mla_v_dim=128)


def test_latent_attention_counts_deepseek_v3s_parameters():
    """DeepSeek-V3's 671 B parameters (37 B active a token) from its configuration: latent attention (q and kv
    latents, rotated 64-wide parts, 128 heads of 128 + 64 / 128), three dense blocks, 58 MoE blocks of 256 experts
    2,048 wide, top-8, and a shared expert; the multi-token-prediction module not counted (as the 671 B is not)."""
    shapes = dict(DSV3.param_shapes())
    assert DSV3.params == sum(shapes.values())
    assert round(DSV3.params / 1e9) == 671
    active = DSV3.params - DSV3.moe_blocks * (256 - 8) * DSV3.expert_params
    assert round(active / 1e9) == 38  # "37B activated": 37.55 B
    assert shapes["blocks.0.attn.kv_up.weight"] == 128 * (128 + 128) * 512
    assert shapes["blocks.0.attn.q_up.weight"] == 128 * (128 + 64) * 1536
    assert shapes["blocks.0.attn.kv_down.weight"] == (512 + 64) * 7168


def test_latent_attention_splits_its_up_projections_by_heads_and_keeps_the_latents_whole():
    from shardlab.plan.geometry import tp_local
    from shardlab.plan.ops import layer_ops

    shapes = dict(DSV3.param_shapes())
    for name in ("q_down", "kv_down", "q_norm", "kv_norm"):
        key = f"blocks.0.attn.{name}.weight"
        assert tp_local(key, shapes[key], 4) == shapes[key]
    assert tp_local("blocks.0.attn.kv_up.weight", shapes["blocks.0.attn.kv_up.weight"], 4).rows == 128 * 256 // 4
    assert tp_local("blocks.0.attn.proj.weight", shapes["blocks.0.attn.proj.weight"], 4).row == 128 * 128 // 4
    # the ops' GEMM FLOPs are the model's, split over TP (the latents' on each rank's sequence-parallel share)
    m = replace(DSV3, moe_experts=0, moe_first_dense=0)
    for t, sp in ((1, False), (4, True)):
        ops = layer_ops(m, 1, 4096, t, 2, True, sp=sp)
        gemm = sum(o.flops for o in ops if o.kind == "gemm")
        assert gemm * t == pytest.approx(m.flops_fwd_layer(4096, 4096))


def test_multi_token_prediction_adds_a_depth_on_the_last_stage():
    """DeepSeek-V3's MTP depth: two norms, the 2h -> h projection, an MoE block and a final norm (11.6 B of its own;
    the embedding and the head are the model's), its FLOPs a block, the projection and the logits again; timed on
    the last stage with the head."""
    from shardlab.plan.compute import micro_batch_time

    m = replace(DSV3, mtp_layers=1)
    assert m.params == sum(dict(m.param_shapes()).values()) and round(m.mtp_params / 1e9, 1) == 11.6
    assert m.flops_fwd(1, 4096) - DSV3.flops_fwd(1, 4096) == pytest.approx(
        4 * 7168 ** 2 + DSV3.uniform(True).flops_fwd_layer(1, 4096) + 2 * 7168 * 129280)
    small = replace(DEEPSEEKISH, mtp_layers=1)
    train = TrainSpec(global_batch=16, micro_batch=2, seq=16, precision="bf16-mixed")
    c = replace(load_cluster("H100-SXM", 8), num_gpus=8)
    lay = Layout(dp=4, pp=2, strategy="zero1", ep=4)
    with_mtp, without = (micro_batch_time(x, train, lay, c) for x in (small, DEEPSEEKISH))
    assert with_mtp.head[0] > without.head[0] and with_mtp.fwd >= without.fwd


def test_remote_nodes_counts_the_copies_a_deduplicating_dispatcher_sends():
    """The expected remote nodes a token reaches, against every equally likely routing enumerated: k of E experts
    over `nodes` nodes, and group-limited routing (top g of G groups, groups whole on nodes)."""
    from itertools import combinations

    for k, E, nodes in ((2, 8, 2), (3, 12, 4), (8, 16, 4)):
        per = E // nodes
        picks = list(combinations(range(E), k))
        want = sum(len({x // per for x in c} - {0}) for c in picks) / len(picks)  # this token's node is 0
        assert moe.remote_nodes(k, E, nodes) == pytest.approx(want)
    G, g, nodes = 8, 4, 4
    picks = list(combinations(range(G), g))
    want = sum(len({x // (G // nodes) for x in c} - {0}) for c in picks) / len(picks)
    assert moe.remote_nodes(8, 256, nodes, G, g) == pytest.approx(want) == pytest.approx(3 * (1 - 15 / 70))
    assert moe.remote_nodes(8, 256, 1) == 0.0


def test_ep_dedup_sends_each_token_once_per_remote_node():
    m = replace(LLAMA, moe_experts=16, moe_top_k=8)
    train = TrainSpec(global_batch=32, micro_batch=2, seq=16, precision="bf16-mixed")
    c = replace(load_cluster("H100-SXM", 16), num_gpus=16, gpus_per_node=4)  # ep 16 over 4 nodes
    plain, dedup = (evaluate(m, train, Layout(dp=16, strategy="zero1", ep=16, ep_dedup=x), c) for x in (False, True))
    a, b = (next(cl for cl in p.comm if cl.c.group == "ep") for p in (plain, dedup))
    assert a.inter == pytest.approx(a.c.payload * 12 / 16)  # every copy: (n - local) / n
    assert b.inter == pytest.approx(b.c.payload * moe.remote_nodes(8, 16, 4) / 8) and b.time < a.time
    assert "deduplicated across nodes" in b.c.why
    one_node = replace(c, gpus_per_node=16)
    x, y = (evaluate(m, train, Layout(dp=16, strategy="zero1", ep=16, ep_dedup=v), one_node) for v in (False, True))
    assert x.step_time == y.step_time  # within a node nothing crosses the network
    with pytest.raises(ValueError, match="ep_dedup needs ep > 1"):
        Layout(dp=2, ep_dedup=True).check(m)


def test_a_megatron_pipeline_layout_places_the_blocks_ends_and_mtp_depths():
    """Megatron-Core's pipeline_model_parallel_layout (Layout.pp_layout): `|` between virtual stages, E, t, m, L,
    x*n and (...)*n; virtual stage i on rank i % pp; the step is timed on the slowest rank's own blocks, ends and
    MTP depths (the planner's split had put a full share of blocks beside the head and the MTP depth)."""
    from shardlab.plan.compute import micro_batch_time
    from shardlab.plan.layout import pp_layout_ranks, pp_layout_stages

    assert pp_layout_stages("Et*2|(t*3|)*2tmL") == [(2, 1, 0, 0), (3, 0, 0, 0), (3, 0, 0, 0), (1, 0, 1, 1)]
    assert pp_layout_ranks("Et*2|(t*3|)*2tmL", 2) == [(5, 1, 0, 0), (4, 0, 1, 1)]
    m = replace(DSV3, mtp_layers=1)
    assert pp_layout_ranks("Et*4|(t*4|)*14tmL", 2) == [(32, 1, 0, 0), (29, 0, 1, 1)]
    train = TrainSpec(global_batch=256, micro_batch=1, seq=4096, precision="bf16-mixed")
    c = replace(load_cluster("B200", 256), num_gpus=256)
    own, laid = (micro_batch_time(m, train, Layout(dp=16, pp=16, strategy="zero1", ep=8, pp_layout=x), c)
                 for x in ("", "Et*4|(t*4|)*14tmL"))
    assert laid.fwd < own.fwd  # 4 blocks on the busiest rank, where the split had 4 + the head and the MTP depth
    assert "pp_layout=Et*4|(t*4|)*14tmL" in evaluate(m, train, Layout(dp=16, pp=16, strategy="zero1", ep=8,
                                                                       pp_layout="Et*4|(t*4|)*14tmL"), c).explain["forward"]
    for bad in ("Et*4|(t*4|)*14tL", "Et*4|(t*4|)*13tmL", "Et*4|(t*4)*14tmL", "Ex"):
        with pytest.raises(ValueError, match="pp_layout"):
            Layout(dp=16, pp=16, strategy="zero1", ep=8, pp_layout=bad).check(m)


def test_megatron_moe_blocks_keep_no_expert_output_and_recompute_modules_free_what_they_recompute():
    """Transformer Engine's MoE block as Megatron-Core runs it keeps, per routed copy, fc1's input, gate and up,
    fc2's input and the fp32 probability (the probabilities weigh the fused SwiGLU's output, so no expert output is
    kept); Megatron-Core's recompute_modules (Layout.recompute_modules) free, per token: mla_up_proj q, k and v;
    moe_act fc2's input per copy; core_attn the log-sum-exp (and proj's FP8 copy); mlp a dense block's MLP but its
    input. Counted by hand for DeepSeek-V3 at TP 2 with SP, MXFP8 (1-byte GEMM inputs), 4,096 tokens."""
    from shardlab.plan.activations import te_llama_activation_bytes_per_layer as te

    m, s, t = DSV3.uniform(True), 4096, 2
    h, a, f, k, qk, dv = 7168, 128, 2048, 8, 192, 128
    base = te(m, 1, s, t, True, fp8=True)
    one_copy = te(replace(m, moe_top_k=k + 1), 1, s, t, True, fp8=True) - base
    assert one_copy == pytest.approx(s * (h + 4 * f + f + 4) / t)  # no 2h expert output
    gone = {"mla_up_proj": 2 * (2 * a * qk + a * dv) / t, "moe_act": k * f / t, "core_attn": (4 * a + a * dv) / t}
    for mod, per_token in gone.items():
        assert base - te(m, 1, s, t, True, fp8=True, modules=frozenset({mod})) == pytest.approx(s * per_token), mod
    dense = DSV3.uniform(False)
    fd = 18432
    assert te(dense, 1, s, t, True, fp8=True) - te(dense, 1, s, t, True, fp8=True, modules=frozenset({"mlp"})) \
        == pytest.approx(s * (4 / t + h / t + fd / t + 4 * fd / t))
    assert te(m, 1, s, t, True, fp8=True, modules=frozenset({"mlp"})) == base  # MoE blocks: Megatron's mlp skips them


def test_recompute_modules_run_their_ops_again_and_are_checked(capsys):
    """The backward runs each module's forward ops again: mla_up_proj the latents' up-projections and q, k assembly,
    moe_act the experts' SwiGLU (MoE blocks only), mlp a dense block's MLP; the plan's memory falls and its step
    grows by that recompute; a module the planner does not count, a module beside recompute=full, or mla_up_proj
    without latent attention is refused (one line, exit 2 from the CLI)."""
    from shardlab.plan.cli import main as plan_main
    from shardlab.plan.ops import llama_layer_ops
    from shardlab.plan.recompute import recomputed_ops

    moe_block, dense_block = (llama_layer_ops(DSV3.uniform(x), 1, 4096, 2, 2, True, sp=True) for x in (True, False))
    names = lambda ops: [o.name for o in ops]  # noqa: E731
    mods = frozenset({"mla_up_proj", "moe_act", "mlp"})
    assert names(recomputed_ops(moe_block, "none", modules=mods)) == ["q_up", "kv_up", "rope", "mla_cat", "swiglu"]
    assert names(recomputed_ops(dense_block, "none", modules=mods)) == ["q_up", "kv_up", "rope", "mla_cat", "ln_2",
                                                                         "gate", "up", "swiglu", "down"]
    m = replace(DSV3, n_layer=8, moe_first_dense=1)
    train = TrainSpec(global_batch=64, micro_batch=1, seq=4096, precision="bf16-mixed", flash_attention=True,
                      llama_impl="te")
    c = replace(load_cluster("B200", 64), num_gpus=64)
    plain, rec = (evaluate(m, train, Layout(dp=32, tp=2, sp=True, strategy="zero1", ep=8, recompute_modules=x), c)
                  for x in ("", "mla_up_proj,moe_act,mlp"))
    assert rec.mem_total < plain.mem_total and rec.step_time > plain.step_time and "recompute" in rec.explain["backward"]
    with pytest.raises(ValueError, match="recompute_modules must be one of"):
        Layout(dp=2, recompute_modules="core_attn,attn").check(m)
    with pytest.raises(ValueError, match="needs recompute=none"):
        Layout(dp=2, recompute="full", recompute_modules="mlp").check(m)
    with pytest.raises(ValueError, match="needs latent attention"):
        Layout(dp=2, recompute_modules="mla_up_proj").check(LLAMA)
    with pytest.raises(ValueError, match="llama_impl=te"):
        evaluate(LLAMA, TrainSpec(global_batch=4, micro_batch=1, seq=16), Layout(dp=1, recompute_modules="mlp"),
                 replace(load_cluster("H100-SXM", 1), num_gpus=1))
    capsys.readouterr()
    assert plan_main(["model=llama-tiny", "gpus=2", "recompute_modules=mla_up_proj"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs latent attention" in err[0], err


def test_a_pipeline_layout_times_each_rank_with_its_own_dense_and_moe_blocks():
    """Under a pipeline layout a model of mixed blocks is timed rank by rank with the rank's own blocks: DeepSeek-V3's
    three dense blocks sit on the first stage, so a middle rank of four MoE blocks sets the pace, where the model's
    share (58 of 61 MoE) had been taken for every rank."""
    from shardlab.plan.compute import micro_batch_time
    from shardlab.plan.layout import pp_layout_moe_blocks

    m = replace(DSV3, mtp_layers=1)
    lay = "Et*4|(t*4|)*14tmL"
    assert pp_layout_moe_blocks(lay, 16, m.is_moe) == [1] + [4] * 14 + [1]
    assert pp_layout_moe_blocks("Ettt|tt|tt|ttmL", 2, lambda i: i >= 3) == [2, 4]
    train = TrainSpec(global_batch=256, micro_batch=1, seq=4096, precision="bf16-mixed")
    c = replace(load_cluster("B200", 256), num_gpus=256)
    from shardlab.plan.compute import _micro_batch_time

    laid = Layout(dp=16, pp=16, strategy="zero1", ep=8, pp_layout=lay)
    mt = micro_batch_time(m, train, laid, c)
    middle = _micro_batch_time(m.uniform(True), train, laid, c, rank=1)  # four MoE blocks, no end
    all_moe = micro_batch_time(m.uniform(True), train, laid, c)  # the first rank's 4 blocks + the embedding
    assert (mt.fwd, mt.bwd) == (middle.fwd, middle.bwd) and mt.fwd + mt.bwd < all_moe.fwd + all_moe.bwd
    assert "4 MoE and 0 dense" in mt.mixed


def test_megatrons_all_to_all_dispatcher_sorts_by_local_expert_and_flex_does_not():
    """Megatron-Core's all-to-all dispatcher (TE's layers) copies the received rows into local-expert order and back
    (sort_chunks_by_idxs): tokens x k rows of h each way, read and written, the sort with the fp32 probabilities.
    HybridEP / DeepEP (flex), one expert a rank, or shardlab's own layers: no such copy, the step unchanged."""
    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    train = TrainSpec(global_batch=8, micro_batch=2, seq=16, llama_impl="te")
    lay = Layout(dp=4, ep=4)
    sort, unsort = moe.sort_ops(m.expert_view(4), train, lay, 2)
    slots = 2 * 16 * 2
    assert (sort.bytes, unsort.bytes) == (2 * slots * 32 * 2 + 2 * slots * 4, 2 * slots * 32 * 2)
    assert sort.bwd_bytes == sort.bytes and unsort.bwd_bytes == unsort.bytes
    for view, t, lay2 in ((m.expert_view(4), train, replace(lay, ep_dispatcher="flex")),
                          (m.expert_view(8), train, replace(lay, dp=8, ep=8)),
                          (m.expert_view(4), replace(train, llama_impl="own"), lay)):
        assert moe.sort_ops(view, t, lay2, 2) == []
    c = load_cluster("h100", 4)
    alltoall, flex = (evaluate(m, train, replace(lay, ep_dispatcher=d), c) for d in ("alltoall", "flex"))
    assert alltoall.times["forward"] > flex.times["forward"] and "sort_chunks_by_idxs" in alltoall.explain["forward"]


@pytest.mark.parametrize("probs_dtype,nbytes", [("float32", 4), ("bfloat16", 2)])
def test_the_eager_expert_bias_bytes_are_counted_through_torchs_dispatcher(probs_dtype, nbytes):
    """moe.EXPERT_BIAS_BYTES: Megatron-Core's TEGroupedMLP._apply_bias as it runs (per expert t + b * p, the rows
    concatenated, cast back), its aten ops' operand and result bytes summed, views and allocations left out:
    per element of the rows, forward and backward, by the probabilities' dtype (the bias vectors and the
    probabilities' own bytes are the rounding, below 1/8 of a byte an element here)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Bytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.split(".")[0] not in ("view", "_unsafe_view", "split", "split_with_sizes", "slice",
                                                   "detach", "alias", "as_strided", "expand", "t", "unsqueeze"):
                self.total += sum(x.numel() * x.element_size() for x in tree_flatten((args, kwargs, out))[0]
                                  if isinstance(x, torch.Tensor))
            return out

    experts, rows, h = 4, 256, 512
    t = torch.randn(experts * rows, h, dtype=torch.bfloat16, requires_grad=True)
    bias = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    probs = torch.rand(experts * rows, 1, dtype=getattr(torch, probs_dtype), requires_grad=True)
    split = [rows] * experts
    with Bytes() as fwd:
        out = torch.cat([a + b * p for a, b, p in zip(torch.split(t, split), bias, torch.split(probs, split))]
                        ).to(t.dtype)
    grad = torch.randn_like(out)
    with Bytes() as bwd:
        out.backward(grad)
    n = experts * rows * h
    assert (round(fwd.total / n), round(bwd.total / n)) == moe.EXPERT_BIAS_BYTES[nbytes]


def test_the_eager_expert_bias_is_planned_where_megatron_runs_it():
    """GPT-OSS-style experts with biases in TE's layers: one `expert_bias` pass a block over tokens x k rows of h,
    at the flex dispatchers' fp32 probabilities or the all-to-all's 16-bit ones; none without the biases, in
    shardlab's own layers, or fully graphed (TE's op fuser scales the bias inside its grouped linear)."""
    m = replace(LLAMA, moe_experts=8, moe_top_k=2, expert_bias=True).expert_view(4)
    train = TrainSpec(global_batch=8, micro_batch=2, seq=16, llama_impl="te")
    lay = Layout(dp=4, ep=4)
    n = 2 * 16 * 2 * 32
    for dispatcher, nbytes in (("alltoall", 2), ("flex", 4)):
        (op,) = moe.bias_ops(m, train, replace(lay, ep_dispatcher=dispatcher))
        assert (op.bytes, op.bwd_bytes) == tuple(b * n for b in moe.EXPERT_BIAS_BYTES[nbytes])
    for view, t in ((replace(m, expert_bias=False), train), (m, replace(train, llama_impl="own")),
                    (m, replace(train, cuda_graphs="full"))):
        assert moe.bias_ops(view, t, lay) == []


def test_the_eager_glu_clamp_bytes_and_kernels_are_counted_through_torchs_dispatcher():
    """moe.CLAMP_BYTES and CLAMP_KERNELS: Megatron-Core's weighted_bias_quick_geglu_impl with a clamp value, its
    eager part as it runs (the halves chunked, each clamped, concatenated, viewed), aten ops' operand and result
    bytes summed and the ops that launch a kernel counted, views left out: per element of the rows x f (the
    compiled activation after it is the planned `swiglu`, not counted here)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    views = ("view", "_unsafe_view", "split", "split_with_sizes", "slice", "chunk", "detach", "alias", "as_strided",
             "expand", "t", "unsqueeze")

    class Count(TorchDispatchMode):
        total, kernels = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.split(".")[0] not in views:
                self.kernels += 1
                self.total += sum(x.numel() * x.element_size() for x in tree_flatten((args, kwargs, out))[0]
                                  if isinstance(x, torch.Tensor))
            return out

    rows, f, clamp = 1024, 512, 7.0
    x = torch.randn(rows, 2 * f, dtype=torch.bfloat16, requires_grad=True)
    with Count() as fwd:
        x_glu, x_linear = x.chunk(2, -1)
        y = torch.cat((x_glu.clamp(min=None, max=clamp), x_linear.clamp(min=-clamp, max=clamp)), -1).view(-1, 2 * f)
    grad = torch.randn_like(y)
    with Count() as bwd:
        y.backward(grad)
    n = rows * f
    assert (round(fwd.total / n), round(bwd.total / n)) == moe.CLAMP_BYTES
    assert (fwd.kernels, bwd.kernels) == moe.CLAMP_KERNELS


def test_the_eager_glu_clamp_is_planned_where_megatron_runs_it(capsys):
    """GPT-OSS-style clamped experts in TE's layers: one `glu_clamp` pass a block over tokens x k rows of f, run
    again under moe_act's recompute, its kernels in the host's count and its clamped copy kept for the backward
    (none under moe_act); nothing unclamped, in shardlab's own layers, or fully graphed (TE's op fuser clamps
    inside its kernel). A negative limit is refused."""
    from shardlab.plan import host
    from shardlab.plan.recompute import module_ops

    m = replace(LLAMA, moe_experts=8, moe_top_k=2, glu_clamp=7.0).expert_view(4)
    train = TrainSpec(global_batch=8, micro_batch=2, seq=16, llama_impl="te")
    lay = Layout(dp=4, ep=4)
    n = 2 * 16 * 2 * m.expert_ffn
    (op,) = moe.clamp_ops(m, train, lay)
    assert (op.bytes, op.bwd_bytes) == tuple(b * n for b in moe.CLAMP_BYTES)
    block = [type(op)("router", "gemm"), op]
    assert module_ops(block, frozenset({"moe_act"})) == [op]
    plain = replace(m, glu_clamp=0.0)
    assert [a - b for a, b in zip(host.te_kernels(m, train, lay), host.te_kernels(plain, train, lay))] \
        == list(moe.CLAMP_KERNELS)
    assert moe.clamp_saved_bytes(m, train, lay) == n * 2 * 2
    assert moe.clamp_saved_bytes(m, train, replace(lay, recompute_modules="moe_act")) == 0
    for view, t in ((plain, train), (m, replace(train, llama_impl="own")), (m, replace(train, cuda_graphs="full"))):
        assert moe.clamp_ops(view, t, lay) == [] and moe.clamp_saved_bytes(view, t, lay) == 0
    c = load_cluster("h100", 4)
    full = replace(LLAMA, moe_experts=8, moe_top_k=2)
    clamped, unclamped = (evaluate(replace(full, glu_clamp=g), train, lay, c) for g in (7.0, 0.0))
    assert clamped.times["forward"] > unclamped.times["forward"] and "clamped at 7" in clamped.explain["forward"]
    assert clamped.mem_total > unclamped.mem_total
    with pytest.raises(ValueError, match="glu_clamp"):
        replace(full, glu_clamp=-1.0)
    from shardlab.plan.cli import main as plan_main

    base = ["model=llama-tiny", "gpus=4", "micro_batch=2", "seq=128", "moe_experts=4", "moe_top_k=2", "ep=2",
            "llama_impl=te", "cluster=h100"]
    assert plan_main(base + ["glu_clamp=7", "--explain"]) in (0, 1) and "clamped at 7" in capsys.readouterr().out
    assert plan_main(base + ["glu_clamp=-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "glu_clamp must be 0 or positive" in err[0], err


def test_the_busiest_ranks_load_scales_its_experts_all_to_all_and_activations():
    """TrainSpec.moe_load (the busiest expert-parallel rank's token-slots over the mean): that rank's expert GEMMs
    and the passes over their rows, its all-to-all bytes and its experts' activations scale by it; the router,
    the permutation of its own tokens and the attention do not; without ep it changes nothing (every expert on
    every rank); below 1 it is refused."""
    from shardlab.plan.activations import te_llama_activation_bytes_per_layer as te
    from shardlab.plan.ops import moe_ops

    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    even, busy = m.expert_view(4), m.expert_view(4, 1.5)
    by_name = lambda ops: {o.name: o for o in ops}  # noqa: E731
    a, b = by_name(moe_ops(even, 64, 2)), by_name(moe_ops(busy, 64, 2))
    for name in ("gate", "up", "down"):
        assert b[name].flops == 1.5 * a[name].flops and b[name].shape[0] == 1.5 * a[name].shape[0]
    assert b["swiglu"].bytes == 1.5 * a["swiglu"].bytes
    assert all(b[n] == a[n] for n in ("router", "topk", "permute", "unpermute"))
    k, f, h = 2, m.expert_ffn, m.d_model
    assert te(busy, 1, 16) - te(even, 1, 16) == pytest.approx(16 * 0.5 * k * (2 * h + 4 * f + 2 * f + 4))
    train, lay, c = TrainSpec(global_batch=8, micro_batch=2, seq=16), Layout(dp=4, ep=4), load_cluster("h100", 4)
    plans = {x: evaluate(m, replace(train, moe_load=x), lay, c) for x in (1.0, 1.5)}
    a2a = {x: next(cl.c for cl in p.comm if cl.c.op == "all_to_all") for x, p in plans.items()}
    assert a2a[1.5].payload == pytest.approx(1.5 * a2a[1.0].payload) and "busiest rank's load 1.5" in a2a[1.5].why
    # the device's time (this tiny block is host-bound: the host's wait takes up the difference in the step)
    assert plans[1.5].times["forward"] > plans[1.0].times["forward"] and plans[1.5].mem_total > plans[1.0].mem_total
    assert "routing load 1.5" in plans[1.5].explain["forward"]
    one = {x: evaluate(m, replace(train, moe_load=x), Layout(dp=4), c) for x in (1.0, 1.5)}
    assert one[1.5].times == one[1.0].times and one[1.5].mem_total == one[1.0].mem_total
    with pytest.raises(ValueError, match="moe_load"):
        replace(train, moe_load=0.9).check()


def test_the_ep_overlap_holds_one_block_more_at_its_peak():
    """Megatron-Core's combined 1F1B (the EP overlap) runs a forward block whole before the paired backward block's
    attention frees: the plan holds one block's activations more (a memory line), and its time does not move."""
    from shardlab.plan.memory import stored_per_layer

    m = replace(LLAMA, moe_experts=8, moe_top_k=2)
    train, c = TrainSpec(global_batch=8, micro_batch=2, seq=16, llama_impl="te", flash_attention=True), \
        load_cluster("h100", 4)
    lay = Layout(dp=4, ep=4)
    off, on = (evaluate(m, train, replace(lay, ep_overlap=x), c) for x in (False, True))
    (line,) = [ln for ln in on.memory if ln.name == "EP overlap block"]
    assert line.bytes == stored_per_layer(m.expert_view(4), train, lay)[0] > 0
    assert on.mem_total - off.mem_total == pytest.approx(line.bytes)
    assert not [ln for ln in off.memory if ln.name == "EP overlap block"]
