"""Every-step training that survives a replica (`parallel.sync=every_step parallel.fault_tolerant=true`,
docs/fault_tolerance.md).

Each replica is its own torchrun job with any data-parallel layer inside (zero1/2/3, ddp, torch-fsdp2); the
replicas are the outer dp_replicate dimension of one logical HSDP run. The layer inside reduces the gradient
within the replica as usual (`replicas_step_alone`: the in-job replicate all-reduce goes); this view then
averages what each rank's optimizer steps (its gradient shards) across the replicas, rank k with the rank k
of every other replica, over the group of the step's quorum (manager.py, quorum.quorum_group).

Per step s:
1. `before_step` (the trainer's hook, before the batch): the quorum of step s (the last one kept, over the same group,
   while the lighthouse cannot be reached; the replica's ranks vote on it). Joiners are healed here: the lowest
   member's rank k broadcasts its shard's parameters, optimizer state, learning rates, RNG (the host's, and
   the device's on CUDA) and step over the new group to the joiners' rank k (shard to shard); the sampler's
   position follows from the step. Every tensor of the heal lives on the replica's device (an NCCL quorum
   group moves device memory only).
2. forward and backward inside the replica.
3. `finish_backward`: the gradient, scaled by this replica's token weight w_i (its tokens over the nominal
   tokens per replica step: 1.0 at full batches), with w_i appended, is all-reduced over the quorum group:
   g = Σ w_i g_i / Σ w_i over the replicas that contributed. The replica's ranks vote on success (MIN over the
   replica); any failure (a dead member closes the sockets, a stopped one outlasts parallel.ft_timeout)
   abandons the group and the replica quorums again for step s (attempt a+1): the live replicas complete the
   step from their own gradients, the lost replica's contribution is absent from it.
4. A replica dropped from a retry (it was the late one) asks to join and is healed at a later step's quorum;
   the step it was in is abandoned (no update).
"""
from __future__ import annotations

import hashlib
import os
import time
import uuid

import torch

from shardlab import comm
from shardlab.parallel.dp.base import _local
from shardlab.parallel.ft import resume as ft_resume
from shardlab.parallel.ft.hooks import ReplicaHooks
from shardlab.parallel.ft.manager import FaultToleranceError, Manager, log_replica, restarts
from shardlab.parallel.ft import quorum  # called through the module: the simulated world watches its ops
from shardlab.parallel.dp.view import DPView


# Drill: "SECONDS[@RESTART]": every heal this process takes part in (as a joiner or as the sender) pauses
# SECONDS after its first broadcast; with @RESTART only in the processes of that restart (torchrun's count, or
# the lone-replica supervisor's): the window in which `shardlab bench faults` kills a replica mid-heal. Keep it
# below parallel.ft_timeout: the peer waits in its own broadcasts meanwhile.
HEAL_DELAY_ENV = "SHARDLAB_HEAL_DELAY"


def injected_heal_delay() -> float:
    spec = os.environ.get(HEAL_DELAY_ENV, "")
    if not spec:
        return 0.0
    seconds, _, when = spec.partition("@")
    return float(seconds) if not when or int(when) == restarts() else 0.0


def rng_state(device: torch.device) -> torch.Tensor:
    """What a joiner continues from, as one uint8 host tensor: the host generator's state, then the CUDA
    generator's of `device` when the replica runs on CUDA (dropout and other sampling on the device)."""
    parts = [torch.get_rng_state()]
    if device.type == "cuda":
        parts.append(torch.cuda.get_rng_state(device))
    return torch.cat(parts)


def set_rng_state(state: torch.Tensor, device: torch.device) -> None:
    """Install `rng_state`'s layout (received on the device: copied back to the host first)."""
    host = rng_state(device)  # the right size and a valid state, overwritten by the copy
    host.copy_(state)
    n = torch.get_rng_state().numel()
    torch.set_rng_state(host[:n].clone())
    if device.type == "cuda":
        torch.cuda.set_rng_state(host[n:].clone(), device)


def position(sampler, step: int) -> None:
    """Move the global sampler to the start of optimizer step `step` (the data a joiner trains on next)."""
    sampler.epoch, k = divmod(step, sampler.steps_per_epoch)
    sampler.cursor = k * sampler.global_batch


def _flat(tensors: list[torch.Tensor]) -> dict[torch.dtype, torch.Tensor]:
    by = {}
    for t in tensors:
        by.setdefault(t.dtype, []).append(t.detach().reshape(-1))
    return {d: torch.cat(ts) for d, ts in by.items()}


