"""Pipeline parallelism through the composition the trainer uses: every schedule, own and torch, and PP
composed with data-parallel layers, equal one device over a few steps with gradient accumulation and
clipping (the tied embedding summed between the first and last stage and counted once in the norm)."""
import pytest

from pipeline_harness import train
from shardlab.config import Config
from shardlab.testing import assert_params_close
from shardlab.testing.compare import lr_sum

STEPS = 3


@pytest.fixture(scope="module")
def reference():
    return train(STEPS, dp="single")


def _check(results, ref, what):
    for r in results:
        # fp32, the same sums in another order (per stage, then across ranks): round-off only
        assert r["losses"] == pytest.approx(ref["losses"], rel=1e-5), what
    merged = {}
    for r in results:
        merged.update(r["params"])
    # tight, except where Adam turns round-off of a (near-)zero gradient into an update: see compare.py
    assert_params_close(merged, ref["params"], lr_sum=lr_sum(Config(), STEPS))


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1),
                                        ("torch-gpipe", 1), ("torch-1f1b", 1), ("torch-interleaved", 2),
                                        ("torch-zb", 2)])
def test_every_schedule_trains_like_one_device(pool2, reference, schedule, v):
    results = pool2.run(train, STEPS, pp=2, pp_schedule=schedule, pp_virtual=v)
    _check(results, reference, schedule)


@pytest.mark.parametrize("dp", ["ddp", "zero1", "zero2", "torch-fsdp2"])
def test_pipeline_composes_with_data_parallel(pool4, reference, dp):
    """World 4 = pp 2 x dp 2: each stage's gradients reduced over its data-parallel pair, once a step."""
    results = pool4.run(train, STEPS, dp=dp, pp=2, pp_schedule="1f1b")
    _check(results, reference, f"pp2 x {dp}")
