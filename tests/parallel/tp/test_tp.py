"""Tensor (and sequence) parallelism, own and DTensor, at tp=2: each computes what one device computes.

One pool of 2 gloo ranks for the module; the TP group is the world. Every case builds the single-device GPT
on each rank, keeps a copy as the reference and splits the other (tests/drivers/tp_harness.py).
"""
import pytest
import torch

from shardlab.parallel.tp.cost import comm_bytes_per_step
from shardlab.testing.compare import assert_float64_equal
from tp_harness import TINY, checkpoint_roundtrip, reshard_across_degrees, dropout_recompute, dropout_streams, dtensor_collectives, parity, records

# One step, no optimizer yet: the TP ranks sum partial matmuls in another order than one device's GEMM.
# Any order of an n-term sum is within γ_n·Σ|terms| ≈ n·u·Σ|terms| of the exact one, whatever the CPU's
# kernels; the longest reductions here are n ≤ 256 (vocabulary, tokens x batch) with terms no larger than
# the tensor's largest element, so fp32 (u = 6e-8) stays within 256·6e-8 = 1.5e-5 of each tensor's scale in
# the worst case (measured ~1e-7): FP32 = 1e-5 relative to the scale plus the losses' tol/10, float64
# (u = 1.1e-16) within 3e-14: FP64 = 1e-12. Parameters after AdamW steps are compared in float64 only
# (shardlab/testing/compare.py says why fp32 cannot be compared tightly there on every CPU).
FP32 = 1e-5
FP64 = 1e-12
VOCAB257 = dict(TINY, vocab_size=257)  # not divisible by 2: padded to 258

CASES = [(impl, sp) for impl in ("own", "dtensor") for sp in (False, True)]
IDS = [f"{impl}-{'sp' if sp else 'nosp'}" for impl, sp in CASES]


def _close(got, ref, tol, what, scale=None):
    scale = float(ref.abs().max()) if scale is None else scale
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol * scale, msg=lambda m: f"{what}: {m}")


def _check(out, tol=FP32):
    got, ref = out["logits"]
    _close(got, ref, tol, "logits")
    got, ref = out["grads"]
    assert got.keys() == ref.keys()
    for name in ref:
        # the key bias's gradient is mathematically zero (softmax ignores a per-query constant): pure
        # round-off, judged against the scale of the key weight's gradient
        scale = float(ref[name[:-4] + "weight"].abs().max()) if name.endswith("attn.k.bias") else None
        _close(got[name], ref[name], tol, f"grad {name}", scale)
    torch.testing.assert_close(torch.tensor(out["losses"], dtype=torch.float64),
                               torch.tensor(out["ref_losses"], dtype=torch.float64), rtol=tol / 10, atol=0)
    assert out["norm"][0] == pytest.approx(out["norm"][1], rel=1e-6)
    assert out["tied"], "the head must stay tied to the embedding"
    assert out["grads_placed"], "after finish_backward every gradient is placed like its parameter"


@pytest.mark.parity
@pytest.mark.parametrize("impl,sp", CASES, ids=IDS)
def test_tp_equals_single_device(pool2, impl, sp):
    """float64: logits, loss, gradients and grad norm of a step, then 3 AdamW steps: losses and parameters."""
    out = pool2.run(parity, impl, sp, dtype="fp64")[0]
    _check(out, tol=FP64)
    # parameters per rank (docs/tp.md): split ones / N, replicated ones whole
    n, L, h, T, V = 2, TINY["n_layer"], TINY["d_model"], TINY["max_seq_len"], TINY["vocab_size"]
    assert out["local_numel"] == (L * (12 * h * h + 7 * h) + V * h) // n + L * 6 * h + 2 * h + T * h
    got, ref = out["params"]
    assert_float64_equal(got, ref)


def test_tp4_equals_single_device_and_own_equals_dtensor(pool4):
    """World 4, tp=4 (one head per rank): own and DTensor, with and without SP, equal one device's first
    step (as at tp=2) and, over 5 AdamW steps, its losses and final parameters; own and DTensor equal each
    other; each rank holds 1/4 of the split parameters. All in float64 (compare.py)."""
    outs = {case: pool4.run(parity, *case, dtype="fp64", steps=5, timeout=300)[0] for case in CASES}
    n, L, h, T, V = 4, TINY["n_layer"], TINY["d_model"], TINY["max_seq_len"], TINY["vocab_size"]
    for (impl, sp), out in outs.items():
        _check(out, tol=FP64)
        assert out["local_numel"] == (L * (12 * h * h + 7 * h) + V * h) // n + L * 6 * h + 2 * h + T * h
        got, ref = out["params"]
        assert_float64_equal(got, ref)
    for sp in (False, True):
        own, dt = outs[("own", sp)], outs[("dtensor", sp)]
        assert_float64_equal(own["losses"], dt["losses"], "losses")
        assert_float64_equal(own["params"][0], dt["params"][0])


