"""The own DDP engine against torch's DistributedDataParallel, on gloo ranks (world 2 and 4).

Each test function below ships a module-level `_fn` to every rank of the module's pool.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from shardlab import comm
from shardlab.testing import assert_float64_equal, in_float64

from ddp_harness import (SMALL_BUCKETS, SyncBNNet, TorchDDPSyncBN, _assert_same_grad, _batch, _grads, _loss, _model, _step, _wrap)


def _equivalence_fn():
    for kind in ("gpt", "unused", "frozen_tied", "syncbn"):
        kw = dict(SMALL_BUCKETS, find_unused=kind == "unused")
        ours_model, ref_model = _model(kind), _model(kind)
        if kind == "syncbn":  # the same module state and math, under a class torch DDP accepts on CPU
            ref_model.bn.__class__ = TorchDDPSyncBN
        ours, ref = _wrap("ddp", ours_model, **kw), _wrap("torch-ddp", ref_model, **kw)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours_model, ref_model)]
        for step in range(3):  # step 0 with the initial buckets, then rebuilt ones
            for strategy in (ours, ref):
                _step(strategy, kind, step)
            a, b = _grads(ours_model), _grads(ref_model)
            assert a.keys() == b.keys()
            scale = max(g.abs().max().item() for g in b.values() if g is not None)
            for n in a:
                assert (a[n] is None) == (b[n] is None), f"{kind} step {step} {n}: grad None on one side only"
                if a[n] is not None:
                    _assert_same_grad(a[n], b[n], comm.world_size() == 2, scale, f"{kind} step {step} {n}")
            for opt, strategy in zip(opts, (ours, ref)):
                strategy.optimizer_step(opt)
                strategy.zero_grad(opt)
        if kind == "unused":  # used on no rank: no gradient at all, like torch
            assert ours_model.never.weight.grad is None
    return True


@pytest.mark.parity
def test_grads_equal_torch_ddp_world2(pool2):
    assert all(pool2.run(_equivalence_fn))


@pytest.mark.parity
def test_grads_equal_torch_ddp_world4(pool4):
    assert all(pool4.run(_equivalence_fn))


def _syncbn_global_batch_fn():
    """SyncBatchNorm under ddp computes what plain BatchNorm computes on the whole global batch."""
    world = comm.world_size()
    torch.manual_seed(0)
    ref = SyncBNNet(bn=nn.BatchNorm1d)
    torch.manual_seed(0)
    model = SyncBNNet()
    strategy = _wrap("ddp", model)
    full = torch.randn(4 * world, 6, generator=torch.Generator().manual_seed(7))
    ref(full).backward()
    strategy.module(full.chunk(world)[comm.rank()]).backward()
    strategy.finish_backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_float64_equal(p.grad, q.grad, n)
    assert_float64_equal(model.bn.running_var, ref.bn.running_var, "running_var")
    return True


@pytest.mark.parity
def test_syncbn_equals_global_batchnorm(pool2):
    assert all(pool2.run(in_float64, _syncbn_global_batch_fn))  # float64: compare.py


# --- training: consistency, accumulation, bytes ---------------------------------------------------

def _ten_steps_fn(comm_dtype):
    model = _model("gpt")
    strategy = _wrap("ddp", model, comm_dtype=comm_dtype, **SMALL_BUCKETS)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(10):
        _step(strategy, "gpt", step)
        strategy.clip_grad_norm_(1.0)
        strategy.optimizer_step(opt)
        strategy.zero_grad(opt)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = comm.all_gather_object(flat)
    return all(torch.equal(everyone[0], f) for f in everyone)


def test_params_identical_across_ranks_after_10_steps(pool4):
    assert all(pool4.run(_ten_steps_fn, "fp32"))


def test_params_identical_across_ranks_with_bf16_comm(pool2):
    assert all(pool2.run(_ten_steps_fn, "bf16"))


def _no_sync_fn():
    """Two microbatches per rank, the first under no_sync, equal one big batch on one process."""
    world, accum = comm.world_size(), 2
    model, big = _model("gpt"), _model("gpt")
    strategy = _wrap("ddp", model, **SMALL_BUCKETS)
    comm.RECORDER.reset_step()  # count only this step's collectives
    for micro in range(accum):
        strategy.set_requires_gradient_sync(micro == accum - 1)
        (_loss(strategy.module, _batch("gpt", comm.rank(), 0, micro)) / accum).backward()
        if micro == 0:  # sync off: gradients accumulate locally, nothing on the wire
            assert comm.RECORDER.step_calls.get("all_reduce", 0) == 0, dict(comm.RECORDER.step_calls)
    strategy.finish_backward()
    assert comm.RECORDER.step_calls.get("all_reduce", 0) == len(strategy.bucket_layout())  # once per bucket
    batches = [_batch("gpt", r, 0, m) for r in range(world) for m in range(accum)]
    x, y = (torch.cat([b[i] for b in batches]) for i in range(2))
    _loss(big, (x, y)).backward()
    for (n, p), q in zip(model.named_parameters(), big.parameters()):
        assert_float64_equal(p.grad, q.grad, n)
    return True


@pytest.mark.parity
def test_no_sync_accumulation_equals_one_large_batch(pool2):
    assert all(pool2.run(in_float64, _no_sync_fn))  # float64: compare.py


def _bytes_fn(comm_dtype):
    model = _model("gpt")
    strategy = _wrap("ddp", model, comm_dtype=comm_dtype, **SMALL_BUCKETS)
    stats = []
    for step in range(3):
        comm.RECORDER.reset_step()
        _step(strategy, "gpt", step)
        stats.append(comm.RECORDER.step_stats())
    # The analytic value: every trainable parameter once (the tied weight once), in the wire dtype.
    numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    itemsize = {"fp32": 4, "fp16": 2, "bf16": 2}[comm_dtype]
    layout = [b["numel"] * 4 for b in strategy.bucket_layout()]  # fp32 gradient bytes per bucket
    events = strategy.bucket_events()
    return [(s["bytes"].get("all_reduce"), s["calls"].get("all_reduce")) for s in stats[1:]], \
        numel * itemsize, layout, events


def test_comm_bytes_per_step_equal_sum_of_buckets(pool2):
    for dtype in ("fp32", "fp16"):
        for per_step, analytic, layout, events in pool2.run(_bytes_fn, dtype):
            n_buckets = len(layout)
            assert n_buckets > 2 and all(size >= 0.05 * 2**20 for size in layout[:-1])  # full but the last
            assert per_step == [(analytic, n_buckets)] * 2
            assert sum(e["bytes"] for e in events) == analytic
            assert [e["bucket"] for e in events] == list(range(n_buckets))
            assert all(e["t_ready"] <= e["t_launch"] <= e["t_done"] for e in events)
            assert {e["dtype"] for e in events} == {"float32" if dtype == "fp32" else "float16"}


# --- failures are loud, never hangs ------------------------------------------------------------------

def _unused_error_fn():
    model = _model("unused")
    strategy = _wrap("ddp", model)  # find_unused is off
    try:
        _step(strategy, "unused", 0)
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_unused_parameters_error_names_them(pool2):
    messages = pool2.run(_unused_error_fn)
    for rank, msg in enumerate(messages):
        assert f"rank {rank} got no gradient" in msg and "never.weight" in msg and "find_unused" in msg
    assert "rank0_only" not in messages[0] and "rank0_only.weight" in messages[1]


def _mismatch_fn():
    model = nn.Linear(4, 4 + comm.rank())
    try:
        _wrap("ddp", model)
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_mismatched_shapes_across_ranks_is_a_clear_error(pool2):
    for msg in pool2.run(_mismatch_fn):
        assert "differs across ranks" in msg and "'weight' [4, 4]" in msg and "'weight' [5, 4]" in msg


# --- through the trainer ---------------------------------------------------------------------------

def _trainer_fn(tmp, strategy):
    from shardlab import config
    from shardlab.train.trainer import Trainer

    overrides = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=8", "train.micro_batch=2",
                 "train.steps=4", "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0",
                 f"parallel.strategy={strategy}", "ckpt.final=false"]  # 2 ranks x 2 sequences x 2 microbatches (no_sync)
    cfg = config.load(None, overrides)
    cfg = config.validate(cfg, comm.world_size())
    (tmp / strategy).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, tmp / strategy)
    summary = trainer.run()
    return summary, {k: v.clone() for k, v in trainer.strategy.full_parameters().items()}


@pytest.mark.parity
def test_trainer_ddp_with_accumulation_matches_torch_ddp(pool2, tmp_path):
    """float64 (compare.py): the clip norm is summed over buckets here, per parameter in torch."""
    (ours, p_ours), _ = pool2.run(in_float64, _trainer_fn, tmp_path, "ddp")
    (ref, p_ref), _ = pool2.run(in_float64, _trainer_fn, tmp_path, "torch-ddp")
    assert ours["ranks_consistent"] is True
    assert_float64_equal(ours["final_train_loss"], ref["final_train_loss"], "final loss")
    assert_float64_equal(p_ours, p_ref)
    n = sum(p.numel() for p in p_ours.values())
    assert ours["comm"]["bytes_per_step"]["all_reduce"] >= 8 * n  # + the trainer's own small all-reduces
    assert sum(v for k, v in ours["comm"]["bytes_by_tag"].items() if k.startswith("bucket")) == 8 * n  # float64
