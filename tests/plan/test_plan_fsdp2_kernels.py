"""FSDP2's own kernels around its collectives (plan/fsdp2_kernels.py): the bytes torch's fully_shard moves
per step, where the term applies and where it must not (shardlab's own zero3, Megatron's layouts, profiles)."""
import json
from dataclasses import replace

import pytest

from shardlab.plan import fsdp2_kernels
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.published_gpu import COMPILED, GIVEN, HELD_OUT, predict
from shardlab.plan.published_gpu_heldout import HELD_OUT as HELD_OUT_GPU, plan_row
from shardlab.plan.report import render
from shardlab.plan.step import evaluate

H100 = load_cluster("H100-SXM-500W", 8)
ARGS = PRESETS["llama3-8b"], TrainSpec(16, 2, 8192, flash_attention=True)


def _plan(cluster=H100, train=ARGS[1], **lay):
    return evaluate(ARGS[0], train, Layout(**{"dp": 8, "strategy": "zero3", "comm_dtype": "fp32", **lay}), cluster)


def _line(p, op):
    return next(cl.c for cl in p.comm if cl.c.group == "dp" and cl.c.op == op)


def test_bytes_as_torch_moves_them():
    p = _plan(zero3_impl="fsdp2")
    k = fsdp2_kernels.kernels(p.model, p.train, p.layout, p.cluster, p.comm, p.m)
    ag, rs = _line(p, "all_gather"), _line(p, "reduce_scatter")
    bw = H100.hbm_at(2 * ag.payload / ag.calls)
    # copy-out: every gathered byte read and written on the compute stream
    assert k.copy_out == pytest.approx(2 * ag.payload / bw)
    # reduce-scatter copy-in: the bf16 gradients read (2 B) and the fp32 input written (4 B): 6 B an element
    elems = rs.payload / 4
    assert k.rs_copy_in == pytest.approx(6 * elems / H100.hbm_at(6 * elems / rs.calls))
    # the all-gather copy-in is per shard: 1/8 of the gathered (bf16) elements, 4 + 2 + 2 + 2 B each
    b_in = 10 * (ag.payload / 2) / 8
    assert k.ag_copy_in == pytest.approx(b_in / H100.hbm_at(b_in / ag.calls))
    assert k.post_reduce == 0.0  # fp32 reduce, one micro batch: ReduceOp.AVG, no cast, no accumulation
    assert p.times["zero_copies"] == pytest.approx(k.seconds)
    assert "FSDP2's own kernels" in p.explain["zero_copies"] and "chunk_cat" in p.explain["zero_copies"]
    line = next(ln for ln in render(p, explain=True).splitlines() if ln.strip().startswith("zero_copies"))
    assert "FSDP2's own kernels" in line  # the --explain report prints it on the zero_copies line


def test_the_copy_in_shrinks_with_the_shard_the_copy_out_does_not():
    small, big = (fsdp2_kernels.kernels(p.model, p.train, p.layout, p.cluster, p.comm, p.m) for p in
                  (_plan(zero3_impl="fsdp2"), _plan(load_cluster("H100-SXM-500W", 64), dp=64, zero3_impl="fsdp2",
                                                    train=TrainSpec(128, 2, 8192, flash_attention=True))))
    assert big.copy_out == pytest.approx(small.copy_out) and big.rs_copy_in == pytest.approx(small.rs_copy_in)
    assert big.ag_copy_in < small.ag_copy_in / 4


def test_post_reduce_kernels_where_torch_runs_them():
    base = fsdp2_kernels.kernels(*(lambda p: (p.model, p.train, p.layout, p.cluster, p.comm, p.m))(
        _plan(zero3_impl="fsdp2")))
    accum = _plan(zero3_impl="fsdp2", train=TrainSpec(32, 2, 8192, flash_attention=True))  # m = 2
    bf16 = _plan(zero3_impl="fsdp2", comm_dtype="bf16")
    fp16 = _plan(zero3_impl="fsdp2", comm_dtype="fp16")
    post = [fsdp2_kernels.kernels(p.model, p.train, p.layout, p.cluster, p.comm, p.m).post_reduce
            for p in (accum, bf16, fp16)]
    assert base.post_reduce == 0 and all(x > 0 for x in post)
    assert post[2] > post[1]  # fp16 adds the pre- and post-divide to bf16's cast back


def test_only_fsdp2_on_presets():
    own = _plan()
    assert own.explain["zero_copies"].startswith("ZeRO flat buffers")
    assert fsdp2_kernels.kernels(own.model, own.train, own.layout, own.cluster, own.comm, own.m) is None
    # a calibrated profile measures its copies: the layout's implementation changes nothing there
    prof = replace(H100, gemm_table={"ew:copy": 5e11, "ew:flat": 3e11})
    assert _plan(prof, zero3_impl="fsdp2").times == _plan(prof).times
    for strategy in ("ddp", "zero1", "zero2"):
        assert not fsdp2_kernels.applies(Layout(dp=8, strategy=strategy, zero3_impl="fsdp2"), H100)
    with pytest.raises(ValueError, match="zero3_impl"):
        _plan(zero3_impl="fsdp1")


