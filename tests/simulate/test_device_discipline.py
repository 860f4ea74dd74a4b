"""The device-discipline check: one simulated step (two, so the optimizer state exists) of every layout,
as one rank of a fake world, the accelerator stood in for by the meta device (shardlab.simulate). Every
layout must keep device discipline: no host/device mixing, no tensor created without a device, host syncs
within the budget each layer declares (Parallel.host_syncs), no collective NCCL lacks. A planted
violation is caught and named by op and source line.

Runs in the test process itself (no worker pool: one fake process group at a time, nothing allocated)."""
from __future__ import annotations

import datetime
import inspect
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from shardlab import comm, config
from shardlab.errors import ConfigError
from shardlab.simulate.step import simulate_rank

BASE = ["model.preset=tiny", "train.seq_len=16", "train.micro_batch=2"]
PP = ["parallel.strategy=ddp", "parallel.pp=2", "train.grad_accum=2"]

# name -> (world, ranks checked, keys)
LAYOUTS = {
    "single": (1, [0], ["parallel.strategy=single"]),
    "ddp": (2, [0], ["parallel.strategy=ddp"]),
    "zero1": (2, [1], ["parallel.strategy=zero1"]),
    "zero2": (2, [1], ["parallel.strategy=zero2"]),
    "zero3": (2, [1], ["parallel.strategy=zero3"]),
    "hsdp-zero3": (4, [3], ["parallel.strategy=zero3", "parallel.dp_replicate=2"]),
    "torch-ddp": (2, [0], ["parallel.strategy=torch-ddp"]),
    "torch-fsdp2": (2, [1], ["parallel.strategy=torch-fsdp2"]),
    "torch-zero1": (2, [0], ["parallel.strategy=torch-zero1"]),
    "tp-own-sp": (2, [1], ["parallel.strategy=ddp", "parallel.tp=2", "parallel.sp=true"]),
    "tp-dtensor": (2, [1], ["parallel.strategy=torch-fsdp2", "parallel.tp=2", "parallel.tp_impl=dtensor"]),
    "tp-zero2": (4, [2], ["parallel.strategy=zero2", "parallel.tp=2", "parallel.sp=true"]),
    "pp-gpipe": (2, [0, 1], PP + ["parallel.pp_schedule=gpipe"]),
    "pp-1f1b": (2, [0, 1], PP + ["parallel.pp_schedule=1f1b"]),
    "pp-interleaved": (2, [0, 1], PP + ["parallel.pp_schedule=interleaved", "parallel.pp_virtual=2",
                                        "model.n_layer=4"]),
    "pp-zb": (2, [0, 1], PP + ["parallel.pp_schedule=zb"]),
    # the last stage of an untied (llama) pipeline under own TP: the head without the embedding
    "llama-pp-tp-sp": (4, [3], ["parallel.strategy=ddp", "parallel.pp=2", "parallel.tp=2", "parallel.sp=true",
                                "train.grad_accum=2", "model.preset=llama-tiny"]),
    "cp": (2, [1], ["parallel.strategy=ddp", "parallel.cp=2"]),
    "ep": (2, [1], ["parallel.strategy=ddp", "parallel.ep=2", "model.moe_experts=4"]),
    "moe": (1, [0], ["parallel.strategy=single", "model.moe_experts=4", "model.moe_capacity=0"]),
    "offload-params-host": (2, [1], ["parallel.strategy=zero3", "parallel.offload=params",
                                     "parallel.offload_to=host"]),
    "offload-params-disk": (2, [1], ["parallel.strategy=zero3", "parallel.offload=params",
                                     "parallel.offload_to=disk"]),
    # ZeRO-Offload: optimizer state and step on the host, parameters and gradients on the device
    "offload-optimizer-zero1-disk": (1, [0], ["parallel.strategy=zero1", "parallel.offload=optimizer",
                                              "parallel.offload_to=disk"]),
    "offload-optimizer-zero2-host": (2, [1], ["parallel.strategy=zero2", "parallel.offload=optimizer",
                                              "parallel.offload_to=host"]),
    "offload-optimizer-zero3-disk": (2, [1], ["parallel.strategy=zero3", "parallel.offload=optimizer",
                                              "parallel.offload_to=disk"]),
    "offload-optimizer-hsdp-zero2": (4, [3], ["parallel.strategy=zero2", "parallel.dp_replicate=2",
                                              "parallel.offload=optimizer", "parallel.offload_to=host"]),
    "powersgd": (2, [0], ["parallel.strategy=ddp", "parallel.compress=powersgd"]),
    "diloco": (2, [0], ["parallel.strategy=ddp", "parallel.sync=diloco", "parallel.sync_every=1"]),
    "bf16": (2, [0], ["parallel.strategy=zero2", "train.dtype=bf16"]),
    "bf16-recompute-llama": (2, [1], ["parallel.strategy=zero3", "train.dtype=bf16", "train.recompute=full",
                                      "model.preset=llama-tiny"]),
    "recompute-selective": (2, [0], ["parallel.strategy=ddp", "train.recompute=selective"]),
}


