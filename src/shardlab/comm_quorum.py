"""Process groups rebuilt for each quorum of a fault-tolerant job (parallel/dp/ft_manager.py, docs/fault_tolerance.md).

Kept beside comm.py, which re-exports every name here (`comm.quorum_group` & co.). A replica is its own
torchrun job, so the replicas share no default process group: the cross-replica group of quorum q is a
`ProcessGroupGloo` built directly over the lighthouse's TCPStore, under a prefix that names the job, the
quorum and the shard position (rank k of every replica: HSDP's dp_replicate group for shard k). A new quorum
gets a new prefix, so a group never meets a member of an older one (torchft's reconfigurable group).

Gloo's own timeout bounds every operation: a dead member closes its sockets (the peers fail at once), a
stopped one lets the timeout expire (`parallel.ft_timeout`). Either way the caller gets an exception and
abandons the group. The records carry the pseudo-group name (the prefix: "<job>/q<q>/shard<k>") and the
members' replica ids.
"""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from shardlab.comm_record import RECORDER, SKIP_FILES

SKIP_FILES.add(__file__)  # a record's stack starts at its caller


class QuorumGroup:
    """One quorum's group for one shard position: `pg` (gloo), this member's position, the members."""

    def __init__(self, store, prefix: str, position: int, members: list[int], timeout_s: float):
        self.name, self.position, self.members = prefix, position, tuple(members)
        self.size = len(members)
        # The constructor meets the other members through the store (blocks until all came, or the timeout)
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), position, self.size,
                                        datetime.timedelta(seconds=timeout_s))

    def _record(self, op: str, t: torch.Tensor, wire: int, tag: str):
        nbytes = t.numel() * t.element_size()
        return RECORDER.add(op, nbytes, wire, t.dtype, t.shape, (self.name, self.members), tag)


def quorum_group(store, prefix: str, position: int, members: list[int], timeout_s: float) -> QuorumGroup:
    """The group of quorum members `members` (replica ids, in group order) under `prefix`; this process is
    `members[position]`. Raises when a member does not come within `timeout_s`."""
    return QuorumGroup(store, prefix, position, members, timeout_s)


def quorum_all_reduce(t: torch.Tensor, group: QuorumGroup, tag: str = "") -> None:
    """Sum `t` in place over the quorum's members (ring bytes as comm.all_reduce counts them)."""
    n = group.size
    rec = group._record("all_reduce", t, int(t.numel() * t.element_size() * 2 * (n - 1) / n), tag)
    if n > 1:
        group.pg.allreduce([t]).wait()
    RECORDER.done(rec)


def quorum_broadcast(t: torch.Tensor, src: int, group: QuorumGroup, tag: str = "") -> None:
    """`t` from member position `src` to every member, in place."""
    rec = group._record("broadcast", t, t.numel() * t.element_size(), tag)
    if group.size > 1:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = src, 0
        group.pg.broadcast([t], opts).wait()
    RECORDER.done(rec)
