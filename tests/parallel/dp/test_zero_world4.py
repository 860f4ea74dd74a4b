"""ZeRO at world size 4 (one pool for the module): odd sizes, padding in the accounting, resharding a
checkpoint to another world size."""
import pytest
import torch

from shardlab.testing import in_float64
from test_zero import _expected_comm, _same
from zero_harness import ODD, load, save, train, unit_shard_numels


@pytest.fixture(scope="module")
def ddp4_odd(pool4):
    return pool4.run(in_float64, train, "ddp", steps=5, model_kw=ODD)


@pytest.mark.parity
@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_odd_sizes_equal_ddp(pool4, ddp4_odd, name):
    """Nothing divisible by 4, and parameters (3 rows) smaller than the world: rank 3 owns no rows.
    float64 (shardlab/testing/compare.py)."""
    _same(pool4.run(in_float64, train, name, steps=5, model_kw=ODD, wrap="layer"), ddp4_odd)


@pytest.mark.parity
def test_zero3_equals_ddp(pool4):
    _same(pool4.run(in_float64, train, "zero3", steps=5, reshard_after_forward=False),
          pool4.run(in_float64, train, "ddp", steps=5))


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_state_bytes_with_padding(pool4, name):
    """Per rank the bytes include padding; summed over ranks, minus the reported padding, they are the
    formulas exactly: zero1 8Ψ + 8Ψ/N, zero2 4Ψ + 12Ψ/N, zero3 16Ψ/N (per rank, times N)."""
    out = pool4.run(train, name, steps=2, model_kw=ODD, wrap="layer")
    n, psi = 4, out[0]["psi"]
    shard = sum(unit_shard_numels(ODD, "layer", n).values())  # padded shard length, every rank alike
    per_rank = {"zero1": (4 * n * shard, 4 * n * shard, 8 * shard),
                "zero2": (4 * n * shard, 4 * shard, 8 * shard),
                "zero3": (4 * shard, 4 * shard, 8 * shard)}[name]
    for rank in out:
        st = rank["state"]
        assert (st["params"], st["grads"], st["optimizer"]) == per_rank
        for key, held in rank["held"].items():
            assert st[key] == held, key
    assert out[-1]["state"]["padding"] > 0  # the last rank's shards are the short ones
    unpadded = sum(r["state"]["params"] + r["state"]["grads"] + r["state"]["optimizer"] - r["state"]["padding"]
                   for r in out)
    assert unpadded == n * {"zero1": 8 * psi, "zero2": 4 * psi, "zero3": 0}[name] + \
        {"zero1": 8 * psi, "zero2": 12 * psi, "zero3": 16 * psi}[name]


def test_collective_bytes_with_padding(pool4):
    out = pool4.run(train, "zero3", steps=1, model_kw=ODD, wrap="layer")
    expected = _expected_comm("zero3", unit_shard_numels(ODD, "layer", 4), 4)
    for rank in out:
        c = rank["comm"]
        assert {op: (c["bytes"][op], c["wire_bytes"][op], c["calls"][op]) for op in expected} == expected


def test_checkpoint_reshards_to_world1(pool4, tmp_path):
    """Saved by zero3 on 4 ranks, loaded by zero2 in one process (no process group): DCP reshards."""
    saved = pool4.run(save, "zero3", str(tmp_path / "ckpt"), model_kw=ODD)[0]
    loaded = load("zero2", str(tmp_path / "ckpt"), model_kw=ODD)
    assert loaded["steps"] == {2.0}
    for k in saved:
        torch.testing.assert_close(loaded["params"][k], saved[k], rtol=0, atol=0)
