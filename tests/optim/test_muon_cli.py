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
