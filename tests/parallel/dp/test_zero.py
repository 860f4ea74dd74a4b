"""zero1 / zero2 / zero3 compute what DDP computes: same losses for 10 steps, same final parameters.

One pool per world size (the session's, tests/conftest.py); each case trains a tiny GPT for 10 steps on every rank.
Parity runs in float64 and is asserted to 1e-9 (shardlab/testing/compare.py: portable across CPU kernels);
one zero3 case checks fp32 against compare.py's error model; same-order pairs are asserted bitwise.
"""
import pytest
import torch

from shardlab.parallel.dp.shard import scatter_rows
from shardlab.testing import assert_float64_equal, assert_fp32_within_error_model, in_float64
from zero_harness import ODD, TINY, load, save, state_dicts, train, unit_shard_numels



def _same(out, ref, bitwise: bool = False):
    """Same losses and gradient norms at every step, same final parameters: float64 runs to compare.py's
    FP64_TOL, or bitwise (`bitwise=True`, any dtype: the same reduction order)."""
    for rank_out, rank_ref in zip(out, ref):  # every rank saw its own microbatches: compare rank by rank
        for key in ("losses", "norms"):
            if bitwise:
                assert rank_out[key] == rank_ref[key], key
            else:
                assert_float64_equal(rank_out[key], rank_ref[key], key)
    params, ref_params = out[0]["params"], ref[0]["params"]
    if bitwise:
        assert params.keys() == ref_params.keys()
        for k in ref_params:
            assert torch.equal(params[k], ref_params[k]), k
    else:
        assert_float64_equal(params, ref_params)


@pytest.fixture(scope="module")
def ddp2(pool2):
    return pool2.run(train, "ddp")


@pytest.fixture(scope="module")
def ddp2_64(pool2):
    return pool2.run(in_float64, train, "ddp")


# A compact matrix: every stage, both reshard modes, every wrap policy, prefetch on and off.
CASES = [
    ("zero1", {}),
    ("zero2", {}),
    ("zero2", {"wrap": "layer"}),
    ("zero3", {}),
    ("zero3", {"wrap": "layer"}),
    ("zero3", {"wrap": "whole"}),
    ("zero3", {"reshard_after_forward": False}),
    ("zero3", {"reshard_after_forward": False, "wrap": "layer", "prefetch": False}),
]


@pytest.mark.parametrize("name,parallel", CASES, ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}"
                                                      for n, p in CASES])
@pytest.mark.parity
def test_equals_ddp_world2(pool2, ddp2_64, name, parallel):
    _same(pool2.run(in_float64, train, name, **parallel), ddp2_64)


@pytest.mark.parity
def test_zero3_fp32_within_the_error_model(pool2, ddp2, ddp2_64):
    """fp32, the training precision: zero3 is as close to float64 ddp as fp32 ddp is (compare.py, 2.)."""
    out = pool2.run(train, "zero3")
    for key in ("losses", "norms"):
        assert_fp32_within_error_model(out[0][key], ddp2[0][key], ddp2_64[0][key], key)
    assert_fp32_within_error_model(out[0]["params"], ddp2[0]["params"], ddp2_64[0]["params"])


@pytest.mark.parametrize("reshard", [True, False])
def test_zero3_equals_torch_fsdp2(pool2, reshard):
    """Same layout, same reduction order (sum, then divide): bitwise equal, not just close."""
    ref = pool2.run(train, "torch-fsdp2", reshard_after_forward=reshard)
    _same(pool2.run(train, "zero3", reshard_after_forward=reshard), ref, bitwise=True)


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
@pytest.mark.parity
def test_grad_accumulation_equals_ddp(pool2, name):
    """Two microbatches per step: zero1 accumulates full gradients, zero2/3 accumulate in the shards."""
    ref = pool2.run(in_float64, train, "ddp", steps=4, accum=2)
    _same(pool2.run(in_float64, train, name, steps=4, accum=2), ref)


@pytest.mark.parity
def test_bf16_autocast(pool2):
    """Under bf16 autocast zero3 equals torch-fsdp2 bitwise (same reduction order, same casts); against
    ddp, whose averaging rounds differently, Adam turns last-bit gradient differences into lr-sized ones:
    losses only, at rtol 1e-3 (bf16 keeps 8 bits: one rounding of the logits is 2^-8 = 4e-3 relative, the
    loss averages thousands of them)."""
    out = pool2.run(train, "zero3", steps=4, dtype="bf16")
    _same(out, pool2.run(train, "torch-fsdp2", steps=4, dtype="bf16"), bitwise=True)
    ddp = pool2.run(train, "ddp", steps=4, dtype="bf16")
    torch.testing.assert_close(torch.tensor(out[0]["losses"]), torch.tensor(ddp[0]["losses"]), rtol=1e-3, atol=0)