def _cfg(keys):
    return config.load(None, BASE + keys)


def _meta_model(cfg):
    from shardlab.model.gpt import build_model, resolve_model_config
    with torch.device("meta"):
        return build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed)


@pytest.fixture(autouse=True)
def _no_process_group():
    if comm.is_initialized():
        pytest.skip("the simulated world needs a process without a process group")


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_keeps_device_discipline(name):
    world, ranks, keys = LAYOUTS[name]
    cfg = _cfg(keys)
    cfg = config.validate(cfg, world)  # a layout the trainer accepts
    for rank in ranks:
        rep = simulate_rank(cfg, world, rank)
        assert rep["violations"] == [], f"{name} rank {rank}:\n" + "\n".join(rep["violations"])
        # offloaded optimizer state is off the device: counted apart
        assert rep["param_elems"] > 0 and rep["state_bytes"]["optimizer"] + rep["offloaded_bytes"] > 0
        assert rep["host_syncs"] >= 1  # the gradient norm's read, at least: the counting works
        if world > 1:
            assert sum(rep["comm"]["bytes_per_step"].values()) > 0, rep["comm"]


def test_find_unused_collective_on_the_device():
    """An unused parameter: the map of used parameters is all-reduced (on the device: NCCL)."""
    cfg = _cfg(["parallel.strategy=ddp", "parallel.find_unused=true"])
    model = _meta_model(cfg)
    with torch.device("meta"):
        model.unused = nn.Linear(4, 4)
    rep = simulate_rank(cfg, 2, 0, model=model)
    assert rep["violations"] == []
    assert rep["comm"]["calls_per_step"]["all_reduce"] >= 2  # the buckets and the unused map


def test_fault_tolerant_diloco():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=10))
    cfg = _cfg(["parallel.strategy=single", "parallel.sync=diloco", "parallel.sync_every=1",
                "parallel.fault_tolerant=true", "parallel.replicas=1", "parallel.replica_id=0",
                f"parallel.ft_store=127.0.0.1:{store.port}"])
    rep = simulate_rank(cfg, 1, 0, hook=lambda par: par.dp.on_start(SimpleNamespace(step=0), 0))
    assert rep["violations"] == []
    assert any("parallel/ft/periodic.py" in site for site in rep["host_sync_sites"])  # the copy to the store


class _DoneWork:
    def is_completed(self) -> bool:
        return True

    def wait(self, timeout=None) -> bool:
        return True


class _QuorumPG:
    """A quorum group's process group in simulation: every operation completes at once, nothing moves."""

    def allreduce(self, tensors, opts=None):
        return _DoneWork()

    def broadcast(self, tensors, opts=None):
        return _DoneWork()


