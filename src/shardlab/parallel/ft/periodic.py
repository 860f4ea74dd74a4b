"""Replicas that die and rejoin under local SGD / DiLoCo (`parallel.fault_tolerant=true`, docs/fault_tolerance.md).

Each replica is a job of its own (`shardlab train --nproc 1 parallel.replica_id=i`); the replicas meet only at
the outer step, over the same transport as every-step fault tolerance (manager.py): a quorum per outer
step decided in the lighthouse's store (membership only), and a group rebuilt for each quorum (gloo; NCCL on
CUDA: quorum.py) over which the pseudo-gradient is all-reduced (quorum_all_reduce). The store
never carries a tensor.

- **Outer step k.** The quorum of k (its "step" is k; the last one kept while the lighthouse cannot be
  reached, manager.py). Every participant all-reduces [w·Δ, w] (local SGD: the parameters): a member
  w = 1, a joiner w = 0 (it has no pseudo-gradient of this period), so the mean is over the members, in the
  group's fixed reduction order on every participant: bitwise equal results.
- **Dropped.** A collective that fails (a dead member closes the sockets, a stopped one outlasts
  `parallel.ft_timeout`) makes the live replicas quorum again for k (attempt a+1) and redo it without the
  lost one; its inner steps since the last outer step are lost, and so is its share of the data for them.
  A replica that finds itself left out (it was the late one) asks to join again.
- **Joining.** A replica that starts after the job's first quorum (a restart), or was left out, asks to join
  and is admitted at the next outer step: it takes part in the all-reduce with w = 0, then the lowest member
  broadcasts the state after that outer step (parameters = θ_start, the outer momentum, the steps) over the
  group. Its inner optimizer keeps its own state (fresh after a restart), as DiLoCo keeps inner state per
  replica.
- **Founding.** Replicas that start before any outer step meet in a founding quorum (at most
  `parallel.ft_join_timeout`), so the first outer step's timeout does not measure start-up skew.
"""
from __future__ import annotations

import hashlib
import os

import torch

from shardlab.parallel.ft.hooks import ReplicaHooks
from shardlab.parallel.ft.manager import FaultToleranceError, Manager, log_replica, restarts  # noqa: F401
from shardlab.parallel.ft import quorum  # called through the module: the simulated world watches its ops
from shardlab.parallel.sync.periodic import PeriodicSync


def _to_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()