def test_world1_zero3_equals_single():
    """At world size 1 (no process group) the strategies still run: every collective is a copy."""
    _same([train("zero3", steps=3)], [train("single", steps=3)], bitwise=True)


@pytest.mark.parametrize("rows,world", [(7, 2), (3, 4), (1, 4), (8, 4), (257, 4)])
def test_flat_layout_is_torch_chunk(rows, world):
    """Packing a full tensor into the flat layout puts torch.chunk's piece r (zero-padded) in row r."""
    full = torch.arange(rows * 3, dtype=torch.float32).view(rows, 3)
    chunk = -(-rows // world)
    dst = torch.full((world, chunk * 3), -1.0)
    scatter_rows(dst, full)
    pieces = list(torch.chunk(full, world))
    for r in range(world):
        piece = pieces[r] if r < len(pieces) else full[:0]
        padded = torch.zeros(chunk, 3)
        padded[: piece.shape[0]] = piece
        assert torch.equal(dst[r], padded.view(-1)), r


def test_tiny_and_odd_models_are_what_the_tests_claim():
    from shardlab.model.gpt import GPTConfig, build_model

    tiny = build_model(GPTConfig(**TINY), 0)
    assert all(p.shape[0] % 4 == 0 for p in tiny.parameters())
    odd = build_model(GPTConfig(**ODD), 0)
    assert any(p.shape[0] < 4 for p in odd.parameters())
    assert any(p.shape[0] % 4 and p.shape[0] % 2 for p in odd.parameters())


# --- memory: state_bytes equals the formulas, and what the tensors really hold -------------------------

FORMULAS = {  # bytes per rank, Adam fp32: (params, grads, optimizer) as functions of Ψ and N
    "zero1": lambda psi, n: (4 * psi, 4 * psi, 8 * psi // n),
    "zero2": lambda psi, n: (4 * psi, 4 * psi // n, 8 * psi // n),
    "zero3": lambda psi, n: (4 * psi // n, 4 * psi // n, 8 * psi // n),
}


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_state_bytes_equal_formulas(pool2, name):
    out = pool2.run(train, name, steps=2)
    for rank in out:
        psi, st = rank["psi"], rank["state"]
        assert st["padding"] == 0  # every tiny dimension divides by 2
        assert (st["params"], st["grads"], st["optimizer"]) == FORMULAS[name](psi, 2)
        for key, held in rank["held"].items():
            assert st[key] == held, key  # the accounting is what the tensors hold
    total = {"zero1": 8 * psi + 8 * psi // 2, "zero2": 4 * psi + 12 * psi // 2, "zero3": 16 * psi // 2}[name]
    assert sum(out[0]["state"][k] for k in ("params", "grads", "optimizer")) == total


def test_state_bytes_ddp_is_16_psi(ddp2):
    st, psi = ddp2[0]["state"], ddp2[0]["psi"]
    assert st["params"] + st["grads"] + st["optimizer"] == 16 * psi


# --- communication: bytes per step per rank equal the analytic volumes -----------------------------------

def _expected_comm(name: str, units: dict[str, int], n: int, reshard: bool = True) -> dict:
    """(bytes, wire bytes, calls) per op for one step. A unit's full flat buffer is 4 * N * S_u bytes;
    zero3 gathers every unit before forward and every unit but the root again before backward."""
    full = {u: 4 * n * s for u, s in units.items()}
    gathers = list(full.values())
    if name == "zero3" and reshard:
        gathers += [b for u, b in full.items() if u != "root"]
    ops = {"reduce_scatter": list(full.values()), "all_gather": gathers, "all_reduce": [4]}  # + grad norm
    return {op: (sum(calls), sum(int(b * (n - 1) / n) for b in calls) if op != "all_reduce" else
                 sum(int(b * 2 * (n - 1) / n) for b in calls), len(calls)) for op, calls in ops.items()}


COMM_CASES = [("zero1", "block", True), ("zero2", "layer", True), ("zero3", "block", True),
              ("zero3", "block", False), ("zero3", "layer", True), ("zero3", "whole", True)]


@pytest.mark.parametrize("name,wrap,reshard", COMM_CASES)
def test_collective_bytes_equal_analytic(pool2, ddp2, name, wrap, reshard):
    out = pool2.run(train, name, steps=2, wrap=wrap, reshard_after_forward=reshard)
    units = unit_shard_numels(TINY, wrap, 2)
    expected = _expected_comm(name, units, 2, reshard)
    for rank in out:
        c = rank["comm"]
        got = {op: (c["bytes"][op], c["wire_bytes"][op], c["calls"][op]) for op in expected}
        assert got == expected
    if name == "zero3":  # ~1.5x DDP on the wire: 3 passes over the parameters instead of 2, less the root's
        psi = out[0]["psi"]
        ddp_wire = ddp2[0]["comm"]["wire_bytes"]["all_reduce"]
        assert ddp_wire == 2 * 4 * psi // 2
        wire = sum(out[0]["comm"]["wire_bytes"].values()) - 4
        passes = 3 if reshard and wrap != "whole" else 2
        root = 4 * units["root"] * (2 - 1)
        assert wire == passes * 4 * psi // 2 - (root if passes == 3 else 0)


def test_reshard_false_saves_one_all_gather_per_unit(pool2):
    """...and pays for it in memory: every unit stays gathered from its forward to its backward."""
    a = pool2.run(train, "zero3", steps=1, reshard_after_forward=True)[0]
    b = pool2.run(train, "zero3", steps=1, reshard_after_forward=False)[0]
    units = len(unit_shard_numels(TINY, "block", 2))
    calls = (a["comm"]["calls"]["all_gather"], b["comm"]["calls"]["all_gather"])
    assert calls == (2 * units - 1, units)  # the root is never regathered: FSDP2 keeps it from forward
    assert b["state"]["transient"] > a["state"]["transient"]


# --- state dicts: same keys, shapes and placements as torch-fsdp2; DCP round trips across strategies ---

def test_state_dicts_match_torch_fsdp2(pool2):
    ours = pool2.run(state_dicts, "zero3")
    ref = pool2.run(state_dicts, "torch-fsdp2")
    for o, r in zip(ours, ref):
        assert o == r
    assert "lm_head.weight" in ours[0]["model"] and "lm_head.weight" not in ours[0]["optim_state"]
    for name in ("zero1", "zero2"):
        assert pool2.run(state_dicts, name) == ours


@pytest.mark.parametrize("saver,loader", [("zero3", "zero1"), ("torch-fsdp2", "zero3"), ("zero2", "torch-fsdp2")])
def test_dcp_checkpoint_loads_across_strategies(pool2, tmp_path, saver, loader):
    saved = pool2.run(save, saver, str(tmp_path / "ckpt"))[0]
    loaded = pool2.run(load, loader, str(tmp_path / "ckpt"))[0]
    assert loaded["steps"] == {2.0}
    for k in saved:
        torch.testing.assert_close(loaded["params"][k], saved[k], rtol=0, atol=0)


def test_bf16_gradient_communication(pool2, ddp2):
    """parallel.comm_dtype=bf16: the reduce-scatter payload halves; the training barely moves."""
    out = pool2.run(train, "zero3", comm_dtype="bf16")
    fp32 = _expected_comm("zero3", unit_shard_numels(TINY, "block", 2), 2)
    assert out[0]["comm"]["bytes"]["reduce_scatter"] == fp32["reduce_scatter"][0] // 2
    torch.testing.assert_close(torch.tensor(out[0]["losses"]), torch.tensor(ddp2[0]["losses"]), rtol=1e-3, atol=0)


def test_all_gather_order_follows_execution(pool2):
    """Forward gathers in module order; backward in reverse order of the forward's ends, each unit
    prefetched one ahead: with wrap=layer the block (its norms) before its mlp before its attention."""
    out = pool2.run(train, "zero3", steps=1, wrap="layer")
    forward = ["root", "blocks.0", "blocks.0.attn", "blocks.0.mlp", "blocks.1", "blocks.1.attn", "blocks.1.mlp"]
    backward = ["blocks.1", "blocks.1.mlp", "blocks.1.attn", "blocks.0", "blocks.0.mlp", "blocks.0.attn"]
    assert out[0]["gathers"] == [f"ag:{u}" for u in forward + backward]
