"""trace.profile=A-B (observe/profile.py): torch.profiler over those steps, the top table and a Chrome trace per
rank, the profiled steps left out of the step times; a malformed range is refused before the run."""
import json

import pytest

from run_harness import train
from shardlab.errors import ConfigError
from shardlab.observe.profile import parse_steps
from shardlab.testing import run_cli


def test_the_range_is_parsed_or_refused_in_one_line():
    assert parse_steps("") is None
    assert parse_steps("3") == (3, 3)
    assert parse_steps("10-12") == (10, 12)
    for bad in ("x", "5-2", "-1", "1-2-3"):
        with pytest.raises(ConfigError, match="trace.profile"):
            parse_steps(bad)


def test_a_run_writes_the_top_kernels_and_a_trace(tmp_path):
    out = tmp_path / "run"
    # one process, single device: the launcher runs it in its own process either way (run_harness)
    train(["--config", "configs/tiny.toml", "--nproc", "1", "--out", str(out), "train.steps=8",
           "train.eval_every=0", "parallel.strategy=single", "ckpt.final=false", "trace.profile=5-6"])
    top = (out / "profile" / "rank0_top.txt").read_text()
    assert top.startswith("rank 0: steps 5-6 (2 steps), sorted by self CPU time") and "aten::" in top
    assert json.loads((out / "profile" / "rank0.json").read_text())["traceEvents"]
    assert json.loads((out / "summary.json").read_text())["step_time_s"] > 0  # steps 3, 4, 7 timed (not 5-6)


def test_a_malformed_range_stops_the_run_before_it_starts(tmp_path):
    r = run_cli(["train", "--config", "configs/tiny.toml", "--out", str(tmp_path / "r"), "trace.profile=9-1"])
    assert r.returncode == 2 and "trace.profile='9-1'" in r.stderr
    assert not (tmp_path / "r").exists()
