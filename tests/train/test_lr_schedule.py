"""The learning-rate schedule (optim.lr_at) at its exact values: linear warm-up that reaches train.lr on the last
warm-up step, then a cosine from train.lr to train.min_lr at train.steps, flat after. Pinned value by value: a
one-token change (warm-up from step instead of step + 1, the cosine's progress off by one) moves a loss curve by
too little for the training tests to notice, so it is checked here."""
import math
import types

import pytest

from shardlab.optim import lr_at


def _cfg(lr=1e-3, min_lr=1e-4, warmup=4, steps=12):
    return types.SimpleNamespace(train=types.SimpleNamespace(lr=lr, min_lr=min_lr, warmup_steps=warmup, steps=steps))


def test_warm_up_is_linear_and_reaches_the_peak_on_its_last_step():
    cfg = _cfg()
    assert [lr_at(s, cfg) for s in range(4)] == [1e-3 * k / 4 for k in (1, 2, 3, 4)]
    assert lr_at(0, cfg) > 0  # the first step moves the weights


def test_cosine_from_peak_to_min_at_the_last_step_and_flat_after():
    cfg = _cfg()
    assert lr_at(4, cfg) == pytest.approx(1e-3, rel=0, abs=1e-18)  # progress 0: the peak
    mid = 4 + (12 - 4) // 2
    assert lr_at(mid, cfg) == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4), rel=1e-15)  # half way: the mean
    assert lr_at(12, cfg) == pytest.approx(1e-4, rel=1e-15)
    assert lr_at(100, cfg) == lr_at(12, cfg)  # past train.steps: min_lr, not a second cosine
    for s in range(5, 12):
        p = (s - 4) / 8
        assert lr_at(s, cfg) == 1e-4 + 0.5 * (1e-3 - 1e-4) * (1 + math.cos(math.pi * p))
    values = [lr_at(s, cfg) for s in range(4, 13)]
    assert values == sorted(values, reverse=True)  # decays monotonically


def test_no_warm_up_starts_at_the_peak():
    cfg = _cfg(warmup=0, steps=10)
    assert lr_at(0, cfg) == 1e-3 and lr_at(10, cfg) == pytest.approx(1e-4, rel=1e-15)
