"""ZeRO-Offload with the parameters on an accelerator (`parallel.offload=optimizer`, own zero1/2/3): the
optimizer state *and its step* live on the host, the parameters and gradients stay on the device.

What this rank keeps off the device: for each of its parameter shards an fp32 *master copy* (what the
optimizer steps), a host buffer for the shard's reduced gradient, and Adam's state (m, v) of the master:
in host memory (`offload_to=host`) or in memory-mapped files (`offload_to=disk`, paged in and out one shard
at a time by `DiskOffload`). Master and gradient buffers are page-locked (pinned) on CUDA, so both copies
run asynchronously on a side stream; elsewhere they are ordinary host memory.

One step, wrap unit by unit (the layout of `shard.py`):

    side stream:   D2H grads(u0) D2H grads(u1) D2H grads(u2) ...    H2D master(u0)   H2D master(u1) ...
    host:                 wait(u0) Adam(u0)   wait(u1) Adam(u1)   wait(u2) Adam(u2) ...
    compute stream:  (waits for each unit's H2D before it next reads that unit's parameters)

- the side stream first waits for the compute stream: the gradients the host steps are the finished ones
  (reduced, unscaled for fp16, clipped), exactly what the optimizer would step on the device;
- every unit's gradient copy is queued at once; the host waits for unit k's alone, steps it while the
  copies of the later units are still in flight, and queues unit k's updated master back to the device,
  which lands while the host steps unit k+1;
- the compute stream waits (on the device, not the host) for each unit's copy back before anything after
  the step reads it: zero1/zero2's all-gather of the updated shards, zero3's next forward.

The master starts as a copy of the shard and the host steps it with the same AdamW call the device would
run, so the parameters copied back are what the device's own step computes (bitwise on a CPU, where the
kernel is the same; on CUDA the host's kernel rounds like the CPU's). Parameters are fp32 in every
`train.dtype` (autocast computes in 16 bits), so the master *is* the shard's value, not a widened copy.

State dicts see the masters' optimizer state under the shards' names (`zero_state`): a checkpoint loads
into a layout with or without offload.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from shardlab.parallel.dp.offload import DiskOffload, _Only


class _Copies:
    """The side stream the copies run on, and its events, for the device's kind (CUDA, or the stand-in
    accelerator of the simulated check); on a CPU there is no stream and every copy is immediate."""

    def __init__(self, device: torch.device):
        mod = None if device.type == "cpu" else getattr(torch, device.type, None)
        self.mod = mod if mod is not None and hasattr(mod, "Stream") else None
        self.device = device
        self.side = self.mod.Stream(device=device) if self.mod is not None else None

    def after_compute(self) -> None:
        """The side stream starts after everything queued on the compute stream so far."""
        if self.side is not None:
            self.side.wait_stream(self.mod.current_stream(self.device))

    def on_side(self):
        import contextlib
        return self.mod.stream(self.side) if self.side is not None else contextlib.nullcontext()

    def mark(self):
        """An event after the copies queued on the side stream so far (None without streams)."""
        return self.side.record_event() if self.side is not None else None

    @staticmethod
    def host_wait(event) -> None:
        if event is not None:
            event.synchronize()

    def compute_waits(self, event) -> None:
        if event is not None:
            self.mod.current_stream(self.device).wait_event(event)


class HostStep:
    """The host side of ZeRO-Offload for a zero layer's units (see the module docstring)."""

    def __init__(self, units, device: torch.device, offload_to: str):
        self.units = [u for u in units if u.infos]
        self.copies = _Copies(device)
        pin = device.type == "cuda"  # page-locked memory only where a device copies from it asynchronously
        self.master: dict[str, nn.Parameter] = {}  # fqn -> the host master copy of this rank's shard
        self.grad: dict[str, torch.Tensor] = {}  # fqn -> the host buffer its reduced gradient is copied into
        self.nbytes = 0  # masters and gradient buffers
        for unit in self.units:
            dtype = unit.infos[0].param.dtype
            # one allocation per unit and kind (pinned allocations are costly to make); views per parameter
            masters = torch.empty(unit.shard_numel, dtype=dtype, device="cpu", pin_memory=pin)
            grads = torch.empty(unit.shard_numel, dtype=dtype, device="cpu", pin_memory=pin)
            self.nbytes += 2 * masters.numel() * masters.element_size()
            for info, m, g in zip(unit.infos, unit.shard_views(masters), unit.shard_views(grads)):
                self.master[info.fqn] = nn.Parameter(m, requires_grad=info.shard.requires_grad)
                self.grad[info.fqn] = g
        self.disk = DiskOffload() if offload_to == "disk" else None  # Adam's state in files
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """The masters := the device shards (at the start, and after anything but the step wrote the shards:
        a checkpoint load, a heal). Waits for the copies: what follows may step the masters at once."""
        for unit in self.units:
            for info in unit.infos:
                self.master[info.fqn].copy_(info.shard.detach())

    @torch.no_grad()
    def step(self, optimizer: torch.optim.Optimizer, grad_of) -> None:
        """One optimizer step on the host; `grad_of(info)`: the shard's finished gradient on the device."""
        c = self.copies
        c.after_compute()
        arrived = []
        for unit in self.units:  # every unit's gradients down at once, in the order they are stepped
            with c.on_side():
                for info in unit.infos:
                    g = grad_of(info)
                    if g is not None:
                        self.grad[info.fqn].copy_(g, non_blocking=True)
                    self.master[info.fqn].grad = None if g is None else self.grad[info.fqn]
            arrived.append(c.mark())
        for unit, event in zip(self.units, arrived):
            c.host_wait(event)  # this unit's gradients are on the host; later units' still copying
            masters = [self.master[i.fqn] for i in unit.infos]
            if self.disk is not None:
                self.disk.step(optimizer, masters)
            else:
                with _Only(optimizer, masters):
                    optimizer.step()
            with c.on_side():
                for info in unit.infos:
                    info.shard.copy_(self.master[info.fqn], non_blocking=True)
            c.compute_waits(c.mark())  # the device reads the shard only after it has landed

    def zero_grad(self) -> None:
        for m in self.master.values():
            m.grad = None

    def offloaded_bytes(self, optimizer) -> int:
        """Bytes this rank keeps off the device: masters, gradient buffers and the optimizer state."""
        state = sum(v.numel() * v.element_size() for m in self.master.values()
                    for v in optimizer.state.get(m, {}).values() if torch.is_tensor(v) and v.dim() > 0)
        return self.nbytes + state
