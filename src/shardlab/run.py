"""Load a finished (or running) run directory in Python, e.g. in a notebook:

    import shardlab.run
    r = shardlab.run.load("runs/20260101-120000-ddp")
    r.config.parallel.strategy            # the resolved Config (dataclasses) from config.toml
    r.metrics                             # metrics.jsonl: a list of dicts, one per logged step
    r.summary["tokens_per_s"]             # summary.json (None while the run is still going)
    r.events                              # the skip / rollback records
    pandas.DataFrame(r.metrics).set_index("step")   # steps are unique

and its model, ready for inference in this one process whatever layout trained it (the checkpoint is
resharded on load: DCP reads any world's shards; the same loading as `shardlab generate`, generate/load.py):

    r.logits(torch.tensor([[1, 2, 3]]))   # [batch, seq, vocab] float32 logits of the latest checkpoint
    r.model()                             # the bare single-device model (GPT or Llama), eval mode
    r.tokenizer.encode("hello")           # the tokenizer the model was trained with
    shardlab.run.load("runs/x/checkpoints/step_000200").logits(...)   # one checkpoint in particular

`load` imports nothing from torch: reading a run's records is cheap; the model is read on first use.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from shardlab import config as config_mod
from shardlab.train.metrics import read_rows


@dataclass
class Run:
    path: Path
    config: config_mod.Config | None  # None for a checkpoint outside a run (what `ckpt import --hf` wrote)
    metrics: list[dict] = field(default_factory=list)
    summary: dict | None = None
    checkpoint: Path | str | None = None  # what the model is read from: a step directory, or the run's latest
    _model: object = field(default=None, init=False, repr=False)

    @property
    def events(self) -> list[dict]:
        return [r for r in self.metrics if r.get("event")]

    def series(self, key: str) -> tuple[list[int], list[float | None]]:
        """(steps, values) of one metric over the records that have it, e.g. r.series("loss")."""
        rows = [r for r in self.metrics if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def model(self):
        """The checkpoint's model on this process's CPU in float32, eval mode (read once, then kept): the
        single-device model training started from, with the trained weights, whatever layout wrote them."""
        if self._model is None:
            from shardlab.generate.load import load_model, step_dir

            self.checkpoint = step_dir(self.checkpoint or self.path)  # the run's latest committed one
            with warnings.catch_warnings():  # DCP's note that it reads into one process: what is meant here
                warnings.filterwarnings("ignore", message="torch.distributed is disabled")
                self._model = load_model(self.checkpoint)
        return self._model

    def logits(self, tokens):
        """Token ids ([batch, seq] or one sequence [seq]: a tensor or a list) -> the model's logits,
        [batch, seq, vocab] float32, without gradients: what training's loss and `shardlab generate` see."""
        import torch

        ids = torch.as_tensor(tokens, dtype=torch.long)
        with torch.no_grad():
            return self.model()(ids.unsqueeze(0) if ids.dim() == 1 else ids)

    @property
    def tokenizer(self):
        """The tokenizer the checkpoint's model was trained with (`encode(text)`, `decode(ids)`)."""
        from shardlab.generate.cli import tokenizer_of

        return tokenizer_of(str(self.checkpoint or self.path), self.model().cfg.vocab_size)


def load(path: str | Path) -> Run:
    """A run directory, or one of its checkpoints (checkpoints/ or a step directory, also one outside a run)
    -> Run. Raises FileNotFoundError for anything else."""
    p = Path(path)
    checkpoint = None
    if not (p / "config.toml").is_file():
        from shardlab.checkpoint import manifest as mf  # torch-free

        try:
            where, kind = mf.resolve(p)
        except FileNotFoundError:
            raise FileNotFoundError(f"{p} has neither config.toml nor checkpoints: not a shardlab run directory "
                                    "or checkpoint") from None
        checkpoint = p
        run = where.parent.parent if kind == "step" else where.parent  # step_NNNNNN -> checkpoints -> run
        p = run if (run / "config.toml").is_file() else p
    summary_path = p / "summary.json"
    has_config = (p / "config.toml").is_file()
    return Run(path=p, config=config_mod.load(p / "config.toml") if has_config else None,
               metrics=read_rows(p / "metrics.jsonl") if has_config else [],
               summary=json.loads(summary_path.read_text()) if has_config and summary_path.is_file() else None,
               checkpoint=checkpoint)