@pytest.mark.parity
@pytest.mark.parametrize("impl,sp", CASES, ids=IDS)
def test_tp_fp32_first_step_within_round_off(pool2, impl, sp):
    """fp32, the training precision, before any optimizer step: logits, loss, gradients and grad norm
    within the order-independent round-off bound of the comment above."""
    out = pool2.run(parity, impl, sp, steps=1)[0]
    _check(out)


@pytest.mark.parity
@pytest.mark.parametrize("impl,sp", CASES, ids=IDS)
def test_vocab_padding_leaves_loss_equal(pool2, impl, sp):
    """Vocabulary 257 at tp=2: own pads to 258 (one zero row, masked out of the loss), DTensor shards
    unevenly (129 + 128); loss, logits and gradients equal the single device's 257-way softmax."""
    out = pool2.run(parity, impl, sp, model_kw=VOCAB257, dtype="fp64", steps=2)[0]
    assert out["logits"][0].shape[-1] == 257
    _check(out, tol=FP64)
    assert out["grads"][0]["wte.weight"].shape == (257, 64)


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_own_tp_collective_counts(pool2, sp):
    """Without SP: exactly one all-reduce per attention and one per MLP in forward, the same in backward.
    With SP: each becomes one all-gather + one reduce-scatter per region and pass, and no all-reduce."""
    recs = pool2.run(records, sp)[0]
    for i in range(TINY["n_layer"]):
        for region in ("attn", "mlp"):
            tag = f"tp.blocks.{i}.{region}"
            for phase in ("forward", "backward"):
                ops = sorted(r["op"] for r in recs if r["tag"] == tag and r["phase"] == phase)
                assert ops == (["all_gather", "reduce_scatter"] if sp else ["all_reduce"]), (tag, phase, ops)
    by_tag = {}
    for r in recs:
        by_tag.setdefault((r["phase"], r["tag"]), []).append(r["op"])
    assert by_tag[("forward", "tp.wte")] == ["reduce_scatter" if sp else "all_reduce"]
    assert by_tag[("forward", "tp.lm_head")] == ["all_gather"] if sp else ("forward", "tp.lm_head") not in by_tag
    assert by_tag[("backward", "tp.lm_head")] == ["reduce_scatter" if sp else "all_reduce"]
    assert by_tag[("forward", "tp.loss.max")] == ["all_reduce"] and by_tag[("forward", "tp.loss.sum")] == ["all_reduce"]
    assert not any(r["tag"].startswith("tp.loss") for r in recs if r["phase"] == "backward"), "the loss backward is local"
    assert by_tag.get(("step", "tp.sp_grads"), []) == (["all_reduce"] if sp else [])


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_own_tp_bytes_equal_analytic(pool2, sp):
    """Payload bytes (comm's convention: the full tensor) of every collective of one step, from the shapes:
    b*s*h*4 per region collective, O(tokens) for the loss, the replicated parameters for SP's grad sync."""
    n, b, s, h, L = 2, 2, TINY["max_seq_len"], TINY["d_model"], TINY["n_layer"]
    act = b * s * h * 4
    recs = pool2.run(records, sp)[0]
    for r in recs:
        if r["tag"].startswith(("tp.blocks", "tp.wte", "tp.lm_head")):
            assert r["bytes"] == act, r
            factor = 2 * (n - 1) / n if r["op"] == "all_reduce" else (n - 1) / n
            assert r["wire"] == int(act * factor), r
    assert [r["bytes"] for r in recs if r["tag"] == "tp.loss.max"] == [b * s * 4]
    assert [r["bytes"] for r in recs if r["tag"] == "tp.loss.sum"] == [2 * b * s * 4]
    region = sum(r["bytes"] for r in recs if r["tag"].startswith("tp.blocks"))
    assert region == 2 * L * 2 * act * (2 if sp else 1)  # 2 regions x (fwd + bwd) x (AG + RS with SP)
    if sp:  # per block: 2 LayerNorms (w, b) + 2 row biases; ln_f; the position table
        sp_numel = L * (4 * h + 2 * h) + 2 * h + TINY["max_seq_len"] * h
        assert [r["bytes"] for r in recs if r["tag"] == "tp.sp_grads"] == [sp_numel * 4]
    by_op = {}
    for r in recs:
        by_op[r["op"]] = by_op.get(r["op"], 0) + r["bytes"]
    assert by_op == comm_bytes_per_step(L, h, TINY["max_seq_len"], b * s, sp)  # what the bench and planner use


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_dtensor_tp_region_collectives(pool2, sp):
    """DTensor TP's redistributions at module boundaries (what the plan places): as own TP, one all-reduce
    per attention and per MLP plus the embedding's in forward, one per region plus the head's in backward;
    with SP an all-gather and a reduce-scatter instead. (Collectives inside DTensor's op dispatch, such as
    loss_parallel's, are out of this counter's view.)"""
    counts = pool2.run(dtensor_collectives, sp)[0]
    n = 2 * TINY["n_layer"] + 1
    want = {"all_gather_into_tensor": n, "reduce_scatter_tensor": n} if sp else {"all_reduce": n}
    for phase in ("forward", "backward"):
        got = {k: v for k, v in counts[phase].items() if k in ("all_reduce", "all_gather_into_tensor",
                                                                 "reduce_scatter_tensor")}
        assert got == want, (phase, counts[phase])


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_dropout_streams(pool2, sp):
    """Dropout on (p=0.1): attention dropout (heads split across ranks) draws from a different stream on
    each TP rank; the residual dropout draws from the shared stream without SP (replicated activations:
    identical masks, so the residual stream stays identical) and from per-rank streams with SP."""
    r0, r1 = pool2.run(dropout_streams, sp)
    assert all(a != b for a, b in zip(r0["sdpa"], r1["sdpa"]))
    if sp:
        assert all(a != b for a, b in zip(r0["drop"], r1["drop"]))
    else:
        assert r0["drop"] == r1["drop"]
        assert torch.equal(r0["resid"], r1["resid"])


