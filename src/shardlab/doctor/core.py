"""The Doctor: the trainer's one handle on anomaly detection, replica checksums, the hang watchdog,
uneven inputs and fault injection. The trainer calls it at fixed points of each step:

    doctor = Doctor(cfg, run_dir, strategy, rank, world)     # starts the watchdog thread
    action = doctor.before_step(step, batch_indices)         # "run" | "skip" | "shadow" (uneven, join)
    ...for each microbatch: forward, backward, then doctor.after_backward(step, (x, y), loss)
    doctor.launch_check(step)                                # after the last backward: the gather starts
    verdict = doctor.check_step(step, loss, grad_norm)       # "ok" | "skip" | "stop" | "rollback"
    verdict = doctor.after_step(step)                        # periodic checksums: "ok" | "stop" | "rollback"
    doctor.close() -> {"ranks_consistent": bool, "anomalies": n}

Every verdict is identical on every rank: it is computed from one all-gather of every rank's signals,
so a skipped or rolled-back step is skipped everywhere (a step skipped on one rank only would itself
make the replicas diverge).

The all-gather is launched asynchronously as soon as the last backward returns (`launch_check`): every
signal it carries is known then, none depends on the gradient reduction. It then travels while the
last gradient buckets are still reduced, and `check_step` (after clipping, before the optimizer step)
only collects the result: the verdict is the same, for the same step, but the check no longer adds a
synchronisation point of its own to the critical path.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

from shardlab import comm
from shardlab.doctor import anomaly as anomaly_mod
from shardlab.doctor import checksum as checksum_mod
from shardlab.doctor import inject
from shardlab.doctor.localize import build_replica, localize
from shardlab.doctor.report import summarize
from shardlab.doctor.watchdog import Watchdog
from shardlab import precision


class AnomalyError(RuntimeError):
    """The run stops on an anomaly (doctor.on_anomaly=stop) or a replica divergence."""


class UnevenInputsError(RuntimeError):
    """A rank ran out of data while others still had some (data.uneven=error)."""


def _autocast(dtype: str, device: torch.device):
    wanted = precision.autocast_dtype(dtype)
    return contextlib.nullcontext() if wanted is None else torch.autocast(device.type, dtype=wanted)


class Doctor:
    def __init__(self, cfg, run_dir, strategy, rank: int, world: int, device: torch.device | None = None,
                 replica_sets: list | None = None, placement=None):
        self.cfg, self.run_dir, self.strategy = cfg, Path(run_dir), strategy
        # Under a pipeline, where each module of the whole model runs (parallel/pp/placement.py): a planted
        # fault is checked against the whole model, the replay gathers it, and a culprit is named with
        # its stage and the rank holding it. None: this rank runs the whole model.
        self.placement = placement
        # what must stay bitwise equal across which ranks, as the layers declare it (doctor/replicas.py); the
        # data-parallel layer seen through every layer's view knows them all
        self.replica_sets = replica_sets if replica_sets is not None else strategy.replica_sets()
        self.rank, self.world = rank, world
        self.device = device or comm.device()
        self.policy = cfg.doctor.on_anomaly
        self.faults = inject.Faults.parse(cfg.debug, world)
        self.faults.check_module(strategy.model, placement)
        self.monitor = anomaly_mod.LocalGradMonitor(list(strategy.model.named_parameters()), self.device)
        self.spike = anomaly_mod.SpikeDetector(cfg.doctor.spike_factor)
        self.watchdog = None
        if world > 1 and cfg.doctor.hang_timeout_s > 0:
            self.watchdog = Watchdog(self.run_dir, rank, world, cfg.doctor.hang_timeout_s,
                                     extra={"strategy": cfg.parallel.strategy})
        comm.RECORDER.verify = bool(cfg.doctor.verify_collectives)
        self.skip_steps: set[int] = set()  # bad batches to skip after a rollback
        self.anomalies = 0
        self.last_report: dict | None = None
        self.last_checksum: dict | None = None
        self.ranks_consistent = True
        self.divergences = 0
        self._data_next: list[bool] | None = None  # every rank's "I have data for the next step", agreed
        self._pending = None  # the launched check: (step, handle, output buffer, row length)
        self._pending_fragments: set[int] = set()  # parallel.sync: requested checks, each at its fragment's sync
        self._nan_handle = None
        self._reset_step([])

    def _reset_step(self, indices) -> None:
        self._micro: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._losses: list[torch.Tensor] = []
        self._indices = list(indices)
        self._tokens = 0
        self._pending = None  # (a check launched by a step that raised: that run is over)
        self.monitor.reset()

    # --- before the step -------------------------------------------------------------------------------
    def has_data(self, step: int) -> bool:
        """Whether this rank has data for `step`. shardlab's global sampler never runs dry, so only the
        debug.uneven_rank knob makes a rank run out; a finite per-rank loader would answer here."""
        u = self.faults.uneven
        return not (u is not None and u[0] == self.rank and step >= u[1])

    def before_step(self, step: int, batch_indices) -> str:
        """Call once per step after sampling, before any forward. Returns "run", "skip" (a bad batch
        skipped after a rollback: consume it, do nothing else) or "shadow" (data.uneven=join: this rank
        has no data; run the step with zero loss weight so its collectives still match)."""
        self._reset_step(batch_indices or [])
        if self.watchdog:
            self.watchdog.beat()
        if step in self.skip_steps:
            self._data_next = None  # no check_step this step: re-agree on data at the next one
            return "skip"
        if self.faults.fires("hang", step, self.rank):
            inject.hang_forever(self.rank, step)
        mine = self.has_data(step)  # must match what this rank announced in the last check_step
        if self._data_next is None:  # first step (or after a skip): one extra small collective
            flags = torch.tensor([float(mine)], device=self.device)
            out = torch.empty(self.world, device=self.device)
            comm.all_gather(out, flags, tag="doctor has-data")
            self._data_next = [bool(v) for v in out.tolist()]
        flags, self._data_next = self._data_next, None
        flags[self.rank] = flags[self.rank] and mine
        if not all(flags):
            empty = [r for r, f in enumerate(flags) if not f]
            if self.cfg.data.uneven == "error" or not any(flags):
                raise UnevenInputsError(
                    f"step {step}: rank{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))} ran out of data "
                    f"while rank(s) {', '.join(str(r) for r, f in enumerate(flags) if f)} still have some. Stopping "
                    "on every rank now instead of hanging in the next collective. Give every rank the same number "
                    "of batches (shardlab's global sampler does), or set data.uneven=join to let the exhausted "
                    "ranks shadow the collectives with zero-weight steps.")
            self.active_ranks = sum(flags)
            if not flags[self.rank]:
                return "shadow"
        self.active_ranks = sum(flags)
        if self.faults.nan_here(step, self.rank):
            self._nan_handle = inject.attach_nan(self.strategy.model, self.faults.nan[2])
        return "run"

    def loss_weight_factor(self, action: str) -> float:
        """data.uneven=join: the gradient must be the mean over the tokens that exist. With `active`
        of W ranks holding data, those scale their loss by W / active and shadows by 0."""
        return 0.0 if action == "shadow" else self.world / max(1, getattr(self, "active_ranks", self.world))

    # --- during the step -------------------------------------------------------------------------------
    def after_backward(self, step: int, microbatch, loss: torch.Tensor) -> None:
        """After each microbatch's backward. `loss` is its summed (unscaled) cross-entropy, None on a pipeline
        rank without the last stage (it computes no loss: the last stage's rank reports it). Keeps the
        inputs for a possible replay; no host sync."""
        x, y = microbatch
        self._micro.append((x, y))
        if loss is None:
            return
        self._losses.append(loss.detach().float().reshape(()))
        self._tokens += y.numel()

    def _my_row(self, step: int, shadow: bool) -> torch.Tensor:
        if self._losses and not shadow:
            losses = torch.stack(self._losses)
            loss = losses.sum() / max(1, self._tokens)
            finite = torch.isfinite(losses)
            first_bad = torch.where(finite.all(), torch.tensor(-1.0, device=losses.device),
                                    (~finite).float().argmax().float())
            loss_finite, tokens = finite.all().float(), float(self._tokens)
        else:
            loss = first_bad = torch.zeros((), device=self.device)
            loss_finite, tokens = torch.ones((), device=self.device), 0.0
        sq = self.monitor.sq.sum()
        row = torch.stack([torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0).float(),
                           torch.tensor(tokens, device=self.device), torch.nan_to_num(sq, nan=0.0, posinf=0.0),
                           loss_finite.float(), torch.isfinite(sq).float(), first_bad.float(),
                           torch.tensor(float(self.has_data(step + 1)), device=self.device),
                           torch.tensor(float(self.monitor.fired), device=self.device)])
        return row.to(torch.float64)

    def launch_check(self, step: int, shadow: bool = False) -> None:
        """After the step's last backward, before the gradient reduction is waited for: start the all-gather
        of every rank's local signals (asynchronous). All of them are known here (losses, local gradient
        norms, the next step's data), so the gather overlaps the last buckets' all-reduce instead of
        adding a synchronisation point after them; `check_step` collects it. Every rank calls it at the
        same point of the step, so the group's collectives stay in the same order everywhere."""
        row = self._my_row(step, shadow)
        if self.faults.fires("mismatch", step, self.rank):
            print(f"[shardlab doctor] rank {self.rank}: injected collective mismatch at step {step}", flush=True)
            row = torch.cat([row, row.new_zeros(1)])  # one element more than the other ranks send
        out = torch.empty(self.world * row.numel(), dtype=row.dtype, device=self.device)
        handle = comm.all_gather(out, row, async_op=True, tag="doctor check")
        self._pending = (step, handle, out, row.numel())

    def check_step(self, step: int, loss=None, grad_norm: float = 0.0, found_inf: bool = False,
                   loss_scale: float | None = None, shadow: bool = False) -> str:
        """After clipping, before the optimizer step. Collects the all-gather of every rank's local signals
        (launched by `launch_check`, or here if the caller did not), then takes the same decision on every
        rank: "ok", or the doctor.on_anomaly policy."""
        if self._pending is None or self._pending[0] != step:
            self.launch_check(step, shadow)
        _, handle, out, n = self._pending
        self._pending = None
        handle.wait()  # (normally done by now: it travelled with the last gradient buckets)
        rows = [dict(zip(anomaly_mod.FIELDS, r)) for r in out.view(self.world, n).tolist()]
        self._data_next = [bool(r["has_data_next"]) for r in rows]
        found = anomaly_mod.decide(rows, float(grad_norm), found_inf, self.spike)
        try:
            if found is None:
                self.spike.add(found_loss(rows))
                return "ok"
            self.anomalies += 1
            self._investigate(step, found, rows, loss_scale)
            if self.policy == "rollback":
                self.skip_steps.add(step)
            return self.policy
        finally:
            if self._nan_handle is not None:  # the injected fault fires once
                self._nan_handle.remove()
                self._nan_handle = None
                self.faults.nan = None

    def _investigate(self, step: int, found: dict, rows: list[dict], loss_scale) -> None:
        """Localise on the suspect ranks (all ranks call this: the parameter gather may be collective)."""
        if self.watchdog:
            self.watchdog.beat()
        full = self.strategy.full_parameters()  # collective for sharded strategies: every rank calls it
        if self.placement is not None:  # the other stages' parameters too (a collective over the pipeline)
            full = self.placement.whole_parameters(full)
        loc = None
        if self.rank in found["ranks"] and self._micro:
            replica = build_replica(self.cfg, full, self.device)
            handle = None
            if self._planted(step):  # the fault is part of what we replay
                handle = inject.attach_nan(replica, self.faults.nan[2])
            per = len(self._micro[0][0])
            chunks = [self._indices[i * per:(i + 1) * per] for i in range(len(self._micro))]
            loc = localize(replica, self._micro, chunks, lambda: _autocast(self.cfg.train.dtype, self.device))
            if handle:
                handle.remove()
            del replica
            if self.placement is not None and loc.get("module"):  # which stage runs it, on which rank
                loc.update(self.placement.locate(loc["module"], self.rank) or {})
        from shardlab.fp8.stats import nonfinite_casts  # float8 layers: the first scale that went non-finite
        mine = {"rank": self.rank, "signals": rows[self.rank], "localisation": loc,
                "local_grad_norms": self.monitor.per_param(), "sample_indices": self._indices,
                "fp8_nonfinite": nonfinite_casts(self.strategy.model)}
        everyone = comm.all_gather_object(mine)
        if self.watchdog:
            self.watchdog.beat()
        report = {"step": step, **found, "loss_scale": loss_scale, "policy": self.policy,
                  "fp8_first_nonfinite_scale": self._fp8_first(everyone),
                  "local_grad_hooks": bool(rows[0]["hooks_fired"]), "per_rank": {str(e["rank"]): e for e in everyone}}
        report["summary"] = summarize(report, self.run_dir)
        self.last_report = report
        if self.rank == 0:
            out = self.run_dir / "anomalies" / f"step_{step}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=1, default=str))
            if self.policy != "stop":  # with stop, the trainer's error message is this summary
                    print(f"[shardlab doctor] {report['summary']}", file=sys.stderr, flush=True)

    def _fp8_first(self, everyone: list[dict]) -> str | None:
        """The first float8 cast whose scale went non-finite over every rank's layers (TP, pp and EP ranks
        hold others), placed by rank (and pipeline stage) when the run has several ranks."""
        from shardlab.fp8.stats import first_across

        def where(name: str, rank: int) -> str:
            stage = self.placement.locate(name, rank) if self.placement is not None else None
            return f" (rank {rank}" + (f", pipeline stage {stage['stage']})" if stage else ")")

        return first_across({e["rank"]: e.pop("fp8_nonfinite") for e in everyone},
                            where if len(everyone) > 1 else None)

    def _planted(self, step: int) -> bool:
        """Whether an injected NaN fired in what this rank replays: on this rank, or under a pipeline on any
        rank of its pipeline (the replica runs every stage)."""
        if self.placement is None or self.faults.nan is None:
            return self.faults.nan_here(step, self.rank)
        return self.faults.nan[0] == step and self.faults.nan[1] in self.placement.ranks(self.rank)

    # --- after the step --------------------------------------------------------------------------------
    def after_step(self, step: int) -> str:
        """After the optimizer step: heartbeat, injected corruption, periodic replica checksums."""
        if self.watchdog:
            self.watchdog.beat()
        if self.faults.fires("corrupt", step, self.rank):
            self._corrupt(step)
        every = self.cfg.doctor.checksum_every
        requested = bool(every) and (step + 1) % every == 0
        periodic = self.replica_sets[0] if self.replica_sets[0].periodic else None
        if periodic is not None:
            # local SGD / DiLoCo: replicas are equal only right after an outer step, fragment by fragment.
            # A requested check compares every fragment, each at its next outer step (this one if it is).
            if requested:
                self._pending_fragments |= set(range(periodic.fragments))
            due = sorted(self._pending_fragments & set(periodic.synced()))
            if not due:
                return "ok"
            self._pending_fragments -= set(due)
            result = self.checksum(step, fragments=due)
        elif requested:
            result = self.checksum(step)
        else:
            return "ok"
        if not result["consistent"]:
            return "stop" if self.policy == "stop" else ("rollback" if self.policy == "rollback" else "ok")
        return "ok"

    def _corrupt(self, step: int) -> None:
        """debug.corrupt_rank: perturb one element of what this rank must hold equal to its replicas: in the
        first replica set with another member (debug.corrupt_expert: the experts' set). Under DiLoCo that set
        declares its outer state θ_start (a parameter itself differs by design mid-period, and the outer step
        would absorb the perturbation into the averaged pseudo-gradient)."""
        want = (lambda rs: rs.name == "experts") if self.cfg.debug.corrupt_expert else \
            (lambda rs: rs.name != "experts")
        target, replicated = None, []
        for rs in self.replica_sets:
            if want(rs) and len(rs.ranks) > 1:
                target, replicated = rs, rs.corruptible()
                if replicated:
                    break
        if replicated:
            name = inject.corrupt_parameter(replicated)
            where = f" ({target.held_label})" if target.held_label else ""
            print(f"[shardlab doctor] rank {self.rank}: injected corruption of {name}{where} after step {step}",
                  flush=True)
        else:
            what = "no expert (debug.corrupt_expert needs parallel.ep > 1)" if self.cfg.debug.corrupt_expert else \
                f"no parameter under {self.cfg.parallel.strategy}"
            print(f"[shardlab doctor] rank {self.rank}: debug.corrupt_rank ignored: this rank replicates {what}, "
                  "so there is no replica to diverge", flush=True)

    def checksum(self, step: int, fragments: list[int] | None = None) -> dict:
        """Compare every replica set now (collective). The first set's result is the verdict's body, the
        others nest under their names; the first diverged set names the divergence. A periodic set (local
        SGD / DiLoCo) compares only `fragments` (default: those whose outer step ended the last step): the
        rest differ by design mid-period."""
        primary, *others = self.replica_sets
        if primary.periodic and fragments is None:
            fragments = primary.synced()
        result = self._check_set(step, primary, fragments)
        several = 1 < len(primary.ranks) < self.world and result.get("fragments") != []  # (nothing compared: [])
        if several:
            result["group_ranks"] = primary.ranks
        for rs in others:
            part = self._check_set(step, rs, None)
            if len(rs.ranks) > 1:
                part["group_ranks"] = rs.ranks
                several = several or len(rs.ranks) < self.world
            consistent = result.get("dp_consistent", result["consistent"])
            result = {**result, rs.name: part, "dp_consistent": consistent,
                      "consistent": result["consistent"] and part["consistent"]}
            if result.get("diverged_set") is None and consistent and not part["consistent"]:
                # the verdict names the copy that drifted
                result["first"], result["ranks"], result["diverged_set"] = part["first"], part["ranks"], rs.name
        if several:
            result = self._agree(result)
        self.last_checksum = result
        if result.get("fragments") != []:  # (nothing compared mid-period: the last comparison still stands)
            self.ranks_consistent = result["consistent"]  # the latest comparison: a rollback can heal a divergence
        if not result["consistent"]:
            self.divergences += 1
            text = checksum_mod.describe(result)
            result["summary"] = text
            if self.rank == 0:
                out = self.run_dir / "doctor" / f"divergence_step_{step}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(result, indent=1))
                print(f"[shardlab doctor] {text}", file=sys.stderr, flush=True)
        return result

    def _check_set(self, step: int, rs, fragments: list[int] | None) -> dict:
        """One replica set's comparison (a collective over its group; none when this rank is alone in it).
        `fragments`: for a periodic set, the fragments just synchronised (their owner is named on divergence)."""
        base = {"step": step, "consistent": True, "compared": 0}
        if rs.periodic:
            base["fragments"] = fragments
        if len(rs.ranks) == 1:
            return {**base, "note": rs.note}
        if rs.periodic and not fragments:  # (the final check of a run that ends mid-period: no collective)
            return {**base, "note": "no fragment was synchronised by the last step: replicas differ by design "
                                    "mid-period (parallel.sync)"}
        if rs.periodic:  # fragment by fragment, so a divergence names the fragment that owns it
            per = {f: rs.parameters([f]) for f in fragments}
            owner = {name: f for f, pairs in per.items() for name, _ in pairs}
            named = [pair for f in fragments for pair in per[f]]
        else:
            named = rs.parameters(None)
        result = checksum_mod.check_replicas(named, step, self.device, rs.group, rs.ranks)
        if rs.periodic:
            result["fragments"] = fragments
            if not result["consistent"]:
                result["first"]["fragment"] = owner[result["first"]["param"]]
        return result

    def _agree(self, result: dict) -> dict:
        """Several groups (one data-parallel group per tp/pp/cp coordinate, HSDP's replicate group per shard,
        one TP group per dp/pp coordinate) each judged their own replicas: every rank must take the same
        verdict (a stop on the diverged group's ranks only leaves the others in the next step's collectives:
        a hang), and rank 0, which writes the report, must hold the diverged group's result. So one small
        object all-gather over the world, on check steps only, and every rank takes the first diverged
        group's result (else rank 0's)."""
        everyone = comm.all_gather_object(result)
        return next((r for r in everyone if not r["consistent"]), everyone[0])

    def dump(self, reason: str) -> None:
        """Write this rank's flight record now (the trainer calls it when a step raises)."""
        if self.watchdog:
            self.watchdog.dump(reason)

    def close(self, final_checksum: bool = True) -> dict:
        """Final replica check (collective), then stop the watchdog and remove the hooks."""
        try:
            if final_checksum and self.world > 1:
                self.checksum(-1 if self.last_checksum is None else self.last_checksum["step"] + 1)
        finally:
            if self.watchdog:
                self.watchdog.stop()
                self.watchdog = None
            self.monitor.remove()
        return {"ranks_consistent": self.ranks_consistent, "anomalies": self.anomalies,
                "divergences": self.divergences}


def found_loss(rows: list[dict]) -> float:
    tokens = sum(r["tokens"] for r in rows)
    return sum(r["loss"] * r["tokens"] for r in rows) / tokens if tokens else float("nan")
