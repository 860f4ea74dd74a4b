"""The GPU terms (docs/planner.md, "The GPU terms"): each can be read off a plan, none touches a calibrated
profile, V schedules plan with their own bubble, and the published GPU rows stay recorded as fixtures."""
from dataclasses import replace

import pytest

from shardlab.plan.hardware import Cluster, load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.published_gpu import GIVEN, HELD_OUT, FOUNDRY, TORCHTITAN
from shardlab.plan.step import evaluate


def test_power_cap_lowers_sustained_clock_by_the_cube_root():
    c = load_cluster("H100-SXM-500W")
    assert c.clock_factor == pytest.approx((500 / 700) ** (1 / 3))
    assert load_cluster("H100-SXM").clock_factor == 1.0
    assert c.peak_flops == 989e12  # the MFU denominator stays the datasheet's
    assert (c.hbm_bytes, c.hbm_bw) == (96e9, 2400e9)


def test_terms_are_off_on_a_profile_file():
    c = Cluster("p", 2, 2, 1e12, 1e12, 1e9, 1e9, 1e9, 1e-5, 1e9, 1e-5)
    assert (c.clock_factor, c.sm_share_comm, c.wave_efficiency(7, 9), c.call_latency, c.attention) == (1, 0, 1, 0, "")
    assert not c.unit_pipeline and load_cluster("H100-SXM").unit_pipeline
    assert c.hbm_at(1e9) == c.hbm_bw and not c.pipelined_phases and not c.ring_latency_steps


def test_achieved_hbm_by_kernel_size():
    """Calculon's curve on every GPU preset: a memory-bound kernel reaches 90% of the datasheet from 100 MB,
    75% from 10 MB, 60% from 1 MB, 30% below; an elementwise op and the optimizer run at it."""
    from shardlab.plan.compute import _op_time
    from shardlab.plan.ops import Op
    h = load_cluster("H100-SXM")
    assert [h.hbm_at(b) / h.hbm_bw for b in (2e8, 5e7, 5e6, 5e5)] == pytest.approx([0.9, 0.75, 0.6, 0.3])
    gelu = Op("gelu", "elem", bytes=4e8, ew="gelu")
    assert _op_time(gelu, h, False, False) == pytest.approx(4e8 / (0.9 * h.hbm_bw))
    p = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3"), h)
    assert "Calculon" in p.explain["forward"]


def test_unit_pipeline_by_hand():
    """Two streams over the units: a gather issued one unit ahead, a unit's reduce-scatter after its backward,
    one FIFO stream. 4 blocks (F 1, B 2) whose gathers and reduce-scatters take 2 each, the root's 1."""
    from shardlab.plan.overlap import Stage, simulate
    st = [Stage(0, 0, 1, 0, 1)] + [Stage(1, 2, 2, 2, 2) for _ in range(4)] + [Stage(1, 2)]
    step, wait, tail = simulate(st, 1)
    assert (step, wait, tail) == (28, 10, 3)  # compute 15: forward waits 6, backward 4, the last two reductions 3
    cheap = [Stage(0, 0, .1, 0, .1)] + [Stage(1, 2, .2, .2, .2) for _ in range(4)] + [Stage(1, 2)]
    step, wait, tail = simulate(cheap, 1)  # hidden but for the root's gather, block 1's and the last reductions
    assert wait == pytest.approx(0.3) and tail == pytest.approx(0.3) and step == pytest.approx(15.6)


def test_slow_network_exposes_gathers_unit_by_unit():
    """Under a network slower than a unit's forward, every unit's forward gather shows, although the step's
    compute (the backward's recompute included) could hide all of it, which is what the budget model said."""
    m, tr = PRESETS["llama3-8b"], TrainSpec(512, 8, 2048, flash_attention=True)
    lay = Layout(dp=64, strategy="zero3", recompute="full", comm_dtype="bf16")
    slow = replace(load_cluster("A100-80G", 64), inter_bw=1.2e9)
    per_unit, budget = evaluate(m, tr, lay, slow), evaluate(m, tr, lay, replace(slow, unit_pipeline=False))
    assert per_unit.times["comm_total"] == pytest.approx(budget.times["comm_total"])
    assert per_unit.times["comm_total"] < per_unit.times["compute"]
    gathers = next(cl.time for cl in per_unit.comm if cl.c.op == "all_gather" and cl.c.group == "dp") / 2
    assert gathers > per_unit.times["forward"]  # the forward's half of the gathers outlasts the forward
    assert per_unit.times["exposed_comm"] > budget.times["exposed_comm"] + 0.8 * (gathers - per_unit.times["forward"])
    assert "unit by unit" in per_unit.explain["exposed_comm"]


