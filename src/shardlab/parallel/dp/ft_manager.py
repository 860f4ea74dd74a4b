"""The quorum of a fault-tolerant job: who trains step s, and the process group they train it over
(docs/fault_tolerance.md). torchft's Manager, reduced to what shardlab's replicas need.

Every rank k of every replica i runs one `Manager`. All the job's keys live in the lighthouse's TCPStore
under the job's name (`parallel.ft_job`): the store carries membership only, never a tensor.

- **Quorum (step s, attempt a).** Rank k of replica i posts `s<s>/a<a>/post/<i>/<k>`. The decision waits
  until every expected replica (the previous quorum's) has posted on all its ranks, or `parallel.ft_timeout`
  passed, or each missing one has asked to join again (its old processes are gone). The first rank to get
  there proposes; an atomic compare-and-set makes the first proposal the decision, which every rank of every
  replica reads. So the ranks of one replica, and the replicas, agree on the members.
- **Joiners** (attempt 0 only): a replica whose every rank posted `join/<i>/<k>` with the same request id
  is admitted; it takes the state of the lowest member (the caller heals it over the new group) and trains
  step s with the others. The request id (one per join, agreed by the replica's ranks) keeps a key left by a
  previous incarnation (killed between its admission and the deletion of its request) from completing the
  request of the next one with a process that no longer exists.
- **Quorum id.** It grows by one whenever the participants change; the group of quorum q is built under
  the prefix `q<q>/shard<k>` (comm.quorum_group), so an abandoned group is never met again.
- **Retry (attempt a > 0).** A collective that failed on some rank of a replica (the replica's ranks vote)
  makes the replica quorum again for the same step, without joiners; the dead drop out at the timeout.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from shardlab import comm

_POLL_S = 0.01  # how often a waiting rank looks at the store again


class FaultToleranceError(RuntimeError):
    """A replica could not reach its peers: no store, no admission, no state within the timeouts."""


def log_replica(replica: int, message: str) -> None:
    print(f"[shardlab ft] replica {replica}: {message}", flush=True)


def restarts() -> int:
    """How many times this replica's processes were restarted: torchrun's count, or the lone-replica
    supervisor's (launch/supervisor.py)."""
    return max(int(os.environ.get(k, "0") or 0) for k in ("TORCHELASTIC_RESTART_COUNT", "SHARDLAB_FT_RESTARTS"))


