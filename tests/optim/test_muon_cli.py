"""Bad input: train.optimizer=muon with a layer that cannot hand it whole matrices (FSDP2's DTensor shards)
is one line naming the layer, and exit code 2."""
import os
import subprocess
import sys


def test_muon_under_fsdp2_is_refused_in_one_line_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "shardlab", "train", "--nproc", "2", "--out", str(tmp_path / "run"),
                          "model.preset=tiny", "train.seq_len=16", "train.steps=2", "train.warmup_steps=1",
                          "train.optimizer=muon", "parallel.strategy=torch-fsdp2"],
                         capture_output=True, text=True, timeout=300, env={**os.environ})
    assert out.returncode == 2, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("shardlab: error:")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert "optimizer muon needs whole matrices, and torch-fsdp2 hands it DTensor dim-0 shards" in errors[0]


def _validate(overrides, world=2):
    from shardlab import config

    return config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=16", "train.optimizer=muon",
                                              *overrides]), world)


def test_config_validation_refuses_muon_before_any_rank_starts():
    """The serving declarations are data (optim/serving.py HANDS): validation answers as the built layer would."""
    import pytest

    from shardlab.errors import ConfigError

    for overrides, layer in ((["parallel.strategy=torch-fsdp2"], "torch-fsdp2"),
                             (["parallel.tp=2", "parallel.tp_impl=dtensor"], "tp")):
        with pytest.raises(ConfigError, match=f"optimizer muon needs whole matrices, and {layer} hands it DTensor"):
            _validate(overrides)
    for overrides in (["parallel.strategy=zero3"], ["parallel.strategy=zero1"], ["parallel.tp=2"],
                      ["parallel.strategy=torch-zero1"], ["parallel.strategy=ddp"],
                      ["parallel.strategy=torch-fsdp2", "parallel.tp=2", "parallel.tp_impl=own"]):
        _validate(overrides)  # served (under tp=2 at 2 ranks the dp layer is none: no FSDP2 shards)
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