@pytest.mark.parametrize("sp", [False, True], ids=["nosp", "sp"])
def test_dropout_replays_under_recompute(pool2, sp):
    """The per-rank streams are drawn from the default one, so activation recompute replays the masks."""
    out = pool2.run(dropout_recompute, sp)[0]
    for name, g in out["plain"].items():
        torch.testing.assert_close(out["recompute"][name], g, rtol=0, atol=0, msg=name)


def test_checkpoint_reshards(pool2, tmp_path):
    """Own TP's state dict (vocab 257: uneven shards) saved with DCP loads into the single-device model, a
    fresh own-TP model and a DTensor-TP model, each holding exactly the saved values; padding stays zero."""
    out = pool2.run(checkpoint_roundtrip, str(tmp_path / "ckpt"), VOCAB257)
    for rank_out in out:
        saved = rank_out["saved"]
        for key in ("single", "own", "dtensor"):
            got = rank_out[key]
            for name, value in saved.items():
                torch.testing.assert_close(got[name], value, rtol=0, atol=0, msg=f"{key} {name}")
        assert rank_out["padding_zero"]
    layout = out[0]["layout"]
    assert layout["wte.weight"] == ("DTensor", (257, 64), "(Shard(dim=0),)", (129, 64))
    assert out[1]["layout"]["wte.weight"][3] == (128, 64)
    assert layout["blocks.0.attn.q.weight"][1:] == ((64, 64), "(Shard(dim=0),)", (32, 64))
    assert layout["blocks.0.attn.proj.weight"][1:] == ((64, 64), "(Shard(dim=1),)", (64, 32))
    assert layout["blocks.0.ln_1.weight"][0] == "Tensor"
    assert layout["lm_head.weight"] == layout["wte.weight"]


def test_checkpoint_tp4_loads_at_tp2(pool4, tmp_path):
    """World 4, vocab 257: a tp=4 checkpoint (shards 65/65/65/62 rows) of model and AdamW state loads at tp=2
    on a 2 x 2 (dp, tp) mesh holding exactly the saved parameters and first moments, and the next step's
    loss equals the single-device run's next loss."""
    for out in pool4.run(reshard_across_degrees, str(tmp_path / "ckpt"), VOCAB257):
        for kind in ("params", "exp_avg"):
            for name, saved in out["saved"][kind].items():
                torch.testing.assert_close(out["loaded"][kind][name], saved, rtol=0, atol=0,
                                           msg=f"rank {out['rank']} {kind} {name}")
        assert out["steps"] == {2.0}
        assert out["next"][0] == pytest.approx(out["next"][1], rel=1e-6)


def test_indivisible_heads_are_refused():
    from shardlab.parallel.tp.own import check_divisible

    with pytest.raises(ValueError, match="does not divide model.n_head=3"):
        check_divisible(3, 6, 2)



def test_indivisible_sequence_is_refused_with_sp():
    from torch import nn

    from shardlab.parallel.tp.own import SequenceParallelPositions

    positions = SequenceParallelPositions(nn.Embedding(16, 4), rank=0, size=2)
    assert positions(torch.arange(16)).shape == (8, 4)
    with pytest.raises(ValueError, match="sequence length 15 is not divisible by the tensor-parallel degree 2"):
        positions(torch.arange(15))
