"""MoE in the combinations users take it to next: generation (KV cache against recomputing the sequence,
from an ep=2 checkpoint), bf16 autocast (one device and ep=2), compiled blocks, activation recompute (also under ep=2), and a
tp=2 x ep=2 checkpoint resumed at world 4.

Tolerances: recompute and resume are compared bitwise (the same kernels on the same inputs). Compiled vs
eager uses test_compile's rtol 1e-4 (inductor sums the fused dense ops in another order). bf16 vs fp32 is
judged on the loss at rel 2e-3: bf16 keeps 8 mantissa bits (3 significant digits) in the matmuls; measured
here over 3 steps: at most 3.3e-4 relative.
"""
from __future__ import annotations

import math

import pytest
import torch

from ckpt_harness import assert_params_equal, train_run
from ep_harness import TINY, train
from generate_harness import PROMPTS, make_decisive
from shardlab.generate.engine import Options, generate
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.model.moe import moe_layers

pytestmark = pytest.mark.timeout(300)

MOE = ["model.moe_experts=4"]


def _decisive_moe(capacity: float) -> torch.nn.Module:
    """generate_harness's decisive GPT (weights of std 0.3: the greedy path wanders), every block an MoE."""
    return make_decisive(build_model(GPTConfig(n_layer=2, n_head=4, d_model=64, vocab_size=256, max_seq_len=64,
                                               moe_experts=4, moe_capacity=capacity), seed=0))


def test_generate_moe_with_capacity_cache_equals_recomputing_the_sequence():
    """With capacity 1.0 the full forward drops token-slots on these prompts; a 1-token decode step cannot
    (capacity is per sequence of the chunk's length), so generate routes dropless: the KV-cache decode, the
    whole sequence recomputed each step, and each prompt alone (no padding) give the same greedy tokens."""
    model = _decisive_moe(1.0)
    with torch.no_grad():
        model(torch.tensor([PROMPTS[0] + PROMPTS[2]]))
    assert sum(m.stats["dropped"] for m in moe_layers(model)) > 0  # capacity would matter here
    cached = generate(model, PROMPTS, Options(max_new=8))[0]
    assert len(set(cached.flatten().tolist())) > 8  # not one repeated byte
    assert torch.equal(cached, generate(model, PROMPTS, Options(max_new=8, use_cache=False))[0])
    for i, p in enumerate(PROMPTS):
        assert torch.equal(generate(model, [p], Options(max_new=8))[0][0], cached[i]), f"prompt {i}"
    assert all(m.capacity_factor == 1.0 for m in moe_layers(model))  # the caller's model is given back as it was


def _generate_layouts() -> list:
    from shardlab.generate.engine import Layout
    return [generate(_decisive_moe(1.0), PROMPTS, Options(max_new=8), Layout(tp=tp, pp=pp))[0]
            for tp, pp in ((2, 1), (1, 2))]


def test_generate_moe_under_tp2_and_pp2_equals_single(pool2):
    """generate's own layouts with MoE blocks: tp=2 (the MoE layers whole on each tp rank, as in training)
    and pp=2 (the blocks split over two stages) give one device's greedy tokens."""
    want = generate(_decisive_moe(1.0), PROMPTS, Options(max_new=8))[0]
    got = pool2.run(_generate_layouts)
    assert torch.equal(got[0][0], want)  # tp=2: rank 0 returns every prompt's tokens
    assert torch.equal(got[0][1], want)  # pp=2: stage 0 (rank 0) returns them


