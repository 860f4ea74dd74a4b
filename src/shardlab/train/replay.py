"""`shardlab doctor replay RUN --step N`: does the anomaly of step N reproduce in one fp32 process?

It loads the run's config, switches to `parallel.strategy=single`, `train.dtype=fp32`, no fault
injection, restores the last committed checkpoint at or before step N (DCP reshards any strategy's
checkpoint for one process; the global sampler gives the same samples at any world size), runs the
steps up to N with the ordinary trainer, and checks step N with the doctor.

* It reproduces -> the cause is in the numbers: the data, the model, the learning rate. Debug it on
  one device (the report names the first non-finite module and the samples).
* It does not  -> the cause is outside this step's maths: a distributed bug (a rank's bad gradient,
  a collective, diverged replicas), reduced precision, a transient hardware fault or an injected one.
Asynchronous algorithms and non-deterministic kernels are not bitwise reproducible; a spike is
compared with the original run's running median, a NaN is a NaN.
"""
from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

from shardlab import comm
from shardlab import config as config_mod
from shardlab.config import ConfigError


def _checkpoint_before(run: Path, step: int) -> Path | None:
    from shardlab.checkpoint import manifest as mf
    ok = [c for c in mf.list_checkpoints(run / "checkpoints") if c.committed and c.step <= step]
    return ok[-1].path if ok else None


def replay(run: Path, step: int) -> dict:
    run = Path(run)
    if not (run / "config.toml").is_file():
        raise ConfigError(f"{run} has no config.toml: not a shardlab run directory")
    cfg = config_mod.load(run / "config.toml")
    original = None
    report_path = run / "anomalies" / f"step_{step}.json"
    if report_path.is_file():
        original = json.loads(report_path.read_text())
    if step >= cfg.train.steps:
        raise ConfigError(f"--step {step}: the run has only {cfg.train.steps} steps (0..{cfg.train.steps - 1})")
    ckpt = _checkpoint_before(run, step)
    cfg = _one_clean_process(cfg, ckpt)
    loss, grad_norm, anomaly, mine = _replay_steps(cfg, ckpt, step)
    # A spike is judged against the original run's running median (the replay has no history).
    if not anomaly and original and original.get("kind") == "spike" and original.get("median"):
        anomaly = math.isfinite(loss) and loss > cfg.doctor.spike_factor * original["median"]
    result = {"step": step, "checkpoint": str(ckpt) if ckpt else None, "reproduces": bool(anomaly),
              "replay_loss": loss, "replay_grad_norm": grad_norm, "original": original and
              {k: original.get(k) for k in ("kind", "ranks", "loss", "median", "reason")},
              "replay_report": mine and {k: mine.get(k) for k in ("kind", "reason", "summary")}}
    result["summary"] = _verdict(run, step, ckpt, loss, grad_norm, anomaly, mine, original)
    out = run / "doctor" / f"replay_step_{step}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str))
    return result


def _one_clean_process(cfg, ckpt):
    """The run's config made one process, fp32, nothing injected, nothing written into the original run
    (validated: the resolved copy)."""
    cfg.parallel.strategy, cfg.parallel.backend = "single", "auto"
    cfg.parallel.dp_replicate = cfg.parallel.dp_shard = 0  # one process: the layout's degrees do not apply
    cfg.parallel.tp = cfg.parallel.pp = cfg.parallel.cp = 1
    cfg.train.dtype, cfg.train.grad_accum, cfg.train.eval_every = "fp32", 1, 0
    cfg.ckpt.every, cfg.ckpt.final, cfg.ckpt.resume = 0, False, str(ckpt) if ckpt else ""
    cfg.trace.enabled = False
    cfg.doctor.on_anomaly, cfg.doctor.hang_timeout_s, cfg.doctor.checksum_every = "stop", 0.0, 0
    for f in ("inject_nan", "hang_rank", "mismatch_rank", "corrupt_rank", "uneven_rank"):
        setattr(cfg.debug, f, "")
    cfg.debug.slow_rank, cfg.debug.corrupt_expert = -1, False
    return config_mod.validate(cfg, world_size=1)


def _replay_steps(cfg, ckpt, step: int) -> tuple[float, float, bool, dict | None]:
    """Train from the checkpoint through `step` in a scratch directory: (loss, grad norm, anomaly?, the
    doctor's report of it)."""
    from shardlab.optim import lr_at, set_lr
    from shardlab.train.trainer import Trainer

    scratch = Path(tempfile.mkdtemp(prefix="shardlab-replay-"))
    try:
        trainer = Trainer(cfg, scratch)
        st = trainer.state
        st.step = trainer.start_step
        if st.step > step:
            raise ConfigError(f"the checkpoint {ckpt} is past step {step}")
        loss = grad_norm = float("nan")
        while st.step <= step:
            set_lr(st.optimizer, lr_at(st.step, cfg))
            comm.RECORDER.step = st.step
            loss_sum, grad_norm, _ = trainer.train_step()
            loss = float(loss_sum) / trainer.tokens_per_step
            if trainer.verdict != "ok" and st.step < step:
                raise ConfigError(f"replay hit an anomaly at step {st.step}, before step {step}: "
                                  f"{trainer.doctor.last_report['summary']}")
            st.step += 1
        anomaly = trainer.verdict != "ok"
        mine = trainer.doctor.last_report if anomaly else None
        trainer.doctor.close(final_checksum=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return loss, grad_norm, anomaly, mine


def _verdict(run, step, ckpt, loss, grad_norm, anomaly, mine, original) -> str:
    start = f"from {Path(ckpt).name}" if ckpt else "from the initial weights"
    orig = (f"The run recorded: {original['reason']}." if original else
            f"(No anomaly report for step {step} in {run}/anomalies.)")
    if anomaly:
        where = ""
        if mine:
            locs = [e.get("localisation") for e in mine["per_rank"].values() if e.get("localisation")]
            if locs and locs[0].get("module"):
                where = f" The first non-finite module is {locs[0]['module']} ({locs[0]['where']})."
        return (f"step {step} REPRODUCES in one fp32 process ({start}): loss {loss:.4g}, grad norm "
                f"{grad_norm:.4g}. {orig}{where} Verdict: NUMERICS (data, model or hyper-parameters), "
                "not a distributed bug; debug it on one device.")
    return (f"step {step} does NOT reproduce in one fp32 process ({start}): loss {loss:.4g}, grad "
            f"norm {grad_norm:.4g} (finite). {orig} Verdict: DISTRIBUTED or TRANSIENT (a rank's "
            "bad gradient, a collective, diverged replicas, reduced precision, a hardware or "
            "injected fault); compare the ranks (anomalies/, doctor/) rather than the maths.")
