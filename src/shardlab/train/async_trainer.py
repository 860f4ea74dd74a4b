"""The training loop of `parallel.sync=async` (docs/sync.md): a parameter server on rank 0, workers on the
other ranks (the protocol: parallel/sync/async_ps.py).

Not the synchronous `Trainer`: there is no step all ranks take together. Every rank builds the whole
model as `single` (no data-parallel group). The server owns the master parameters, the optimizer, the
learning-rate schedule, clipping, evaluation and the run's records; a worker is a gradient function: it
loads the parameters it pulled, computes the gradient of ticket t's global batch (the sampler's step t,
microbatches and loss weight exactly as a `single` step computes them) and pushes it. The server applies
gradient t as step t with the schedule's step-t learning rate, so one worker with τ = 0 is `single`.

Records: metrics.jsonl has a row for every applied gradient (its loss, staleness, worker and the server's
wall time), whatever `train.log_every` says; summary.json has the synchronous run's keys plus `async`
(staleness mean/max, gradients per worker, bytes per applied gradient).

Checkpoints: the server saves alone (a process group of rank 0) what the run's state is: the master
parameters, the optimizer, the step (= version) and the sampler. It is an ordinary one-process checkpoint
(layout: every degree 1), so `single` can resume it too. Resuming restarts the tickets at the saved
version; gradients in flight at the save are not in it (their batches are computed again). The workers
keep no state but their RNG (used only by dropout), which is not saved. The doctor does not watch these
runs (its checks compare ranks that step together).
"""
from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch

from shardlab import comm, parallel
from shardlab.train.state import TrainState, datasets
from shardlab.config import Config, to_dict
from shardlab.data import GlobalSampler
from shardlab.data.documents import eos_id_of, packed_batch
from shardlab.observe import inject
from shardlab.observe.memory import PeakMemory
from shardlab.parallel.sync import async_ps
from shardlab.train import evaluate, host_alloc, summary as summary_mod
from shardlab.train.metrics import MetricsLog, plot_losses, print_summary
from shardlab.optim import lr_at, set_lr