def _simulated_quorum_group(members, position):
    """The NCCL quorum group a replica on CUDA builds (quorum.quorum_backend), without a store or a peer."""
    from shardlab.parallel.ft.quorum import QuorumGroup
    g = QuorumGroup.__new__(QuorumGroup)
    g.__dict__.update(name="sim/q1/shard1", position=position, members=tuple(members), size=len(members),
                      timeout=datetime.timedelta(seconds=5), device=torch.device("meta"), backend="nccl",
                      aborted=False, pg=_QuorumPG())
    return g


@pytest.mark.parametrize("joiner", [False, True], ids=["sender", "joiner"])
def test_fault_tolerant_every_step_keeps_its_tensors_on_the_device(joiner):
    """Every-step fault tolerance on CUDA: the gradient's all-reduce over the quorum group (NCCL there) and a
    heal at step 1 (the lowest member's rank sends; a joiner's rank receives): every tensor given to a quorum
    collective lives on the device, the step metadata and the RNG states included."""
    cfg = _cfg(["parallel.strategy=zero2", "parallel.fault_tolerant=true", "parallel.replicas=2",
                f"parallel.replica_id={1 if joiner else 0}", "parallel.ft_store=127.0.0.1:1"])
    cfg = config.validate(cfg, 2)
    me = 1 if joiner else 0

    def hook(par):
        ft = par.dp
        m = ft.manager
        m.members, m.qid, m.group = [0, 1], 1, _simulated_quorum_group([0, 1], me)
        sampler = SimpleNamespace(epoch=0, cursor=0, steps_per_epoch=100, global_batch=4)
        ft.__dict__["train_state"] = SimpleNamespace(step=0, sampler=sampler)
        vote = ft._vote  # its flag's .item() answers 0 in simulation: the replica's ranks agree here
        ft.__dict__["_vote"] = lambda ok: (vote(ok), ok)[1]

    decision = {"step": 0, "qid": 1, "members": [0], "participants": [0, 1], "joiners": {"1": {"0": "a", "1": "b"}}}

    def heal(par, i):
        if i == 1:  # the optimizer's state exists after the first step
            par.dp._heal(dict(decision), joiner=joiner)

    rep = simulate_rank(cfg, 2, 1, hook=hook, before_step=heal)
    assert rep["comm"]["calls_per_step"].get("all_reduce", 0) >= 1, rep["comm"]
    if not joiner:
        assert rep["violations"] == [], "\n".join(rep["violations"])
    else:  # a joiner reads its new learning rates and RNG state back, and logs the parameters' checksum: host
        # syncs of a rare event, over the per-step budget; nothing else
        others = [v for v in rep["violations"] if not v.startswith("host-sync: ")]
        assert others == [], "\n".join(others)
        assert all("parallel.ft.every_step" in v for v in rep["violations"]), rep["violations"]


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_optimizer_offload_keeps_the_optimizer_off_the_device(name):
    """ZeRO-Offload on the (simulated) accelerator: the step runs without a violation, the device holds no
    optimizer state (the allocation trace's peak falls by Adam's m and v of this rank's shards, 8 bytes an
    element, and its step counters), and what the host holds instead is Adam's state plus a master copy and a gradient buffer of
    the shards (4 + 4 bytes an element). The collectives are those of the run without offload."""
    keys = [f"parallel.strategy={name}"]
    base = simulate_rank(_cfg(keys), 2, 1)
    off = simulate_rank(_cfg(keys + ["parallel.offload=optimizer", "parallel.offload_to=host"]), 2, 1)
    assert off["violations"] == [], "\n".join(off["violations"])
    adam = base["state_bytes"]["optimizer"]
    assert adam > 0 and off["state_bytes"]["optimizer"] == 0 and base["offloaded_bytes"] == 0
    assert off["state_bytes"]["params"] == base["state_bytes"]["params"]
    assert off["state_bytes"]["grads"] == base["state_bytes"]["grads"]
    assert off["offloaded_bytes"] == adam + adam  # Adam 8 B/element; master and gradient buffer 4 + 4
    # fused AdamW keeps each tensor's step counter on the device too: 4 bytes a parameter
    counters = 4 * len(list(_meta_model(_cfg(keys)).parameters()))
    assert off["peak_mem_bytes"] == base["peak_mem_bytes"] - adam - counters
    assert off["comm"] == base["comm"]