def test_generate_loads_an_ep2_training_checkpoint_on_one_device(pool2, tmp_path, capsys):
    """An ep=2 run's checkpoint (each rank wrote its experts) loads for `shardlab generate` on one device
    through DCP's reshard: every parameter equals the trained run's, bitwise, and its greedy decode with the
    cache equals recomputing the sequence. A Hugging Face export of it is refused."""
    from shardlab.generate.load import load_model

    run = tmp_path / "run"
    res = pool2.run(train_run, run, MOE + ["parallel.ep=2", "train.steps=2", "ckpt.every=2"], 2)
    model = load_model(run)
    assert dict(model.named_parameters()).keys() == res[0]["params"].keys()
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), res[0]["params"][name]), name
    opts = Options(max_new=6)
    assert torch.equal(generate(model, PROMPTS, opts)[0],
                       generate(model, PROMPTS, Options(max_new=6, use_cache=False))[0])
    # no Hugging Face class holds these experts: `ckpt export --hf` refuses in one line, writing nothing
    from shardlab.checkpoint import cli as ckpt_cli
    assert ckpt_cli.main(["export", str(run / "checkpoints" / "step_000002"), "--hf", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mixture-of-experts" in err[0] and not (tmp_path / "hf").exists()


def test_bf16_router_softmax_stays_fp32_and_loss_is_close_to_fp32():
    model = _decisive_moe(1.25)
    moe = moe_layers(model)[0]
    x = torch.randn(2, 8, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert moe.router(x).dtype == torch.bfloat16  # autocast lowers the router's matmul ...
        weight, *_ , aux, z = moe.route(x)
    assert weight.dtype == aux.dtype == z.dtype == torch.float32  # ... its softmax and the losses stay fp32
    ref = train(1, 1.0, "single", steps=3)
    bf16 = train(1, 1.0, "single", steps=3, train_kw={"dtype": "bf16"})
    assert all(math.isfinite(v) for v in bf16["loss"])
    assert bf16["loss"] == pytest.approx(ref["loss"], rel=2e-3)
    assert sum(bf16["dropped"]) > 0  # capacity is live under bf16 too


def test_bf16_under_ep2_runs_close_to_fp32(pool2):
    """bf16 rows travel through the all-to-alls (the experts' bf16 outputs come back as bf16)."""
    ref = train(1, 1.0, "single", steps=2)
    for r in pool2.run(train, 2, 1.0, steps=2, train_kw={"dtype": "bf16"}):
        assert all(math.isfinite(v) for v in r["loss"])
        assert r["loss"] == pytest.approx(ref["loss"], rel=2e-3)


def test_compiled_moe_blocks_equal_eager_and_route_eager():
    """train.compile with MoE blocks: each block's dense parts compile; the routed MLP runs eager (its shapes
    depend on the routing), the one graph break. Losses within test_compile's rtol, same dropped slots."""
    from torch._dynamo.utils import counters

    from shardlab.parallel import compile as compile_layer

    counters.clear()
    before = sum(c._compile_state["calls"] for c in compile_layer._CLASSES.values())
    eager = train(1, 1.0, "single", steps=3)
    compiled = train(1, 1.0, "single", steps=3, train_kw={"compile": True})
    failed = next((c._compile_state["failed"] for c in compile_layer._CLASSES.values()
                   if c._compile_state["failed"]), None)
    assert compiled["loss"] == pytest.approx(eager["loss"], rel=1e-4)
    assert compiled["dropped"] == eager["dropped"] and sum(eager["dropped"]) > 0
    if failed:  # as test_compile: inductor itself cannot build here; the fallback ran eager
        pytest.skip(f"inductor cannot compile the block on this machine ({failed}); ran eager")
    calls = sum(c._compile_state["calls"] for c in compile_layer._CLASSES.values()) - before
    assert calls == 3 * TINY["n_layer"]
    breaks = list(counters["graph_break"])
    assert breaks and all("MoE.forward" in b for b in breaks), breaks


def _recompute_replays(ref: dict, got: dict, hooks: bool = True) -> None:
    assert got["loss"] == ref["loss"] and got["dropped"] == ref["dropped"]
    if ref["params"] is not None:  # (rank 0 holds the full parameters)
        assert_params_equal(got["params"], ref["params"], exact=True)
    if not hooks:
        return
    # the MoE forward hook fired twice per layer in step 0 (forward, then the recompute in backward, last
    # block first), and the replay's outputs, dropped slots (zero rows) included, are the forward's bit for bit
    n = TINY["n_layer"]
    assert len(got["outputs"]) == 2 * n
    for first, again in zip(got["outputs"][:n], reversed(got["outputs"][n:])):
        assert torch.equal(first, again)


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_recompute_replays_routing_and_drops_exactly(mode):
    """Capacity 1.0 (slots drop) and dropout 0.1 in attention and the experts (the recompute must replay the
    RNG): the same losses and parameters, bitwise, as without recompute."""
    kw = {"model_kw": {"dropout": 0.1}}
    torch.manual_seed(0)
    ref = train(1, 1.0, "single", steps=2, **kw)
    torch.manual_seed(0)
    got = train(1, 1.0, "single", steps=2, train_kw={"recompute": mode}, **kw)
    assert sum(ref["dropped"]) > 0
    _recompute_replays(ref, got)


def _ep2_recompute() -> dict:
    return {"plain": train(2, 1.0, steps=2), "full": train(2, 1.0, steps=2, train_kw={"recompute": "full"})}


def test_recompute_under_ep2_replays_the_all_to_alls(pool2):
    """Under ep=2 a recomputed MoE block runs its dispatch and combine all-to-alls again in backward (every
    rank recomputes the same blocks in the same order); losses and parameters equal the run without."""
    for r in pool2.run(_ep2_recompute):
        # (torch's checkpoint stops a recompute once the last tensor backward needs is back: under EP that
        # is before the MoE's forward hook, so the hooks do not show the replay; comm's records do)
        _recompute_replays(r["plain"], r["full"], hooks=False)
        # the forward's dispatch and combine run once more: comm records them (bytes grow, never shrink)
        assert all(f > p for f, p in zip(r["full"]["bytes"], r["plain"]["bytes"]))


TPxEP = MOE + ["parallel.tp=2", "parallel.ep=2", "train.steps=4", "model.moe_capacity=1.0"]


def test_tp2_x_ep2_checkpoint_resumes_bitwise_at_world4(pool4, tmp_path):
    """tp=2 x ep=2 (world 4, capacity 1.0): 4 steps straight, checkpointing at step 2; a second run resumed
    from that checkpoint and taking steps 3 and 4 ends with the same losses and parameters, bitwise. (Each
    rank restores its own experts' AdamW state: a checkpoint's param groups are one rank's, naming its
    experts; tp.py's loader takes the hyperparameters from them and the parameter lists from its own rank.)"""
    straight = pool4.run(train_run, tmp_path / "straight", TPxEP + ["ckpt.every=2"], 4, timeout=300)
    resumed = pool4.run(train_run, tmp_path / "resumed",
                        TPxEP + [f"ckpt.resume={tmp_path}/straight/checkpoints/step_000002"], 4, timeout=300)
    assert resumed[0]["start"] == 2
    for r in range(4):
        assert_params_equal(resumed[r]["params"], straight[r]["params"], exact=True)
    assert [resumed[0]["losses"][s] for s in (3, 4)] == [straight[0]["losses"][s] for s in (3, 4)]
