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


def _wsd(lr=1e-3, min_lr=1e-4, warmup=2, steps=10, fraction=0.3):
    cfg = _cfg(lr, min_lr, warmup, steps)
    cfg.train.lr_schedule, cfg.train.decay_fraction = "wsd", fraction
    return cfg


def test_wsd_warms_up_holds_then_decays_linearly_to_min_on_the_last_step():
    cfg = _wsd()
    values = [lr_at(s, cfg) for s in range(10)]
    assert values[:2] == [1e-3 / 2, 1e-3]  # the same warm-up
    assert values[2:7] == [1e-3] * 5  # stable until the last ceil(0.3 x 10) = 3 steps
    assert values[7:] == [1e-4 + (1e-3 - 1e-4) * (1 - k / 3) for k in (1, 2, 3)]  # linear, min_lr at step 9
    assert values[-1] == 1e-4
    assert lr_at(50, cfg) == 1e-4  # flat after


def test_wsd_resumes_mid_phase_on_the_same_curve():
    """A pure function of the step: a run resumed at any step (stable or decay) continues the same values."""
    a, b = _wsd(), _wsd()
    assert [lr_at(s, a) for s in range(5, 10)] == [lr_at(s, b) for s in range(5, 10)]
    short = _wsd(warmup=8, steps=10, fraction=0.5)  # the decay never eats the warm-up
    assert [lr_at(s, short) for s in range(8)] == [1e-3 * k / 8 for k in range(1, 9)]
    assert lr_at(9, short) == 1e-4
