"""comm on subgroups at world 4 (a 2 x 2 mesh: dp_replicate x dp_shard): records carry their group and a
per-group sequence number, broadcast/scatter take the group's rank, point-to-point is recorded per
channel, and a rank missing from a subgroup's collective is named with that group. One pool for the
module; every run has a timeout and the hang is a late rank, not a lost one, so nothing can hang."""
import time
from pathlib import Path

import torch

from shardlab import comm
from shardlab.doctor import hang

# 2 x 2, dp_shard innermost: dp_shard groups [0, 1] and [2, 3]; dp_replicate groups [0, 2] and [1, 3]
_MESH = None


def _mesh():
    global _MESH
    if _MESH is None:
        from torch.distributed.device_mesh import init_device_mesh
        _MESH = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    return _MESH.get_group("dp_replicate"), _MESH.get_group("dp_shard")


def _mine(start: int) -> list[tuple]:
    return [(r.op, r.group, list(r.group_ranks), r.seq, r.peer, r.tag) for r in list(comm.RECORDER.ring)
            if r.order > start]


def _groups_and_seqs():
    rep, shard = _mesh()
    start = comm.RECORDER.order
    comm.all_reduce(torch.ones(2), group=shard, tag="a")
    comm.all_reduce(torch.ones(2), tag="b")
    comm.all_reduce(torch.ones(2), group=shard, tag="c")
    comm.all_gather(torch.empty(4), torch.ones(2), group=rep, tag="d")
    named = comm.new_group([0, 1, 2, 3], name="everyone")  # a registered name for a group of all ranks
    comm.barrier(named)
    return _mine(start)


def test_records_carry_group_members_and_a_per_group_sequence_number(pool4):
    out = pool4.run(_groups_and_seqs, timeout=60)
    shard = {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}
    rep = {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}
    for r, recs in enumerate(out):
        (op_a, g_a, m_a, s_a, _, _), (_, g_b, m_b, s_b, _, _), (_, _, _, s_c, _, _), (op_d, g_d, m_d, s_d, _, _), \
            (op_e, g_e, m_e, _, _, _) = recs
        assert (g_a, m_a) == ("dp_shard", shard[r]) and (g_b, m_b) == ("world", [0, 1, 2, 3])
        assert (g_d, m_d, op_d) == ("dp_replicate", rep[r], "all_gather")
        assert (g_e, m_e, op_e) == ("everyone", [0, 1, 2, 3], "barrier")
        # the n-th on its own group: dp_shard's second is #(first + 1) whatever the world did in between
        assert s_c == s_a + 1
    # the same collective has the same (group, members, seq) on every member
    assert out[0][0][3] == out[1][0][3] and out[2][0][3] == out[3][0][3]
    assert out[0][3][3] == out[2][3][3]


def _broadcast_scatter():
    rep, shard = _mesh()
    r = comm.rank()
    t = torch.tensor([float(r)])
    comm.broadcast(t, src=1, group=shard)  # the group's second member: global 1 in [0, 1], 3 in [2, 3]
    obj = comm.broadcast_object(f"from {r}", src=1, group=rep)  # global 2 in [0, 2], 3 in [1, 3]
    out = torch.zeros(1)
    chunks = [torch.tensor([100.0 * r + i]) for i in range(2)]
    comm.scatter(out, chunks, src=1, group=shard)
    return t.item(), obj, out.item()


def test_broadcast_and_scatter_on_a_subgroup_take_the_group_rank(pool4):
    out = pool4.run(_broadcast_scatter, timeout=60)
    assert [o[0] for o in out] == [1.0, 1.0, 3.0, 3.0]
    assert [o[1] for o in out] == ["from 2", "from 3", "from 2", "from 3"]
    # the source (the group's rank 1) sends chunk i to the group's rank i
    assert [o[2] for o in out] == [100.0, 101.0, 300.0, 301.0]


def _p2p():
    rep, _ = _mesh()  # [0, 2] and [1, 3]
    start = comm.RECORDER.order
    me, other = comm.rank(rep), 1 - comm.rank(rep)
    # a ring exchange (both directions at once) with batch_isend_irecv, then a plain send/recv and isend/irecv
    got = torch.zeros(3)
    handles = comm.batch_isend_irecv([comm.P2POp(comm.isend, torch.full((3,), float(comm.rank())), other, rep),
                                      comm.P2POp(comm.irecv, got, other, rep)])
    for h in handles:
        h.wait()
    plain, later = torch.zeros(2), torch.zeros(2)
    if me == 0:
        comm.send(torch.tensor([7.0, 8.0]), dst=1, group=rep, tag="act")
        comm.isend(torch.tensor([9.0, 9.0]), dst=1, group=rep, tag="act").wait()
    else:
        comm.recv(plain, src=0, group=rep, tag="act")
        comm.irecv(later, src=0, group=rep, tag="act").wait()
    recs = [(r.op, r.group, r.peer, r.seq, r.bytes, r.wire_bytes, r.state) for r in list(comm.RECORDER.ring)
            if r.order > start]
    return got.tolist(), plain.tolist(), later.tolist(), recs


