"""The own DDP engine against torch's DistributedDataParallel, on gloo ranks (world 2 and 4).

Each test function below ships a module-level `_fn` to every rank of the module's pool.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from shardlab import comm, parallel
from shardlab.config import Config
from shardlab.model.gpt import PRESETS, GPTConfig, build_model
from shardlab.model.loss import cross_entropy
from shardlab.parallel.dp.sync_batchnorm import SyncBatchNorm
from shardlab.testing import assert_float64_equal, in_float64

SMALL_BUCKETS = dict(bucket_mb=0.05, first_bucket_mb=0.05)  # several buckets even for tiny models


# --- models --------------------------------------------------------------------------------------

class UnusedBranch(nn.Module):
    """`never` takes no part in the loss; `rank0_only` is used on rank 0 only (dynamic control flow)."""

    def __init__(self):
        super().__init__()
        self.a, self.never, self.rank0_only, self.b = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), \
            nn.Linear(16, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if comm.rank() == 0:
            h = h + self.rank0_only(h)
        return self.b(h).pow(2).mean()


class FrozenTied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, x):
        return self.head(torch.relu(self.mid(self.frozen(self.emb(x))))).logsumexp(-1).mean()


class SyncBNNet(nn.Module):
    def __init__(self, bn=nn.SyncBatchNorm):
        super().__init__()
        self.fc, self.bn, self.out = nn.Linear(6, 8), bn(8), nn.Linear(8, 1)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.fc(x)))).pow(2).mean()


class TorchDDPSyncBN(nn.BatchNorm1d):
    """Our SyncBatchNorm's CPU path under another class name: torch DDP refuses CPU `nn.SyncBatchNorm`."""
    process_group = None
    forward = SyncBatchNorm.forward


def _gpt():
    return build_model(GPTConfig(**PRESETS["tiny"], max_seq_len=16), seed=0)


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    return {"gpt": _gpt, "unused": UnusedBranch, "frozen_tied": FrozenTied, "syncbn": SyncBNNet}[kind]()


def _batch(kind: str, rank: int, step: int, micro: int = 0):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    if kind == "gpt":
        x = torch.randint(0, 256, (2, 16), generator=g)
        return (x, torch.roll(x, -1, 1))
    if kind == "frozen_tied":
        return (torch.randint(0, 32, (4, 5), generator=g),)
    return (torch.randn(4, 8 if kind == "unused" else 6, generator=g),)


def _wrap(name: str, model: nn.Module, **kw):
    """The data-parallel layer the composition applies to `model` (its optimizer is not used here)."""
    cfg = Config()
    cfg.parallel.strategy = name
    for k, v in kw.items():
        setattr(cfg.parallel, k, v)
    return parallel.build(cfg, torch.device("cpu"), model).dp


def _loss(module, batch):
    """The toy models return their loss; the GPT returns logits, scored by the loss function."""
    if len(batch) == 2:
        return cross_entropy(module(batch[0]), batch[1], reduction="mean")
    return module(*batch)


def _step(strategy, kind, step, micro=0):
    loss = _loss(strategy.module, _batch(kind, comm.rank(), step, micro))
    loss.backward()
    strategy.finish_backward()


def _grads(model):
    return {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}


# --- equivalence with torch DDP --------------------------------------------------------------------

def _assert_same_grad(a, b, exact, scale, what):
    """World 2: bitwise equal. World 4: gloo's ring sums 4 addends in an order that depends on where an
    element sits in its bucket, so layouts that differ (torch's first step uses one bucket for all)
    differ by an ulp of the addends: rtol 1e-6, with atol 1e-6 of the model's largest gradient entry
    for entries that cancel to nearly zero (e.g. a bias before BatchNorm, whose true gradient is 0)."""
    if exact:
        assert torch.equal(a, b), f"{what}: max diff {(a - b).abs().max().item():.3g}"
    else:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6 * scale, msg=lambda m: f"{what}: {m}")


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
    config.validate(cfg, comm.world_size())
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
