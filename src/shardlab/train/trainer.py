"""The training loop. Layout-agnostic: `shardlab.parallel.build` composes the layers and returns the
object that owns a step's forward and backward; the trainer never asks which layers it has.

Per step: the global sampler hands this data-parallel rank its share of the global batch (ranks of
one tensor/pipeline group get the same share); the share is split into `grad_accum` microbatches;
each microbatch's summed cross-entropy is scaled by D / global_tokens (D = data-parallel size), so
that after the data-parallel layer's gradient averaging (÷ D) the gradient is exactly that of the
mean loss over every token of the global batch, at any layout and accumulation -- and at any shares
(`data.shares`: ranks may hold different numbers of samples; train/balance.py).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import torch

from shardlab import comm, parallel, precision
from shardlab.checkpoint.manifest import step_dirname
from shardlab.comm import CollectiveMismatchError
from shardlab.config import Config, ConfigError, to_dict
from shardlab.data import GlobalSampler
from shardlab.data.documents import eos_id_of, packed_batch
from shardlab.doctor import AnomalyError, Doctor, UnevenInputsError
from shardlab.launch import failure, interrupt, orphans
from shardlab.observe import analysis, inject, timeline
from shardlab.observe.memory import PeakMemory
from shardlab.observe.profile import StepProfiler
from shardlab.observe.core_share import CoreShare
from shardlab.optim import lr_at, set_lr
from shardlab.train import evaluate, host_alloc, summary as summary_mod
from shardlab.train.metrics import MetricsLog, StepLog, plot_losses, print_summary
from shardlab.train.scaler import LossScaler
from shardlab.train.state import TrainState, datasets


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Trainer:
    """The synchronous loop (`shardlab.train.make_trainer` picks it for every parallel.sync but async)."""

    def __init__(self, cfg: Config, run_dir: Path):
        if cfg.parallel.sync == "async":  # refused, not trained as every_step: that run has no common step
            raise ValueError("parallel.sync=async runs the parameter server's trainer: use "
                             "shardlab.train.make_trainer(cfg, run_dir)")
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t = cfg.train
        torch.set_num_threads(t.threads)
        if int(os.environ.get("WORLD_SIZE", 1)) > 1 or cfg.parallel.strategy != "single":
            comm.init(cfg.parallel.backend)
        self.rank, self.world = comm.rank(), comm.world_size()
        self.device = comm.device()
        if t.retain_host_memory and self.device.type == "cpu":
            host_alloc.retain_freed_memory()  # no page faults on every step's activations (train/host_alloc.py)
        self.is_main = self.rank == 0
        if cfg.trace.enabled:
            timeline.enable(self.run_dir, self.rank)
        self.profiler = StepProfiler(cfg.trace.profile, self.run_dir, self.rank, self.device)  # trace.profile

        self.train_ds, self.val_ds = datasets(cfg)
        # packed documents (data.doc_mask, docs/data.md): the EOS id that ends each one; None: no masks
        self.doc_eos = eos_id_of(cfg) if cfg.data.doc_mask else None
        self.tokens_per_step = t.global_batch * t.seq_len
        # Peak memory is measured from here: model, gradients, optimizer state, activations, buffers.
        self.peak_mem = PeakMemory(self.device).__enter__()
        self.core_share = CoreShare()  # the core share the ranks had in the timed steps (explain)

        self.par = parallel.build(cfg, self.device)  # mesh, model, layers, optimizer (docs/parallel.md)
        self.dims, self.strategy = self.par.dims, self.par.dp
        # the whole model's count (under expert parallelism a rank holds only its experts)
        self.n_params = self.par.num_params()
        # This job's slice of the run's global batch (fault-tolerant replicas: replica i of R, an R-times larger one)
        reps, rid = self.strategy.data_slice()
        sampler = GlobalSampler(len(self.train_ds), t.global_batch * reps, t.seed, self.dims.dp_size * reps,
                                rid * self.dims.dp_size + self.dims.dp_rank)
        scaler = LossScaler() if t.dtype in precision.LOSS_SCALED else None
        precision.warn_if_slow(t.dtype, self.device.type, self.is_main)
        from shardlab.train.balance import Balancer
        self.balance = Balancer(cfg, self.dims, sampler, self.rank)  # data.shares: each rank's samples
        self.state = TrainState(cfg, self.strategy, self.par.optimizer, sampler, scaler, balance=self.balance)
        self.metrics = MetricsLog(self.run_dir, t.steps, enabled=self.is_main, tracker=t.tracker,
                                  config=to_dict(cfg))
        from shardlab.train.moe_log import MoELog
        self.moe_log = MoELog(self.par, t.grad_accum)  # routing stats of MoE models (docs/moe.md)

        # SIGINT/SIGTERM: the ranks agree to stop at a step boundary over a group of their own (launch/interrupt.py)
        self.stop_group = comm.new_group(list(range(self.world)), name="stop", backend="gloo") \
            if self.world > 1 and interrupt.installed() else None
        from shardlab.checkpoint import CheckpointManager
        self.ckpt = CheckpointManager(self.run_dir, cfg)
        self.start_step = self.ckpt.resume(self.state)
        # the layers' start (fault-tolerant replicas: found the job with the others, or join it healed by a peer)
        self.start_step = self.strategy.on_start(self.state, self.start_step, self.run_dir,
                                                 (self._load_step, _committed_steps))
        # The doctor: anomaly checks, replica checksums, hang watchdog, fault injection (docs/doctor.md).
        self.doctor = Doctor(cfg, self.run_dir, self.strategy, self.rank, self.world, self.device,
                             self.par.replica_sets(), placement=self.par.placement)
        self.verdict = "ok"
        self.comm_total: dict[str, int] = {}  # bytes by op over the steps this process ran
        self.comm_steps = 0

    def _load_step(self, step: int) -> int:
        """A whole fault-tolerant job resumes at `step` (parallel.ft_job_dir): this replica's checkpoint of it."""
        path = self.ckpt.dir / step_dirname(step)
        found = self.ckpt.load_first(str(path), self.state)
        return found[1]

    # --- one optimizer step -------------------------------------------------------------------------
    def train_step(self) -> tuple[torch.Tensor, float, bool]:
        cfg, st, par = self.cfg, self.state, self.par
        t = cfg.train
        self.strategy.before_step(st)  # the layers' hook (every-step fault tolerance: this step's quorum)
        comm.set_phase("data loading")
        with timeline.span("data", cat="data"):
            idx = st.sampler.next_batch()
            action = self.doctor.before_step(st.step, idx)  # "run" | "skip" | "shadow" (uneven data, join)
            if action == "skip":  # a bad batch skipped after a rollback: consumed, nothing else
                self.verdict = "skip"
                return torch.zeros((), device=self.device), float("nan"), True
            # (x, y), and with data.doc_mask the per-token document positions, computed before any layer cuts
            batch = [b.to(self.device, non_blocking=True) for b in packed_batch(self.train_ds, idx, self.doc_eos)]
        # grad_accum microbatches on every rank whatever its share (the same collectives everywhere)
        micro = list(zip(*(b.tensor_split(t.grad_accum) for b in batch)))
        shadow = action == "shadow"

        def verdict(loss_sum, grad_norm, found_inf) -> bool:
            # the same verdict on every rank: "ok" | "skip" | "stop" | "rollback" (doctor.on_anomaly);
            # an anomalous step updates nothing
            self.verdict = self.doctor.check_step(st.step, loss_sum, grad_norm, found_inf,
                                                  st.scaler.scale if st.scaler is not None else None, shadow=shadow)
            return self.verdict != "ok"

        # compute per sample (data.shares=auto, debug.slow_factor): the forwards and backwards only
        measuring = contextlib.ExitStack()
        measuring.enter_context(self.balance.measure(len(idx)))

        def after_forward_backward() -> None:
            measuring.close()
            # the doctor's signals are complete: its all-gather travels while the last buckets are reduced
            self.doctor.launch_check(st.step, shadow=shadow)

        try:
            # the mean over all tokens of the global batch (par.loss_weight), the doctor's uneven-data factor,
            # the loss scale
            out = par.step(micro, max_norm=t.grad_clip, global_tokens=self.tokens_per_step,
                           weight_factor=self.doctor.loss_weight_factor(action), scaler=st.scaler, verdict=verdict,
                           after_backward=lambda i, mb, loss: self.doctor.after_backward(st.step, mb, loss),
                           after_forward_backward=after_forward_backward)
        finally:
            measuring.close()
        return out.loss_sum, out.grad_norm, out.skipped

    def _rollback(self) -> int:
        """doctor.on_anomaly=rollback: reload the latest checkpoint on every rank; the doctor remembers
        the bad step and makes the replay skip its batch."""
        self.ckpt.wait()
        found = self.ckpt.load_first("latest", self.state)
        if found is None:
            raise AnomalyError(f"doctor.on_anomaly=rollback at step {self.state.step}: there is no checkpoint to "
                               f"roll back to yet (ckpt.every={self.cfg.ckpt.every}); use a smaller ckpt.every")
        path, step = found
        if self.is_main:
            print(f"[shardlab doctor] rolled back to {path.name} (step {step}); skipping the bad batch(es) of "
                  f"step(s) {sorted(self.doctor.skip_steps)}", flush=True)
        return step

    def save_on_signal(self, signum: int) -> interrupt.Interrupted:
        """Every rank stopped at this step for `signum`: write a checkpoint (ckpt.on_signal), unless the
        save of this very step is already in flight or done, which is then only finished."""
        st, t0 = self.state, time.perf_counter()
        self.ckpt.quiet = True  # the launcher's last lines say it
        path, note = None, ""
        if not self.cfg.ckpt.on_signal:
            note = "ckpt.on_signal=false"
        elif st.step > 0:
            if self.ckpt.last_saved_step != st.step:
                self.ckpt.wait()  # an older step's save in flight: finished first (one save at a time)
                self.ckpt.save(st, async_=False)
            outcome = self.ckpt.wait()
            if outcome is None:
                path = self.ckpt.dir / step_dirname(st.step)
            else:
                note = outcome
        return interrupt.Interrupted(signum, st.step, path, time.perf_counter() - t0, note)

    def run(self) -> dict:
        cfg, st = self.cfg, self.state
        t = cfg.train
        st.step = self.start_step
        step_times: list[float] = []
        warmup = max(3, (t.steps - st.step) // 10)
        self.metrics.archive_after(st.step if st.step else -1)  # records after it are written again
        steplog = StepLog(self)
        self.stop = interrupt.StopVote(self.stop_group)  # carries a signal that came during the resume's load
        if t.eval_every and st.step == 0:  # the starting point: ~ln(256) = 5.5 nats/byte for a fresh model
            self.metrics.log({"step": 0, "val_loss": evaluate.val_loss(self)})
        while st.step < t.steps:
            set_lr(st.optimizer, lr_at(st.step, cfg))
            comm.RECORDER.reset_step()
            comm.RECORDER.step = st.step
            _sync(self.device)
            t0 = time.perf_counter()
            self.core_share.begin()
            profiled = self.profiler.before_step(st.step)
            with timeline.span("step", cat="step", step=st.step):
                inject.maybe_slow(cfg, self.rank, st.step)  # debug.slow_rank: a straggler on purpose
                loss_sum, grad_norm, skipped = self.train_step()
            self.moe_log.after_step()
            _sync(self.device)
            dt = time.perf_counter() - t0
            self.core_share.end(count=st.step + 1 > self.start_step + warmup)  # the steps step_times keeps
            if self.verdict == "stop":
                raise AnomalyError(self.doctor.last_report["summary"])
            if self.verdict == "rollback":
                bad, st.step = st.step, self._rollback()
                steplog.rolled_back(bad, st.step, self.doctor.last_report["reason"])
                continue
            self.comm_stats = comm.RECORDER.step_stats()
            for op, b in self.comm_stats["bytes"].items():  # the run's totals (summary: mean per step)
                self.comm_total[op] = self.comm_total.get(op, 0) + b
            self.comm_steps += 1
            self.profiler.after_step(st.step)
            st.step += 1
            self.strategy.after_step(st)  # the layers' hook (a no-op for every layer today)
            if st.step > self.start_step + warmup and not profiled:  # the profiler slows the steps it records
                step_times.append(dt)
            verdict = self.doctor.after_step(st.step - 1)  # heartbeat, periodic replica checksums
            if verdict == "stop":
                raise AnomalyError(self.doctor.last_checksum["summary"])
            if verdict == "rollback":
                bad, st.step = st.step - 1, self._rollback()
                steplog.rolled_back(bad, st.step, "replica divergence")
                continue
            self.balance.after_step(st.step)  # data.shares=auto: measure, re-set the shares
            self.ckpt.maybe_save(st)
            steplog.finished(st.step, self.verdict, skipped, loss_sum, grad_norm, dt, evaluate.val_loss)
            signum = self.stop.check()  # the vote started one step ago: every rank reads the same answer
            if signum:
                raise self.save_on_signal(signum)
        return self._finish(step_times, steplog)

    def _finish(self, step_times: list[float], steplog: StepLog) -> dict:
        """After the last step: the final save, the doctor's last check, the summary (rank 0 writes it,
        the plots, and prints it)."""
        self.ckpt.close(self.state)
        self.profiler.close()
        self.doctor_result = self.doctor.close()  # final replica checksum, stops the watchdog
        timeline.finish()  # every rank writes trace/rank{R}.jsonl; rank 0 merges trace.json
        summary = summary_mod.build(self, step_times, steplog.last_train_loss, steplog.last_val)
        summary["shares"] = self.balance.summary()
        summary.update(self.moe_log.summary())
        summary.update(self.strategy.summary())  # the layers' keys (fault tolerance: ft, restarts, heals, ...)
        if self.is_main and self.cfg.trace.enabled:
            summary.update(analysis.summarize(self.run_dir))
        if self.is_main:
            summary_mod.write(self.run_dir, summary)
            self.metrics.close()
            plot_losses(self.run_dir)
            if self.moe_log.enabled:
                from shardlab.train.moe_heatmap import plot_expert_load
                plot_expert_load(self.run_dir)  # expert_load.png: tokens per expert over steps
            print_summary(summary)
            print(f"\nrun directory: {self.run_dir}")
        return summary

    # --- the run as a rank's program -------------------------------------------------------------------------
    def main(self) -> dict:
        """`run`, then the process group left; a failure recorded (run directory's failure record, the doctor's
        flight record) and turned into the exit code the launcher reports (shardlab.train.main calls it)."""
        clean = False
        try:
            summary = self.run()
            signum = self.stop.finish()  # a signal during the last step or the final save
            if signum:
                raise self.save_on_signal(signum)
            clean = True
        except interrupt.Interrupted as e:  # every rank is here, at the same step: leave together, exit 130/143
            if self.is_main:
                failure.record_interrupted(self.run_dir, e)
            clean = True
            code = interrupt.exit_code(e.signum)
            restarts = int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
            if restarts > 0 and orphans.PARENT_ENV in os.environ:
                code = 0  # torchrun would restart a failed group; shardlab's launcher says 130/143 from the record
            raise SystemExit(code) from None
        except (AnomalyError, UnevenInputsError, CollectiveMismatchError) as e:
            self.doctor.dump(f"error: {type(e).__name__}: {e}")
            kind = "anomaly" if isinstance(e, AnomalyError) else "distributed"
            failure.record(self.run_dir, self.rank, kind, e, self.doctor)
            if self.is_main or isinstance(e, CollectiveMismatchError):
                print(f"shardlab: error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(failure.CODES[kind]) from None
        except ConfigError as e:  # a rollback that found no intact checkpoint
            self.doctor.dump(f"error: {type(e).__name__}: {e}")
            raise bad_input(self.run_dir, e) from None
        except BaseException as e:  # keep the flight record of whatever went wrong, then fail as usual
            self.doctor.dump(f"error: {type(e).__name__}: {e}")
            if not isinstance(e, (SystemExit, KeyboardInterrupt)):
                failure.record(self.run_dir, self.rank, "crash", e)
            raise
        finally:
            comm.shutdown(clean)
        if summary["ckpt_failed_saves"]:  # training finished, but a checkpoint the user asked for is missing
            if self.is_main:
                print(f"shardlab: error: {len(summary['ckpt_failed_saves'])} checkpoint save(s) failed, the last: "
                      f"{summary['ckpt_failed_saves'][-1]} (see summary.json)", file=sys.stderr, flush=True)
            raise SystemExit(1)
        return summary


def _committed_steps(run_dir: Path) -> list[int]:
    """The steps of a run's committed checkpoints (a fault-tolerant job's resume compares its replicas')."""
    from shardlab.checkpoint import manifest as mf
    return [c.step for c in mf.list_checkpoints(Path(run_dir) / "checkpoints") if c.committed]


def bad_input(run_dir: Path, e: ConfigError) -> SystemExit:
    """Bad input the ranks found themselves (a checkpoint damaged since the launcher checked it, a plain
    `torchrun` run, an elastic restart): one line, exit 2, as when the launcher finds it."""
    from shardlab.errors import one_line

    failure.record(run_dir, comm.rank(), "bad input", e)
    if comm.rank() == 0:
        print(f"shardlab: error: {one_line(str(e))}", file=sys.stderr, flush=True)
    comm.shutdown(False)
    return SystemExit(failure.CODES["bad input"])