def _parse_join(raw: bytes) -> dict:
    """A join request's value: {"inc": the rank's incarnation, "req": the replica's request id}."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    try:
        ask = json.loads(text)
    except ValueError:
        ask = None
    return ask if isinstance(ask, dict) else {"inc": text, "req": ""}


def parse_absent(text: str) -> tuple[int, int, int] | None:
    """debug.ft_absent "R@A-B": replica R sits out the quorums of steps A..B and is admitted again at B+1
    (a reference run for a failure drill: the same quorums without the failure). None when empty."""
    if not text:
        return None
    rid, _, span = text.partition("@")
    a, _, b = span.partition("-")
    return int(rid), int(a), int(b or a)


class Manager:
    def __init__(self, pcfg, shard: int, n_shards: int, absent: str = "", device=None):
        self.rid, self.n_replicas = int(pcfg.replica_id), int(pcfg.replicas)
        self.shard, self.n_shards = shard, n_shards
        self.address, self.job = pcfg.ft_store, pcfg.ft_job
        self.prefix, self.client = f"{self.job}/e0", None
        self.timeout, self.join_timeout = float(pcfg.ft_timeout), float(pcfg.ft_join_timeout)
        self.absent = parse_absent(absent)
        # the quorum groups' backend follows the replica's device (comm.quorum_backend: NCCL with CUDA)
        self.device, self.backend = device, getattr(pcfg, "backend", "auto")
        self.job_dir = Path(pcfg.ft_job_dir) if pcfg.ft_job_dir else None
        self.log_path = None
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.store = None
        self.members: list[int] = []  # the participants of the current quorum
        self.qid = 0
        self.group = None  # comm.QuorumGroup of the current quorum (None: alone, or broken)
        self.quorums = 0  # decisions this process took part in
        self.reconnects = 0  # times the lighthouse came back
        self._pending: dict[str, str] = {}  # what this rank has posted for the quorum it waits in
        self._last: tuple[str, str] | None = None  # (key, value) of the last decision it followed

    def set_run_dir(self, run_dir) -> None:
        """This replica's quorum log: RUN/quorum.jsonl (rank 0 writes it)."""
        self.log_path = Path(run_dir) / "quorum.jsonl" if run_dir is not None and self.shard == 0 else None

    # --- the store ---------------------------------------------------------------------------------------
    def connect(self) -> None:
        import torch.distributed as dist
        try:
            client = comm.connect_store(self.address, self.join_timeout)
        except Exception as e:  # noqa: BLE001 - torch raises several kinds; one message says what to check
            raise FaultToleranceError(f"replica {self.rid}: cannot reach the lighthouse at parallel.ft_store="
                                      f"{self.address} ({type(e).__name__}); is `shardlab lighthouse` running "
                                      "there?") from None
        self.client = client
        self.store = dist.PrefixStore(self.prefix, client)  # keys namespaced per job (and its epoch)

    def use_epoch(self, epoch: int) -> None:
        """The job's epoch: a whole-job resume starts a new one (ft_resume.py), with keys of its own."""
        import torch.distributed as dist
        self.prefix = f"{self.job}/e{epoch}"
        self.store = dist.PrefixStore(self.prefix, self.client)

    def alive(self) -> bool:
        """Whether the job's quorums are still being decided: one within 2 x parallel.ft_timeout (the
        decisions' proposer stamps the wall clock)."""
        if not self._has("beat"):
            return False
        return time.time() - float(comm.store_get(self.store, "beat").decode()) < 2 * self.timeout

    def job_started(self) -> bool:
        """Whether the job has decided a quorum already (a process starting now is a restart: it joins)."""
        return self._reliably(lambda: comm.store_check(self.store, "started"))

    def _has(self, key: str) -> bool:
        return comm.store_check(self.store, key)

    # --- the quorum -------------------------------------------------------------------------------------
    def _planned_out(self, step: int) -> set[int]:
        if self.absent is None:
            return set()
        rid, a, b = self.absent
        return {rid} if a <= step <= b else set()

    def _planned_in(self, step: int) -> set[int]:
        return {self.absent[0]} if self.absent is not None and step == self.absent[2] + 1 else set()

    def _join_requests(self) -> dict[int, dict[str, str]]:
        """Replica id -> {shard: incarnation}, for replicas whose every rank asked to join in one request (a
        rank's key from an earlier request, of a previous incarnation of the replica, does not count)."""
        out = {}
        for j in range(self.n_replicas):
            keys = [f"join/{j}/{k}" for k in range(self.n_shards)]
            if all(self._has(k) for k in keys):
                asks = [_parse_join(comm.store_get(self.store, key)) for key in keys]
                if len({a["req"] for a in asks}) == 1:
                    out[j] = {str(k): a["inc"] for k, a in enumerate(asks)}
        return out

    def quorum(self, step: int, attempt: int, founding: bool = False) -> dict:
        """Post, wait, decide: the decision for (step, attempt), which this rank then follows (a new group
        when the participants changed)."""
        base = f"s{step}/a{attempt}"
        self._pending = {f"{base}/post/{self.rid}/{self.shard}": self.incarnation}
        out = self._planned_out(step)
        expected = [j for j in (range(self.n_replicas) if founding else self.members) if j not in out]
        wait_s = self.join_timeout if founding else self.timeout
        state = {"deadline": time.monotonic() + wait_s}

        def post_and_decide():
            store = self.store
            for key, value in self._pending.items():
                comm.store_set(store, key, value.encode())
            while not self._has(f"{base}/decision"):
                complete = [j for j in expected
                            if all(self._has(f"{base}/post/{j}/{k}") for k in range(self.n_shards))]
                # a replica whose every rank asked to join was restarted: not waited for; admitted only at
                # attempt 0 (a retry redoes a step the joiner has no state for)
                requests = {j: v for j, v in self._join_requests().items() if j not in out}
                joining = {} if attempt else requests
                missing = [j for j in expected if j not in complete or j in requests]
                late = time.monotonic() > state["deadline"]
                waiting = [j for j in self._planned_in(step) if j not in joining]
                # Never without its own replica: its other ranks are alive (a dead one takes the whole replica
                # down with it, torchrun's restart) and only later, e.g. all stopped and one woken first.
                own = self.rid not in expected or self.rid in complete
                if own and (late or all(j in requests for j in missing)) and (late or not waiting):
                    members = [j for j in complete if j not in requests]
                    participants = sorted(set(members) | set(joining))
                    # a joiner is a new process even where its replica id was a participant: a new group
                    changed = founding or bool(joining) or participants != self.members
                    gone = {str(j): ("restarted: its previous processes are gone" if j in requests else
                                     f"not all its ranks came within {self.timeout:g} s") for j in missing}
                    proposal = {"step": step, "attempt": attempt, "qid": self.qid + 1 if changed else self.qid,
                                "members": members, "joiners": {str(j): v for j, v in joining.items()},
                                "participants": participants, "gone": gone}
                    comm.store_compare_set(store, f"{base}/decision", "", json.dumps(proposal))
                    break
                time.sleep(_POLL_S)
            return comm.store_get(store, f"{base}/decision")

        raw = self._reliably(post_and_decide, lambda: state.update(deadline=time.monotonic() + wait_s))
        decision = json.loads(raw)
        self._last = (f"{base}/decision", raw.decode() if isinstance(raw, bytes) else raw)
        if self.rid in decision["participants"]:
            def admit():
                for j, incs in decision["joiners"].items():  # tell the joiner's rank k where it was admitted
                    comm.store_set(self.store, f"admit/{j}/{self.shard}", json.dumps(
                        {"step": step, "attempt": attempt, "inc": incs[str(self.shard)]}).encode())
                comm.store_set(self.store, "started", b"1")
                comm.store_set(self.store, "beat", str(time.time()).encode())
            self._reliably(admit)
            self._follow(decision)
        self._pending = {}
        return decision

    def join(self, request: str = "") -> dict:
        """Ask to join; wait (parallel.ft_join_timeout) to be admitted; follow that quorum's decision.
        `request`: this join's id, the same on every rank of the replica (a fresh one per join)."""
        self._pending = {f"join/{self.rid}/{self.shard}": json.dumps({"inc": self.incarnation, "req": request})}
        log_replica(self.rid, f"rank {self.shard} asking to join (process {os.getpid()}; waiting up to "
                              f"{self.join_timeout:g} s)")
        deadline = time.monotonic() + self.join_timeout
        key = f"admit/{self.rid}/{self.shard}"

        def ask():
            store = self.store
            for k, value in self._pending.items():
                comm.store_set(store, k, value.encode())
            while True:
                if self._has(key):
                    admit = json.loads(comm.store_get(store, key))
                    if admit["inc"] == self.incarnation:
                        break
                if time.monotonic() > deadline:
                    raise FaultToleranceError(f"replica {self.rid}: not admitted within parallel.ft_join_timeout="
                                              f"{self.join_timeout:g} s; are the other replicas still training?")
                time.sleep(_POLL_S)
            base = f"s{admit['step']}/a{admit['attempt']}"
            raw = comm.store_get(store, f"{base}/decision")
            comm.store_delete(store, f"join/{self.rid}/{self.shard}")  # admitted: not a request any more
            return base, raw

        base, raw = self._reliably(ask)
        self._pending = {}
        self._last = (f"{base}/decision", raw.decode())
        decision = json.loads(raw)
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # its posts from now on
        self._follow(decision)
        return decision

    # --- a lighthouse that may die --------------------------------------------------------------------
    def _reliably(self, fn, on_reconnect=None):
        """fn(), and again after reconnecting when the lighthouse went away (restarted: an empty store).
        A rank waits for the lighthouse up to parallel.ft_join_timeout; a quorum's wait starts again then."""
        while True:
            try:
                return fn()
            except FaultToleranceError:
                raise
            except Exception as e:  # noqa: BLE001 - the store's client: connection reset, refused, timeout
                log_replica(self.rid, f"rank {self.shard}: lost the lighthouse ({type(e).__name__}); reconnecting")
                self._reconnect()
                if on_reconnect is not None:
                    on_reconnect()

    def _reconnect(self) -> None:
        import torch.distributed as dist
        deadline = time.monotonic() + self.join_timeout
        while True:
            try:
                client = comm.connect_store(self.address, 2.0)
                break
            except Exception:  # noqa: BLE001 - not back yet
                if time.monotonic() > deadline:
                    raise FaultToleranceError(f"replica {self.rid}: the lighthouse at {self.address} did not come "
                                              f"back within parallel.ft_join_timeout={self.join_timeout:g} s") from None
                time.sleep(0.2)
        self.client = client
        self.store = dist.PrefixStore(self.prefix, client)
        self.reconnects += 1
        # Re-register: the decision this rank followed last first (a rank that is still waiting for it must
        # find that one, not decide anew), then that the job runs; the posts follow in fn().
        if self._last is not None:
            comm.store_compare_set(self.store, self._last[0], "", self._last[1])
        comm.store_set(self.store, "started", b"1")
        log_replica(self.rid, f"rank {self.shard}: reconnected to the lighthouse (quorum {self.qid} continues)")

    def _follow(self, decision: dict) -> None:
        """Become a participant of `decision`: its group (built anew when the participants changed), its log."""
        participants = decision["participants"]
        if self.group is None or decision["qid"] != self.qid or participants != self.members:
            self.broken()  # the old quorum's group is abandoned (NCCL: aborted; gloo: its sockets close with it)
            if len(participants) > 1:
                try:
                    self.group = comm.quorum_group(self.store, f"q{decision['qid']}/shard{self.shard}",
                                                   participants.index(self.rid), participants, self.timeout,
                                                   device=self.device, backend=self.backend)
                except Exception as e:  # noqa: BLE001 - a member died before it came: the collective fails
                    log_replica(self.rid, f"rank {self.shard}: the group of quorum {decision['qid']} was not "
                                          f"formed ({type(e).__name__}); the step's collective will fail")
        self.members, self.qid = participants, decision["qid"]
        self.quorums += 1
        self._log(decision)

    def broken(self) -> None:
        """The current group failed: abandon it (the next quorum builds a new one). An NCCL communicator is
        aborted at once: a collective still waiting on it for a dead peer returns."""
        if self.group is not None:
            self.group.abort()
        self.group = None

    def _log(self, d: dict) -> None:
        row = {k: d[k] for k in ("step", "attempt", "qid", "members", "participants")}
        row["joiners"], row["gone"] = sorted(int(j) for j in d["joiners"]), d["gone"]
        if self.shard == 0:
            msg = (f"quorum {d['qid']} for step {d['step']} (attempt {d['attempt']}): members {d['members']}")
            for j, why in sorted(d["gone"].items()):
                msg += f"; replica {j} gone ({why})"
            if d["joiners"]:
                msg += f"; admitting {sorted(int(j) for j in d['joiners'])}"
            log_replica(self.rid, msg)
        line = json.dumps(row) + "\n"
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(line)
        # the job's log: written once per decision, by rank 0 of its lowest participant
        if self.job_dir is not None and self.shard == 0 and self.rid == min(d["participants"]):
            self.job_dir.mkdir(parents=True, exist_ok=True)
            with open(self.job_dir / "quorums.jsonl", "a") as f:
                f.write(line)