def test_every_term_shows_in_explain():
    lay = Layout(dp=16, tp=8, sp=True, strategy="zero3", recompute="full", comm_dtype="fp32")
    p = evaluate(PRESETS["llama3-405b"], TrainSpec(32, 2, 8192, flash_attention=True), lay,
                 load_cluster("H100-SXM-500W", 128))
    assert p.times["comm_sm_cost"] > 0
    assert p.times["step"] == pytest.approx(sum(p.times[k] for k in (
        "compute", "tp_pp_comm", "bubble", "exposed_comm", "comm_sm_cost", "optimizer", "zero_copies", "trainer")))
    for words in ("(500 W / 700 W)^(1/3)", "wave quantization", "flash2"):
        assert words in p.explain["forward"]
    assert "achieved bus bandwidth" in p.explain["comm_total"] and "slower of" in p.explain["comm_total"]
    assert "Calculon" in p.explain["forward"] and "unit by unit" in p.explain["exposed_comm"]


def test_fp32_reduce_doubles_the_gradient_bytes():
    args = PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True)
    c = load_cluster("H100-SXM-500W", 8)
    rs = [next(cl.c.payload for cl in evaluate(*args, Layout(dp=8, strategy="zero3", comm_dtype=d), c).comm
               if cl.c.op == "reduce_scatter") for d in (None, "fp32")]
    assert rs[1] == 2 * rs[0]


def test_v_schedules_plan_with_their_own_bubble():
    m, tr, c = PRESETS["gpt3-6.7b"], TrainSpec(64, 1), load_cluster("H100-SXM", 32)
    zb = evaluate(m, tr, Layout(dp=8, pp=4, strategy="zero1", schedule="zb"), c)
    zbv = evaluate(m, tr, Layout(dp=8, pp=4, v=2, strategy="zero1", schedule="zbv"), c)
    assert zbv.times["bubble"] < zb.times["bubble"]
    with pytest.raises(ValueError, match="stages per rank"):
        Layout(dp=8, pp=4, strategy="zero1", schedule="dualpipev").check(m)


@pytest.mark.parametrize("schedule, v, m, units", [
    ("1f1b", 1, 8, 3), ("interleaved", 2, 8, 1.5), ("zb", 1, 8, 1),
    ("zbv", 2, 8, 0.5),  # m >= (3p-1)/2: (p-1)/6
    ("zbv", 2, 4, 1.0),  # few micro batches leave the V's warm-up unfilled: 2(2p-1-m)/6 = 6/6
    ("dualpipev", 2, 4, 1.0),
])
def test_the_bubble_is_the_schedule_rows_closed_form(schedule, v, m, units):
    """bubble = idle micro-batch times x t_mb, read from the row's formula (registry.analytic_bubble) at this m."""
    model, tr, c = PRESETS["gpt3-6.7b"], TrainSpec(8 * m, 1), load_cluster("H100-SXM", 32)
    p = evaluate(model, tr, Layout(dp=8, pp=4, v=v, strategy="zero1", schedule=schedule), c)
    assert p.m == m
    t_mb = (p.times["compute"] + p.times["tp_pp_comm"]) / m
    assert p.times["bubble"] == pytest.approx(units * t_mb, rel=1e-12)


def test_published_rows_are_recorded_with_sources():
    assert len(GIVEN) == 5 and len(HELD_OUT) == 23
    assert {r["source"] for r in GIVEN} == {TORCHTITAN} and {r["source"] for r in HELD_OUT} == {FOUNDRY}
    assert replace  # noqa: the fixtures are data; docs/planner.md carries their errors


