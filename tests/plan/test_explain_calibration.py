"""What `shardlab explain` measures beyond the machine's profile (plan/calibrate_run.py) and how the planner
uses it: the ranks' waits at tensor parallelism's syncs, the in-situ refit of the elementwise families."""
from dataclasses import replace

import pytest

from shardlab.plan.calibrate_compute import refit_in_situ_families
from shardlab.plan.hardware import PRESETS
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.model import ModelSpec
from shardlab.plan.step import evaluate

CPU = replace(PRESETS["A100-80G"], name="this", num_gpus=4, gpus_per_node=4, source="test")
MODEL = ModelSpec("t", n_layer=4, d_model=256, n_head=4, vocab=256, seq=128)
TRAIN = TrainSpec(global_batch=8, micro_batch=8, precision="fp32")


def test_sync_wait_interpolates_and_extrapolates_in_proportion():
    c = replace(CPU, sync_wait=((0.0, 0.0), (0.002, 0.001), (0.010, 0.003)))
    assert c.sync_wait_at(0.0) == 0.0 and c.sync_wait_at(-1) == 0.0
    assert c.sync_wait_at(0.001) == pytest.approx(0.0005)  # half way to the first point
    assert c.sync_wait_at(0.006) == pytest.approx(0.002)  # half way between the two points
    assert c.sync_wait_at(0.020) == pytest.approx(0.006)  # beyond the last: the same wait per second of segment
    assert replace(CPU, sync_wait=()).sync_wait_at(0.01) == 0.0  # presets: one device per rank, no wait


def test_tp_collectives_carry_the_sync_wait_and_dp_does_not():
    waits = ((0.0, 0.0), (0.001, 0.0005), (1.0, 0.5))  # half of every segment
    tp = Layout(dp=1, tp=2)
    plain, waiting = evaluate(MODEL, TRAIN, tp, CPU), evaluate(MODEL, TRAIN, tp, replace(CPU, sync_wait=waits))
    compute = plain.times["compute"]
    tp_lines = [cl for cl in waiting.comm if cl.c.group == "tp"]
    extra = sum(cl.exposed for cl in tp_lines) - sum(cl.exposed for cl in plain.comm if cl.c.group == "tp")
    # every call ends one of the segments the passes are cut into: the waits add up to half the compute
    assert extra == pytest.approx(0.5 * compute, rel=1e-9)
    assert waiting.step_time == pytest.approx(plain.step_time + extra, rel=1e-9)
    ddp = Layout(dp=2)
    two = replace(TRAIN, global_batch=16)
    assert evaluate(MODEL, two, ddp, replace(CPU, sync_wait=waits)).step_time == \
        evaluate(MODEL, two, ddp, CPU).step_time  # dp's bucketed syncs: the layout's miniature carries them


def test_in_situ_points_refit_the_family_line():
    # isolated GELU at 1.4 GB/s; inside the model it moved its bytes at 3.2 GB/s at two sizes
    table = {"ew:gelu": 1.4e9, "ewa:gelu": 0.0, "ewt:gelu:1000000": 1e6 / 3.2e9, "ewt:gelu:4000000": 4e6 / 3.2e9,
             "ew:add": 17e9}
    refit_in_situ_families(table)
    assert table["ew:gelu"] == pytest.approx(3.2e9, rel=1e-6) and table["ewa:gelu"] == pytest.approx(0.0, abs=1e-12)
    assert table["ew:add"] == 17e9 and "ew:ln" not in table  # families without in-situ points are left alone