def test_published_rows_mark_fsdp2_where_the_run_used_it():
    assert all(r["layout"].get("zero3_impl") == "fsdp2" for r in GIVEN + COMPILED)
    assert not any("zero3_impl" in r["layout"] for r in HELD_OUT)  # llm-foundry: FSDP1's flat parameters
    for r in HELD_OUT_GPU:
        titan = r["source"].startswith("pytorch/torchtitan")
        assert (r["layout"].get("zero3_impl") == "fsdp2") == titan
        if not titan:  # Megatron-LM and NeMo: no FSDP, their copies unchanged
            assert plan_row(r).explain["zero_copies"].startswith("ZeRO flat buffers")
    row = GIVEN[2]
    on, off = predict(row)["plan"], predict(row, row_fsdp2=False)["plan"]
    assert on.times["zero_copies"] != off.times["zero_copies"]
    assert abs(on.step_time / off.step_time - 1) < 0.02  # small: torch's count against the flat-buffer one


GPT2_8 = ["model=gpt2", "cluster=H100-SXM-500W", "gpus=8", "global_batch=64", "micro_batch=8"]


def _cli(capsys, argv):
    from shardlab.plan.cli import main

    rc = main(argv)
    return rc, capsys.readouterr()


def test_strategy_torch_fsdp2_is_a_plan_input(capsys):
    """`shardlab plan strategy=torch-fsdp2` plans torch's fully_shard: FSDP2's kernels on the zero_copies line
    of --explain, a step that differs from shardlab's own zero3, and the layout line says which it is."""
    out = {s: _cli(capsys, [f"strategy={s}", *GPT2_8, "--explain"]) for s in ("zero3", "torch-fsdp2")}
    assert out["zero3"][0] == out["torch-fsdp2"][0] == 0
    lines = {s: o.out.splitlines() for s, (_, o) in out.items()}
    copies = {s: next(ln for ln in ls if ln.strip().startswith("zero_copies")) for s, ls in lines.items()}
    assert "FSDP2's own kernels" in copies["torch-fsdp2"] and "chunk_cat" in copies["torch-fsdp2"]
    assert "FSDP2" not in copies["zero3"] and "ZeRO flat buffers" in copies["zero3"]
    step = {s: next(ln for ln in ls if ln.startswith("step ")) for s, ls in lines.items()}
    assert step["zero3"] != step["torch-fsdp2"]
    layout = {s: next(ln for ln in ls if ln.startswith("layout:")) for s, ls in lines.items()}
    assert "dp=8 zero3 fsdp2 " in layout["torch-fsdp2"] and "fsdp2" not in layout["zero3"]
    rc, o = _cli(capsys, ["strategy=torch-fsdp2", *GPT2_8, "--json"])
    d = json.loads(o.out)
    assert rc == 0 and d["layout"]["strategy"] == "zero3" and d["layout"]["zero3_impl"] == "fsdp2"


def test_torch_fsdp2_on_a_profile_and_in_search_and_from_config(capsys):
    from shardlab import config
    from shardlab.plan.from_config import from_config
    from shardlab.plan.search import args_of, search

    # a calibrated profile measures its copies: the name changes the label, not the plan
    prof = replace(H100, gemm_table={"ew:copy": 5e11, "ew:flat": 3e11})
    assert _plan(prof, zero3_impl="fsdp2").times == _plan(prof).times
    # the search keeps shardlab's own layers unless the user fixed the strategy's implementation
    m, tr = PRESETS["gpt2"], TrainSpec(64, 8, flash_attention=True)
    own = search(m, tr, H100, 8)
    assert all(p.layout.zero3_impl == "own" for p in own)
    fsdp2 = search(m, tr, H100, 8, {"zero3_impl": "fsdp2"})
    zero3 = [p for p in fsdp2 if p.layout.strategy == "zero3"]
    assert zero3 and all(p.layout.zero3_impl == "fsdp2" for p in zero3)
    assert all(p.layout.zero3_impl == "own" for p in fsdp2 if p.layout.strategy != "zero3")
    assert "strategy=torch-fsdp2" in args_of(zero3[0])  # the arguments that plan it again
    # a training config's parallel.strategy, read the same way
    for name, impl in (("torch-fsdp2", "fsdp2"), ("zero3", "own")):
        cfg = config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2",
                                                 "train.global_batch=8", f"parallel.strategy={name}"]), 4)
        lay = from_config(cfg, 4)[2]
        assert (lay.strategy, lay.zero3_impl) == ("zero3", impl)


TP_IMPLS = "tp_impl must be one of own, dtensor"


@pytest.mark.parametrize("argv,needle", [(["tp=2", "sp=true", "tp_impl=megatron"], TP_IMPLS),
                                         (["search", "gpus=4", "tp_impl=x"], TP_IMPLS),
                                         (["cp=2", "cp_impl=ring"], "cp_impl must be one of own, torch, ulysses"),
                                         (["strategy=torch-fsdp3"], "torch-fsdp2"),
                                         # the pairs training refuses (parallel/rules.py), refused the same way
                                         (["tp=2", "cp=2", "tp_impl=dtensor"], "tp_impl=dtensor with cp=2"),
                                         (["tp=2", "pp=2", "tp_impl=dtensor"], "tp_impl=dtensor with pp=2")])
def test_bad_implementation_is_one_line_exit_2(capsys, argv, needle):
    rc, o = _cli(capsys, argv)
    assert rc == 2 and needle in o.err and len(o.err.strip().splitlines()) == 1, o.err
