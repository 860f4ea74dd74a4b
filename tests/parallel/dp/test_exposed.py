"""The last-bucket rule (`parallel.last_bucket_mb`): the assignment, the planner's copy of it, torch DDP
parity with it on 2 gloo ranks, and the exposed-communication figure's per-step arithmetic."""
from __future__ import annotations

import random

import pytest
import torch

from shardlab.bench.exposed import frac_stats, step_fractions
from shardlab.observe import analysis
from shardlab.plan.comm import ddp_buckets
from shardlab.parallel.dp.buckets import assign
from ddp_harness import _assert_same_grad, _grads, _model, _step, _wrap

pytestmark = pytest.mark.timeout(120)


def test_tail_buckets_double_from_the_last_until_the_cap():
    key = ["f32"] * 7
    assert assign([4, 4, 4, 4, 1, 2], key[:6], [4, 100]) == [[0], [1, 2, 3, 4, 5]]
    # first bucket stays first; then from the end: <= 3, <= 6, <= 12 bytes
    assert assign([4, 4, 4, 4, 1, 2], key[:6], [4, 100], last=3) == [[0], [1, 2], [3], [4, 5]]
    # never empty: a last parameter larger than the limit is a bucket of its own
    assert assign([4, 4, 4, 4, 1, 9], key[:6], [4, 100], last=3) == [[0], [1, 2], [3, 4], [5]]
    # the tail stops where its limit would reach the cap (8): the rest is packed as before
    assert assign([4, 4, 4, 4, 4, 4, 1], key, [4, 8], last=2) == [[0], [1, 2], [3, 4], [5], [6]]
    # per dtype: each key's own first bucket and tail
    assert assign([4, 1, 4, 1], ["a", "b", "a", "b"], [4, 100], last=1) == [[0], [1, 3], [2]]


def test_planner_bucket_sizes_equal_the_engine_assignment():
    rng = random.Random(0)
    for _ in range(300):
        sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 30))]
        first, cap, last = rng.randint(1, 60), rng.randint(1, 200), rng.choice([0, 1, 10, 40, 500])
        engine = [sum(sizes[i] for i in b) for b in assign(sizes, ["f32"] * len(sizes), [first, cap], last)]
        assert ddp_buckets(sizes, first, cap, last) == engine, (sizes, first, cap, last)


def _last_bucket_fn():
    """ddp with a last bucket of 0.3 MiB vs torch DDP, 3 steps (initial and rebuilt buckets): gradients
    bitwise equal (world 2), and after the rebuild the tied embedding, ready last, sits in the last bucket."""
    kw = dict(bucket_mb=0.05, first_bucket_mb=0.05, last_bucket_mb=0.3)
    out = {}
    for kind in ("gpt", "frozen_tied"):
        ours_model, ref_model = _model(kind), _model(kind)
        ours, ref = _wrap("ddp", ours_model, **kw), _wrap("torch-ddp", ref_model, **kw)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours_model, ref_model)]
        for step in range(3):
            for strategy in (ours, ref):
                _step(strategy, kind, step)
            a, b = _grads(ours_model), _grads(ref_model)
            for n in a:  # (frozen parameters: None on both sides)
                assert (a[n] is None) == (b[n] is None), n
                if a[n] is not None:
                    _assert_same_grad(a[n], b[n], True, 1.0, f"{kind} step {step} {n}")
            for opt, strategy in zip(opts, (ours, ref)):
                strategy.optimizer_step(opt)
                strategy.zero_grad(opt)
        layout = ours.bucket_layout()
        out[kind] = (layout[-1]["params"], layout[-1]["bytes"], len(layout))
    return out


def test_last_bucket_holds_the_embedding_and_grads_equal_torch_ddp(pool2):
    for out in pool2.run(_last_bucket_fn):
        params, nbytes, n = out["gpt"]
        assert "wte.weight" in params and nbytes <= 0.3 * 2**20 and n > 2
        assert out["frozen_tied"][0][-1] == "emb.weight"  # the tied embedding is ready last


def _coll(t0, t1, tag, t_wait):
    return {"name": "all_reduce", "cat": "comm", "t0": t0, "t1": t1, "async": True, "t_wait": t_wait,
            "args": {"op": "all_reduce", "seq": 0, "group": "world", "group_size": 2, "bytes": 8,
                     "wire_bytes": 8, "dtype": "float32", "tag": tag, "step": 0, "phase": "backward"}}


def test_exposed_fraction_per_step_is_the_mean_over_ranks_grouped_by_layout():
    def rank(extra):  # two steps, layouts A then B; backward [0, 8] and [10, 18]
        ev = [{"name": "step", "cat": "step", "t0": 0, "t1": 10, "args": {"step": 0, "layout": "A"}},
              {"name": "step", "cat": "step", "t0": 10, "t1": 20, "args": {"step": 0, "layout": "B"}},
              {"name": "backward", "cat": "compute", "t0": 0, "t1": 8, "args": {}},
              {"name": "backward", "cat": "compute", "t0": 10, "t1": 18, "args": {}},
              _coll(7, 9 + extra, "bucket0", 8), _coll(17.5, 18.5, "bucket0", 18)]
        return analysis.from_events(0, ev)
    per = step_fractions({0: rank(0), 1: rank(1)}, key=lambda a: a["layout"])
    assert per["A"][0]["frac"] == pytest.approx(0.15)  # exposed 1 and 2 s of 10 s: mean 1.5
    assert per["B"][0]["frac"] == pytest.approx(0.05)
    s = frac_stats([0.1, 0.2, 0.3])
    assert s["median"] == 0.2 and s["ci90"][0] <= 0.2 <= s["ci90"][1]