def test_point_to_point_goes_through_comm_and_is_recorded_per_channel(pool4):
    out = pool4.run(_p2p, timeout=60)
    peer = {0: 2, 1: 3, 2: 0, 3: 1}
    for r, (got, plain, later, recs) in enumerate(out):
        assert got == [float(peer[r])] * 3
        assert all(rec[6] == "completed" and rec[1] == "dp_replicate" and rec[2] == peer[r] for rec in recs)
        send0, recv0 = recs[0][:6], recs[1][:6]
        assert send0[0] == "send" and send0[4:] == (12, 12) and recv0[0] == "recv" and recv0[4:] == (12, 0)
    # the n-th message sender -> receiver has the same number on both sides: channel 0 -> 2 carried 3 messages
    sender = [(op, seq) for op, _, _, seq, *_ in out[0][3] if op == "send"]
    receiver = [(op, seq) for op, _, _, seq, *_ in out[2][3] if op == "recv"]
    assert [s for _, s in sender] == [s for _, s in receiver] and len(sender) == 3
    assert out[2][1] == [7.0, 8.0] and out[2][2] == [9.0, 9.0]


def _subgroup_hang(run_dir):
    """Rank 3 is late for dp_shard [2, 3]'s third all-reduce (rank 2 waits in it); ranks 0 and 1 finish
    theirs and wait in the next world all-reduce. Every watchdog fires and dumps; rank 3 then joins,
    so everything completes."""
    from shardlab.doctor.watchdog import Watchdog
    rep, shard = _mesh()
    wd = Watchdog(Path(run_dir), comm.rank(), 4, timeout_s=1.0, exit_on_hang=False)
    try:
        comm.all_reduce(torch.ones(8), tag="warm-up")
        comm.all_reduce(torch.ones(8), group=shard, tag="warm-up")
        comm.all_reduce(torch.ones(8), group=rep, tag="warm-up")
        comm.all_reduce(torch.ones(8), group=shard, tag="warm-up")
        if comm.rank() == 3:
            comm.set_phase("data loading")
            deadline = time.monotonic() + 20
            while wd.fired is None and time.monotonic() < deadline:  # until its watchdog has dumped
                time.sleep(0.05)
            time.sleep(2.0)  # and the others' have too (they fire within a second of each other)
        comm.all_reduce(torch.ones(1000), group=shard, tag="grads")
        comm.all_reduce(torch.ones(4), tag="metrics")
    finally:
        wd.stop()
    last = {r.group: r.seq for r in list(comm.RECORDER.ring) if r.tag == "warm-up"}
    return wd.fired, wd.where, last["dp_shard"], last["world"]


def test_a_rank_missing_from_a_subgroup_collective_is_named_with_the_group(pool4, tmp_path):
    fired = pool4.run(_subgroup_hang, str(tmp_path), timeout=90)
    assert all(f and "no progress" in f for f, *_ in fired), fired
    shard, world = fired[2][2] + 1, fired[0][3] + 1  # the numbers the stuck collectives got
    res = hang.report(tmp_path)
    assert res["kind"] == "hang" and res["group"] == "dp_shard" and res["group_ranks"] == [2, 3], res["lines"]
    assert res["absent"] == [3] and res["waiting"] == [2]
    assert res["seq"] == shard and res["lines"][0].startswith(
        f"rank 3 never joined all_reduce #{shard} of dp_shard [2, 3] (grads, 4.0 kB); its last completed op was "
        f"all_reduce #{shard - 1} of dp_shard [2, 3]"), res["lines"]
    assert "it was in: data loading" in res["lines"][0]
    # the other stuck group is a consequence and is said after the cause
    assert any(line.startswith(f"also stuck: all_reduce #{world} of world") and "[2, 3] never joined" in line
               for line in res["lines"]), res["lines"]
    # one numbering: rank 2's watchdog named the collective the report names
    assert fired[2][1] == f"blocked in {res['op']}"
    assert fired[0][1].startswith(f"blocked in all_reduce #{world} of world (metrics")
