"""What a quorum's ranks do when the lighthouse cannot be reached (dead, hung, partitioned): the part of
`manager.Manager` that keeps the last quorum, reconnects, and sorts out a retry after an outage. See the
manager docstring for the protocol and docs/fault_tolerance.md.

Every store operation runs on the manager's lane (lane.py), bounded by parallel.ft_timeout, so a hung
lighthouse is met as an error like a dead one. The rules:
- a rank that finds the lighthouse gone at attempt 0 keeps its last quorum when the replica's ranks agree
  (`_reach_or_keep`: a MIN vote over the replica) and may keep it for at most parallel.ft_join_timeout;
- it tries to reach the lighthouse again once per quorum (`_try_connect`: _PROBE_S, then in the background)
  and re-registers the last decision it followed there (`_connect`);
- a retry needs the lighthouse, and a decision taken there wins (`_superseded`).
"""
from __future__ import annotations

import json
import socket
import time

from shardlab.parallel.ft.store import connect_store, store_compare_set, store_get, store_set
from shardlab.parallel.ft.lane import _Unreachable

# How long a rank that lost the lighthouse gives one new attempt to reach it before it keeps its quorum: a
# lighthouse that answers at all connects in milliseconds; an attempt still under way then goes on in the
# background and a later quorum takes its answer, so a partitioned lighthouse costs this once, not every step.
_PROBE_S = 2.0
# The replica's ranks vote (MIN) on where the quorum of step s comes from, one of these per rank
_EXPIRED, _WAIT, _KEEP, _REACHED = 0, 1, 2, 3


class FaultToleranceError(RuntimeError):
    """A replica could not reach its peers: no store, no admission, no state within the timeouts."""


class _KeepInstead(Exception):
    """The lighthouse was lost within a quorum that may keep the last one."""


def log_replica(replica: int, message: str) -> None:
    print(f"[shardlab ft] replica {replica}: {message}", flush=True)