def _unflat(tensors: list[torch.Tensor], flats: dict[torch.dtype, torch.Tensor]) -> None:
    offsets = dict.fromkeys(flats, 0)
    with torch.no_grad():
        for t in tensors:
            o = offsets[t.dtype]
            t.copy_(flats[t.dtype][o:o + t.numel()].view_as(t))
            offsets[t.dtype] = o + t.numel()


class EveryStepFaultTolerance(ReplicaHooks, DPView):
    """The dp layer of one replica, its optimizer steps averaged across the replicas of the step's quorum."""

    def host_syncs(self) -> dict[str, int]:
        # the two votes (the quorum's: keep or the lighthouse; the step's: all succeeded), the quorum's
        # host-side all-reduce (gloo) and the state copies of a heal
        return {**self.dp.host_syncs(), "shardlab.parallel.ft.every_step": 4}

    def __init__(self, dp, pcfg, optimizer, absent: str = ""):
        super().__init__(dp)
        named = dp.replicas_step_alone()  # HSDP zero: the in-job replicate all-reduce goes (there is none)
        self.__dict__.update(params=[p for _, p in named], optimizer=optimizer, train_state=None,
                             manager=Manager(pcfg, comm.rank(), comm.world_size(), absent, agree=self._replica_min,
                                             device=dp.device, share=self._replica_share),
                             ready_step=None, skip_update=False, heals=0, heal_s=[], heal_bytes=0,
                             retries=0, absent_steps=0)

    @property
    def rid(self) -> int:
        return self.manager.rid

    # --- start: found the job or join it ------------------------------------------------------------------
    def on_start(self, train_state, start_step: int, run_dir=None, resume=None) -> int:
        """The trainer's hook before the first step: found the job with the other replicas, or join it healed by
        a peer; returns the step to start from. `run_dir`: where
        this replica's quorum log goes (quorum.jsonl). `resume`: (load_step(step) -> step, committed_steps(
        run_dir) -> [step, ...]), the trainer's checkpoint hooks for a whole-job resume (resume.py)."""
        m = self.manager
        m.set_run_dir(run_dir)
        self.__dict__["train_state"] = train_state
        m.connect()
        job_dir = m.job_dir
        rec = ft_resume.read_epoch(job_dir) if job_dir is not None else None
        epoch = rec["epoch"] if rec else 0
        m.use_epoch(epoch)
        if job_dir is not None and m.shard == 0 and run_dir is not None:
            ft_resume.register(job_dir, self.rid, run_dir)
        if restarts() > 0 or (m.job_started() and (job_dir is None or m.alive())):
            self._rejoin(mid_step=False)
            return train_state.step
        step = start_step
        if job_dir is not None and m.job_started():  # the whole job stopped: resume it, in a new epoch
            step, committed = ft_resume.common_step(job_dir, m.n_replicas, resume[1])
            epoch += 1
            ft_resume.write_epoch(job_dir, epoch, step, committed)
            m.use_epoch(epoch)
            log_replica(self.rid, f"rank {m.shard}: the job stopped; resuming it at step {step}, the newest every "
                                  f"replica committed (epoch {epoch})")
        elif rec is not None:  # a resume another replica opened a moment ago (or the job's first epoch)
            step = rec["step"]
        if step != start_step:
            if step == 0 or resume is None:
                raise FaultToleranceError(f"replica {self.rid}: the job resumes at step {step} but this replica "
                                          f"holds step {start_step}; no checkpoint of step {step} to load")
            start_step = resume[0](step)
        decision = m.quorum(start_step, 0, founding=True)
        if self.rid not in decision["participants"]:
            raise FaultToleranceError(f"replica {self.rid}: the founding quorum was decided without it (more than "
                                      f"parallel.ft_join_timeout={m.join_timeout:g} s late)")
        self.__dict__["ready_step"] = start_step
        log_replica(self.rid, f"rank {m.shard} founding member (process {os.getpid()})")
        return start_step

    def before_step(self, train_state) -> None:
        """The quorum of the step about to run (before its batch is drawn: a joiner is healed here)."""
        comm.set_phase("quorum")
        step = train_state.step
        if self.ready_step == step:  # this step's quorum is behind us (founding, or admitted to it)
            self.__dict__["ready_step"] = None
            return
        if self.rid in self.manager._planned_out(step):
            self._rejoin(mid_step=False)  # debug.ft_absent: sit out, as a dead replica would
            return
        decision = self.manager.quorum(step, 0)
        if self.rid not in decision["participants"]:
            self._rejoin(mid_step=False)  # dropped (late): join again
        elif decision["joiners"]:
            self._heal(decision, joiner=False)

    # --- the step ---------------------------------------------------------------------------------------
    def finish_backward(self) -> None:
        self.dp.finish_backward()
        self.__dict__["skip_update"] = False
        grads = [_local(g) for g in self.dp.grad_tensors()]
        weight = torch.ones(1, dtype=grads[0].dtype if grads else torch.float32, device=self.device)
        mine = torch.cat([g.reshape(-1) for g in grads] + [weight])  # w_i = 1.0: a full batch's tokens
        step, attempt = self.train_state.step, 0
        while True:
            buf = mine.clone()
            ok = self._attempt(lambda: quorum.quorum_all_reduce(buf, self.manager.group, tag="ft gradient"))
            if self._vote(ok):
                break
            self.manager.broken()
            attempt += 1
            if attempt > 2 * self.manager.n_replicas:  # each retry drops at least one replica: not reached
                raise FaultToleranceError(f"replica {self.rid}: step {step}'s gradient average failed {attempt} "
                                          "times")
            self.__dict__["retries"] = self.retries + 1
            decision = self.manager.quorum(step, attempt)
            if self.rid not in decision["participants"]:  # the others completed the step without us
                for g in grads:
                    g.zero_()
                self.__dict__["skip_update"] = True
                self._rejoin(mid_step=True)
                return
        if len(self.manager.members) > 1:
            with torch.no_grad():
                out = buf[:-1].div_(buf[-1])  # Σ w_i g_i / Σ w_i
                offset = 0
                for g in grads:
                    g.copy_(out[offset:offset + g.numel()].view_as(g))
                    offset += g.numel()

    def _attempt(self, fn) -> bool:
        if len(self.manager.members) == 1:
            return True  # alone: nothing to exchange
        if self.manager.group is None:
            return False  # the group was never formed: a member is gone
        try:
            fn()
            return True
        except Exception as e:  # noqa: BLE001 - a closed connection, a timeout (gloo's; NCCL's on the host)
            log_replica(self.rid, f"rank {self.manager.shard}: the quorum's collective failed ({type(e).__name__}); "
                                  "quorum again")
            return False

    def _vote(self, ok: bool) -> bool:
        """All ranks of this replica succeeded (a MIN over the replica's own job)."""
        return bool(self._replica_min([1 if ok else 0], tag="ft vote")[0])

    def _replica_min(self, values: list[int], tag: str = "ft lighthouse vote") -> list[int]:
        """The elementwise MIN of `values` over this replica's ranks (its own job's group): the ranks of one
        replica take one way (the manager's vote on keeping a quorum, the step's on success)."""
        if comm.world_size() == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.int32, device=self.device)
        comm.all_reduce(t, op=comm.ReduceOp.MIN, tag=tag)
        return t.tolist()

    @staticmethod
    def _replica_share(obj):
        """Rank 0's `obj` on every rank of this replica (its own job's group): a joiner's ranks follow the one
        admission its rank 0 found."""
        return comm.broadcast_object(obj if comm.rank() == 0 else None, src=0)

    def optimizer_step(self, optimizer) -> None:
        if self.skip_update:  # the step was abandoned: this replica was healed to a later one
            return
        self.dp.optimizer_step(optimizer)

    # --- healing --------------------------------------------------------------------------------------
    def _state_tensors(self) -> list[torch.Tensor]:
        """What a heal copies, in one order on every replica: this rank's parameters (shards), then their
        optimizer state, key by key."""
        out = [_local(p.data) for p in self.params]  # torch-fsdp2: the DTensors' local shards
        for p in self.params:
            st = self.optimizer.state.get(p, {})
            out += [_local(st[k]) for k in sorted(st) if torch.is_tensor(st[k])]
        return out

    @torch.no_grad()
    def _heal(self, decision: dict, joiner: bool) -> None:
        """Over the new quorum's group: the lowest member sends its state, the joiners take it. Every tensor
        sent lives on the replica's device (NCCL moves device memory only)."""
        m, st, t0 = self.manager, self.train_state, time.perf_counter()
        step, source = decision["step"], min(decision["members"])
        if joiner:  # the marker a drill times a kill to (SHARDLAB_HEAL_DELAY widens what follows)
            log_replica(self.rid, f"rank {m.shard} healing at step {step} from replica {source} "
                                  f"(quorum {decision['qid']}, process {os.getpid()})")
            self.dp.materialize_optimizer(self.optimizer)  # the same tensors as the source's, to receive into
        elif self.rid == source:  # the other members take part in the broadcasts, and drop what they receive
            log_replica(self.rid, f"rank {m.shard} sending its state to replica(s) "
                                  f"{sorted(int(j) for j in decision['joiners'])} at step {step}")
        tensors = self._state_tensors()
        flats = {d: t.clone() for d, t in _flat(tensors).items()}
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        meta = torch.tensor([float(step)] + lrs, dtype=torch.float64, device=self.device)
        rng = rng_state(self.device).to(self.device)
        src = decision["participants"].index(source)
        delay = injected_heal_delay()
        moved = 0
        try:
            if m.group is None:
                raise FaultToleranceError("no group")
            for i, t in enumerate((meta, rng, *flats.values())):
                quorum.quorum_broadcast(t, src, m.group, tag="ft heal")
                moved += t.numel() * t.element_size()
                if i == 0 and delay:
                    time.sleep(delay)
        except Exception as e:  # noqa: BLE001
            if joiner:
                raise FaultToleranceError(f"replica {self.rid}: the heal from replica {source} failed "
                                          f"({type(e).__name__})") from None
            # A member's copy is its own state: nothing to undo. The group is abandoned, so the step's
            # collective fails, the replica votes for a retry, and the retry's quorum drops the joiner.
            log_replica(self.rid, f"rank {m.shard}: the heal at step {step} failed ({type(e).__name__}); the "
                                  "step is redone without the joiner")
            m.broken()
            return
        if not joiner:
            return
        _unflat(tensors, flats)
        for g, lr in zip(self.optimizer.param_groups, meta[1:].tolist()):
            g["lr"] = lr
        set_rng_state(rng, self.device)
        self.dp.params_updated()  # zero1/2: the full parameters gathered again inside the replica
        position(st.sampler, step)
        st.step = step
        self.__dict__.update(heals=self.heals + 1, heal_bytes=self.heal_bytes + moved)
        self.heal_s.append(time.perf_counter() - t0)
        log_replica(self.rid, f"rank {m.shard} healed at step {step} from replica {source} ({moved} bytes); "
                              f"parameters {self.checksum()}")

    def _rejoin(self, mid_step: bool) -> None:
        st, t0 = self.train_state, time.perf_counter()
        before = st.step
        # one request id for the replica's ranks (rank 0's, over the replica's own group): their join keys
        # belong together, and a key a killed incarnation left behind does not complete this request
        request = comm.broadcast_object(uuid.uuid4().hex[:12] if comm.rank() == 0 else None, src=0)
        decision = self.manager.join(request)
        self._heal(decision, joiner=True)
        self.heal_s[-1] = time.perf_counter() - t0  # from the request: what the replica waited
        self.__dict__["absent_steps"] = self.absent_steps + decision["step"] - before
        self.__dict__["ready_step"] = decision["step"]
        if mid_step:  # the trainer counts the step it is finishing: it ends at the healed step
            st.step -= 1

    # --- what summary.json reports -------------------------------------------------------------------------
    def checksum(self) -> str:
        """sha1 of this rank's parameters (shards): equal on rank k of every replica after each step."""
        h = hashlib.sha1()
        for p in self.params:
            h.update(_local(p.detach()).contiguous().view(torch.uint8).cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    def full_checksum(self) -> str:
        """sha1 of the whole model's parameters (in name order): equal on every replica after a step."""
        h = hashlib.sha1()
        for _, t in sorted(self.dp.full_parameters().items()):
            h.update(_local(t.detach()).contiguous().view(torch.uint8).cpu().numpy().tobytes())
        return h.hexdigest()[:16]

    def ft_summary(self) -> dict:
        m = self.manager
        return {"restarts": restarts(), "heals": self.heals,
                "quorums": m.quorums, "quorum_id": m.qid, "retries": self.retries,
                "kept_quorums": m.kept, "reconnects": m.reconnects,
                "param_checksum": self.full_checksum(),
                "heal_s": [round(x, 3) for x in self.heal_s], "heal_bytes": self.heal_bytes,
                "state_bytes": sum(t.numel() * t.element_size() for t in self._state_tensors())}