def test_second_round_terms():
    """Hopper GEMMs at the sustained rate, the Triton FlashAttention backend at half of FlashAttention-2's rate,
    kernel launch gaps in the forward's words, and the eager RMSNorm's bytes only where a row asks for it."""
    from shardlab.plan import attention
    from shardlab.plan.ops import EAGER_NORM_BYTES, layer_ops
    h100, a100 = load_cluster("H100-SXM"), load_cluster("A100-80G")
    assert (h100.gemm_efficiency, load_cluster("H200").gemm_efficiency, a100.gemm_efficiency) == (0.706, 0.706, 0.75)
    for c in (h100, a100):
        fa2 = attention.kernel_time(1e12, c, False, "flash2")
        assert attention.kernel_time(1e12, c, False, "triton") == pytest.approx(2 * fa2, rel=0.02)
    lay = Layout(dp=8, strategy="zero3")
    p = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), lay, load_cluster("H100-SXM", 8))
    assert "launch gaps 1 us per kernel" in p.explain["forward"] and "sustained" in p.explain["forward"]
    fused, eager = (next(o for o in layer_ops(PRESETS["llama3-8b"], 1, 64, 1, 2, True, eager_norm=e)
                         if o.name == "ln_1") for e in (False, True))
    assert eager.bytes == fused.bytes * EAGER_NORM_BYTES[0] / 4
    slow = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True, eager_norm=True), lay,
                    load_cluster("H100-SXM", 8))
    assert slow.step_time > p.step_time


def test_published_sets_are_kept_apart():
    from shardlab.plan.published_gpu import EXAMINED, HELD_OUT_2, row_cluster
    assert len(EXAMINED) == 8 and len(HELD_OUT_2) == 39
    assert all(r["attention"] == "triton" for r in HELD_OUT + EXAMINED + HELD_OUT_2)
    assert all(r.get("eager_norm") for r in GIVEN)
    c = row_cluster(HELD_OUT_2[0])
    assert (c.hbm_bytes, c.hbm_bw, c.peak_flops) == (40e9, 1555e9, 312e12)


def test_eager_adam_only_where_a_row_asks():
    """A row's eager AdamW (torch's foreach, Composer's loop) moves 84 B per fp32 parameter, a fused one 28."""
    from shardlab.plan.compute import EAGER_ADAM_BYTES
    args = PRESETS["llama3-8b"], Layout(dp=8, strategy="zero3"), load_cluster("H100-SXM", 8)
    fused, eager = (evaluate(args[0], TrainSpec(16, 2, 8192, flash_attention=True, eager_adam=e), *args[1:])
                    for e in (False, True))
    assert eager.times["optimizer"] == pytest.approx(fused.times["optimizer"] * (EAGER_ADAM_BYTES + 2) / 30)
    assert "eager kernels" in eager.explain["optimizer"] and "eager" not in fused.explain["optimizer"]
    assert all(r.get("eager_adam") for r in GIVEN + HELD_OUT)


def test_profile_file_keeps_the_hbm_curve(tmp_path):
    """A preset written as a profile file reads back with its curve; a calibrated one writes none."""
    from shardlab.plan.hardware import read_profile, write_profile
    h = load_cluster("H100-SXM")
    write_profile(h, tmp_path / "h.toml")
    assert read_profile(tmp_path / "h.toml").hbm_efficiency == h.hbm_efficiency
    bare = Cluster("p", 2, 2, 1e12, 1e12, 1e9, 1e9, 1e9, 1e-5, 1e9, 1e-5)
    write_profile(bare, tmp_path / "p.toml")
    assert "hbm_efficiency" not in (tmp_path / "p.toml").read_text()
    assert read_profile(tmp_path / "p.toml").hbm_efficiency == ()


