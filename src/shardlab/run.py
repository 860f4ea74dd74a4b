"""Load a finished (or running) run directory in Python, e.g. in a notebook:

    import shardlab.run
    r = shardlab.run.load("runs/20260101-120000-ddp")
    r.config.parallel.strategy            # the resolved Config (dataclasses) from config.toml
    r.metrics                             # metrics.jsonl: a list of dicts, one per logged step
    r.summary["tokens_per_s"]             # summary.json (None while the run is still going)
    r.events                              # the skip / rollback records
    pandas.DataFrame(r.metrics).set_index("step")   # steps are unique

Nothing is imported from torch: loading a run is cheap.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from shardlab import config as config_mod
from shardlab.train.metrics import read_rows


@dataclass
class Run:
    path: Path
    config: config_mod.Config
    metrics: list[dict] = field(default_factory=list)
    summary: dict | None = None

    @property
    def events(self) -> list[dict]:
        return [r for r in self.metrics if r.get("event")]

    def series(self, key: str) -> tuple[list[int], list[float | None]]:
        """(steps, values) of one metric over the records that have it, e.g. r.series("loss")."""
        rows = [r for r in self.metrics if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]


def load(path: str | Path) -> Run:
    """A run directory -> Run. Raises FileNotFoundError if it has no config.toml."""
    p = Path(path)
    if not (p / "config.toml").is_file():
        raise FileNotFoundError(f"{p} has no config.toml: not a shardlab run directory")
    summary_path = p / "summary.json"
    return Run(path=p, config=config_mod.load(p / "config.toml"), metrics=read_rows(p / "metrics.jsonl"),
               summary=json.loads(summary_path.read_text()) if summary_path.is_file() else None)
