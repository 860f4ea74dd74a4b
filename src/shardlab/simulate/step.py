"""One training step of a layout, as one rank of a simulated world, audited (simulate/audit.py).

    report = simulate_rank(cfg, world=8, rank=3, device="cuda")
    report["violations"]   # [] when the step keeps device discipline

The real composition builds the real model, layers and optimizer for that rank (parameters on the `meta`
device: nothing is allocated for real), and one step runs as the trainer runs it: forward/backward of
each microbatch, the backward's finish, clipping, the optimizer step, zero_grad. What the step does is
audited op by op: host/device mixing, tensors created without a device, host syncs (each layer has a
budget: what each layer declares, `Parallel.host_syncs`), collectives NCCL lacks. The same report carries what the
dry run prints: the rank's mesh coordinates, its state bytes, the peak of the allocation trace, the
collectives' bytes by op.
"""
from __future__ import annotations

import contextlib
import copy
from collections import Counter

import torch

from shardlab import comm
from shardlab.model import moe
from shardlab.simulate.audit import Audit, audited, emulated_autocast, recomputed_under_audit
from shardlab.simulate.world import SIM, fake_world


def simulate_rank(cfg, world: int, rank: int, device: str = "cuda", model=None, hook=None, steps: int = 2,
                  before_step=None) -> dict:
    """The report of `rank`'s step in a world of `world` (see the module docstring). `model`: a module to
    use instead of `cfg.model` (built on the meta device by the caller); `hook(par)`: called after the
    build, before the step (tests plant violations through it); `before_step(par, i)`: called at the start
    of step i, audited as the step is (what the trainer runs before the batch: a fault-tolerant replica's
    quorum and heal). `steps`: two by default, because the
    optimizer's state is created in the first and only met (moved, offloaded) in the second; the report's
    comm and peak are the last step's."""
    from shardlab import parallel
    cfg = copy.deepcopy(cfg)
    # device cpu: the stand-in plays the host, where mixing, implicit devices and syncs cost nothing
    audit = Audit(host=device == "cpu")
    with fake_world(world, rank, device, audit), audited(audit):
        audit.recording = False  # the build: traced for memory, not judged (it is not the step)
        # The composition builds the model on meta and allocates each rank's part (parallel/materialize.py):
        # here the device is meta too, so "unallocated" is what the trace has not counted, and the trace
        # pauses while the model is only a shape. A model the caller brings is whole on the device already.
        with _meta_build(audit):
            par = _build(cfg, model, world)
        build_peak = audit.peak
        model = par.model
        from shardlab.train.moe_log import MoELog
        moe_log = MoELog(par, cfg.train.grad_accum)
        from shardlab.parallel.step import _AUTOCAST
        # torch.autocast has no meta device: the audit emulates it (simulate/audit.py) over the whole
        # forward/backward, so that activation recompute (which re-enters torch's autocast state, not
        # ours) recomputes in the forward's precision; backward's own ops are below the emulation anyway
        par.autocast = contextlib.nullcontext
        precision = _AUTOCAST.get(par.dtype)
        if hook is not None:
            hook(par)
        state = par.state_bytes()
        resident = audit.live  # what the build left on the device, before the step
        audit.reset_peak()
        audit.recording = True
        from shardlab.parallel import recompute
        real_checkpoint = recompute.checkpoint
        recompute.checkpoint = recomputed_under_audit(real_checkpoint, audit)
        norm = None
        try:
            with moe.static_shapes(model):  # routing has no data to go by: capacity-bounded, fixed shapes
                for i in range(steps):  # the second step meets the optimizer state the first one created
                    if before_step is not None:
                        before_step(par, i)
                    norm = _step(cfg, par, moe_log, lambda: emulated_autocast(audit, precision))
        except Exception as e:  # noqa: BLE001 - what a GPU would raise here too: a finding, named by its line
            audit.add_error(e)
        finally:
            recompute.checkpoint = real_checkpoint
        audit.recording = False
        comm_stats = comm.RECORDER.step_stats()
        state_after = par.state_bytes()  # optimizer state exists after the first step
    syncs = audit.syncs()
    dims = par.dims
    return {
        "rank": rank,
        "coords": {d: dims.coord(d) for d in ("pp", "dp_replicate", "dp_shard", "cp", "tp") if dims.size(d) > 1},
        "param_elems": sum(p.numel() for p in _local_params(par)),
        "state_bytes": {k: int(state_after.get(k, state.get(k, 0))) for k in ("params", "grads", "optimizer")},
        "offloaded_bytes": int(state_after.get("offloaded", 0)),  # parallel.offload: kept off the device
        "peak_mem_bytes": int(audit.peak),
        "resident_bytes": int(resident),
        "build_peak_bytes": int(build_peak),
        "comm": {"bytes_per_step": comm_stats["bytes"], "calls_per_step": comm_stats["calls"]},
        "host_syncs": len(syncs),
        "host_sync_sites": dict(Counter(f"{f.op} at {f.where}" for f in syncs)),
        "violations": violations(audit, steps, {**par.host_syncs(), **moe_log.HOST_SYNCS}),
        "grad_norm_type": type(norm).__name__,
    }