def test_dropout_kernels_where_the_run_drops_out():
    """Unfused attention with dropout runs a dropout kernel over the b*a*s*s probabilities (2e + 1 B each way)
    and the bias-dropout-adds write 1-byte masks; a fused kernel, dropout 0 and llama blocks add nothing, and a
    profile file (its own measured ops) never sees it."""
    from shardlab.plan.ops import layer_ops
    m = PRESETS["gpt3-1.3b"]
    ops = layer_ops(m, 2, 2048, 1, 2, False, dropout=True)
    drop = next(o for o in ops if o.name == "attn_dropout")
    assert drop.bytes == drop.bwd_bytes == 5 * 2 * 16 * 2048 * 2048
    assert not any(o.name == "attn_dropout" for o in layer_ops(m, 2, 2048, 1, 2, True, dropout=True))
    assert layer_ops(PRESETS["llama3-8b"], 1, 64, 1, 2, False, dropout=True) == \
        layer_ops(PRESETS["llama3-8b"], 1, 64, 1, 2, False, dropout=False)
    a100, lay = load_cluster("A100-80G"), Layout(dp=8)
    on, off = (evaluate(m, TrainSpec(16, 2, 2048, flash_attention=False, dropout=d), lay, a100) for d in (True, False))
    assert on.step_time > off.step_time and "dropout kernels" in on.explain["forward"]
    assert "dropout kernels" not in off.explain["forward"]
    prof = replace(a100, gemm_fit=(2e14, 1e9), source="profile")
    on, off = (evaluate(m, TrainSpec(16, 2, 2048, flash_attention=False, dropout=d), lay, prof) for d in (True, False))
    assert on.step_time == off.step_time


def test_torch_ring_merge_kernels():
    """cp_impl=torch (torch's ring attention) adds its merge and fp32 accumulation kernels per layer on GPU
    presets: 12 + 40.5 (cp - 1) bytes per output element forward, 84 + 58.5 (cp - 1) backward; shardlab's own
    ring and a profile file do not."""
    from shardlab.plan.compute import ring_merge_op
    m = PRESETS["llama3-8b"]
    op = ring_merge_op(m, 1, 32768, 1, 8)
    assert (op.bytes, op.bwd_bytes) == (32768 * 4096 * (12 + 40.5 * 7), 32768 * 4096 * (84 + 58.5 * 7))
    h, train = load_cluster("H100-SXM"), TrainSpec(4, 1, 65536, flash_attention=True)
    torch_ring, own = (evaluate(m, train, Layout(dp=4, cp=2, strategy="zero3", cp_impl=i), h) for i in ("torch", "own"))
    assert torch_ring.step_time > own.step_time
    prof = replace(h, gemm_fit=(2e14, 1e9), source="profile")
    torch_ring, own = (evaluate(m, train, Layout(dp=4, cp=2, strategy="zero3", cp_impl=i), prof) for i in ("torch", "own"))
    assert torch_ring.step_time == own.step_time



def test_torch_ring_compiled_merges_and_repeated_heads():
    """Under compile the ring's merges are Inductor's fused count (10.5 + 7.6 (cp - 1) forward, 36 + 32.5 (cp - 1)
    backward); under torchtitan's llama (repeat_kv before SDPA) torch's ring carries n_head/t k/v heads."""
    from shardlab.plan.comm import cp_ring
    from shardlab.plan.compute import ring_merge_op
    m = PRESETS["llama3-8b"]
    op = ring_merge_op(m, 1, 32768, 1, 8, compiled=True)
    assert (op.bytes, op.bwd_bytes) == pytest.approx((32768 * 4096 * (10.5 + 7.6 * 7), 32768 * 4096 * (36 + 32.5 * 7)))
    train, lay = TrainSpec(1, 1, 262144, flash_attention=True), Layout(dp=1, cp=8, strategy="zero3", cp_impl="torch")
    own, titan = (cp_ring(m, replace(train, llama_impl=i), lay, 1) for i in ("own", "torchtitan"))
    assert titan.payload == pytest.approx(own.payload * m.n_head / m.n_kv_heads)
    assert cp_ring(m, replace(train, llama_impl="torchtitan"), replace(lay, cp_impl="own"), 1).payload == own.payload