class FaultTolerantSync(ReplicaHooks, PeriodicSync):
    """PeriodicSync whose outer step runs over each outer step's quorum group."""

    def host_syncs(self) -> dict[str, int]:
        # the quorum's host-side all-reduce (gloo) of the pseudo-gradient, and the parameters' fingerprint
        # that the replicas' logs compare
        return {**self.dp.host_syncs(), "shardlab.parallel.ft.periodic": 2}

    def __init__(self, dp, pcfg, group, optimizer):
        super().__init__(dp, pcfg, group, optimizer)
        self.__dict__.update(rid=int(pcfg.replica_id), n_replicas=int(pcfg.replicas), train_state=None,
                             manager=Manager(pcfg, 0, 1, device=dp.device), outer_k=0, heals=0, heal_bytes=0)

    @property
    def members(self) -> list[int]:
        """The participants of the last outer step's quorum."""
        return self.manager.members

    # --- start: found the job or join it ------------------------------------------------------------------
    def on_start(self, train_state, start_step: int, run_dir=None, resume=None) -> int:
        """The trainer's hook before the first step: found the job with the other replicas, or join it with a
        peer's state; returns the step to start from. (`resume`: a whole-job resume is every-step only.)"""
        m = self.manager
        self.__dict__["train_state"] = train_state
        m.set_run_dir(run_dir)
        m.connect()
        self.__dict__["outer_k"] = self.inner_step // self.every
        if restarts() > 0 or m.job_started():  # the job is under way: this is a (re)start
            self._join(mid_step=False)
            return self.train_state.step
        decision = m.quorum(self.outer_k, 0, founding=True)
        if self.rid not in decision["participants"]:
            raise FaultToleranceError(f"replica {self.rid}: the founding quorum was decided without it (more than "
                                      f"parallel.ft_join_timeout={m.join_timeout:g} s late)")
        log_replica(self.rid, f"founding member (process {os.getpid()}); replicas present at the start: "
                              f"{decision['participants']} of {self.n_replicas}")
        return start_step

    # --- the outer step ---------------------------------------------------------------------------------
    @torch.no_grad()
    def synchronise(self, fragments: list[int] | None = None) -> None:
        # one fragment only (parallel.fragments=1 is enforced with fault_tolerant): the whole model
        k = self.outer_k + 1
        decision = self.manager.quorum(k, 0)
        if self.rid not in decision["participants"]:  # too late: the others went on without this replica
            log_replica(self.rid, f"dropped from outer step {k} (the others decided without it: more than "
                                  f"{self.manager.timeout:g} s late); joining again")
            self._join(mid_step=True)
            return
        if self.mode == "diloco":
            delta = (self.start - self._flat().float()).to(self.wire_dtype)  # Δ = θ_start − θ_end
        else:
            delta = self._flat()
        decision = self._average(k, decision, delta, weight=1.0)
        if decision is None:
            self._join(mid_step=True)
            return
        self._after(k, decision)

    def _average(self, k: int, decision: dict, delta: torch.Tensor, weight: float) -> dict | None:
        """All-reduce [w·Δ, w] over the quorum (again after a failure, without the lost); the mean lands in
        self's parameters (local SGD) or θ_start via the outer optimizer (DiLoCo). None: left out."""
        m = self.manager
        mine = torch.cat([delta.float().mul(weight), torch.tensor([weight], device=delta.device)])
        attempt = 0
        while True:
            buf = mine.clone()
            try:
                if len(m.members) > 1:
                    if m.group is None:
                        raise FaultToleranceError("the quorum's group was not formed")
                    quorum.quorum_all_reduce(buf, m.group, tag=f"{self.mode} outer step")
                break
            except Exception as e:  # noqa: BLE001 - a closed connection, a timeout (gloo's; NCCL's on the host)
                log_replica(self.rid, f"outer step {k}: the quorum's collective failed ({type(e).__name__}); "
                                      "quorum again")
                m.broken()
                attempt += 1
                if attempt > 2 * self.n_replicas:
                    raise FaultToleranceError(f"replica {self.rid}: outer step {k} failed {attempt} times") from None
                decision = m.quorum(k, attempt)
                if self.rid not in decision["participants"]:
                    return None
        mean = buf[:-1].div_(buf[-1])
        if self.mode == "diloco":
            whole = self.views[0]  # the outer optimizer's one parameter: a view of all of θ_start
            whole.grad = mean
            self.outer.step()
            whole.grad = None
            self._unflatten(self.start)
        else:
            self._unflatten(mean.to(self.params[0].dtype))
        self.dp.params_updated()
        return decision

    def _after(self, k: int, decision: dict) -> None:
        """Log what the step decided, heal the joiners (the lowest member's state), move on."""
        members, joiners = decision["members"], sorted(int(j) for j in decision["joiners"])
        step = self.train_state.step + 1  # the trainer counts this step once the optimizer phase returns
        msg = f"outer step {k} (step {step}): averaged {len(members)} of {self.n_replicas} replicas {members}"
        for j, why in sorted(decision["gone"].items()):
            msg += f"; replica {j} gone ({why})"
        if joiners:
            msg += f"; admitting replica(s) {joiners}"
            self._heal(decision, k, step, joiner=False)
        log_replica(self.rid, f"{msg}; parameters {self.fingerprint()}")
        self.__dict__["outer_k"] = k

    def fingerprint(self) -> str:
        """A short hash of the parameters: equal on every member after an outer step (the logs compare it)."""
        return hashlib.sha1(_to_bytes(self._flat())).hexdigest()[:16]

    # --- joining ----------------------------------------------------------------------------------------
    def _state(self) -> list[torch.Tensor]:
        out = [self.start] if self.mode == "diloco" else [p.data for p in self.params]
        if self.mode == "diloco" and self.outer.state[self.views[0]].get("momentum_buffer") is not None:
            out.append(self.outer.state[self.views[0]]["momentum_buffer"])
        return out

    def _heal(self, decision: dict, k: int, step: int, joiner: bool) -> None:
        """The lowest member broadcasts the state after outer step k over the quorum's group."""
        m = self.manager
        src = decision["participants"].index(min(decision["members"]))
        meta = torch.tensor([k, step, self.inner_step], dtype=torch.int64, device=self.device)  # NCCL: on the device
        tensors = [meta] + [t.clone() for t in self._state()]
        try:
            for t in tensors:
                quorum.quorum_broadcast(t, src, m.group, tag="fault-tolerant state")
        except Exception as e:  # noqa: BLE001
            if joiner:
                raise FaultToleranceError(f"replica {self.rid}: the state from replica {min(decision['members'])} "
                                          f"did not arrive ({type(e).__name__})") from None
            m.broken()
            return
        if not joiner:
            return
        k, step, inner = (int(x) for x in tensors[0].tolist())
        for dst, t in zip(self._state(), tensors[1:]):
            dst.copy_(t)
        if self.mode == "diloco":
            self._unflatten(self.start)
        self.dp.params_updated()
        st = self.train_state
        position(st.sampler, step)
        st.step = step
        self.__dict__.update(inner_step=inner, outer_k=k, heals=self.heals + 1,
                             heal_bytes=self.heal_bytes + sum(t.numel() * t.element_size() for t in tensors))

    @torch.no_grad()
    def _join(self, mid_step: bool) -> None:
        """Ask to join, be admitted at an outer step (a zero-weight part of its average), take the state."""
        decision = self.manager.join()
        k = decision["step"]
        zero = torch.zeros(sum(p.numel() for p in self.params), dtype=self.wire_dtype, device=self.device)
        decision = self._average(k, decision, zero, weight=0.0)  # the members' mean; this replica adds nothing
        if decision is None:
            raise FaultToleranceError(f"replica {self.rid}: left out of outer step {k} right after admission")
        self._heal(decision, k, -1, joiner=True)
        if mid_step:  # called from the optimizer phase: the trainer still adds the step it is finishing
            self.train_state.step -= 1
        log_replica(self.rid, f"joined at outer step {k} (step {self.train_state.step + (1 if mid_step else 0)}) "
                              f"with the state of replica {min(decision['members'])}; members "
                              f"{decision['participants']}; parameters {self.fingerprint()}")

    def ft_summary(self) -> dict:
        m = self.manager
        return {"restarts": restarts(), "heals": self.heals, "quorums": m.quorums, "quorum_id": m.qid,
                "kept_quorums": m.kept, "reconnects": m.reconnects,
                "param_checksum": self.fingerprint(), "heal_bytes": self.heal_bytes,
                "state_bytes": sum(t.numel() * t.element_size() for t in self._state())}


def position(sampler, step: int) -> None:
    """Move the global sampler to the start of optimizer step `step` (the data a joiner trains on next)."""
    sampler.epoch, k = divmod(step, sampler.steps_per_epoch)
    sampler.cursor = k * sampler.global_batch
