"""The strategy-agnostic training loop.

    trainer = make_trainer(cfg, run_dir)   # the run's trainer
    summary = trainer.run()                 # or main(cfg, run_dir): a rank's whole program, exit codes included

Two trainers share that face: the synchronous loop (trainer.py: every rank takes every step together, whatever
the layers) and the asynchronous parameter server's (async_trainer.py, parallel.sync=async: a server and workers,
no common step). Imports are deferred: importing the package loads neither.
"""
from __future__ import annotations


def make_trainer(cfg, run_dir):
    """The trainer of the run `cfg` describes, built on this rank (joins the process group)."""
    if cfg.parallel.sync == "async":  # another program: no step all ranks take together
        from shardlab.train.async_trainer import AsyncTrainer
        return AsyncTrainer(cfg, run_dir)
    from shardlab.train.trainer import Trainer
    return Trainer(cfg, run_dir)


def main(cfg, run_dir) -> dict:
    """A rank's program for `shardlab train`: the run's trainer built (bad input it finds: one line, exit 2),
    run, the process group left; exits with the run's code where it failed."""
    from shardlab.errors import ConfigError
    from shardlab.train.trainer import bad_input

    try:
        trainer = make_trainer(cfg, run_dir)
    except ConfigError as e:  # e.g. no intact checkpoint to resume from (shardlab.checkpoint)
        raise bad_input(run_dir, e) from None
    return trainer.main()


__all__ = ["main", "make_trainer"]
