"""The quorum protocol in one process (parallel/dp/ft_manager.py, comm_quorum.py): two replicas' managers on
threads, one TCPStore. Founding, a replica that does not post dropped at the timeout, a joiner admitted with
a new quorum id, a planned absence (debug.ft_absent) decided without waiting, and the quorum groups' sums."""
from __future__ import annotations

import datetime
import json
import threading
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist

from shardlab import comm
from shardlab.parallel.dp.ft_manager import Manager, parse_absent

TIMEOUT_S = 0.5


def _manager(rid: int, port: int, absent: str = "") -> Manager:
    pcfg = SimpleNamespace(replica_id=rid, replicas=2, ft_store=f"127.0.0.1:{port}", ft_job="unit",
                           ft_timeout=TIMEOUT_S, ft_join_timeout=20, ft_job_dir="")
    m = Manager(pcfg, 0, 1, absent)
    m.connect()
    return m


def _both(f0, f1, t=30.0):
    out, errors = {}, []

    def run(i, f):
        try:
            out[i] = f()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, f), daemon=True) for i, f in enumerate((f0, f1))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=t)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads), "a manager is still waiting"
    return out[0], out[1]


def test_quorums_drop_admit_and_plan():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    m0, m1 = _manager(0, server.port, "1@3-3"), _manager(1, server.port, "1@3-3")

    d0, d1 = _both(lambda: m0.quorum(0, 0, founding=True), lambda: m1.quorum(0, 0, founding=True))
    assert d0 == d1 and d0["participants"] == [0, 1] and d0["qid"] == 1

    def sum_over(m, value):  # the quorum group sums in place
        t = torch.full((3,), float(value))
        comm.quorum_all_reduce(t, m.group)
        return t.tolist()
    assert _both(lambda: sum_over(m0, 1), lambda: sum_over(m1, 2)) == ([3.0] * 3, [3.0] * 3)

    t0 = time.monotonic()
    d = m0.quorum(1, 0)  # replica 1 posts nothing: dropped once the timeout passed
    assert time.monotonic() - t0 >= TIMEOUT_S and d["members"] == [0] and "1" in d["gone"] and d["qid"] == 2
    assert m0.group is None  # alone: no group

    jobkeys = dist.PrefixStore("unit/e0", server)

    def quorum_once_asked():  # the joiner is admitted by the first quorum that sees its request
        while not jobkeys.check(["join/1/0"]):
            time.sleep(0.01)
        return m0.quorum(2, 0)
    d0, d1 = _both(quorum_once_asked, m1.join)  # admitted: a new group, a new quorum id
    assert d0 == d1 and d0["participants"] == [0, 1] and d0["joiners"] and d0["qid"] == 3
    assert _both(lambda: sum_over(m0, 5), lambda: sum_over(m1, 0)) == ([5.0] * 3, [5.0] * 3)

    t0 = time.monotonic()
    d = m0.quorum(3, 0)  # debug.ft_absent=1@3-3: replica 1 sits out step 3, decided without waiting for it
    assert time.monotonic() - t0 < TIMEOUT_S and d["participants"] == [0]
    assert parse_absent("1@3-5") == (1, 3, 5) and parse_absent("") is None


def _run_all(*fns, t=30.0):
    out, errors = [None] * len(fns), []

    def run(i, f):
        try:
            out[i] = f()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, f), daemon=True) for i, f in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=t)
    assert not errors, errors
    assert not any(th.is_alive() for th in threads), "a manager is still waiting"
    return out


def test_a_join_key_left_by_a_killed_incarnation_does_not_complete_the_next_request():
    """Replicas of two ranks. Replica 1 is killed right after an admission, before its rank 1 deleted its join
    key; its next incarnation asks to join with a request id of its own. Its rank 0's request and the stale key
    of rank 1 are not a request of the whole replica (admitting it would wait for a process that is gone); once
    the new rank 1 asked too, the replica is admitted with the new processes."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))

    def manager(rid, shard):
        pcfg = SimpleNamespace(replica_id=rid, replicas=2, ft_store=f"127.0.0.1:{server.port}", ft_job="stale",
                               ft_timeout=TIMEOUT_S, ft_join_timeout=20, ft_job_dir="")
        m = Manager(pcfg, shard, 2)
        m.connect()
        return m

    r0 = [manager(0, 0), manager(0, 1)]
    old = [manager(1, 0), manager(1, 1)]
    founded = _run_all(*(lambda m=m: m.quorum(0, 0, founding=True) for m in r0 + old))
    assert all(d["participants"] == [0, 1] for d in founded)

    # replica 1 dies; its rank 1 had not deleted its request of an earlier join (a killed incarnation's key)
    jobkeys = dist.PrefixStore("stale/e0", server)
    jobkeys.set("join/1/1", json.dumps({"inc": old[1].incarnation, "req": "earlier"}))
    new0 = manager(1, 0)
    joined = {}

    def join0():
        joined[0] = new0.join("this-one")
        return joined[0]
    th = threading.Thread(target=join0, daemon=True)
    th.start()
    while not jobkeys.check(["join/1/0"]):
        time.sleep(0.01)
    # replica 0 quorums: replica 1 is not a whole request yet, so it is dropped at the timeout, not admitted
    d = _run_all(lambda: r0[0].quorum(1, 0), lambda: r0[1].quorum(1, 0))
    assert all(x["participants"] == [0] and x["joiners"] == {} for x in d), d
    # the new rank 1 asks: the whole replica is admitted at the next quorum, with the new processes
    new1 = manager(1, 1)
    incs = {"0": new0.incarnation, "1": new1.incarnation}

    def quorum_once_asked(m):
        def f():
            while not (jobkeys.check(["join/1/1"]) and b"this-one" in jobkeys.get("join/1/1")):
                time.sleep(0.01)
            return m.quorum(2, 0)
        return f
    d0, d1, j1 = _run_all(quorum_once_asked(r0[0]), quorum_once_asked(r0[1]), lambda: new1.join("this-one"))
    th.join(timeout=30)
    assert not th.is_alive()
    assert d0 == d1 == j1 == joined[0] and d0["joiners"] == {"1": incs} and d0["participants"] == [0, 1]
