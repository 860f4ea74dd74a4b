"""Helpers shared by the checkpoint tests: run the real trainer in a worker pool rank (or in-process
for `single`) and report what a checkpoint test compares."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from shardlab import config
from shardlab.checkpoint import manifest as mf

BASE = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
        "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "train.lr=1e-2",
        "ckpt.keep=10", "ckpt.final=false"]


class _Stop(Exception):
    pass


def make_cfg(overrides: list[str], world: int):
    cfg = config.load(None, BASE + overrides)
    cfg = config.validate(cfg, world)
    return cfg


def train_run(run_dir: Path, overrides: list[str], world: int, fail: str = "", rng_seed: int = 1000,
              stop_after: int = 0, wait_each: bool = True) -> dict:
    """Train per `overrides`; returns (on every rank) losses by step, full parameters, the global
    batches consumed, the step the run started from, and the manager's last outcome."""
    import os

    from shardlab import comm
    from shardlab.train.trainer import Trainer

    torch.manual_seed(rng_seed + comm.rank())  # a fresh process's RNG, different per rank
    if fail:
        os.environ["SHARDLAB_CKPT_FAIL"] = fail
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    try:
        trainer = Trainer(make_cfg(overrides, world), Path(run_dir))
    finally:
        os.environ.pop("SHARDLAB_CKPT_FAIL", None)
    batches = {}
    sampler = trainer.state.sampler
    plain = sampler.next_global_batch

    def recording():
        step = sampler.step
        batches[step] = plain()
        return batches[step]

    sampler.next_global_batch = recording
    saves = []  # (step, outcome, latest) after each save; waits for async saves to know the outcome
    save = trainer.ckpt.maybe_save

    def recording_save(state):
        if save(state) and wait_each:  # wait_each=False: async saves overlap the next steps, as in real runs
            trainer.ckpt.wait()
            latest = mf.read_latest(trainer.ckpt.dir)
            saves.append((state.step, trainer.ckpt.last_outcome, latest.name if latest else None,
                          sorted(p.name for p in trainer.ckpt.dir.iterdir())))
        if state.step == stop_after:  # an interruption right after this checkpoint (as if the job died)
            trainer.ckpt.wait()
            raise _Stop

    trainer.ckpt.maybe_save = recording_save
    try:
        trainer.run()
    except _Stop:
        pass
    losses = {}
    if trainer.rank == 0:
        for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            if "loss" in row:
                losses[row["step"]] = row["loss"]
    return {"losses": losses, "params": {k: v.detach().clone() for k, v in trainer.strategy.full_parameters().items()},
            "batches": batches, "start": trainer.start_step, "outcome": trainer.ckpt.last_outcome,
            "rng": torch.rand(3), "saves": saves, "notes": trainer.ckpt.notes}


def assert_params_equal(a: dict, b: dict, exact: bool = True, rtol=1e-5, atol=1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=k)


def _steps(trainer, n: int) -> list[float]:
    """`n` optimizer steps the way Trainer.run takes them, without its logging, eval and plots."""
    from shardlab import comm
    from shardlab.optim import lr_at, set_lr

    st, losses = trainer.state, []
    for _ in range(n):
        set_lr(st.optimizer, lr_at(st.step, trainer.cfg))
        loss_sum, _, _ = trainer.train_step()
        assert trainer.verdict == "ok", trainer.verdict
        st.step += 1
        trainer.doctor.after_step(st.step - 1)
        trainer.ckpt.maybe_save(st)
        trainer.par.sum_over_data(loss_sum, tag="test")
        losses.append(loss_sum.item() / trainer.tokens_per_step)
    return losses


def train_quick(run_dir: Path, overrides: list[str], world: int) -> list[float]:
    """train.steps steps (checkpoints per ckpt.*) with the lean loop; global losses of every step."""
    from shardlab.train.trainer import Trainer

    Path(run_dir).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(make_cfg(overrides, world), Path(run_dir))
    losses = _steps(trainer, trainer.cfg.train.steps)
    trainer.ckpt.close(trainer.state)
    return losses


def continue_from(paths: list[Path], overrides: list[str], world: int, steps: int = 3) -> dict:
    """One trainer (strategy and world size per `overrides`) loads each checkpoint in turn and trains
    `steps` steps from it; returns {path: [global losses]}. Reusing the trainer is deliberate: every
    load must overwrite everything (model, optimizer, sampler, step, RNG), or the next result drifts."""
    from shardlab.train.trainer import Trainer

    run_dir = Path(paths[0]).parents[2] / f"load-{'-'.join(o.split('=')[1] for o in overrides)}-{world}"
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(make_cfg(overrides, world), run_dir)
    out = {}
    for path in paths:
        trainer.state.step = trainer.ckpt.load(Path(path), trainer.state)
        out[str(path)] = _steps(trainer, steps)
    return out
