"""Allocating what a rank holds of a model built on the meta device (the composition's step 5).

The composition builds the model with its parameters on the meta device (model/init.py
`parameters_on_meta`: no storage) and applies every layer to that: the pipeline split, tensor, context and
expert parallelism cut meta tensors into meta pieces at no cost. Storage is then allocated once, for what
this rank holds, by whichever comes first:

- a data-parallel layer that shards (`builds_on_meta`: own zero1/2/3, torch-fsdp2 and their HSDP forms)
  allocates its shards itself in `wrap` (zero: the flat shards; FSDP2: `to_empty` after `fully_shard`), so
  no rank ever holds its part of the model unsharded;
- any other data-parallel layer keeps whole replicas of the part: `allocate` gives the part its storage
  before the layer wraps it;
- what the data-parallel layer never sees (expert parallelism's experts, hidden from it) is allocated after.

An unallocated parameter is replaced by a new object (a meta tensor cannot take storage in place): a layer
holding parameter objects from the meta phase would hold ones the model no longer has, so layers find
theirs through their modules (parallel/ep/layer.py `expert_params`).

The values come last, from the per-parameter seeded draw (parallel/init_shards.py). A tensor is
"unallocated" while it is on the meta device (`unallocated`); the simulation, whose device is the meta
device itself, swaps that test for its allocation trace (simulate/step.py) and pauses the trace while the
model is built (`META_PHASE`).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn


def _is_meta(t: torch.Tensor) -> bool:
    return t.is_meta


unallocated = _is_meta  # swapped by the simulation (its device is the meta device)
META_PHASE: list = []  # context-manager factories entered around the meta phase (the simulation's trace pause)


@contextlib.contextmanager
def meta_phase():
    """The composition's build on meta: the simulation's allocation trace is paused inside."""
    with contextlib.ExitStack() as stack:
        for enter in META_PHASE:
            stack.enter_context(enter())
        yield


def local(t: torch.Tensor) -> torch.Tensor:
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def is_unallocated(t: torch.Tensor | None) -> bool:
    return t is not None and unallocated(local(t))


def successor(old: nn.Parameter, new: nn.Parameter) -> nn.Parameter:
    """`new`, the allocated parameter that takes an unallocated `old`'s place, with what layers hung on
    `old` (its Python attributes: a float8 weight's `gather_encoding`, say): the same parameter, now with
    storage."""
    new.__dict__.update({k: v for k, v in vars(old).items() if k not in vars(new)})
    return new


def allocate(module: nn.Module, device: torch.device, move: bool = True) -> int:
    """Give every unallocated parameter and buffer of `module` empty storage on `device`, and (`move`) move
    the allocated ones there (after a data-parallel layer: not; it put its shards where they live). A meta tensor cannot take another device's data in place, so an unallocated
    parameter is replaced by a new one in every module that registers it (a tied head stays the
    embedding's). Returns the bytes allocated."""
    done: dict[int, nn.Parameter] = {}
    total = 0
    with torch.no_grad():
        for mod in module.modules():
            for name, p in mod._parameters.items():
                if p is None:
                    continue
                if id(p) not in done:
                    if is_unallocated(p):
                        new = successor(p, nn.Parameter(torch.empty_like(p, device=device), p.requires_grad))
                        total += local(new).numel() * new.element_size()
                    else:
                        if move and p.device != device:
                            p.data = p.data.to(device)
                        new = p
                    done[id(p)] = new
                mod._parameters[name] = done[id(p)]
            for name, b in mod._buffers.items():
                if b is not None and (is_unallocated(b) or (move and b.device != device)):
                    mod._buffers[name] = torch.empty_like(b, device=device) if is_unallocated(b) else b.to(device)
    return total


def move_allocated(module: nn.Module, device: torch.device) -> None:
    """`module.to(device)` for what is allocated; unallocated tensors stay where they are (a sharding
    data-parallel layer allocates them on `device` itself)."""
    with torch.no_grad():
        for mod in module.modules():
            for table in (mod._parameters, mod._buffers):
                for name, t in table.items():
                    if t is not None and not is_unallocated(t) and t.device != device:
                        if isinstance(t, nn.Parameter):
                            t.data = t.data.to(device)
                        else:
                            table[name] = t.to(device)


def to_empty_keeping_buffers(module: nn.Module, device: torch.device) -> None:
    """`module.to_empty(device)` (FSDP2's way to allocate its meta shards), with the buffers' values kept:
    they were made real (model/init.py) and are not drawn again."""
    saved = {n: b.detach().to("cpu") for n, b in module.named_buffers() if not is_unallocated(b)}
    module.to_empty(device=device)
    with torch.no_grad():
        for n, b in module.named_buffers():
            if n in saved and not b.is_meta:
                b.copy_(saved[n])
