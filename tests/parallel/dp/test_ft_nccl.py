"""The quorum groups on NCCL (parallel/ft/quorum.py), checked without a GPU: torch's ProcessGroupNCCL is replaced by a
fake that records what it is given and whose collectives complete, fail or never complete. What is checked:
the backend follows the replica's device and the backend settings; the group is built with the timeout, a
non-blocking communicator bound to the device, NCCL's error handling set to abort-only for its construction
alone, and the store's wait bounded by the group's timeout; a failed, a never-completing and a failed-to-launch
collective each abort the communicator and raise; the manager aborts an abandoned group; the heal's RNG state
carries the CUDA generator's. (A real NCCL communicator has not run here: docs/cuda.md.)"""
from __future__ import annotations

import datetime
import os
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from shardlab.parallel.ft.quorum import (ERROR_HANDLING_ENV, NONBLOCKING_TIMEOUT_ENV, quorum_all_reduce, quorum_backend,
                                         quorum_broadcast, quorum_group)
from shardlab.parallel.ft.manager import Manager


class FakeWork:
    def __init__(self, outcome: str):
        self.outcome, self.waited = outcome, 0

    def is_completed(self) -> bool:
        return self.outcome != "hang"  # an error completes a work too

    def wait(self, timeout=None) -> bool:
        self.waited += 1
        if self.outcome == "error":
            raise RuntimeError("NCCL error: remote process exited or there was a network error")
        return True


class FakeOptions:
    def __init__(self):
        self._timeout = datetime.timedelta(minutes=10)
        self.config = SimpleNamespace(blocking=1)


class FakeNCCL:
    """Stands in for torch.distributed.ProcessGroupNCCL: records its construction, runs nothing."""
    Options = FakeOptions
    made: list = []
    outcome = "ok"  # of the next collectives: ok | error | hang | raise (the launch itself fails)
    fail_connect = False

    def __init__(self, store, rank, size, opts):
        self.rank, self.size, self.opts = rank, size, opts
        self.env = os.environ.get(ERROR_HANDLING_ENV)  # what torch's constructor would read
        self.store_timeout = store.timeout
        self.device, self.aborts, self.works = None, 0, []
        FakeNCCL.made.append(self)

    def eager_connect_single_device(self, device):
        if FakeNCCL.fail_connect:
            raise RuntimeError("NCCL error: ncclCommInitRankConfig timed out")
        self.device = device

    def _work(self):
        if FakeNCCL.outcome == "raise":
            raise RuntimeError("NCCL communicator was aborted")
        self.works.append(FakeWork(FakeNCCL.outcome))
        return self.works[-1]

    def allreduce(self, tensors, opts=None):
        return self._work()

    def broadcast(self, tensors, opts=None):
        return self._work()

    def abort(self):
        self.aborts += 1


@pytest.fixture
def nccl(monkeypatch):
    monkeypatch.setattr(dist, "ProcessGroupNCCL", FakeNCCL, raising=False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    for name in (ERROR_HANDLING_ENV, NONBLOCKING_TIMEOUT_ENV, "SHARDLAB_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    FakeNCCL.made, FakeNCCL.outcome, FakeNCCL.fail_connect = [], "ok", False
    return FakeNCCL


@pytest.fixture
def store():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=30))
    return dist.PrefixStore("unit/e0", server)


def _group(store, timeout_s=4.0, device="cuda", backend="auto"):
    return quorum_group(store, "q3/shard1", 1, [0, 2], timeout_s, device=device, backend=backend)


def test_the_backend_follows_the_device_and_the_settings(nccl, monkeypatch):
    assert quorum_backend(torch.device("cpu")) == "gloo"
    assert quorum_backend(None) == "gloo"
    assert quorum_backend(torch.device("cuda", 0)) == "nccl"
    assert quorum_backend("cuda", "gloo") == "gloo"  # parallel.backend=gloo: gloo with CUDA tensors
    monkeypatch.setenv("SHARDLAB_BACKEND", "gloo-staged")
    assert quorum_backend("cuda") == "gloo"  # what `auto` means for the process
    assert quorum_backend("cuda", "nccl") == "nccl"  # parallel.backend itself wins
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    assert quorum_backend("cuda", "nccl") == "gloo"


