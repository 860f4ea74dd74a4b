"""The quorum protocol in one process (parallel/ft/manager.py, parallel/ft/quorum.py): two replicas' managers on
threads, one TCPStore. Founding, a replica that does not post dropped at the timeout, a joiner admitted with
a new quorum id, a planned absence (debug.ft_absent) decided without waiting, and the quorum groups' sums.
A lighthouse that cannot be reached (behind a relay the test kills, hangs and starts again): the last quorum
kept, its bound, and a decision taken at the lighthouse winning over a kept one."""
from __future__ import annotations

import contextlib
import datetime
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from shardlab.parallel.ft import manager as ft_manager
from shardlab.parallel.ft.manager import FaultToleranceError, Manager, parse_absent
from shardlab.parallel.ft.quorum import quorum_all_reduce

TIMEOUT_S = 0.5


def _manager(rid: int, port: int, absent: str = "", timeout: float = TIMEOUT_S, join_timeout: float = 20,
             replicas: int = 2) -> Manager:
    pcfg = SimpleNamespace(replica_id=rid, replicas=replicas, ft_store=f"127.0.0.1:{port}", ft_job="unit",
                           ft_timeout=timeout, ft_join_timeout=join_timeout, ft_job_dir="")
    m = Manager(pcfg, 0, 1, absent)
    m.connect()
    return m


def _both(f0, f1, t=30.0):
    """f0() and f1() on two threads (two managers waiting for each other); both results."""
    return tuple(_run_all(f0, f1, t=t))


def test_quorums_drop_admit_and_plan():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    m0, m1 = _manager(0, server.port, "1@3-3"), _manager(1, server.port, "1@3-3")

    d0, d1 = _both(lambda: m0.quorum(0, 0, founding=True), lambda: m1.quorum(0, 0, founding=True))
    assert d0 == d1 and d0["participants"] == [0, 1] and d0["qid"] == 1

    def sum_over(m, value):  # the quorum group sums in place
        t = torch.full((3,), float(value))
        quorum_all_reduce(t, m.group)
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

    # debug.ft_absent=1@3-3: replica 1 sits out step 3, decided without waiting for it. The timeout is made
    # long for this quorum so that "did not wait for it" is told apart from a slow, loaded machine (half of it)
    m0.timeout = 20.0
    t0 = time.monotonic()
    d = m0.quorum(3, 0)
    assert time.monotonic() - t0 < m0.timeout / 2 and d["participants"] == [0]
    assert parse_absent("1@3-5") == (1, 3, 5) and parse_absent("") is None


# --- a lighthouse that cannot be reached -----------------------------------------------------------------
class Lighthouse:
    """A TCPStore behind a TCP relay on a fixed port, which a test can kill (connections reset, new ones
    refused), hang (connections accepted, nothing forwarded: a stopped or partitioned host) and start again on
    the same port in front of a new, empty store (a restarted lighthouse)."""

    def __init__(self):
        self.server = self._new_server()
        self.hung = threading.Event()
        self.port, self._listener, self._conns = None, None, []
        self.start()

    @staticmethod
    def _new_server():
        return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                             timeout=datetime.timedelta(seconds=30))

    def start(self, fresh: bool = False) -> None:
        if fresh:
            self.server = self._new_server()
        self.hung.clear()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port or 0))
        sock.listen(64)
        self.port, self._listener = sock.getsockname()[1], sock
        threading.Thread(target=self._accept, args=(sock, self.server.port), daemon=True).start()

    def _accept(self, sock, target: int) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return  # killed
            upstream = socket.create_connection(("127.0.0.1", target))
            self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while self.hung.is_set():  # a hung lighthouse: nothing goes through
                    time.sleep(0.01)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # stops listening now (close alone waits for accept)
        self._listener.close()
        for s in self._conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._conns = []


def _founded(lh: Lighthouse, run_dir=None, **kw):
    m0, m1 = _manager(0, lh.port, **kw), _manager(1, lh.port, **kw)
    m0.set_run_dir(run_dir)
    d0, d1 = _both(lambda: m0.quorum(0, 0, founding=True), lambda: m1.quorum(0, 0, founding=True))
    assert d0 == d1 and d0["qid"] == 1 and m0.group is not None
    return m0, m1


def _sum_over(m, value):
    t = torch.full((3,), float(value))
    quorum_all_reduce(t, m.group)
    return t.tolist()