def test_hopper_flash2_by_sequence():
    """FlashAttention-2 on Hopper at the FlashAttention-3 paper's rate for the kernel's sequence length and direction
    (forward causal, backward), Triton's at half of it; the A100 keeps its one published fraction."""
    from shardlab.plan import attention
    h100, a100 = load_cluster("H100-SXM"), load_cluster("A100-80G")
    assert h100.attention_by_seq and not a100.attention_by_seq
    assert attention.efficiency("flash2", h100.peak_flops, 8192) == pytest.approx((333 / 989, 318 / 989))
    assert attention.efficiency("triton", h100.peak_flops, 2048) == pytest.approx((149 / 989, 145.5 / 989))
    assert attention.efficiency("flash2", h100.peak_flops, 1 << 20) == pytest.approx((335 / 989, 322 / 989))
    f3k = attention.efficiency("flash2", h100.peak_flops, 3072)[0]
    assert 298 / 989 < f3k < 319 / 989
    assert attention.efficiency("flash2", a100.peak_flops, 8192) == attention.EFFICIENCY[("flash2", "ampere")]
    assert attention.kernel_time(1e12, a100, True, seq=2048) == attention.kernel_time(1e12, a100, True)
    p = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3"),
                 load_cluster("H100-SXM", 8))
    assert "at 33.7% of peak forward, 2.5x at 32.2% backward (FlashAttention-2 on Hopper at seq 8,192" \
        in p.explain["forward"]
    flat = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3"),
                    replace(load_cluster("H100-SXM", 8), attention_by_seq=False))
    assert flat.step_time < p.step_time  # 35% both ways was faster than the figures at 8k


def test_attention_at_the_sustained_clock():
    """The attention kernels' published rates (short benchmarks, boost clock) at the clock a Hopper settles at under
    its power limit: x MSMF / MAMF of the same GEMM benchmark; the A100 keeps its rates."""
    from shardlab.plan import attention
    h100, a100 = load_cluster("H100-SXM"), load_cluster("A100-80G")
    assert h100.attention_sustained == 0.844 and load_cluster("H200").attention_sustained == 0.844
    assert a100.attention_sustained == 1.0
    burst = replace(h100, attention_sustained=1.0)
    for bw in (False, True):
        assert attention.kernel_time(1e12, h100, bw, seq=8192) == pytest.approx(
            attention.kernel_time(1e12, burst, bw, seq=8192) / 0.844)
    p = evaluate(PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3"),
                 load_cluster("H100-SXM", 8))
    assert "x 0.844 (the papers' short benchmarks at the sustained clock" in p.explain["forward"]