def test_optimizer_offload_with_fault_tolerance_on_an_accelerator_is_refused():
    cfg = _cfg(["parallel.strategy=zero2", "parallel.offload=optimizer", "parallel.fault_tolerant=true",
                "parallel.replicas=2", "parallel.replica_id=0", "parallel.ft_store=127.0.0.1:1"])
    with pytest.raises(ConfigError, match="offload=optimizer with parallel.fault_tolerant=true on an accel"):
        simulate_rank(cfg, 2, 0)


# --- planted violations: each caught, named by op and line -------------------------------------------------

def _line_of(fn, text):
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(src) if text in line)


def _plant(hook_body):
    def hook(par):  # on the first block (a ModuleDict under pipelines, a ModuleList otherwise)
        blocks = par.model.blocks
        first = next(iter(blocks.values() if isinstance(blocks, nn.ModuleDict) else blocks))
        first.register_forward_hook(hook_body)
    return hook


def test_planted_tensor_without_device_is_named():
    def body(module, args, out):
        return out + torch.zeros(out.shape[-1])  # the planted violation
    rep = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=_plant(body))
    line = _line_of(body, "planted")
    site = f"test_device_discipline.py:{line}"
    assert any(v.startswith("no-device: torch.zeros at " + site) for v in rep["violations"]), rep["violations"]
    assert any(v.startswith("mixing: aten::add at " + site) for v in rep["violations"]), rep["violations"]


def test_planted_tensor_without_device_in_a_backward_hook_is_named():
    """Backward runs without torch function modes: the dispatch level catches it by the line's text."""
    def hook(par):
        w = next(iter(par.model.parameters()))
        w.register_hook(lambda g: g + torch.ones(g.shape).sum())  # planted in backward
    rep = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=hook)
    line = _line_of(hook, "planted")
    assert any(v.startswith(f"no-device: aten::ones at test_device_discipline.py:{line}") for v in rep["violations"]), \
        rep["violations"]


def test_planted_host_sync_over_budget_is_named():
    def body(module, args, out):
        if out.abs().max().item() > 1e9:  # the planted sync
            pass
    rep = simulate_rank(_cfg(["parallel.strategy=single"]), 1, 0, hook=_plant(body))
    line = _line_of(body, "planted")
    assert any(v.startswith("host-sync: 2 in test_device_discipline") and f"test_device_discipline.py:{line}" in v
               for v in rep["violations"]), rep["violations"]


def test_planted_host_collective_on_nccl_is_named():
    def body(module, args, out):
        comm.all_reduce(torch.ones(2, device="cpu"))  # the planted collective
    rep = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=_plant(body))
    line = _line_of(body, "planted")
    assert any(v.startswith(f"collective: comm.all_reduce at test_device_discipline.py:{line}")
               for v in rep["violations"]), rep["violations"]
    # on CPU (gloo) the same collective is right
    rep = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=_plant(body), device="cpu")
    assert not any(v.startswith("collective") for v in rep["violations"])


def test_planted_reductions_the_backend_lacks_are_named():
    def bitwise(module, args, out):
        comm.all_reduce(torch.ones(2, dtype=torch.int32, device=out.device), op=comm.ReduceOp.BOR)
    def average(module, args, out):
        comm.all_reduce(torch.ones(2, device=out.device), op=comm.ReduceOp.AVG)
    nccl = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=_plant(bitwise))["violations"]
    gloo = simulate_rank(_cfg(["parallel.strategy=ddp"]), 2, 0, hook=_plant(average), device="cpu")["violations"]
    assert any("ReduceOp.BOR: NCCL" in v for v in nccl), nccl
    assert any("ReduceOp.AVG: gloo" in v for v in gloo), gloo
