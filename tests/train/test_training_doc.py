"""docs/training.md's launcher example is what the launcher prints for that run (the defaults at 8 ranks, the most
the 2-core machine starts without --oversubscribe: micro batch 8 x grad accum 1 x 8 data-parallel ranks = global
batch 64)."""
import re
from pathlib import Path

from shardlab import config
from shardlab.launch import notes

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def test_the_start_line_example_is_the_launchers():
    shown = next(line.strip() for line in DOC.read_text().splitlines() if "[launch] starting " in line)
    world = int(re.match(r"\[launch\] starting (\d+) ranks", shown).group(1))
    cfg = config.load()
    cfg = config.validate(cfg, world)  # train.global_batch=0 is derived here, as the launcher derives it
    assert cfg.train.global_batch == 8 * world
    assert shown == notes.start_line(cfg, world, 1, "runs/x", derived_batch=True)
    # and its warning line is the launcher's for those ranks on 2 cores
    warned = next(line.strip() for line in DOC.read_text().splitlines() if f"{world} ranks x 1 thread on" in line)
    assert warned == notes.oversubscribed(world, 1, 2)