class LighthouseLoss:
    """The lighthouse-loss behaviour of `manager.Manager` (which inherits it): it reads and sets the
    manager's state (its store and client, last decision, members, group, lane) and calls its `_post`,
    `_follow`, `_has` and `_op`."""

    def _can_keep(self) -> bool:
        """Whether this rank could train a step over its last quorum as it stands: a member of it, its group
        formed (or alone: no group needed)."""
        return (self._last is not None and self.rid in self.members
                and (len(self.members) == 1 or self.group is not None))

    def _kept_decision(self, step: int) -> dict:
        return {"step": step, "attempt": 0, "qid": self.qid, "members": list(self.members), "joiners": {},
                "participants": list(self.members), "gone": {}, "kept": True}

    def _reach_or_keep(self) -> tuple[int, bool]:
        """Post for a quorum at attempt 0, or find the lighthouse unreachable; returns the replica's vote and
        whether this rank posted. The ranks vote (MIN): _REACHED, every rank posted and can keep: decide at the
        lighthouse; _KEEP, some rank could not reach it and every rank can keep: keep the last quorum; _WAIT,
        some rank cannot keep (its group was not formed): decide at the lighthouse, waiting for it as long as
        needed; _EXPIRED, a rank found it unreachable for longer than parallel.ft_join_timeout:
        FaultToleranceError on every rank. The vote makes the ranks of one replica take one way: a rank at the
        lighthouse would otherwise wait there for a rank of its own replica that trains on."""
        reached = self._try_post()
        if not self._can_keep():
            code = _WAIT
        elif reached:
            code = _REACHED
        else:
            code = _KEEP
        if not reached and time.monotonic() - self._lost_since > self.join_timeout:
            code = _EXPIRED
        code = int(self.agree([code])[0])
        if code == _EXPIRED:
            msg = (f"the lighthouse at {self.address} has been unreachable for longer than parallel.ft_join_timeout="
                   f"{self.join_timeout:g} s (quorum {self.qid} kept {self.kept} times meanwhile); stopping")
            log_replica(self.rid, f"rank {self.shard}: {msg}")
            raise FaultToleranceError(f"replica {self.rid}: {msg}")
        return code, reached

    def _keep(self, step: int) -> dict:
        """Follow the last quorum again for `step`: same participants, same id, the group already built."""
        decision = self._kept_decision(step)
        self.kept += 1
        self._follow(decision, here=True)
        return decision

    def _try_post(self) -> bool:
        """Post this rank's keys; False when the lighthouse does not answer (and one attempt to reach it
        again, `_try_connect`, found it still gone)."""
        if self._lost_since is None:
            try:
                self._post()
                return True
            except FaultToleranceError:
                raise
            except Exception as e:  # noqa: BLE001 - the store's client: connection reset, refused; _Unreachable
                self._lost(e)
        if not self._try_connect():
            return False
        try:
            self._post()
            return True
        except Exception as e:  # noqa: BLE001 - gone again at once
            self._lost(e)
            return False

    def _lost(self, e: BaseException) -> None:
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            log_replica(self.rid, f"rank {self.shard}: lost the lighthouse ({type(e).__name__})")

    def _superseded(self, step: int, attempt: int) -> str | None:
        """Why this rank must not take part in a retry of `step`: the step went on at the lighthouse without
        the quorum this rank followed. 1. an earlier attempt of the step was decided there with other
        participants or another id than this rank followed (it kept a quorum the lighthouse did not take);
        2. a replica quorums for a later step already (it completed this one)."""
        for a in range(attempt):
            key = f"s{step}/a{a}/decision"
            if self._has(key):
                d = json.loads(self._op(store_get, self.store, key))
                if self._followed.get((step, a)) != (d["qid"], d["participants"]):
                    return (f"step {step} (attempt {a}) was decided at the lighthouse as quorum {d['qid']} of "
                            f"{d['participants']}, not the quorum this replica followed")
        for j in range(self.n_replicas):
            key = f"at/{j}/{self.shard}"
            if j != self.rid and self._has(key):
                at = int(self._op(store_get, self.store, key))
                if at > step:
                    return f"replica {j} is at step {at} already"
        return None

    def _once(self, fn, on_reconnect=None):
        """fn(); _KeepInstead when the lighthouse is lost meanwhile (a quorum at attempt 0 that may keep)."""
        return self._reliably(fn, on_reconnect, keep=True)

    def _reliably(self, fn, on_reconnect=None, keep: bool = False):
        """fn(), and again after reconnecting when the lighthouse went away (restarted: an empty store).
        A rank waits for the lighthouse up to parallel.ft_join_timeout since it was lost; a quorum's wait starts
        again then. keep: no waiting, _KeepInstead (the caller keeps its last quorum)."""
        while True:
            try:
                return fn()
            except FaultToleranceError:
                raise
            except Exception as e:  # noqa: BLE001 - the store's client: connection reset, refused; _Unreachable
                self._lost(e)
                if keep:
                    raise _KeepInstead from None
                self._reconnect()
                if on_reconnect is not None:
                    on_reconnect()

    def _reconnect(self) -> None:
        """Wait for the lighthouse: until parallel.ft_join_timeout has passed since it was lost."""
        deadline = self._lost_since + self.join_timeout
        log_replica(self.rid, f"rank {self.shard}: waiting for the lighthouse (at most "
                              f"{max(0.0, deadline - time.monotonic()):.0f} s more)")
        while not self._try_connect():
            if time.monotonic() > deadline:
                raise FaultToleranceError(f"replica {self.rid}: the lighthouse at {self.address} did not come "
                                          f"back within parallel.ft_join_timeout={self.join_timeout:g} s") from None
            time.sleep(0.2)

    def _try_connect(self) -> bool:
        """One attempt to reach the lighthouse again (`_connect`, on the lane); True: connected. An attempt that
        takes longer than _PROBE_S goes on in the background; a later call takes its answer."""
        if self._probe is not None:
            if not self._probe.done.is_set():
                return False
            job, self._probe = self._probe, None
            if not job.outcome[0]:
                return self._try_connect()  # that one failed: a fresh one
        else:
            try:
                job = self.lane.submit(self._connect)
            except _Unreachable:  # an operation on the old connection still hangs: so does the lighthouse
                return False
            if not job.wait(_PROBE_S):
                self._probe = job
                return False
            if not job.outcome[0]:
                return False
        self.client, self.store = job.result()
        self.reconnects += 1
        self._lost_since, self._back = None, True
        log_replica(self.rid, f"rank {self.shard}: reconnected to the lighthouse (quorum {self.qid} continues)")
        return True

    def _connect(self):
        """Runs on the lane: a new client of the lighthouse and the job's re-registration there."""
        import torch.distributed as dist
        host, port = self.address.rsplit(":", 1)
        # a bare connection first: refused at once, without TCPStore's retries (and their log lines)
        socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout).close()
        client = connect_store(self.address, self.timeout)
        store = dist.PrefixStore(self.prefix, client)
        # Re-register: the last decision taken at the lighthouse this rank followed first (a rank that is still
        # waiting for that decision must find it, not decide anew; a kept one is not registered: the lighthouse
        # holds only its own), then that the job runs and is alive; the posts follow.
        last = self._last
        if last is not None:
            store_compare_set(store, last[0], "", last[1])
        store_set(store, "started", b"1")
        store_set(store, "beat", str(time.time()).encode())
        return client, store
