"""The asynchronous parameter server (`parallel.sync=async`, docs/sync.md): who sends what, and when.

Rank 0 is the **server**: it holds the master parameters and the optimizer and only serves (it computes
no gradient). Ranks 1..W are **workers**: each pulls the parameters, computes the gradient of one global
batch and pushes it, without waiting for the other workers. The server applies gradients one at a time,
each as one optimizer step: a *step* is one applied gradient (of global_batch x seq_len tokens, as a
synchronous step), so the same number of steps consumes the same tokens as `every_step`.

Staleness bound, **bounded delay** (Li et al. 2014, "Scaling distributed machine learning with the
parameter server"; the per-update form of SSP, Ho et al. 2013). Work is handed out as tickets 0, 1, 2, ...:
ticket t is the global batch of step t, and its gradient is applied as step t. A gradient that arrives
before an earlier ticket's waits in the server (the server waits; nothing is dropped, so no token is
lost). Ticket t goes out, with the parameters of the current version u (u gradients applied), only once
u >= t - τ (`parallel.max_staleness`); until then the worker waits for its pull. Its gradient is applied
at version t, so its staleness t - u is at most τ. With τ = 0 the workers take turns (serial SGD), and
one worker with τ = 0 is `single` step for step. The server starts handing out tickets once every worker
has said hello, so the first τ + 1 tickets all go out at version 0 (staleness appears at once when
W > 1 and τ > 0).

Messages, all point to point through `comm` (recorded): worker -> server a header [ticket, version,
loss sum] (float64; ticket -1 is the worker's hello) then the flat fp32 gradient; server -> worker a
header [ticket, version, 0] then the flat fp32 parameters (ticket -1: stop). The server receives from any
worker (`comm.recv_any`, gloo). Per applied gradient: 4Ψ bytes pushed + 4Ψ pulled + two 24-byte headers;
per run, one hello and one stop header per worker.
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import torch

from shardlab import comm

SERVER = 0
HELLO = STOP = -1


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The trainable parameters once each (a tied weight once), in one fixed order on every rank."""
    seen, params = set(), []
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            params.append(p)
    return params


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def unflatten_into(flat: torch.Tensor, params: list[torch.Tensor]) -> None:
    offset = 0
    for p in params:
        p.data.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def _header(ticket: int, version: int, value: float = 0.0) -> torch.Tensor:
    return torch.tensor([ticket, version, value], dtype=torch.float64)


class Server:
    """Rank 0's loop. `apply(step, flat_grad, loss_sum, staleness, worker)` makes one optimizer step;
    `params()` is the current flat master parameters."""

    def __init__(self, numel: int, workers: int, max_staleness: int, steps: int):
        self.numel, self.workers, self.tau, self.steps = numel, workers, max_staleness, steps
        self.staleness: list[int] = []  # of every applied gradient, in step order

    def serve(self, apply: Callable, params: Callable[[], torch.Tensor], start: int = 0) -> None:
        version, ticket = start, start  # version = gradients applied so far
        waiting: deque[int] = deque()  # workers whose pull is held (or not yet answered)
        early: dict[int, tuple] = {}  # ticket -> (gradient, version computed on, loss, worker)
        hellos = 0
        head = torch.empty(3, dtype=torch.float64)
        while version < self.steps or hellos < self.workers:  # (a run resumed at its last step: hellos only)
            worker = comm.recv_any(head, tag="async header")
            t, v, loss = int(head[0]), int(head[1]), float(head[2])
            if t == HELLO:
                hellos += 1
            else:
                grad = torch.empty(self.numel)
                comm.recv(grad, worker, tag="async push")
                early[t] = (grad, v, loss, worker)
            waiting.append(worker)
            while version in early:  # apply in ticket order: ticket t is step t
                grad, v, loss, w = early.pop(version)
                self.staleness.append(version - v)
                apply(version, grad, loss, version - v, w)
                version += 1
            if hellos < self.workers:
                continue  # every worker present first: the same start whatever order they came up in
            flat = None
            while waiting and ticket < self.steps and version >= ticket - self.tau:
                flat = params() if flat is None else flat  # the same version for every pull of this pass
                w = waiting.popleft()
                comm.send(_header(ticket, version), w, tag="async header")
                comm.send(flat, w, tag="async pull")
                ticket += 1
        # every ticket applied: every worker has pushed its last gradient and waits for a pull
        assert len(waiting) == self.workers, (sorted(waiting), self.workers)
        for w in waiting:
            comm.send(_header(STOP, version), w, tag="async header")


class Worker:
    """A worker's loop. `compute(ticket, flat_params) -> (flat_grad, loss_sum)`."""

    def __init__(self, numel: int):
        self.numel = numel
        self.computed = 0

    def work(self, compute: Callable) -> None:
        comm.send(_header(HELLO, -1), SERVER, tag="async header")
        head, flat = torch.empty(3, dtype=torch.float64), torch.empty(self.numel)
        while True:
            comm.recv(head, SERVER, tag="async header")
            ticket, version = int(head[0]), int(head[1])
            if ticket == STOP:
                return
            comm.recv(flat, SERVER, tag="async pull")
            grad, loss = compute(ticket, flat)
            comm.send(_header(ticket, version, float(loss)), SERVER, tag="async header")
            comm.send(grad, SERVER, tag="async push")
            self.computed += 1
