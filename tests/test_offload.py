"""Optimizer offload to disk (parallel.offload=optimizer, offload_to=disk) for the own zero layers: the same
numbers as without it (the optimizer's own per-tensor update, one shard at a time: bitwise), checkpoints
that load anywhere, and bad combinations refused in one line."""
import pytest
import torch

from memory_harness import offload
from shardlab.config import ConfigError, load, validate
from zero_harness import load as load_ckpt, save as save_ckpt


@pytest.mark.parametrize("name", ["zero2", "zero3"])
def test_offload_world2_bitwise_equal_to_no_offload(pool2, name):
    out = pool2.run(offload, name)
    for rank_out in out:
        assert rank_out["disk"]["losses"] == rank_out["none"]["losses"]
    for k, v in out[0]["none"]["params"].items():
        assert torch.equal(out[0]["disk"]["params"][k], v), k


def test_offloaded_checkpoint_loads_without_offload(pool2, tmp_path):
    """Offloaded state is saved as ordinary tensors: a zero3 run with offload resumes as ddp without it,
    and a ddp checkpoint loads into an offloaded zero2."""
    saved = pool2.run(save_ckpt, "zero3", str(tmp_path / "a"), offload="optimizer", offload_to="disk")[0]
    got = pool2.run(load_ckpt, "ddp", str(tmp_path / "a"))[0]
    assert got["steps"] == {2.0} and all(torch.equal(got["params"][k], v) for k, v in saved.items())
    saved = pool2.run(save_ckpt, "ddp", str(tmp_path / "b"))[0]
    got = pool2.run(load_ckpt, "zero2", str(tmp_path / "b"), offload="optimizer", offload_to="disk")[0]
    assert got["steps"] == {2.0} and all(torch.equal(got["params"][k], v) for k, v in saved.items())


@pytest.mark.parametrize("overrides", [["parallel.offload=params", "parallel.strategy=zero3"],
                                       ["parallel.offload=optimizer", "parallel.offload_to=host",
                                        "parallel.strategy=zero3"],
                                       ["parallel.offload=optimizer", "parallel.strategy=ddp"]])
def test_unsupported_offload_is_one_clear_error(overrides):
    with pytest.raises(ConfigError, match="offloads the optimizer to disk for zero1/zero2/zero3 only"):
        validate(load(None, overrides), 2)