def test_apex_distributed_adam_inputs():
    """NeMo's optimizer as apex's DistributedFusedAdam ran it: ZeRO-1 traffic in 100 MB buckets of fp32
    gradients, reduced after the backward where overlap_grad_sync is off, and each micro batch's gradients
    added into the fp32 buffer (grad_copy), shown in explain."""
    from shardlab.plan.comm import dp_collectives
    from shardlab.plan.step import grad_copy_time
    model, c = PRESETS["gpt3-1.3b"], load_cluster("A100-80G", 16)
    train = TrainSpec(global_batch=64, micro_batch=2, fp32_grad_accum=True)
    lay = Layout(dp=16, strategy="zero1", comm_dtype="fp32", zero_bucket_mb=100.0)
    rs, ag = [x for x in dp_collectives(model, train, lay, 2) if x.op != "all_reduce"]
    assert rs.calls == ag.calls == -(-int(rs.payload) // (100 * 2**20)) and rs.overlap == "backward"
    assert rs.last_payload == 100 * 2**20
    off = [x for x in dp_collectives(model, train, replace(lay, overlap_grad_reduce=False), 2)]
    assert off[0].overlap == "none"
    base = evaluate(model, train, lay, c)
    copied = evaluate(model, replace(train, grad_copy=True), lay, c)
    per = grad_copy_time(model, replace(train, grad_copy=True), lay, c)
    # 2 + 4 + 4 B per parameter at ~90% of 2,039 GB/s for the large matrices
    assert 10 * model.params / (2039e9 * 0.9) < per < 10 * model.params / (2039e9 * 0.6)
    assert copied.times["backward"] == pytest.approx(base.times["backward"] + copied.m * per)
    assert "gradient copy into the fp32 buffer" in copied.explain["backward"]
    assert grad_copy_time(model, train, lay, c) == 0.0


def test_the_parts_derived_from_the_presets():
    """A100 40GB: the 80GB part's compute and links, 40 GB of HBM2 at 1,555 GB/s; H800: the H100 SXM with NVLink at
    200 GB/s a direction (400 total). Everything else equal, so a plan differs only where memory or NVLink does."""
    from dataclasses import fields

    from shardlab.plan.hardware import PRESETS

    def differ(a: str, b: str) -> set:
        return {f.name for f in fields(Cluster) if getattr(PRESETS[a], f.name) != getattr(PRESETS[b], f.name)}
    assert differ("A100-40G", "A100-80G") == {"name", "hbm_bytes", "hbm_bw"}
    assert PRESETS["A100-40G"].hbm_bytes == 40e9 and PRESETS["A100-40G"].hbm_bw == 1555e9
    assert differ("H800", "H100-SXM") == {"name", "intra_bw"} and PRESETS["H800"].intra_bw == 200e9
    assert load_cluster("h800").name == "H800" and load_cluster("a100-40g").name == "A100-40G"


def test_the_b200_preset_and_blackwell_attention():
    """DGX B200: the datasheet's figures, the sustained GEMM rates (MSMF / 2,250 and / 4,500) and Blackwell's own
    attention rates (FlashAttention-2 as torch's SDPA runs it, FlashAttention-4); a kernel with no published rate on
    Blackwell (FlashAttention-3 is Hopper-only) is refused in one line, as the plan CLI prints it. Every B200 plan
    above the one cited B200 run's MFU is flagged (its power limit is not stated)."""
    from shardlab.plan import anchors, attention
    from shardlab.plan.peak import gpu_preset
    b = load_cluster("b200", 16)
    assert (b.name, b.gpus_per_node, b.nodes, b.sms, b.tdp_w) == ("B200", 8, 2, 148, 1000.0)
    assert (b.peak_flops, b.peak_flops_fp8, b.hbm_bytes, b.hbm_bw, b.intra_bw, b.inter_bw) == (
        2250e12, 4500e12, 180e9, 8000e9, 900e9, 50e9)
    assert (b.gemm_efficiency, b.gemm_efficiency_fp8, b.attention_sustained) == (0.647, 0.621, 0.822)
    assert b.attention == "flash2" and not b.attention_by_seq
    assert attention.generation(b.peak_flops) == "blackwell" and attention.generation(989e12) == "hopper"
    assert attention.efficiency("flash2", b.peak_flops, 8192) == (0.158, 0.145)  # no rate by length on Blackwell
    assert attention.efficiency("flash4", b.peak_flops) == (0.63, 0.537)
    for backend, gen in (("flash3", "blackwell"), ("flash4", "hopper")):
        with pytest.raises(ValueError, match=f"'{backend}' has no published rate on {gen}"):
            attention.efficiency(backend, b.peak_flops if gen == "blackwell" else 989e12)
    assert gpu_preset("NVIDIA B200") == "B200" and gpu_preset("NVIDIA GB200") == "GB200"  # GB200: its own preset
    model, train, lay = PRESETS["llama3-8b"], TrainSpec(8, 1, 8192, flash_attention=True), \
        Layout(dp=8, strategy="zero3", recompute="selective")
    f2, f4 = evaluate(model, train, lay, load_cluster("B200", 8)), \
        evaluate(model, train, lay, replace(load_cluster("B200", 8), attention="flash4"))
    h100 = evaluate(model, train, lay, load_cluster("H100-SXM", 8))
    assert f4.step_time < f2.step_time < h100.step_time
    flag = anchors.check(f2.mfu, b.peak_flops, True)
    assert flag["generation"] == "Blackwell (B200)" and flag["ceiling"] == 0.214 and flag["above"]


def test_the_nvl72_presets():
    """GB200 and GB300 (the NVL72 racks' GPUs): their datasheet figures, a node of 64 (the NVLink domain as
    power-of-two jobs take it), Blackwell's attention rates, and sustained rates derived from the GB200's MAMF at each
    part's power (no MSMF is published): more power, a higher settled clock, never above the burst."""
    from shardlab.plan import attention
    from shardlab.plan.peak import gpu_preset
    g2, g3, b = load_cluster("gb200", 256), load_cluster("gb300", 64), load_cluster("B200")
    assert (g2.gpus_per_node, g2.nodes, g3.nodes, g2.tdp_w, g3.tdp_w) == (64, 4, 1, 1200.0, 1400.0)
    assert (g2.peak_flops, g2.peak_flops_fp8, g2.hbm_bytes, g3.hbm_bytes, g2.inter_bw, g3.inter_bw) == (
        2500e12, 5000e12, 186e9, 288e9, 50e9, 100e9)
    assert (g2.gemm_efficiency, g2.gemm_efficiency_fp8, g2.attention_sustained) == (0.607, 0.596, 0.833)
    assert b.attention_sustained < g2.attention_sustained < g3.attention_sustained <= 1.0
    assert g2.gemm_efficiency < g3.gemm_efficiency  # the same burst (MAMF), 1,400 W against 1,200 W
    assert attention.generation(g2.peak_flops) == "blackwell" and g2.attention == "flash2"
    assert gpu_preset("NVIDIA GB300") == "GB300"


def test_cudnn_attention_as_measured_on_each_nvl72_part():
    """cuDNN's attention on GB200 and GB300 at cuDNN's own benchmark's rates for that part and sequence length (not
    the B200's FlashAttention-4 fractions): Blackwell Ultra's doubled exponential rate shows as a faster forward; the
    GB200's 8k figures are the B200's fractions within 1%. --explain names the device and the length."""
    from shardlab.plan import attention
    g2, g3 = load_cluster("GB200", 8), load_cluster("GB300", 8)
    assert (g2.attention_device, g3.attention_device) == ("GB200", "GB300") and g3.attention_by_seq
    assert attention.efficiency("cudnn", g3.peak_flops, 8192, "GB300") == pytest.approx((1856 / 2500, 1435 / 2500))
    assert attention.efficiency("cudnn", g2.peak_flops, 0, "GB200") == pytest.approx((1574 / 2500, 1332 / 2500))
    assert attention.efficiency("cudnn", g2.peak_flops, 8192, "GB200") == pytest.approx(
        attention.EFFICIENCY[("cudnn", "blackwell")], abs=0.005)
    f6k = attention.efficiency("cudnn", g3.peak_flops, 6144, "GB300")[0]
    assert 1703 / 2500 < f6k < 1856 / 2500
    # a backend not measured on the part keeps the generation's fractions
    assert attention.efficiency("flash4", g3.peak_flops, 8192, "GB300") == attention.EFFICIENCY[("flash4", "blackwell")]
    model, train, lay = PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3")
    for bw in (False, True):  # the same chip clock (attention_sustained) on both: the kernel alone differs
        t2 = attention.kernel_time(1e12, replace(g2, attention="cudnn", attention_sustained=1.0), bw, seq=8192)
        t3 = attention.kernel_time(1e12, replace(g3, attention="cudnn", attention_sustained=1.0), bw, seq=8192)
        assert t2 / t3 == pytest.approx(1856 / 1574 if not bw else 1435 / 1332)
    p = evaluate(model, train, lay, replace(g3, attention="cudnn"))
    assert "at 74.2% of peak forward, 2.5x at 57.4% backward (cuDNN attention measured on a GB300 at seq 8,192" \
        in p.explain["forward"]


def test_hopper_flash3_and_cudnn_by_sequence():
    """FlashAttention-3 and cuDNN's fused attention on Hopper at the FlashAttention-3 paper's bars for the kernel's
    sequence length (Figs. 5 and 6, head dim 128, the same figures as FlashAttention-2's), not the abstract's one
    75%; --explain names the kernel and the length."""
    from shardlab.plan import attention
    h100 = load_cluster("H100-SXM", 8)
    assert attention.efficiency("flash3", h100.peak_flops, 8192) == pytest.approx((602 / 989, 559 / 989))
    assert attention.efficiency("cudnn", h100.peak_flops, 2048) == pytest.approx((484 / 989, 465 / 989))
    assert attention.efficiency("cudnn", h100.peak_flops, 1 << 17) == pytest.approx((539 / 989, 516 / 989))
    assert attention.efficiency("flash3", h100.peak_flops) == (0.75, 0.55)  # no length: the abstract's figure
    with pytest.raises(ValueError, match="'cudnn' has no published rate on ampere"):
        attention.efficiency("cudnn", 312e12)
    model, train, lay = PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True), Layout(dp=8, strategy="zero3")
    steps = {a: evaluate(model, train, lay, replace(h100, attention=a)) for a in ("flash2", "cudnn", "flash3")}
    assert steps["flash3"].step_time < steps["cudnn"].step_time < steps["flash2"].step_time
    assert "(cuDNN attention on Hopper at seq 8,192: the FlashAttention-3 paper's figures)" \
        in steps["cudnn"].explain["forward"]


