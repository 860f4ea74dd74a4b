"""docs/training.md's launcher example is what the launcher prints for that run (the defaults at 64 ranks:
micro batch 8 x grad accum 1 x 64 data-parallel ranks = global batch 512)."""
from pathlib import Path

from shardlab import config
from shardlab.launch import notes

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def test_the_64_rank_start_line_is_the_launchers():
    shown = next(line.strip() for line in DOC.read_text().splitlines() if "[launch] starting 64 ranks" in line)
    cfg = config.load()
    config.validate(cfg, 64)  # train.global_batch=0 is derived here, as the launcher derives it
    assert cfg.train.global_batch == 512
    assert shown == notes.start_line(cfg, 64, 1, "runs/x", derived_batch=True)
