"""Local SGD and DiLoCo (parallel.sync, parallel/sync/periodic.py): H = 1 is ddp, 1/H of the bytes, exact resume
mid-period. World 2, the tiny model; one process group for the module."""
from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
import torch

from shardlab import comm, config
from shardlab.errors import ConfigError

from sync_harness import sgd_instead_of_adamw

TINY_RUN = ["model.preset=tiny", "train.seq_len=32", "train.global_batch=4", "train.micro_batch=2",
            "train.warmup_steps=1", "train.log_every=1", "train.eval_every=0", "doctor.hang_timeout_s=0",
            "ckpt.final=false"]


def _train(run_dir, overrides, sgd=False):
    from shardlab.train.trainer import Trainer

    with sgd_instead_of_adamw() if sgd else nullcontext():  # SGD for the H = 1 parities (sync_harness.py)
        cfg = config.load(None, TINY_RUN + overrides)
        cfg = config.validate(cfg, comm.world_size())
        trainer = Trainer(cfg, run_dir)
        summary = trainer.run()
    return summary, {k: v.detach().clone() for k, v in trainer.par.full_parameters().items()}


def _h1_runs(run_dir):
    # No clipping: ddp clips the averaged gradient, a lone replica its own (another update once it bites).
    common = ["train.steps=4", "train.grad_clip=0", "train.lr=0.05"]
    return {name: _train(run_dir / name, common + extra, sgd=True)[1] for name, extra in {
        "ddp": ["parallel.strategy=ddp"],
        "local_sgd": ["parallel.strategy=ddp", "parallel.sync=local_sgd", "parallel.sync_every=1"],
        "diloco": ["parallel.strategy=ddp", "parallel.sync=diloco", "parallel.sync_every=1",
                   "parallel.outer_lr=1", "parallel.outer_momentum=0"]}.items()}


@pytest.fixture(scope="module")
def h1(pool2, tmp_path_factory):
    return pool2.run(_h1_runs, tmp_path_factory.mktemp("h1"), timeout=240)


def _assert_same(got, ref):
    # rtol 1e-5 (the bar): the two orders of the same fp32 sums (average the gradients, then step;
    # or step, then average the parameters) differ by rounding; atol for entries near 0.
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=1e-7, msg=k)


@pytest.mark.parity
def test_local_sgd_with_h1_equals_ddp(h1):
    for runs in h1:
        _assert_same(runs["local_sgd"], runs["ddp"])
    assert not torch.equal(h1[0]["ddp"]["wte.weight"], _initial()["wte.weight"])  # it did train


@pytest.mark.parity
def test_diloco_with_h1_outer_lr1_no_momentum_equals_ddp(h1):
    for runs in h1:
        _assert_same(runs["diloco"], runs["ddp"])


def _initial():
    from shardlab.model.gpt import build_model, resolve_model_config

    cfg = config.load(None, TINY_RUN)
    return dict(build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed).named_parameters())


# --- bytes on the wire ----------------------------------------------------------------------------------

def _bytes_per_step(overrides, steps=4):
    """Mean all-reduce bytes per step over `steps` steps (a whole number of periods) of a manual loop."""
    from shardlab import parallel

    cfg = config.load(None, TINY_RUN + ["train.grad_clip=0"] + overrides)
    cfg = config.validate(cfg, comm.world_size())
    par = parallel.build(cfg)
    vocab = par.model.cfg.vocab_size
    gen = torch.Generator().manual_seed(comm.rank())
    total = 0
    for _ in range(steps):
        comm.RECORDER.reset_step()
        x = torch.randint(0, vocab, (2, 32), generator=gen)
        par.step([(x, torch.roll(x, -1, 1))], 1.0 / 128)
        total += comm.RECORDER.step_stats()["bytes"].get("all_reduce", 0)
    n_params = sum(p.numel() for p in par.dp.params) if hasattr(par.dp, "params") else None
    return total / steps, n_params


def _bytes_fn():
    return {name: _bytes_per_step(extra) for name, extra in {
        "sync": ["parallel.strategy=ddp"],
        "local_sgd": ["parallel.strategy=ddp", "parallel.sync=local_sgd", "parallel.sync_every=4"],
        "diloco": ["parallel.strategy=ddp", "parallel.sync=diloco", "parallel.sync_every=4"],
        "diloco_bf16": ["parallel.strategy=ddp", "parallel.sync=diloco", "parallel.sync_every=4",
                        "parallel.outer_dtype=bf16"]}.items()}


