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
  request of the next one with a process that no longer exists. Each participant's rank k tells the joiner's
  rank k where it was admitted (`admit/<i>/<k>`), but only the joiner's rank 0 reads that: it shares the
  decision with its replica's other ranks, so they all follow one decision. An admission told to some ranks
  of a joiner and not to others (a participant's rank lost the lighthouse, or kept its last quorum, between
  the decision and telling) would otherwise split the joiner: the told ranks heal and wait inside their replica
  for the untold, which wait for an admission that never comes (their request lost its other keys).
- **Quorum id.** It grows by one whenever the participants change, and at every retry; the group of quorum q
  is built under the prefix `q<q>/shard<k>` (quorum_group), so an abandoned group is never met again.
- **Retry (attempt a > 0).** A collective that failed on some rank of a replica (the replica's ranks vote)
  makes the replica quorum again for the same step, without joiners, under a new quorum id; the dead drop out
  at the timeout. A rank dropped from a retry (below) marks it (`s<s>/a<a>/left/<i>/<k>`): its replica's other
  ranks, which would wait for its post, leave with it.
- **A lighthouse that cannot be reached** (dead, hung, partitioned; lighthouse.py): the groups already built need no
  lighthouse, so a replica keeps its last quorum (same participants, same id, same group) for step s and trains
  on, for at most parallel.ft_join_timeout of unreachability; its ranks agree on keeping (a MIN over the
  replica). The first quorum at a lighthouse come back keeps the last quorum too, so a replica that reached it
  and one that still keeps train the same step over the same group. A retry (attempt a > 0) needs the
  lighthouse (members change), and a decision taken there wins: a rank that finds step s decided at the
  lighthouse other than the way it followed, or a replica already past step s, is dropped and joins again.
"""
from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from shardlab.parallel.ft.lane import _GRACE_S, _Job, _Lane  # noqa: F401 - _GRACE_S: tests
from shardlab.parallel.ft.quorum import quorum_group
from shardlab.parallel.ft.store import (connect_store, store_check, store_compare_set, store_delete, store_get,
                                        store_peek, store_set)
from shardlab.parallel.ft.lighthouse import (  # noqa: F401 - FaultToleranceError, log_replica: re-exported
    _KEEP, _REACHED, FaultToleranceError, LighthouseLoss, _KeepInstead, log_replica)

_POLL_S = 0.01  # how often a waiting rank looks at the store again
# A joiner's rank 0 shares what it found at least this often (the replica's other ranks wait for it in a
# broadcast of their own job's group: kept short, well inside that group's timeout)
_SHARE_S = 2.0


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


@dataclass
class _Round:
    """One (step, attempt) of `Manager.quorum`: whom it waits for and until when, what this rank did."""
    step: int
    attempt: int
    founding: bool
    out: set  # debug.ft_absent: sitting this step out
    expected: list
    wait_s: float
    may_keep: bool = False  # may keep the last quorum (the lighthouse lost at attempt 0)
    posted: bool = False
    deadline: float = 0.0

    def __post_init__(self):
        self.deadline = time.monotonic() + self.wait_s

    @property
    def base(self) -> str:
        return f"s{self.step}/a{self.attempt}"


class Manager(LighthouseLoss):
    """`agree(values)`: the elementwise MIN of `values` over the ranks of this replica (its own job's group);
    `share(obj)`: rank 0's `obj` on every rank of this replica (a broadcast over its own job's group); the
    defaults, the values themselves, are right for a replica of one process. `device`: where the replica's
    tensors live (an NCCL quorum group on CUDA, quorum.quorum_backend)."""

    def __init__(self, pcfg, shard: int, n_shards: int, absent: str = "", agree=None, device=None, share=None):
        self.rid, self.n_replicas = int(pcfg.replica_id), int(pcfg.replicas)
        self.shard, self.n_shards = shard, n_shards
        self.address, self.job = pcfg.ft_store, pcfg.ft_job
        self.prefix, self.client = f"{self.job}/e0", None
        self.timeout, self.join_timeout = float(pcfg.ft_timeout), float(pcfg.ft_join_timeout)
        self.absent = parse_absent(absent)
        # the quorum groups' backend follows the replica's device (quorum.quorum_backend: NCCL with CUDA)
        self.device, self.backend = device, getattr(pcfg, "backend", "auto")
        self.job_dir = Path(pcfg.ft_job_dir) if pcfg.ft_job_dir else None
        self.log_path = None
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.store = None
        self.members: list[int] = []  # the participants of the current quorum
        self.qid = 0
        self.group = None  # quorum.QuorumGroup of the current quorum (None: alone, or broken)
        self.quorums = 0  # decisions this process took part in
        self.reconnects = 0  # times the lighthouse came back
        self.kept = 0  # quorums kept without the lighthouse
        self.agree = agree or (lambda values: values)
        self.share = share or (lambda obj: obj)
        self.lane = _Lane()
        self._pending: dict[str, str] = {}  # what this rank has posted for the quorum it waits in
        self._last: tuple[str, str] | None = None  # (key, value) of the last lighthouse decision it followed
        self._followed: dict[tuple[int, int], tuple] = {}  # (step, attempt) -> (qid, participants), this step
        self._lost_since: float | None = None  # when this rank found the lighthouse unreachable (None: reached)
        self._probe: _Job | None = None  # an attempt to reach the lost lighthouse, still under way
        self._back = False  # reached the lighthouse again since it last followed a decision taken there

    def set_run_dir(self, run_dir) -> None:
        """This replica's quorum log: RUN/quorum.jsonl (rank 0 writes it)."""
        self.log_path = Path(run_dir) / "quorum.jsonl" if run_dir is not None and self.shard == 0 else None

    # --- the store ---------------------------------------------------------------------------------------
    def connect(self) -> None:
        import torch.distributed as dist
        try:  # waits up to parallel.ft_join_timeout for a lighthouse started after the replicas
            client = self.lane.call(lambda: connect_store(self.address, self.join_timeout), self.join_timeout)
        except Exception as e:  # noqa: BLE001 - torch raises several kinds; one message says what to check
            raise FaultToleranceError(f"replica {self.rid}: cannot reach the lighthouse at parallel.ft_store="
                                      f"{self.address} ({type(e).__name__}); is `shardlab lighthouse` running "
                                      "there?") from None
        # then every wait for a key (a group's construction) is bounded like the quorum: parallel.ft_timeout
        client.set_timeout(datetime.timedelta(seconds=self.timeout))
        self.client = client
        self.store = dist.PrefixStore(self.prefix, client)  # keys namespaced per job (and its epoch)

    def use_epoch(self, epoch: int) -> None:
        """The job's epoch: a whole-job resume starts a new one (resume.py), with keys of its own."""
        import torch.distributed as dist
        self.prefix = f"{self.job}/e{epoch}"
        self.store = dist.PrefixStore(self.prefix, self.client)

    def alive(self) -> bool:
        """Whether the job's quorums are still being decided: one within 2 x parallel.ft_timeout (the
        decisions' proposer stamps the wall clock)."""
        if not self._has("beat"):
            return False
        return time.time() - float(self._op(store_get, self.store, "beat").decode()) < 2 * self.timeout

    def job_started(self) -> bool:
        """Whether the job has decided a quorum already (a process starting now is a restart: it joins)."""
        return self._reliably(lambda: self._has("started"))

    def _op(self, fn, *args):
        """fn(*args), an operation on the lighthouse's store, run by the lane within parallel.ft_timeout."""
        return self.lane.call(lambda: fn(*args), self.timeout)

    def _has(self, key: str) -> bool:
        return self._op(store_check, self.store, key)

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
            # peeked, not checked then read: an admitted joiner deletes its keys, maybe between the two, and a
            # read of a deleted key would wait parallel.ft_timeout (this rank then takes the lighthouse for lost)
            raw = [self._op(store_peek, self.store, f"join/{j}/{k}") for k in range(self.n_shards)]
            if all(r is not None for r in raw):
                asks = [_parse_join(r) for r in raw]
                if len({a["req"] for a in asks}) == 1:
                    out[j] = {str(k): a["inc"] for k, a in enumerate(asks)}
        return out

    def quorum(self, step: int, attempt: int, founding: bool = False) -> dict:
        """Post, wait, decide: the decision for (step, attempt), which this rank then follows (a new group
        when the participants changed). At attempt 0 a replica that cannot reach the lighthouse keeps its last
        quorum instead (`_reach_or_keep`). A rank dropped from the step gets a decision without it, not
        followed."""
        if attempt == 0:
            self._followed = {k: v for k, v in self._followed.items() if k[0] == step}
        out = self._planned_out(step)
        r = _Round(step, attempt, founding, out,
                   expected=[j for j in (range(self.n_replicas) if founding else self.members) if j not in out],
                   wait_s=self.join_timeout if founding else self.timeout)
        # at/<i>/<k>: the step rank k of replica i quorums for, which a retry of an earlier step reads (rule 2 of
        # `_superseded`)
        self._pending = {f"{r.base}/post/{self.rid}/{self.shard}": self.incarnation,
                         f"at/{self.rid}/{self.shard}": str(step)}
        r.may_keep = attempt == 0 and not founding
        if r.may_keep:
            code, r.posted = self._reach_or_keep()
            if code == _KEEP:
                self._pending = {}
                return self._keep(step)
            r.may_keep = code == _REACHED  # every rank of the replica posted, and every one can keep

        def again():
            r.deadline, r.posted = time.monotonic() + r.wait_s, False

        try:
            raw, why = (self._once if r.may_keep else self._reliably)(lambda: self._decide(r), again)
        except _KeepInstead:
            # Lost within the quorum, before this rank read its decision: keep. A rank that read it before the
            # lighthouse went follows it: the same group when the participants did not change; if they did, the
            # group of the one or the other fails its collective and the retry, at the lighthouse, sorts it out
            # (a decision taken there wins, `_superseded`).
            self._pending = {}
            return self._keep(step)
        self._pending = {}
        return self._settle(r, raw, why)

    def _decide(self, r: _Round) -> tuple[bytes | None, str | None]:
        """Post this rank's keys, then wait for the decision of (step, attempt), proposing one as soon as the
        posts allow (the first proposal wins: compare-and-set). (the decision, None), or (None, why) when a
        retry finds itself superseded."""
        store, base = self.store, r.base
        why = self._superseded(r.step, r.attempt) if r.attempt else None
        if why:  # not even posted: a retry must not count this replica in
            self._leave(r)
            return None, why
        if not r.posted:
            self._post()
            r.posted = True
        while True:
            why = self._superseded(r.step, r.attempt) if r.attempt else None
            if why:
                self._leave(r)
                return None, why
            if r.attempt and any(self._has(f"{base}/left/{self.rid}/{k}") for k in range(self.n_shards)
                                 if k != self.shard):
                # a rank of this replica left the retry (its own look at the lighthouse): its post never comes,
                # and a proposal waits for its own replica's posts; leave with it (the vote in _settle follows)
                return None, "another rank of this replica left the retry"
            if self._has(f"{base}/decision"):
                break
            # The first quorum at a lighthouse come back keeps the last one, unchanged, without waiting for
            # posts: replicas still keeping it (they missed the return by a moment) train this step over the
            # same group, so the outage ends without a drop. Members that died meanwhile fail its collective:
            # the retry drops them. Joiners wait one quorum more.
            proposal = self._kept_decision(r.step) if r.may_keep and self._back and not r.out else self._proposal(r)
            if proposal is not None:
                self._op(store_compare_set, store, f"{base}/decision", "", json.dumps(proposal))
                continue
            time.sleep(_POLL_S)
        return self._op(store_get, store, f"{base}/decision"), None

    def _leave(self, r: _Round) -> None:
        """Mark this rank's leaving a retry, for its replica's other ranks waiting there for its post."""
        self._op(store_set, self.store, f"{r.base}/left/{self.rid}/{self.shard}", b"1")

    def _proposal(self, r: _Round) -> dict | None:
        """The decision the posts seen so far allow, or None: wait for more."""
        complete = [j for j in r.expected if all(self._has(f"{r.base}/post/{j}/{k}") for k in range(self.n_shards))]
        # a replica whose every rank asked to join was restarted: not waited for; admitted only at attempt 0 (a
        # retry redoes a step the joiner has no state for)
        requests = {j: v for j, v in self._join_requests().items() if j not in r.out}
        joining = {} if r.attempt else requests
        missing = [j for j in r.expected if j not in complete or j in requests]
        late = time.monotonic() > r.deadline
        waiting = [j for j in self._planned_in(r.step) if j not in joining]
        # Never without its own replica: its other ranks are alive (a dead one takes the whole replica down with
        # it, torchrun's restart) and only later, e.g. all stopped and one woken first.
        own = self.rid not in r.expected or self.rid in complete
        if not (own and (late or all(j in requests for j in missing)) and (late or not waiting)):
            return None
        members = [j for j in complete if j not in requests]
        participants = sorted(set(members) | set(joining))
        # A joiner is a new process even where its replica id was a participant: a new group. So is a retry's:
        # every participant abandoned the group of the failed attempt, and a group is never built twice under one
        # prefix (its old keys would be met).
        changed = r.founding or bool(joining) or r.attempt > 0 or participants != self.members
        gone = {str(j): ("restarted: its previous processes are gone" if j in requests else
                         f"not all its ranks came within {self.timeout:g} s") for j in missing}
        return {"step": r.step, "attempt": r.attempt, "qid": self.qid + 1 if changed else self.qid,
                "members": members, "joiners": {str(j): v for j, v in joining.items()},
                "participants": participants, "gone": gone}

    def _settle(self, r: _Round, raw, why: str | None) -> dict:
        """The decision read (or the reason there is none for this rank): the ranks of a retry agree, a
        participant tells the joiners where they were admitted and follows it."""
        step, attempt = r.step, r.attempt
        decision = None if why else json.loads(raw)
        if decision is not None:
            self._last = (f"{r.base}/decision", raw.decode() if isinstance(raw, bytes) else raw)
            self._back = False
        if attempt > 0:
            # The ranks of a replica leave a retry together: one found the step superseded (its own look at the
            # lighthouse, a moment apart from another's) -> all join again; a lone rank in the group would wait.
            inside = decision is not None and self.rid in decision["participants"]
            if not self.agree([int(inside)])[0] and inside:
                why = "another rank of this replica left the retry"
        if why:
            log_replica(self.rid, f"rank {self.shard}: {why}; the lighthouse's decision wins: joining again")
            return {"step": step, "attempt": attempt, "qid": self.qid, "members": [], "joiners": {},
                    "participants": [], "gone": {}, "superseded": why}
        if self.rid in decision["participants"]:
            self._admit(decision, step, attempt)
            self._follow(decision)
        return decision

    def _admit(self, decision: dict, step: int, attempt: int) -> None:
        """Tell each joiner's rank k where it was admitted (its rank 0 reads it for the whole joiner: `join`);
        mark the job started and beating."""
        def admit():
            for j, incs in decision["joiners"].items():
                store_set(self.store, f"admit/{j}/{self.shard}", json.dumps(
                    {"step": step, "attempt": attempt, "inc": incs[str(self.shard)]}).encode())
            store_set(self.store, "started", b"1")
            store_set(self.store, "beat", str(time.time()).encode())
        try:
            self._op(admit)
        except FaultToleranceError:
            raise
        except Exception as e:  # noqa: BLE001 - the decision is taken: follow it; a joiner not told it was
            self._lost(e)  # admitted does not come, and the group's collective fails (the retry drops it)

    def _post(self) -> None:
        """This rank's pending keys, then one question: a set alone does not wait for an answer (one sent to a
        lighthouse just killed is lost without an error), the check does."""
        store, pending = self.store, dict(self._pending)

        def post():
            for key, value in pending.items():
                store_set(store, key, value.encode())
            return store_check(store, "started")
        self._op(post)

    def join(self, request: str = "") -> dict:
        """Ask to join; wait (parallel.ft_join_timeout) to be admitted; follow that quorum's decision.
        `request`: this join's id, the same on every rank of the replica (a fresh one per join). Every rank
        posts its request; rank 0 alone looks for the admission and shares what it found (`share`), round by
        round, so the replica's ranks leave together, with one decision (or one error)."""
        key = f"join/{self.rid}/{self.shard}"
        self._pending = {key: json.dumps({"inc": self.incarnation, "req": request})}
        log_replica(self.rid, f"rank {self.shard} asking to join (process {os.getpid()}; waiting up to "
                              f"{self.join_timeout:g} s)")
        deadline = time.monotonic() + self.join_timeout
        news, posted = None, False
        while news is None:
            # posted once (over a key a killed incarnation may have left), and again whenever it is missing: a
            # lighthouse that came back holds nothing
            self._reliably(lambda: None if posted and self._has(key) else self._post())
            posted = True
            news = self.share(self._reliably(lambda: self._admission(deadline)) if self.shard == 0 else None)
        if "error" in news:
            raise FaultToleranceError(news["error"])
        base, raw = news["base"], news["raw"]
        decision = json.loads(raw)
        if decision["joiners"].get(str(self.rid), {}).get(str(self.shard)) != self.incarnation:
            raise FaultToleranceError(f"replica {self.rid}: rank {self.shard} is not among the joiners of the "
                                      f"decision its rank 0 was admitted to ({base})")
        self._reliably(lambda: self._op(store_delete, self.store, key))  # admitted: not a request any more
        self._pending = {}
        self._last = (f"{base}/decision", raw)
        self._back = False
        self.incarnation = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # its posts from now on
        self._follow(decision)
        return decision

    def _admission(self, deadline: float) -> dict | None:
        """Rank 0 of a joiner, for at most _SHARE_S: {"base", "raw"}: the decision it was admitted to (its
        own incarnation named: an admission left for an earlier one is not taken); {"error"}: none within
        parallel.ft_join_timeout; None: not yet."""
        store, key = self.store, f"admit/{self.rid}/{self.shard}"
        until = min(deadline, time.monotonic() + _SHARE_S)
        while True:
            if self._has(key):
                admit = json.loads(self._op(store_get, store, key))
                if admit["inc"] == self.incarnation:
                    base = f"s{admit['step']}/a{admit['attempt']}"
                    raw = self._op(store_get, store, f"{base}/decision")
                    return {"base": base, "raw": raw.decode() if isinstance(raw, bytes) else raw}
            if time.monotonic() > deadline:
                return {"error": f"replica {self.rid}: not admitted within parallel.ft_join_timeout="
                                 f"{self.join_timeout:g} s; are the other replicas still training?"}
            if time.monotonic() > until:
                return None
            time.sleep(_POLL_S)

    def _follow(self, decision: dict, here: bool = False) -> None:
        """Become a participant of `decision`: its group (built anew when the participants changed), its log.
        `here`: a quorum kept by this replica, without the lighthouse."""
        participants = decision["participants"]
        if self.group is None or decision["qid"] != self.qid or participants != self.members:
            self.broken()  # the old quorum's group is abandoned (NCCL: aborted; gloo: its sockets close with it)
            if len(participants) > 1:
                store, prefix = self.store, f"q{decision['qid']}/shard{self.shard}"
                try:  # on the lane: the construction meets the members through the lighthouse's store
                    self.group = self.lane.call(lambda: quorum_group(
                        store, prefix, participants.index(self.rid), participants, self.timeout,
                        device=self.device, backend=self.backend), 2 * self.timeout)
                except Exception as e:  # noqa: BLE001 - a member died before it came: the collective fails
                    log_replica(self.rid, f"rank {self.shard}: the group of quorum {decision['qid']} was not "
                                          f"formed ({type(e).__name__}); the step's collective will fail")
        self.members, self.qid = participants, decision["qid"]
        self._followed[(decision["step"], decision["attempt"])] = (decision["qid"], participants)
        self.quorums += 1
        self._log(decision, here)

    def broken(self) -> None:
        """The current group failed: abandon it (the next quorum builds a new one). An NCCL communicator is
        aborted at once: a collective still waiting on it for a dead peer returns."""
        if self.group is not None:
            self.group.abort()
        self.group = None

    def _log(self, d: dict, here: bool = False) -> None:
        row = {k: d[k] for k in ("step", "attempt", "qid", "members", "participants")}
        row["joiners"], row["gone"] = sorted(int(j) for j in d["joiners"]), d["gone"]
        if d.get("kept"):
            row["kept"] = True  # the previous quorum again, not waited for: kept without the lighthouse, or
            # the first quorum at a lighthouse come back
        if self.shard == 0:
            msg = (f"quorum {d['qid']} for step {d['step']} (attempt {d['attempt']}): members {d['members']}")
            if here:
                lost = f" for {time.monotonic() - self._lost_since:.1f} s" if self._lost_since is not None else ""
                msg += (f"; lighthouse unreachable{lost}; keeping quorum {d['qid']} (for at most "
                        f"parallel.ft_join_timeout={self.join_timeout:g} s)")
            elif d.get("kept"):
                msg += f"; the lighthouse is back: quorum {d['qid']} kept"
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