def test_the_nccl_group_is_built_to_be_aborted(nccl, store, monkeypatch):
    monkeypatch.setenv(ERROR_HANDLING_ENV, "3")  # the user's choice for the replica's own groups
    g = _group(store, timeout_s=4.0)
    (pg,) = nccl.made
    assert g.backend == "nccl" and g.pg is pg and (pg.rank, pg.size) == (1, 2)
    assert pg.device == torch.device("cuda")  # the communicator is bound to the replica's device at once
    assert pg.opts.config.blocking == 0  # a non-blocking init: abortable while a member never comes
    assert pg.opts._timeout == datetime.timedelta(seconds=8)  # torch's watchdog: the backstop behind the host
    assert pg.env == "2"  # abort-only while this group was constructed (torch reads it then) ...
    assert os.environ[ERROR_HANDLING_ENV] == "3"  # ... and the process's own setting after
    assert pg.store_timeout == datetime.timedelta(seconds=4)  # NCCL's unique id: waited for ft_timeout at most
    assert store.timeout == datetime.timedelta(seconds=30)  # the lighthouse client's own timeout is back
    assert os.environ[NONBLOCKING_TIMEOUT_ENV] == "4"


def test_a_collective_completes_without_an_abort(nccl, store):
    g = _group(store)
    t = torch.ones(3)
    quorum_all_reduce(t, g, tag="ft gradient")
    quorum_broadcast(t, 0, g, tag="ft heal")
    assert [w.waited for w in g.pg.works] == [1, 1] and g.pg.aborts == 0 and not g.aborted


@pytest.mark.parametrize("outcome", ["error", "raise"])
def test_a_failed_collective_aborts_the_communicator_and_raises(nccl, store, outcome):
    g = _group(store)
    nccl.outcome = outcome
    with pytest.raises(RuntimeError, match="NCCL"):
        quorum_all_reduce(torch.ones(3), g)
    assert g.pg.aborts == 1 and g.aborted
    nccl.outcome = "ok"
    with pytest.raises(RuntimeError, match="aborted"):  # abandoned: never used again
        quorum_broadcast(torch.ones(3), 0, g)
    g.abort()
    assert g.pg.aborts == 1


def test_a_collective_that_never_completes_times_out_on_the_host(nccl, store):
    g = _group(store, timeout_s=0.3)
    nccl.outcome = "hang"  # a stopped or dead peer: NCCL's kernel waits, the host must not
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="parallel.ft_timeout"):
        quorum_broadcast(torch.ones(3), 0, g)
    assert 0.3 <= time.monotonic() - t0 < 5.0
    assert g.pg.aborts == 1  # the communicator aborted: its pending kernels return


def test_a_communicator_that_cannot_connect_is_aborted(nccl, store):
    nccl.fail_connect = True
    with pytest.raises(RuntimeError, match="ncclCommInitRankConfig"):
        _group(store)
    (pg,) = nccl.made
    assert pg.aborts == 1
    assert store.timeout == datetime.timedelta(seconds=30) and ERROR_HANDLING_ENV not in os.environ


def test_the_manager_aborts_the_groups_it_abandons(nccl, store):
    server = store  # a PrefixStore of the test's TCPStore: the manager's own keys go under "<job>/e0"
    pcfg = SimpleNamespace(replica_id=0, replicas=2, ft_store="127.0.0.1:1", ft_job="unit", ft_timeout=4.0,
                           ft_join_timeout=20, ft_job_dir="", backend="auto")
    m = Manager(pcfg, 1, 2, device=torch.device("cuda", 0))
    m.store = server

    def decision(qid):
        return {"step": qid, "attempt": 0, "qid": qid, "members": [0, 1], "participants": [0, 1],
                "joiners": {}, "gone": {}}

    m._follow(decision(1))
    first = m.group
    assert first.backend == "nccl" and first.pg.device == torch.device("cuda", 0)
    m._follow(decision(2))  # a new quorum: a new communicator, the old one aborted
    assert first.pg.aborts == 1 and m.group is not first and m.group.pg.aborts == 0
    second = m.group
    m.broken()  # a failed step: the group is abandoned at once
    assert second.pg.aborts == 1 and m.group is None


def test_the_heal_carries_the_cuda_generator(monkeypatch):
    from shardlab.parallel.ft import every_step as ft_step

    cuda_state = {"now": torch.arange(16, dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": cuda_state["now"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda t, device="cuda": cuda_state.update(now=t.clone()))
    dev = torch.device("cuda", 0)
    sent = ft_step.rng_state(dev)  # the source's: host generator, then the device's
    host_n = torch.get_rng_state().numel()
    assert sent.dtype == torch.uint8 and sent.numel() == host_n + 16
    expected_host = torch.get_rng_state()
    torch.rand(5)  # the joiner's generators moved elsewhere
    cuda_state["now"] = torch.zeros(16, dtype=torch.uint8)
    ft_step.set_rng_state(sent, dev)
    assert torch.equal(torch.get_rng_state(), expected_host)
    assert torch.equal(cuda_state["now"], torch.arange(16, dtype=torch.uint8))
    cpu = ft_step.rng_state(torch.device("cpu"))  # on CPU: the host generator only, as before
    assert cpu.numel() == host_n