class AsyncTrainer:
    def __init__(self, cfg: Config, run_dir: Path):
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t = cfg.train
        torch.set_num_threads(t.threads)
        comm.init("gloo")  # receiving from any source needs gloo (config.validate refuses nccl): on CPU
        self.rank, self.world = comm.rank(), comm.world_size()
        self.is_main = self.rank == async_ps.SERVER
        self.device = comm.device()
        if t.retain_host_memory and self.device.type == "cpu":
            host_alloc.retain_freed_memory()  # no page faults on every step's activations (train/host_alloc.py)
        self.train_ds, self.val_ds = datasets(cfg)
        self.doc_eos = eos_id_of(cfg) if cfg.data.doc_mask else None  # packed documents, as the Trainer's
        self.tokens_per_step = t.global_batch * t.seq_len
        self.peak_mem = PeakMemory(self.device).__enter__()
        # Every rank the whole model, talking to no one: the roles, not a data-parallel layer, communicate.
        alone = copy.deepcopy(cfg)
        alone.parallel.strategy, alone.parallel.sync = "single", "every_step"
        self.par = parallel.build(alone, self.device, world_size=1)
        self.n_params = self.par.model.num_params()
        self.params = async_ps.trainable(self.par.model)
        self.numel = sum(p.numel() for p in self.params)
        self.sampler = GlobalSampler(len(self.train_ds), t.global_batch, t.seed)  # step t's batch, any rank
        self.metrics = MetricsLog(self.run_dir, t.steps, enabled=self.is_main, tracker=t.tracker,
                                  config=to_dict(cfg))
        self.start_step, self.ckpt = 0, None
        server_only = comm.new_group([async_ps.SERVER], name="async server", backend="gloo")  # (collective)
        if self.is_main:
            from shardlab.checkpoint import CheckpointManager

            self.state = TrainState(cfg, self.par.dp, self.par.optimizer, self.sampler, None)
            self.ckpt = CheckpointManager(self.run_dir, cfg, group=server_only)
            self.start_step = self.state.step = self.ckpt.resume(self.state)

    # --- a worker ------------------------------------------------------------------------------------
    def _gradient(self, ticket: int, flat: torch.Tensor) -> tuple[torch.Tensor, float]:
        """The gradient of step `ticket`'s global batch at the pulled parameters, as `single` computes it."""
        t = self.cfg.train
        async_ps.unflatten_into(flat, self.params)
        inject.maybe_slow(self.cfg, self.rank, ticket)  # debug.slow_rank: a straggling worker on purpose
        batch = packed_batch(self.train_ds, self.sampler.global_batch_at(ticket), self.doc_eos)
        micro = list(zip(*(b.to(self.device).tensor_split(t.grad_accum) for b in batch)))
        loss_sum = self.par.forward_backward(micro, 1 / self.tokens_per_step)
        self.par.finish()
        grad = async_ps.flatten([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
        self.par.zero_grad()
        return grad, loss_sum.item()

    # --- the server ----------------------------------------------------------------------------------
    def _apply(self, step: int, grad: torch.Tensor, loss_sum: float, staleness: int, worker: int) -> None:
        """Gradient `step` (0-based) as one optimizer step, then its metrics record."""
        cfg, t = self.cfg, self.cfg.train
        set_lr(self.par.optimizer, lr_at(step, cfg))
        offset = 0
        for p in self.params:
            p.grad = grad[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        grad_norm = self.par.clip_grad_norm_(t.grad_clip)
        self.par.optimizer_step()
        self.par.zero_grad()
        now = time.perf_counter()
        done = step + 1
        row = {"step": done, "loss": loss_sum / self.tokens_per_step, "grad_norm": grad_norm,
               "lr": lr_at(step, cfg), "staleness": staleness, "worker": worker, "wall_s": now - self.t0,
               "step_time_s": now - self.t_last, "tokens_per_s": self.tokens_per_step / max(now - self.t_last, 1e-9)}
        self.t_last = now
        self.last_train_loss = row["loss"]
        if t.eval_every and (done % t.eval_every == 0 or done == t.steps):
            self.last_val = row["val_loss"] = evaluate.val_loss(self)  # the workers wait meanwhile
        self.metrics.log(row, self.start_step)
        self.state.step = done
        self.sampler.next_global_batch()  # its cursor is the checkpoint's record of the tokens consumed
        self.ckpt.maybe_save(self.state)  # the workers wait meanwhile (an async save: only the copy)

    def run(self) -> dict:
        cfg, t = self.cfg, self.cfg.train
        comm.RECORDER.reset_step()  # one count over the run: bytes per applied gradient = total / steps
        self.last_train_loss = self.last_val = None
        self.metrics.archive_after(self.start_step if self.start_step else -1)
        if self.is_main:
            if t.eval_every and self.start_step == 0:
                self.metrics.log({"step": 0, "val_loss": evaluate.val_loss(self)})
            server = async_ps.Server(self.numel, self.world - 1, cfg.parallel.max_staleness, t.steps)
            self.t0 = self.t_last = time.perf_counter()
            server.serve(self._apply, lambda: async_ps.flatten(self.params), start=self.start_step)
            wall, staleness, computed = time.perf_counter() - self.t0, server.staleness, 0
            self.ckpt.close(self.state)  # ckpt.final
        else:
            worker = async_ps.Worker(self.numel)
            t0 = time.perf_counter()
            worker.work(self._gradient)
            wall, staleness, computed = time.perf_counter() - t0, [], worker.computed
        self.peak_mem.__exit__(None, None, None)
        stats = comm.RECORDER.step_stats()
        per_rank = comm.all_gather_object({"peak": self.peak_mem.bytes, "computed": computed,
                                           "bytes": stats["bytes"]})  # every rank is past its loop here
        self.comm_stats = stats
        summary = self._summary(wall, staleness, per_rank) if self.is_main else {}
        if self.is_main:
            summary_mod.write(self.run_dir, summary)
            self.metrics.close()
            plot_losses(self.run_dir)
            print_summary(summary)
            print(f"\nrun directory: {self.run_dir}")
        return summary

    def _summary(self, wall: float, staleness: list[int], per_rank: list[dict]) -> dict:
        cfg, steps = self.cfg, len(staleness)
        per_step = {op: b / max(1, steps) for op, b in self.comm_stats["bytes"].items()}
        return {
            "strategy": cfg.parallel.strategy, "sync": "async", "world_size": self.world, "params": self.n_params,
            "steps": self.start_step + steps, "tokens_per_step": self.tokens_per_step,
            "tokens_per_s": steps * self.tokens_per_step / wall if wall > 0 else None,
            "step_time_s": wall / steps if steps else None,  # the server's wall time per applied gradient
            "final_train_loss": self.last_train_loss, "final_val_loss": self.last_val,
            "peak_mem_bytes": max(r["peak"] for r in per_rank), "peak_mem_kind": self.peak_mem.kind,
            "state_bytes": self.par.state_bytes(),
            # the server's traffic (every message passes it): "send" = parameters pulled, "recv" = gradients
            # pushed, each with its 24-byte header; one hello and one stop header per worker over the run
            "comm": {"bytes_per_step_mean": per_step, "bytes_total": dict(self.comm_stats["bytes"]),
                     "calls_total": dict(self.comm_stats["calls"]),
                     "bytes_by_tag": dict(self.comm_stats["bytes_by_tag"])},
            "async": {"workers": self.world - 1, "max_staleness": cfg.parallel.max_staleness,
                      "staleness_mean": statistics.fmean(staleness) if staleness else None,
                      "staleness_max": max(staleness) if staleness else None,
                      "staleness_counts": {str(s): staleness.count(s) for s in sorted(set(staleness))},
                      "gradients_by_worker": [r["computed"] for r in per_rank[1:]],
                      "params_numel": self.numel, "wall_s": wall},
            "ranks_consistent": None,  # the workers hold stale copies by design: nothing to compare
            "ckpt_failed_saves": list(self.ckpt.failed), "anomalies": 0, "skipped_steps": 0, "events": {},
            "dtype": cfg.train.dtype,
        }

    def main(self) -> dict:
        """`run`, then the process group left (shardlab.train.main calls it)."""
        clean = False
        try:
            summary = self.run()
            clean = True
        finally:
            comm.shutdown(clean)
        if summary.get("ckpt_failed_saves"):  # as the synchronous trainer: a save the user asked for is missing
            print(f"shardlab: error: {len(summary['ckpt_failed_saves'])} checkpoint save(s) failed, the last: "
                  f"{summary['ckpt_failed_saves'][-1]} (see summary.json)", file=sys.stderr, flush=True)
            raise SystemExit(1)
        return summary