def test_userbuffers_hide_every_block_collective_beside_a_gemm():
    """Transformer Engine's userbuffers (tp_comm_overlap): the block's sequence-parallel collectives each run beside
    the GEMM they feed or follow, ring exchange showing one chunk (1/t of the shorter), bulk only what outlasts its
    GEMM; the hidden time costs the SMs its kernels hold. It needs sp (one line); without it the plan is as before."""
    m, c = PRESETS["llama3-70b"], replace(load_cluster("H100-SXM", 64), attention="cudnn")
    t = TrainSpec(128, 1, 8192, precision="bf16-mixed", flash_attention=True)

    def plan(**kw):
        return evaluate(m, t, Layout(dp=2, tp=4, pp=8, v=5, sp=True, strategy="zero1", schedule="interleaved", **kw), c)
    plain, async_bwd, ub = plan(), plan(tp_async_backward=True), plan(tp_comm_overlap=True)
    assert ub.times["tp_pp_comm"] < async_bwd.times["tp_pp_comm"] < plain.times["tp_pp_comm"]
    assert ub.step_time < async_bwd.step_time < plain.step_time
    lines = {cl.c.overlap: cl for cl in ub.comm if cl.c.group == "tp"}
    assert {"col_fprop", "row_fprop", "row_dgrad", "dgrad", "wgrad"} <= set(lines)
    ring = lines["col_fprop"]
    assert 0 < ring.exposed <= ring.time / 4 + 1e-12  # one chunk of four, the GEMM longer than the gather
    assert lines["wgrad"].exposed == 0.0  # bulk, beside a longer weight-gradient GEMM
    assert 0 < ub.times["comm_sm_cost"] < async_bwd.times["comm_sm_cost"]  # 1-24 SMs, not NCCL's 16 CTAs throughout
    assert "Transformer Engine's userbuffers (tp_comm_overlap)" in ub.explain["tp_pp_comm"]
    with pytest.raises(ValueError, match="tp_comm_overlap .* needs tp > 1 and sp=true"):
        Layout(dp=8, tp=4, tp_comm_overlap=True).check(m)


