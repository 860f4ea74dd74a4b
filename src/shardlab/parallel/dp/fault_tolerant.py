"""Replicas that die and rejoin: local SGD / DiLoCo whose outer step survives a lost replica
(`parallel.fault_tolerant=true`, docs/sync.md).

One process group cannot lose a member (a collective with a dead peer errors or hangs) and torchrun restarts
every local worker when one fails, so here each replica is a job of its own (`shardlab train --nproc 1
parallel.replica_id=i`) and the replicas meet only at the outer step, through a key-value store that outlives
any of them (a torch.distributed.TCPStore, hosted by `shardlab lighthouse`). The structure is torchft's
Manager / Lighthouse quorum, reduced to what a periodic outer step needs:

- **Quorum per outer step k.** Each member posts its pseudo-gradient (local SGD: its parameters) under
  `k/delta/<i>` and waits until every expected member has posted, or `parallel.ft_timeout` has passed, or each
  missing one has asked to join again (its old process is gone). The first member to get there proposes the
  membership (who posted) and the joiners to admit; an atomic compare-and-set makes the first proposal the
  decision, and everyone reads that one. So all members average exactly the same deltas, in replica order,
  and end the outer step with bitwise equal parameters.
- **Dropped.** A replica missing from the decision (dead, or later than the timeout) is not waited for again.
  Its inner steps since the last outer step are lost, and so is its share of the data for those steps.
- **Joining.** A replica that starts after the job's first outer step (a restart), or finds itself dropped,
  posts a join request and waits (`parallel.ft_join_timeout`). The next decision admits it; the lowest member
  then posts the state after that outer step (parameters = θ_start, the outer momentum, the step); the joiner
  takes it and is an expected member from the next outer step on. Its inner optimizer keeps its own state
  (fresh after a restart), as DiLoCo keeps inner state per replica.
- **Founding.** Replicas that start before any outer step announce themselves and wait for one another (at
  most `parallel.ft_join_timeout`), so the first outer step's timeout does not measure start-up skew.

Every store message goes through `comm` (`store_set`/`store_get`, pseudo-group "store"), so the recorder
counts the outer step's bytes: one delta sent and one per other member received.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import time
import uuid

import torch

from shardlab import comm
from shardlab.parallel.dp.sync import PeriodicSync

_POLL_S = 0.01  # how often a waiting replica looks at the store again


class FaultToleranceError(RuntimeError):
    """A replica could not find or reach its peers (store unreachable, no state within the join timeout)."""


def log_replica(replica: int, message: str) -> None:
    print(f"[shardlab ft] replica {replica}: {message}", flush=True)


def _to_bytes(t: torch.Tensor) -> bytes:
    # the store is on the host: one copy there (a no-op on a CPU)
    return t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes()


def _from_bytes(b: bytes, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8).view(dtype)


class FaultTolerantSync(PeriodicSync):
    """PeriodicSync whose outer step goes through the store with a per-step membership."""

    def host_syncs(self) -> dict[str, int]:
        # the replicas meet in a key-value store on the host: the pseudo-gradient is copied there once per
        # outer step (parallel.sync_every steps; the check runs sync_every=1), and the parameters'
        # fingerprint that the replicas' logs compare
        return {**self.dp.host_syncs(), "shardlab.parallel.dp.fault_tolerant": 2}

    def __init__(self, dp, pcfg, group, optimizer):
        super().__init__(dp, pcfg, group, optimizer)
        self.__dict__.update(rid=int(pcfg.replica_id), n_replicas=int(pcfg.replicas), address=pcfg.ft_store,
                             timeout=float(pcfg.ft_timeout), join_timeout=float(pcfg.ft_join_timeout),
                             store=None, train_state=None, members=list(range(int(pcfg.replicas))), outer_k=0,
                             incarnation=f"{os.getpid()}-{uuid.uuid4().hex[:8]}")

    # --- start: found the job or join it ------------------------------------------------------------------
    def found_or_join(self, train_state, start_step: int) -> int:
        """Called by the trainer before the first step; returns the step to start from."""
        self.__dict__["train_state"] = train_state
        try:
            store = comm.connect_store(self.address, self.join_timeout)
        except Exception as e:  # noqa: BLE001 - torch raises several kinds; one message says what to check
            raise FaultToleranceError(f"replica {self.rid}: cannot reach the store at parallel.ft_store="
                                      f"{self.address} ({type(e).__name__}); is `shardlab lighthouse` running "
                                      "there?") from None
        self.__dict__["store"] = store
        self.__dict__["outer_k"] = self.inner_step // self.every
        if comm.store_check(store, "closed"):  # the job has taken outer steps: this is a (re)start
            self._join(mid_step=False)
            return self.train_state.step
        comm.store_set(store, f"hello/{self.rid}", self.incarnation.encode())
        deadline = time.monotonic() + self.join_timeout
        while time.monotonic() < deadline and not all(comm.store_check(store, f"hello/{j}")
                                                      for j in range(self.n_replicas)):
            time.sleep(_POLL_S)
        present = [j for j in range(self.n_replicas) if comm.store_check(store, f"hello/{j}")]
        log_replica(self.rid, f"founding member (process {os.getpid()}); replicas present at the start: {present} of "
                       f"{self.n_replicas}")
        return start_step

    # --- the outer step ---------------------------------------------------------------------------------
    @torch.no_grad()
    def synchronise(self, fragments: list[int] | None = None) -> None:
        # one fragment only (parallel.fragments=1 is enforced with fault_tolerant): the whole model
        store, k = self.store, self.outer_k + 1
        if self.mode == "diloco":
            delta = (self.start - self._flat().float()).to(self.wire_dtype)  # Δ = θ_start − θ_end
        else:
            delta = self._flat()
        comm.store_set(store, f"{k}/delta/{self.rid}", _to_bytes(delta), tag=f"{self.mode} outer step")
        decision = self._decide(k)
        if self.rid not in decision["members"]:  # too late: the others went on without this replica
            log_replica(self.rid, f"dropped from outer step {k} (the others decided without it: more than "
                           f"{self.timeout:g} s late); joining again")
            self._join(mid_step=True)
            return
        total = torch.zeros(delta.numel(), dtype=torch.float32, device=delta.device)  # where the outer step runs
        for j in decision["members"]:  # the same order on every member: bitwise equal sums
            d = delta if j == self.rid else _from_bytes(
                comm.store_get(store, f"{k}/delta/{j}", tag=f"{self.mode} outer step"), delta.dtype).to(delta.device)
            total.add_(d.float())
        mean = total.div_(len(decision["members"]))
        if self.mode == "diloco":
            whole = self.views[0]  # the outer optimizer's one parameter: a view of all of θ_start
            whole.grad = mean
            self.outer.step()
            whole.grad = None
            self._unflatten(self.start)
        else:
            self._unflatten(mean)
        self._after_decision(k, decision)

    def _decide(self, k: int) -> dict:
        """Wait for the expected members' deltas (or the timeout, or their join requests); the first
        proposal stored is the decision."""
        store, key = self.store, f"{k}/decision"
        deadline = time.monotonic() + self.timeout
        while not comm.store_check(store, key):
            missing = [j for j in self.members if not comm.store_check(store, f"{k}/delta/{j}")]
            joining = self._join_requests()
            if not missing or time.monotonic() > deadline or all(j in joining for j in missing):
                members = [j for j in self.members if j not in missing]
                gone = {j: ("restarted: its previous process is gone" if j in joining else
                            f"no pseudo-gradient within {self.timeout:g} s") for j in missing}
                proposal = json.dumps({"members": members, "joiners": {str(j): inc for j, inc in joining.items()},
                                       "gone": gone})
                comm.store_compare_set(store, key, "", proposal)
                break
            time.sleep(_POLL_S)
        return json.loads(comm.store_get(store, key))

    def _join_requests(self) -> dict[int, str]:
        """Replica id -> incarnation, for join requests not admitted yet."""
        out = {}
        for j in range(self.n_replicas):
            if comm.store_check(self.store, f"join/{j}"):
                inc = comm.store_get(self.store, f"join/{j}").decode()
                admitted = (json.loads(comm.store_get(self.store, f"admitted/{j}"))
                            if comm.store_check(self.store, f"admitted/{j}") else {})
                if admitted.get("incarnation") != inc:
                    out[j] = inc
        return out

    def _after_decision(self, k: int, decision: dict) -> None:
        """Log what the step decided, admit the joiners (the lowest member serves them the state), move on."""
        store, members = self.store, decision["members"]
        joiners = sorted(int(j) for j in decision["joiners"])
        everyone = sorted(set(members) | set(joiners))  # the members of the next outer step
        step = self.train_state.step + 1  # the trainer counts this step once the optimizer phase returns
        msg = f"outer step {k} (step {step}): averaged {len(members)} of {len(self.members)} replicas {members}"
        for j, why in sorted(decision["gone"].items()):
            msg += f"; replica {j} gone ({why})"
        if joiners:
            msg += f"; admitting replica(s) {joiners}"
        log_replica(self.rid, f"{msg}; parameters {self.fingerprint()}")
        for j, inc in decision["joiners"].items():
            comm.store_set(store, f"admitted/{j}", json.dumps({"incarnation": inc, "outer_step": k}).encode())
        if joiners and self.rid == min(members):
            comm.store_set(store, f"{k}/state", self._state_bytes(k, step, everyone),
                           tag="fault-tolerant state")
        if comm.store_check(store, f"{k - 2}/delta/{self.rid}"):  # the store keeps only recent steps
            comm.store_delete(store, f"{k - 2}/delta/{self.rid}")
        if self.rid == min(members) and comm.store_check(store, f"{k - 2}/state"):
            comm.store_delete(store, f"{k - 2}/state")
        comm.store_set(store, "closed", str(k).encode())
        self.__dict__.update(outer_k=k, members=everyone)

    def fingerprint(self) -> str:
        """A short hash of the parameters: equal on every member after an outer step (the logs compare it)."""
        return hashlib.sha1(_to_bytes(self._flat())).hexdigest()[:16]

    # --- joining ----------------------------------------------------------------------------------------
    def _state_bytes(self, k: int, step: int, members: list[int]) -> bytes:
        state = {"outer_step": k, "step": step, "inner_step": self.inner_step, "members": members,
                 "params": self.start.detach().clone() if self.mode == "diloco" else self._flat()}
        if self.mode == "diloco" and self.outer.state[self.views[0]].get("momentum_buffer") is not None:
            state["momentum"] = self.outer.state[self.views[0]]["momentum_buffer"].clone()
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()

    @torch.no_grad()
    def _join(self, mid_step: bool) -> None:
        """Ask to join, wait to be admitted and for the state after that outer step, take it."""
        store = self.store
        inc = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        comm.store_set(store, f"join/{self.rid}", inc.encode())
        log_replica(self.rid, f"asking to join (process {os.getpid()}; waiting up to {self.join_timeout:g} s for a peer's "
                       "state)")
        deadline = time.monotonic() + self.join_timeout
        k = None
        while k is None or not comm.store_check(store, f"{k}/state"):
            if k is None and comm.store_check(store, f"admitted/{self.rid}"):
                admitted = json.loads(comm.store_get(store, f"admitted/{self.rid}"))
                k = admitted["outer_step"] if admitted["incarnation"] == inc else None
            if time.monotonic() > deadline:
                raise FaultToleranceError(
                    f"replica {self.rid}: no live replica {'admitted it' if k is None else 'sent the state'} within "
                    f"parallel.ft_join_timeout={self.join_timeout:g} s; are the other replicas still training?")
            time.sleep(_POLL_S)
        state = torch.load(io.BytesIO(comm.store_get(store, f"{k}/state", tag="fault-tolerant state")),
                           weights_only=True)
        params = state["params"]
        self._unflatten(params)
        if self.mode == "diloco":
            self.start.copy_(params)
            buf = self.outer.state[self.views[0]].get("momentum_buffer")
            if buf is not None and "momentum" in state:
                buf.copy_(state["momentum"])
        st = self.train_state
        position(st.sampler, state["step"])
        # Called mid-step (from the optimizer phase) the trainer still adds the step it is finishing.
        st.step = state["step"] - (1 if mid_step else 0)
        self.__dict__.update(inner_step=state["inner_step"], outer_k=k, members=state["members"],
                             incarnation=inc)
        log_replica(self.rid, f"joined at outer step {k} (step {state['step']}) with the state of replica "
                       f"{min(state['members'])}; members {state['members']}; parameters {self.fingerprint()}")


def position(sampler, step: int) -> None:
    """Move the global sampler to the start of optimizer step `step` (the data a joiner trains on next)."""
    sampler.epoch, k = divmod(step, sampler.steps_per_epoch)
    sampler.cursor = k * sampler.global_batch