def test_local_sgd_and_diloco_send_one_hth_of_syncs_bytes(pool2):
    for rank_bytes in pool2.run(_bytes_fn, timeout=180):
        sync, _ = rank_bytes["sync"]
        n = rank_bytes["local_sgd"][1]
        assert sync == 4 * n  # every step: every trainable parameter's fp32 gradient, all-reduced once
        assert rank_bytes["local_sgd"][0] == sync / 4  # H = 4: the parameters, once per 4 steps
        assert rank_bytes["diloco"][0] == sync / 4  # the fp32 pseudo-gradient, once per 4 steps
        assert rank_bytes["diloco_bf16"][0] == sync / 8  # in bf16: half of that again


# --- torch's twin -----------------------------------------------------------------------------------------

def _steps(par, n, averager=None):
    vocab = par.model.cfg.vocab_size
    gen = torch.Generator().manual_seed(comm.rank())
    for _ in range(n):
        x = torch.randint(0, vocab, (2, 32), generator=gen)
        par.forward_backward([(x, torch.roll(x, -1, 1))], 1.0 / 128)
        par.finish()
        par.optimizer_step()
        par.zero_grad()
        if averager is not None:
            averager.average_parameters(par.model.parameters())
    return {k: v.detach().clone() for k, v in par.full_parameters().items()}


def _twin_fn():
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    from shardlab import parallel

    def build(h):
        cfg = config.load(None, TINY_RUN + ["parallel.strategy=ddp", "parallel.sync=local_sgd",
                                            f"parallel.sync_every={h}"])
        cfg = config.validate(cfg, comm.world_size())
        return parallel.build(cfg)

    ours = _steps(build(2), 6)
    # torch's averager on replicas that never synchronise themselves (H beyond the run): after calls 1, 3, 5
    # (warm-up 1, period 2), i.e. after inner steps 2, 4, 6, as ours.
    torch_avg = _steps(build(10**6), 6, PeriodicModelAverager(period=2, warmup_steps=1))
    return ours, torch_avg


@pytest.mark.parity
def test_local_sgd_equals_torchs_periodic_model_averager(pool2):
    for ours, theirs in pool2.run(_twin_fn, timeout=180):
        for k in ours:
            # torch divides before its all-reduce, ours after: the same average up to fp32 rounding.
            torch.testing.assert_close(ours[k], theirs[k], rtol=1e-6, atol=1e-7, msg=k)


# --- checkpoints: exact resume mid-period -----------------------------------------------------------------

def _resume_fn(run_dir):
    diloco = ["parallel.strategy=ddp", "parallel.sync=diloco", "parallel.sync_every=2", "train.steps=5"]
    # outer steps after steps 2 and 4; the save at step 3 is 1 step into a period, with θ_start and the outer
    # momentum already moved by the first outer step
    _, straight = _train(run_dir / "straight", diloco + ["ckpt.every=3"])
    ckpt = run_dir / "straight" / "checkpoints" / "step_000003"
    _, resumed = _train(run_dir / "resumed", diloco + [f"ckpt.resume={ckpt}"])
    rows = [json.loads(line) for line in (run_dir / "straight" / "metrics.jsonl").read_text().splitlines()] \
        if comm.rank() == 0 else None
    return straight, resumed, rows


def test_diloco_resumes_exactly_mid_period(pool2, tmp_path):
    """AdamW inside, Nesterov outside (momentum 0.9), H = 2: a checkpoint at step 3 (mid-period, after one
    outer step), then steps 3-4 and the outer step at 4. Resumed from step 3, each replica ends bitwise where
    the straight run's did, although the replicas hold different parameters there (step 5 is mid-period)."""
    (s0, r0, rows), (s1, r1, _) = pool2.run(_resume_fn, tmp_path, timeout=300)
    assert any(not torch.equal(s0[k], s1[k]) for k in s0)  # mid-period: the replicas differ by design
    for straight, resumed in ((s0, r0), (s1, r1)):
        for k in straight:
            assert torch.equal(resumed[k], straight[k]), k
    assert [r["step"] for r in rows if "loss" in r][-1] == 5


# --- config -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, needle", [
    (["parallel.sync=async", "parallel.max_staleness=-1"], "max_staleness"),
    (["parallel.sync=sometimes"], "parallel.sync"),
    (["parallel.sync=diloco", "parallel.sync_every=0"], "sync_every=0"),
    (["parallel.sync=diloco", "parallel.outer_momentum=1"], "momentum"),
    (["parallel.sync=local_sgd", "parallel.strategy=zero2"], "whole replicas only"),
    (["parallel.sync=diloco", "parallel.outer_dtype=int8"], "outer_dtype"),
])
def test_bad_sync_settings_are_one_line_errors(overrides, needle):
    cfg = config.load(None, overrides)
    with pytest.raises(ConfigError, match=needle) as e:
        cfg = config.validate(cfg, 2)
    assert "\n" not in str(e.value)