@contextlib.contextmanager
def _meta_build(audit):
    from shardlab.parallel import materialize
    from shardlab.simulate import audit as audit_mod

    saved = materialize.unallocated
    materialize.unallocated = audit_mod.is_untracked
    materialize.META_PHASE.append(lambda: audit_mod.untracked(audit))
    try:
        yield
    finally:
        materialize.META_PHASE.pop()
        materialize.unallocated = saved


def _build(cfg, model, world):
    """The composition, with torch DDP's buckets routed through comm as when tracing (observe/ddp_hook.py):
    their bytes are counted and checked like every other collective (and the fake group's works, which
    complete with no tensor, never reach DDP's own C++ hook)."""
    from shardlab import parallel
    from shardlab.observe import timeline

    saved = timeline.enabled
    timeline.enabled = lambda: True
    try:
        return parallel.build(cfg, SIM, model=model, world_size=world)
    finally:
        timeline.enabled = saved


def _step(cfg, par, moe_log, autocast) -> float:
    """The trainer's step (train/trainer.py `train_step`) on a random batch of the simulated device."""
    comm.RECORDER.reset_step()
    t = cfg.train
    rows = t.micro_batch * t.grad_accum
    x = torch.randint(0, 2, (rows, t.seq_len), device=SIM)
    y = torch.randint(0, 2, (rows, t.seq_len), device=SIM)
    micro = list(zip(x.tensor_split(t.grad_accum), y.tensor_split(t.grad_accum)))
    weight = par.loss_weight(rows * t.seq_len * par.dims.size("dp_cp"))  # every dp x cp rank holds `rows` rows
    comm.set_phase("forward")
    with autocast():
        par.forward_backward(micro, weight)
    comm.set_phase("optimizer")
    par.finish()
    norm = par.clip_grad_norm_(t.grad_clip)
    par.optimizer_step()
    par.zero_grad()
    if moe_log.enabled:  # a logged step's routing metrics (train/moe_log.py)
        moe_log.after_step()
        moe_log.row()
    return norm


def _local_params(par):
    seen = {}
    for p in par.module.parameters():
        seen[id(p)] = p
    opt = par.optimizer
    for g in getattr(opt, "param_groups", []):
        for p in g["params"]:
            seen[id(p)] = p
    return [p.to_local() if hasattr(p, "to_local") else p for p in seen.values()]


def host_sync_budget(module: str, budgets: dict[str, int]) -> tuple[str, int]:
    """(the entry of `budgets` that covers `module`, its budget): the longest prefix listed, else (module, 0)."""
    best = max((k for k in budgets if module == k or module.startswith(k + ".")), key=len, default=None)
    return (best, budgets[best]) if best is not None else (module, 0)


def violations(audit: Audit, steps: int = 1, budgets: dict[str, int] | None = None) -> list[str]:
    """Every finding that breaks discipline, one line each: mixing, no device, NCCL-lacking collectives,
    and each layer's host syncs beyond its budget (`budgets`: what the layers declare, `Parallel.host_syncs`)."""
    budgets = budgets or {}
    out = [str(f) for f in audit.findings if f.kind != "host-sync"]
    if audit.host:
        return out
    by_layer: dict[str, list] = {}
    for f in audit.syncs():
        layer, budget = host_sync_budget(f.module, budgets)
        by_layer.setdefault((layer, budget), []).append(f)
    for (layer, budget), fs in sorted(by_layer.items()):
        if len(fs) > budget * steps:
            sites = ", ".join(f"{op} x{n}" for op, n in Counter(f"{f.op} at {f.where}" for f in fs).items())
            out.append(f"host-sync: {len(fs)} in {layer or 'unlisted code'} over {steps} step(s) (budget {budget} a step): {sites}")
    return out