def test_overlapped_pipeline_transfers_show_what_outlasts_a_chunk():
    """Megatron-Core's overlap_p2p_comm (interleaved schedule only): each pipeline transfer runs beside a chunk's
    compute, activations beside a forward chunk and gradients beside a backward one; refused without interleaving."""
    m, c = PRESETS["llama3-70b"], load_cluster("H100-SXM", 64)
    t = TrainSpec(256, 1, 8192, precision="bf16-mixed", flash_attention=True)

    def plan(**kw):
        return evaluate(m, t, Layout(dp=2, tp=4, pp=8, v=5, sp=True, strategy="zero1", schedule="interleaved",
                                     **kw), c)
    plain, over = plan(), plan(overlap_p2p_comm=True)
    (send,) = [cl for cl in over.comm if cl.c.group == "pp"]
    call, chunk_f, chunk_b = send.time / send.c.calls, over.times["forward"] / over.m / 5, over.times["backward"] / over.m / 5
    assert send.exposed == pytest.approx(send.c.calls / 2 * (max(0, call - chunk_f) + max(0, call - chunk_b)))
    assert over.times["tp_pp_comm"] < plain.times["tp_pp_comm"] and over.step_time < plain.step_time
    assert "overlap_p2p_comm" in over.explain["tp_pp_comm"]
    with pytest.raises(ValueError, match="overlap_p2p_comm needs pp > 1 and v > 1"):
        Layout(dp=8, pp=8, overlap_p2p_comm=True).check(m)
