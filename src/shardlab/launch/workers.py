"""A pool of W gloo ranks that runs functions on every rank (the bench suites and the tests use it).

    with WorkerPool(2) as pool:
        results = pool.run(fn, arg)   # fn(arg) on ranks 0..W-1, results in rank order

`fn` must be a module-level function (it is pickled by reference). A failure on any rank, or a
timeout, tears the pool down (a rank may be stuck in a collective) and re-raises with the remote
traceback; the next `run` starts a fresh pool. Nothing can hang longer than `timeout`.

A pool may live long (the tests share one per world size for the whole session), so a rank cleans up
after each function: a hang watchdog the function left running is stopped (idle, the rank makes no
progress, and the watchdog would end it `doctor.hang_timeout_s` later). A pool whose rank died while idle
anyway is replaced at the next `run`, with one line on stderr, instead of failing that run.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time
import traceback

from shardlab.launch.launcher import free_port


def _worker(rank: int, world: int, port: int, tasks, results, parent: int) -> None:
    # a pool's rank must not outlive the process that owns the pool (a killed pytest, a bench cut short)
    from shardlab.launch.orphans import die_with_parent

    die_with_parent(parent)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch

    torch.set_num_threads(1)
    from shardlab import comm

    comm.init("gloo")
    while True:
        task = tasks.get()
        if task is None:
            break
        fn, args, kwargs = task
        try:
            outcome = (rank, True, fn(*args, **kwargs))
        except BaseException:  # noqa: BLE001 - shipped to the parent with its traceback
            outcome = (rank, False, f"rank {rank}:\n{traceback.format_exc()}")
        _after_task()
        results.put(outcome)
    comm.shutdown()


def _after_task() -> None:
    """What one function leaves behind must not end the idle rank: stop its hang watchdogs (a trainer
    built and not closed keeps one). Imports nothing the function did not import itself."""
    watchdog = sys.modules.get("shardlab.doctor.watchdog")
    if watchdog is not None:
        watchdog.stop_all()


class WorkerPool:
    def __init__(self, world_size: int, timeout: float = 120.0):
        self.world_size, self.timeout = world_size, timeout
        self.procs: list = []

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        port = free_port()
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(self.world_size)]
        self.procs = [ctx.Process(target=_worker, daemon=True,
                                  args=(r, self.world_size, port, self.tasks[r], self.results, os.getpid()))
                      for r in range(self.world_size)]
        for p in self.procs:
            p.start()

    def dead(self) -> dict[int, int | None]:
        """{rank: exit code} of the ranks no longer running."""
        return {r: p.exitcode for r, p in enumerate(self.procs) if not p.is_alive()}

    def run(self, fn, *args, timeout: float | None = None, **kwargs) -> list:
        if self.procs and self.dead():
            print(f"[WorkerPool] rank(s) of the {self.world_size}-rank pool ended while idle (exit codes "
                  f"{self.dead()}); starting a fresh pool", file=sys.stderr, flush=True)
            self.close(force=True)
        if not self.procs:
            self._start()
        for q in self.tasks:
            q.put((fn, args, kwargs))
        deadline = time.monotonic() + (timeout or self.timeout)
        out: dict[int, object] = {}
        errors = []
        while len(out) + len(errors) < self.world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(force=True)
                if errors:  # one rank failed, the others were left waiting for it: report the failure
                    raise AssertionError("\n".join(errors))
                raise TimeoutError(f"{fn.__name__} did not finish on all {self.world_size} ranks within "
                                   f"{timeout or self.timeout:.0f}s (finished: {sorted(out)})")
            try:
                rank, ok, value = self.results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = self.dead()
                if dead:
                    self.close(force=True)
                    raise RuntimeError(f"{fn.__name__}: rank(s) {sorted(dead)} died (exit codes {dead})") from None
                continue
            if ok:
                out[rank] = value
            else:
                errors.append(value)
                # The other ranks may now wait forever in a collective: give them a moment, then stop.
                deadline = min(deadline, time.monotonic() + 5)
        if errors:
            self.close(force=True)
            raise AssertionError("\n".join(errors))
        return [out[r] for r in range(self.world_size)]

    def close(self, force: bool = False) -> None:
        if not force:
            for q in self.tasks if self.procs else []:
                q.put(None)
            for p in self.procs:
                p.join(timeout=10)
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(force=any(exc))
