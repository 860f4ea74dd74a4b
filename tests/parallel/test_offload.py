"""Offload for the own zero layers on a CPU: the optimizer to disk (parallel.offload=optimizer, offload_to=disk;
with the parameters on an accelerator: tests/parallel/dp/test_offload_host_step.py), and
zero3's parameter shards with it to disk or host (parallel.offload=params): the same numbers as without it
(the same arithmetic, only where the tensors live differs: bitwise), checkpoints that load into a layout
without offload and back, and bad combinations refused in one line."""
import pytest
import torch

from memory_harness import offload, params_at_rest
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


@pytest.mark.parametrize("overrides,needle", [
    (["parallel.offload=optimizer", "parallel.strategy=ddp"], "the optimizer is offloaded for the sharded layers"),
    (["parallel.offload=optimizer", "parallel.offload_to=host", "parallel.strategy=torch-zero1"],
     "the optimizer is offloaded for the sharded layers"),
    (["parallel.offload=params", "parallel.strategy=zero2"], "parameter offload needs parameters sharded at rest"),
    (["parallel.offload=params", "parallel.offload_to=disk", "parallel.strategy=torch-fsdp2"],
     "FSDP2 offloads parameters (with gradients and optimizer) to the host only"),
    (["parallel.offload=params", "parallel.offload_to=host", "parallel.strategy=torch-fsdp2",
      "parallel.backend=gloo"], "FSDP2's CPUOffloadPolicy needs an accelerator"),
])
def test_unsupported_offload_is_one_clear_error(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        validate(load(None, overrides), 2)


def test_fsdp2_offload_on_cpu_exits_2_in_one_line(tmp_path, capsys, monkeypatch):
    """FSDP2's CPUOffloadPolicy fails on CPU deep inside torch ("Cannot access accelerator device"); shardlab
    says so before launching anything."""
    from shardlab import cli
    from shardlab.launch import launcher as launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(launch, "launch", lambda *a: pytest.fail("launched"))
    out = tmp_path / "run"
    code = cli.cmd_train(["--out", str(out), "parallel.strategy=torch-fsdp2", "parallel.offload=params",
                          "parallel.offload_to=host"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "needs an accelerator" in err, err
    assert not out.exists()


# --- parameter offload (zero3) ------------------------------------------------------------------------

def test_params_offload_world2_bitwise_equal_to_no_offload(pool2):
    """zero3 with its parameter shards (and the optimizer) on disk, and on the host (on a CPU: the same
    memory, a copy per fetch), trains bitwise as without offload: only where the shards live differs."""
    out = pool2.run(offload, "zero3", what="params", to=("disk", "host"))
    for rank_out in out:
        for tier in ("disk", "host"):
            assert rank_out[tier]["losses"] == rank_out["none"]["losses"], tier
    for tier in ("disk", "host"):
        for k, v in out[0]["none"]["params"].items():
            assert torch.equal(out[0][tier]["params"][k], v), (tier, k)


def test_params_offload_prefetch_off_and_wrap_layer_bitwise_equal(pool2):
    """The fetch rides on the all-gather wherever it starts: without prefetch, and with finer units."""
    out = pool2.run(offload, "zero3", what="params", prefetch=False, wrap="layer")
    for rank_out in out:
        assert rank_out["disk"]["losses"] == rank_out["none"]["losses"]


def test_params_offloaded_to_disk_are_not_resident_between_uses(pool2):
    """Between uses every unit's parameter shard is a memory-mapped file with none of its pages in the
    process (they are fetched for the all-gather and dropped after it and after the update)."""
    for got in pool2.run(params_at_rest, offload="params", offload_to="disk"):
        assert all(got["mapped"]) and got["resident"] == [0] * len(got["bytes"]) and sum(got["bytes"]) > 0


def test_params_offloaded_checkpoint_loads_without_offload_and_back(pool2, tmp_path):
    """A zero3 run with its parameters on disk saves ordinary DTensor shards: they load into ddp (no
    offload), and a ddp checkpoint loads into zero3 with offload=params."""
    saved = pool2.run(save_ckpt, "zero3", str(tmp_path / "a"), offload="params", offload_to="disk")[0]
    got = pool2.run(load_ckpt, "ddp", str(tmp_path / "a"))[0]
    assert got["steps"] == {2.0} and all(torch.equal(got["params"][k], v) for k, v in saved.items())
    saved = pool2.run(save_ckpt, "ddp", str(tmp_path / "b"))[0]
    got = pool2.run(load_ckpt, "zero3", str(tmp_path / "b"), offload="params", offload_to="disk")[0]
    assert got["steps"] == {2.0} and all(torch.equal(got["params"][k], v) for k, v in saved.items())
