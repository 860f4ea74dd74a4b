"""Muon against the layers, at config validation (before any rank starts): every layer that shards matrices
describes its pieces (optim/serving.py HANDS: zero, own TP, torch-fsdp2, DTensor TP), so muon is served under
each; a layer that hands pieces it does not describe is refused in one line naming the layer (exit 2 from
`shardlab train`, as every ConfigError)."""
import pytest

from shardlab.errors import ConfigError


def _validate(overrides, world=2):
    from shardlab import config

    return config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=16", "train.optimizer=muon",
                                              *overrides]), world)


def test_config_validation_serves_muon_under_every_layer():
    for overrides in (["parallel.strategy=zero3"], ["parallel.strategy=zero1"], ["parallel.tp=2"],
                      ["parallel.strategy=torch-zero1"], ["parallel.strategy=ddp"],
                      ["parallel.strategy=torch-fsdp2"], ["parallel.tp=2", "parallel.tp_impl=dtensor"]):
        _validate(overrides)
    _validate(["parallel.strategy=torch-fsdp2", "parallel.tp=2", "parallel.tp_impl=dtensor"], world=4)
    _validate(["parallel.strategy=zero3", "parallel.dp_replicate=2"], world=4)


def test_a_layer_that_does_not_describe_its_pieces_is_refused_in_one_line(monkeypatch):
    """The serving declarations are data (optim/serving.py HANDS): validation answers as the built layer would."""
    from shardlab.optim import serving

    for key, overrides, layer in (("torch-fsdp2", ["parallel.strategy=torch-fsdp2"], "torch-fsdp2"),
                                  ("tp:dtensor", ["parallel.tp=2", "parallel.tp_impl=dtensor"], "tp")):
        monkeypatch.setitem(serving.HANDS, key, serving.Hands(serving.HANDS[key].phrase, describes=False))
        with pytest.raises(ConfigError, match=f"optimizer muon needs whole matrices, and {layer} hands it DTensor") \
                as err:
            _validate(overrides)
        assert "\n" not in str(err.value)
    _validate(["parallel.strategy=torch-fsdp2", "train.optimizer=adamw"])  # elementwise: served everywhere


def test_the_layers_declare_what_config_validation_reads():
    from shardlab.optim.serving import HANDS
    from shardlab.parallel.dp.native import TorchFSDP2
    from shardlab.parallel.dp.zero import Zero1, Zero3
    from shardlab.parallel.tp.dtensor import DTensorTP
    from shardlab.parallel.tp.own import OwnTP

    assert Zero1.optimizer_hands == Zero3.optimizer_hands == HANDS["zero"].phrase
    assert TorchFSDP2.optimizer_hands == HANDS["torch-fsdp2"].phrase
    assert OwnTP.optimizer_hands == HANDS["tp:own"].phrase and DTensorTP.optimizer_hands == HANDS["tp:dtensor"].phrase
    assert all(h.describes for h in HANDS.values())  # each builds `Pieces` at run time (dtensor_pieces.py)


@pytest.mark.parametrize("offload", ["parallel.offload=optimizer", "parallel.offload=params"])
def test_muon_with_offload_is_refused_in_one_line_before_any_rank(tmp_path, offload):
    """The offloaded step updates a group of layers at a time; Muon's exchange takes every matrix at once. Both
    offloads crashed a rank (a KeyError in the step) before this refusal: now exit 2, nothing written."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "shardlab", "train", "--out", str(tmp_path / "run"), "--nproc", "2",
                          "model.preset=tiny", "train.optimizer=muon", "parallel.strategy=zero3", offload,
                          "parallel.offload_to=disk"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and not (tmp_path / "run").exists(), out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and f"train.optimizer=muon with {offload}" in line and "parallel.offload=none" in line
