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
    cfg = config_mod.validate(cfg, 1)
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
    from shardlab.bench.measure import shardlab_step
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


@pytest.mark.timeout(120)
def test_cpu_mfu_breakdown_rows_add_up_to_the_step_and_unwrap_the_trainer(tmp_path):
    """bench/efficiency.py: every profiled microsecond lands in one row (Python is the step's remainder),
    the phases it marks are seen (the fused AdamW inside the optimizer row), and the wrappers go after."""
    from shardlab.bench import efficiency
    from shardlab.bench.measure import shardlab_step
    tr = _trainer(tmp_path, "bd", 4)
    assert all(g["fused"] for g in tr.state.optimizer.param_groups)  # optim/adamw.py: one pass per tensor
    shardlab_step(tr)
    b = efficiency.breakdown(lambda: shardlab_step(tr), tr, 2, peak=1e11, gemm_flops=1e8, attn_flops=1e7)
    rows = b["rows_ms"]
    assert sum(rows.values()) == pytest.approx(b["step_ms"], rel=1e-6)
    for row in ("optimizer (AdamW)", "gradient norm + clipping", "Linear GEMMs (mm, addmm)",
                "attention (SDPA, fused CPU kernel)", efficiency.PYTHON):
        assert rows[row] > 0, row
    assert b["at_peak_ms"]["Linear GEMMs (mm, addmm)"] == pytest.approx(1.0)  # 1e8 FLOPs at 1e11 FLOP/s
    assert 0 < b["step_cpu_ms"]
    assert "clip_grad_norm_" not in vars(tr.par) and "next_batch" not in vars(tr.state.sampler)
    assert len(efficiency.table_rows(b)) == len(rows) + 1