def test_lighthouse_gone_keeps_the_quorum_and_a_restarted_one_takes_it_up(tmp_path):
    lh = Lighthouse()
    m0, m1 = _founded(lh, tmp_path)
    group = m0.group

    lh.kill()  # every key with it
    for step in (1, 2):  # both keep quorum 1: its group needs no lighthouse
        d0, d1 = _both(lambda: m0.quorum(step, 0), lambda: m1.quorum(step, 0))
        assert d0 == d1 and d0["kept"] and d0["qid"] == 1 and d0["participants"] == [0, 1]
        assert m0.group is group and _both(lambda: _sum_over(m0, 1), lambda: _sum_over(m1, 2)) == ([3.0] * 3,) * 2
    assert m0.kept == m1.kept == 2

    # Started again, empty, while replica 0 already kept step 3: replica 1 reaches it and its first quorum there
    # keeps the last one too, without waiting for replica 0's post; both train step 3 over quorum 1's group.
    d0 = m0.quorum(3, 0)
    lh.start(fresh=True)
    m1.timeout = 20.0  # long here, so that "without waiting" is told apart from a slow, loaded machine
    t0 = time.monotonic()
    d1 = m1.quorum(3, 0)
    assert time.monotonic() - t0 < m1.timeout / 2 and m1.reconnects == 1 and m1.kept == 2
    assert d0["kept"] and d1["kept"] and (d0["qid"], d0["participants"]) == (d1["qid"], d1["participants"])
    assert _both(lambda: _sum_over(m0, 1), lambda: _sum_over(m1, 2)) == ([3.0] * 3,) * 2

    for step in (4, 5):  # replica 0 reaches it too (its first quorum there keeps the last one); then as before
        d0, d1 = _both(lambda: m0.quorum(step, 0), lambda: m1.quorum(step, 0))
        assert d0 == d1 and d0["qid"] == 1 and m0.reconnects == 1 and m0.group is group
    assert not d0.get("kept") and m0.kept == 3
    rows = [json.loads(line) for line in (tmp_path / "quorum.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]  # one row per step: the kept ones say so
    assert [r.get("kept", False) for r in rows[:4]] == [False, True, True, True] and "kept" not in rows[5]
    assert all(r["participants"] == [0, 1] and r["qid"] == 1 for r in rows)


def test_a_hung_lighthouse_is_noticed_within_the_timeout_and_the_quorum_kept():
    lh = Lighthouse()
    m0, m1 = _founded(lh, timeout=1.0)
    lh.hung.set()  # answers nothing: TCPStore's own calls would wait forever
    t0 = time.monotonic()
    d0, d1 = _both(lambda: m0.quorum(1, 0), lambda: m1.quorum(1, 0))
    first = time.monotonic() - t0
    assert d0["kept"] and d1["kept"] and first < 1.0 + 2 * ft_manager._GRACE_S + 1.0, first
    # the request still hangs: kept at once, not after another timeout (made long here, so that "at once" is
    # told apart from a slow, loaded machine: under half of it)
    m0.timeout = m1.timeout = 20.0
    t0 = time.monotonic()
    d0, d1 = _both(lambda: m0.quorum(2, 0), lambda: m1.quorum(2, 0))
    assert d0["kept"] and d1["kept"] and time.monotonic() - t0 < m0.timeout / 2
    lh.hung.clear()  # answers again: once the hanging request has returned, the next quorum is decided there
    deadline = time.monotonic() + 10
    while not (m0.lane._current.done.is_set() and m1.lane._current.done.is_set()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    d0, d1 = _both(lambda: m0.quorum(3, 0), lambda: m1.quorum(3, 0))
    assert d0 == d1 and d0["qid"] == 1 and (m0.reconnects, m1.reconnects) == (1, 1)
    d0, d1 = _both(lambda: m0.quorum(4, 0), lambda: m1.quorum(4, 0))
    assert d0 == d1 and not d0.get("kept")


def test_keeping_ends_after_the_join_timeout():
    lh = Lighthouse()
    m0 = _manager(0, lh.port, join_timeout=2.0, replicas=1)
    assert m0.quorum(0, 0, founding=True)["participants"] == [0]
    lh.kill()
    assert m0.quorum(1, 0)["kept"]  # alone: kept too
    time.sleep(2.2)
    with pytest.raises(FaultToleranceError, match="unreachable for longer than parallel.ft_join_timeout=2 s"):
        m0.quorum(2, 0)


def test_a_decision_taken_at_the_lighthouse_wins_over_a_kept_quorum():
    """Replica 1 cannot reach the lighthouse (replica 0 can): it keeps step 1 while replica 0 decides it without
    it. Replica 1's collective over the kept group then fails; reaching the lighthouse for the retry, it finds
    step 1 decided otherwise and leaves (joins again) instead of deciding a quorum of its own."""
    lh = Lighthouse()
    m0, m1 = _founded(lh)
    m0.address = f"127.0.0.1:{lh.server.port}"  # replica 0 reaches the store behind the relay, which stays up
    m0.connect()
    lh.kill()
    d1 = m1.quorum(1, 0)
    assert d1["kept"] and d1["qid"] == 1
    d0 = m0.quorum(1, 0)  # replica 1 never posts: dropped at the timeout, replica 0 alone in quorum 2
    assert d0["participants"] == [0] and d0["qid"] == 2 and "1" in d0["gone"]
    with pytest.raises(Exception):  # noqa: B017 - gloo: the peer left the group
        _sum_over(m1, 2)
    m1.broken()
    lh.start()  # the same store: the relay is back
    d1 = m1.quorum(1, 1)
    assert d1["participants"] == [] and "decided at the lighthouse as quorum 2 of [0]" in d1["superseded"]
    jobkeys = dist.PrefixStore("unit/e0", lh.server)

    def quorum_once_asked():
        while not jobkeys.check(["join/1/0"]):
            time.sleep(0.01)
        return m0.quorum(2, 0)
    d0, d1 = _both(quorum_once_asked, m1.join)  # joins again, admitted by replica 0's next quorum
    assert d0 == d1 and d0["participants"] == [0, 1] and d0["qid"] == 3 and list(d0["joiners"]) == ["1"]


def test_a_retry_of_a_step_another_replica_completed_joins_again():
    """Rule 2: replica 0 completed step 1 and quorums for step 2; replica 1's retry of step 1 (its side of the
    collective failed) finds it there and joins again rather than deciding step 1 alone."""
    lh = Lighthouse()
    m0, m1 = _founded(lh)
    d0, d1 = _both(lambda: m0.quorum(1, 0), lambda: m1.quorum(1, 0))
    assert d0 == d1 and d0["qid"] == 1
    waiting = threading.Thread(target=lambda: m0.quorum(2, 0), daemon=True)  # posts at/0/0 = 2, waits for 1
    waiting.start()
    jobkeys, deadline = dist.PrefixStore("unit/e0", lh.server), time.monotonic() + 10
    while not (jobkeys.check(["at/0/0"]) and jobkeys.get("at/0/0") == b"2"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    m1.broken()
    d1 = m1.quorum(1, 1)
    assert d1["participants"] == [] and d1["superseded"] == "replica 0 is at step 2 already"
    waiting.join(timeout=10)
    assert not waiting.is_alive()


class _ReplicaMin:
    """The MIN over a replica's ranks, for ranks on threads (every_step.py does it over the replica's own job)."""

    def __init__(self, n: int):
        self.barrier, self.values = threading.Barrier(n, timeout=10), []

    def __call__(self, values):
        self.values.append(list(values))
        self.barrier.wait()
        out = [min(v) for v in zip(*self.values)]
        if self.barrier.wait() == 0:
            self.values.clear()
        self.barrier.wait()
        return out


def test_the_ranks_of_a_replica_keep_together():
    """Rank 0 of a replica of two ranks loses the lighthouse, rank 1 does not: both keep (the vote), rather than
    rank 1 waiting at the lighthouse for a post of rank 0 that never comes while rank 0 trains on."""
    lh = Lighthouse()
    agree = _ReplicaMin(2)

    def rank(k, port):
        pcfg = SimpleNamespace(replica_id=0, replicas=1, ft_store=f"127.0.0.1:{port}", ft_job="unit",
                               ft_timeout=TIMEOUT_S, ft_join_timeout=20, ft_job_dir="")
        m = Manager(pcfg, k, 2, agree=agree)
        m.connect()
        return m
    r0, r1 = rank(0, lh.port), rank(1, lh.server.port)  # rank 1 reaches the store behind the relay
    d0, d1 = _both(lambda: r0.quorum(0, 0, founding=True), lambda: r1.quorum(0, 0, founding=True))
    assert d0 == d1 and d0["participants"] == [0]
    lh.kill()
    d0, d1 = _both(lambda: r0.quorum(1, 0), lambda: r1.quorum(1, 0), t=10)
    assert d0 == d1 and d0["kept"] and (r0.kept, r1.kept) == (1, 1)
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

    manager = _shard_managers(server, "stale")
    r0 = [manager(0, 0), manager(0, 1)]
    old = [manager(1, 0), manager(1, 1)]
    founded = _run_all(*(lambda m=m: m.quorum(0, 0, founding=True) for m in r0 + old))
    assert all(d["participants"] == [0, 1] for d in founded)

    # replica 1 dies; its rank 1 had not deleted its request of an earlier join (a killed incarnation's key)
    jobkeys = dist.PrefixStore("stale/e0", server)
    jobkeys.set("join/1/1", json.dumps({"inc": old[1].incarnation, "req": "earlier"}))
    share = _Share(2)  # the new incarnation's own group: its ranks share rank 0's admission
    new0 = manager(1, 0, share.of(0))
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
    new1 = manager(1, 1, share.of(1))
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


class _Share:
    """`Manager(share=...)` for the ranks of one replica on threads: rank 0's object on every rank (what
    comm.broadcast_object does over the replica's own group)."""

    def __init__(self, n: int):
        self.barrier, self.box = threading.Barrier(n, timeout=60), None

    def of(self, shard: int):
        def share(obj):
            if shard == 0:
                self.box = obj
            self.barrier.wait()
            out = self.box
            self.barrier.wait()
            return out
        return share


def _shard_managers(server, job: str, timeout: float = TIMEOUT_S):
    """manager(rid, shard, share=None): rank `shard` of a replica of two ranks, connected to `server`."""
    def manager(rid, shard, share=None):
        pcfg = SimpleNamespace(replica_id=rid, replicas=2, ft_store=f"127.0.0.1:{server.port}", ft_job=job,
                               ft_timeout=timeout, ft_join_timeout=20, ft_job_dir="")
        m = Manager(pcfg, shard, 2, share=share)
        m.connect()
        return m
    return manager


def test_an_admission_told_to_one_rank_of_a_joiner_does_not_split_it():
    """Replicas of two ranks; replica 1 restarted asks to join on both ranks. The quorum that admits it tells
    its rank 1 only (replica 0's rank 0 did not tell: it lost the lighthouse, or kept its last quorum, between
    the decision and telling). The joiner's ranks follow one decision, its rank 0's: neither leaves for that
    admission (rank 1 alone would heal and wait inside its replica for a rank 0 that waits for an admission
    forever); the groups of that quorum fail on replica 0, and the next quorum admits the whole joiner."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    manager = _shard_managers(server, "split", timeout=2.0)
    r0 = [manager(0, 0), manager(0, 1)]
    old = [manager(1, 0), manager(1, 1)]
    _run_all(*(lambda m=m: m.quorum(0, 0, founding=True) for m in r0 + old))

    share = _Share(2)
    new = [manager(1, 0, share.of(0)), manager(1, 1, share.of(1))]
    joined = {}

    def join(k):
        joined[k] = new[k].join("again")
    threads = [threading.Thread(target=join, args=(k,), daemon=True) for k in (0, 1)]
    for th in threads:
        th.start()
    jobkeys = dist.PrefixStore("split/e0", server)
    while not all(jobkeys.check([f"join/1/{k}"]) for k in (0, 1)):
        time.sleep(0.01)

    incs = {"0": new[0].incarnation, "1": new[1].incarnation}  # the processes asking
    r0[0]._admit = lambda *args: None  # the half-told admission: replica 0's rank 0 does not tell
    d = _run_all(lambda: r0[0].quorum(1, 0), lambda: r0[1].quorum(1, 0))
    assert all(x["joiners"] == {"1": incs} for x in d), d
    assert jobkeys.check(["admit/1/1"]) and not jobkeys.check(["admit/1/0"])
    time.sleep(1.0)  # time enough for a rank that took its own admission to leave
    assert not joined and all(th.is_alive() for th in threads), joined
    assert all(jobkeys.check([f"join/1/{k}"]) for k in (0, 1))  # still one whole request

    del r0[0]._admit  # the next quorum tells both ranks: the whole joiner is admitted, to one decision
    d0, d1 = _run_all(lambda: r0[0].quorum(2, 0), lambda: r0[1].quorum(2, 0))
    for th in threads:
        th.join(timeout=30)
    assert not any(th.is_alive() for th in threads)
    assert d0 == d1 == joined[0] == joined[1] and d0["step"] == 2 and d0["joiners"] == {"1": incs}
    assert not any(jobkeys.check([f"join/1/{k}"]) for k in (0, 1))  # admitted: not a request any more
    for k in (0, 1):  # the groups of that quorum, shard by shard
        assert _both(lambda: _sum_over(r0[k], 1), lambda: _sum_over(new[k], 2)) == ([3.0] * 3, [3.0] * 3)


class _WithdrawnAfterALook:
    """A job's store on which every join key is deleted right after its first look (check, get or peek): the
    admitted joiner withdrawing its request while a proposer, which has not yet seen the decision, reads it."""

    def __init__(self, store):
        self._store, self._seen = store, set()

    def __getattr__(self, name):
        fn = getattr(self._store, name)

        def call(*args, **kw):
            out = fn(*args, **kw)
            keys = args[0] if name == "check" else [args[0]] if args and isinstance(args[0], str) else []
            for key in keys:
                if key.startswith("join/") and key not in self._seen:
                    self._seen.add(key)
                    self._store.delete_key(key)
            return out
        return call


def test_a_join_request_withdrawn_while_a_proposer_reads_it_does_not_stall_the_proposer():
    """An admitted joiner deletes its request keys; a member's rank still proposing (it looked for the decision a
    moment before it was taken) may be between its look at a key and its read. A read of a deleted key waits the
    store's whole timeout: the rank would take the lighthouse for lost, and leave its replica's other rank (which
    follows the decision) alone in the heal. The request is read without waiting: whole, or absent."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    manager = _shard_managers(server, "withdrawn", timeout=2.0)
    m = manager(0, 1)
    jobkeys = dist.PrefixStore("withdrawn/e0", server)
    for k in (0, 1):
        jobkeys.set(f"join/1/{k}", json.dumps({"inc": f"p{k}", "req": "r"}))
    m.store = _WithdrawnAfterALook(m.store)
    assert m._join_requests() == {1: {"0": "p0", "1": "p1"}}  # read at once, whole
    assert not any(jobkeys.check([f"join/1/{k}"]) for k in (0, 1))  # withdrawn meanwhile
    assert m._join_requests() == {}  # and then absent, without waiting


def test_a_rank_dropped_from_a_retry_takes_its_replica_with_it():
    """A replica split at attempt 0 of a step: its rank 0 followed the lighthouse's decision, its rank 1 kept
    another quorum (it lost the lighthouse inside that quorum). The step's collective failed and the replica
    retries: rank 1 finds the step decided otherwise than it followed and is dropped before it posts; rank 0,
    which waits for its own replica's posts, learns it from rank 1's mark and leaves too, so both vote and
    join again together (rank 0 waited for rank 1's post forever, while rank 1 waited for rank 0 in the vote)."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))

    def manager(rid, shard, agree):
        pcfg = SimpleNamespace(replica_id=rid, replicas=2, ft_store=f"127.0.0.1:{server.port}", ft_job="split2",
                               ft_timeout=TIMEOUT_S, ft_join_timeout=20, ft_job_dir="")
        m = Manager(pcfg, shard, 2, agree=agree)
        m.connect()
        return m
    a0, a1 = _ReplicaMin(2), _ReplicaMin(2)
    r0, r1 = [manager(0, k, a0) for k in (0, 1)], [manager(1, k, a1) for k in (0, 1)]
    _run_all(*(lambda m=m: m.quorum(0, 0, founding=True) for m in r0 + r1))
    d = _run_all(*(lambda m=m: m.quorum(1, 0) for m in r0 + r1))
    assert all(x["participants"] == [0, 1] for x in d), d
    r0[1]._followed[(1, 0)] = (r0[1].qid, [0])  # rank 1 kept quorum [0] instead (the split)
    for m in r0:
        m.broken()
    d0, d1 = _run_all(lambda: r0[0].quorum(1, 1), lambda: r0[1].quorum(1, 1), t=15)  # replica 1 is gone
    assert "not the quorum this replica followed" in d1["superseded"], d1
    assert d0["superseded"] == "another rank of this replica left the retry" and d0["participants"] == [], d0
