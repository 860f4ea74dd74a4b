"""`bench overhead` times what `Trainer.run` does per step (not a subset of it)."""
import contextlib
import io

import pytest

from shardlab import comm, config as config_mod


def _trainer(tmp_path, name, steps):
    from shardlab.train.trainer import Trainer
    cfg = config_mod.load(None, ["data.source=stdlib", "model.preset=tiny", "train.seq_len=32", "train.threads=1",
                                 "train.eval_every=0", "train.log_every=100", f"train.steps={steps}",
                                 "parallel.strategy=single", "train.micro_batch=2"])
    config_mod.validate(cfg, 1)
    with contextlib.redirect_stdout(io.StringIO()):
        return Trainer(cfg, tmp_path / name)


def _spy(monkeypatch, tr, log):
    """Record every per-step call Trainer.run makes on the trainer, its doctor, its checkpoint
    manager and the comm recorder."""
    for obj, names in ((tr, ("train_step",)), (tr.doctor, ("after_step",)), (tr.balance, ("after_step",)),
                       (tr.ckpt, ("maybe_save",)),
                       (comm.RECORDER, ("reset_step", "step_stats"))):
        for n in names:
            real = getattr(obj, n)

            def wrapped(*a, _real=real, _n=n, **k):
                log.append(_n)
                return _real(*a, **k)
            monkeypatch.setattr(obj, n, wrapped)


@pytest.mark.timeout(120)
def test_overhead_step_makes_the_calls_trainer_run_makes_per_step(tmp_path, monkeypatch):
    from shardlab.bench.overhead import shardlab_step
    steps = 3
    ran, timed = [], []
    tr = _trainer(tmp_path, "run", steps)
    _spy(monkeypatch, tr, ran)
    with contextlib.redirect_stdout(io.StringIO()):
        tr.run()
    monkeypatch.undo()
    tr2 = _trainer(tmp_path, "bench", steps)
    _spy(monkeypatch, tr2, timed)
    for _ in range(steps):
        shardlab_step(tr2)
    assert "after_step" in timed  # the doctor's per-step check, left out before
    assert timed == ran[:len(timed)] and len(ran) == len(timed)
