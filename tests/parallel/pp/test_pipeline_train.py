"""Pipeline parallelism through the composition the trainer uses: every schedule, own and torch, and PP
composed with data and tensor parallelism, equal one device over 5 steps of 4 accumulated microbatches
with clipping (the tied embedding summed between the first and last stage and counted once in the norm).
Runs are cached per layout, so a schedule run for its parity test is reused by the own-vs-torch test.
Parity runs in float64 to compare.py's FP64_TOL (portable across CPU kernels: compare.py says why); 1f1b
once in fp32 against compare.py's error model."""
import functools

import pytest

from pipeline_harness import train
from shardlab.testing import assert_float64_equal, assert_fp32_within_error_model, in_float64

STEPS = 5  # the measure: 5 optimizer steps, each accumulating 4 microbatches (train's accum=4)
_RUNS: dict = {}


@pytest.fixture(scope="module")
def reference():
    return _reference()


@functools.lru_cache(maxsize=None)
def _reference() -> dict:
    # kept for the session: the world-8 test runs apart from the module's others (tests/conftest.py puts the
    # world-8 tests together), and its module's fixtures are set up again for it
    return in_float64(train, STEPS, dp="single")


def _run(pool, **parallel) -> list:
    key = (pool.world_size, tuple(sorted(parallel.items())))
    if key not in _RUNS:
        _RUNS[key] = pool.run(in_float64, train, STEPS, timeout=300, **parallel)
    return _RUNS[key]


def _merged(results) -> dict:
    merged = {}
    for r in results:
        merged.update(r["params"])
    return merged


def _check(results, ref, what):
    for r in results:
        # float64, the same sums in another order (per stage, then across ranks): round-off only
        assert_float64_equal(r["losses"], ref["losses"], f"{what} losses")
    assert_float64_equal(_merged(results), ref["params"])

SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 1), ("zbv", 2), ("dualpipev", 2),
             ("torch-gpipe", 1), ("torch-1f1b", 1), ("torch-interleaved", 2), ("torch-zb", 2),
             ("torch-looped-bfs", 2), ("torch-zbv", 2), ("torch-dualpipev", 2)]


@pytest.mark.parity
@pytest.mark.parametrize("schedule,v", SCHEDULES)
def test_every_schedule_trains_like_one_device(pool2, reference, schedule, v):
    _check(_run(pool2, pp=2, pp_schedule=schedule, pp_virtual=v), reference, schedule)


@pytest.mark.parity
def test_1f1b_fp32_within_the_error_model(pool2, reference):
    """fp32, the training precision: 1f1b at pp=2 as close to the float64 single run as fp32 single is."""
    single = train(STEPS, dp="single")
    results = pool2.run(train, STEPS, timeout=300, pp=2, pp_schedule="1f1b")
    for r in results:
        assert_fp32_within_error_model(r["losses"], single["losses"], reference["losses"], "losses")
    assert_fp32_within_error_model(_merged(results), single["params"], reference["params"])


@pytest.mark.parity
@pytest.mark.parametrize("own,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_own_and_torch_schedules_agree(pool2, own, v):
    """The same schedule run by the own engine and by torch.distributed.pipelining: the same stages run the
    same microbatches in the same order, so losses and parameters agree as they agree with one device. (zb, ZB-H1 on one stage per rank, has no torch twin: torch's zero-bubble schedules are
    interleaved or V-shaped; all of them are compared with one device above.)"""
    mine = _run(pool2, pp=2, pp_schedule=own, pp_virtual=v)
    theirs = _run(pool2, pp=2, pp_schedule=f"torch-{own}", pp_virtual=v)
    for a, b in zip(mine, theirs):
        assert_float64_equal(a["losses"], b["losses"], f"{own} losses")
    assert_float64_equal(_merged(mine), _merged(theirs))


@pytest.mark.parity
@pytest.mark.parametrize("dp,schedule,v", [("ddp", "1f1b", 1), ("zero1", "1f1b", 1), ("zero2", "1f1b", 1),
                                           ("torch-fsdp2", "1f1b", 1), ("ddp", "zb", 1), ("zero1", "zb", 1),
                                           ("ddp", "interleaved", 2), ("zero1", "interleaved", 2),
                                           ("zero2", "interleaved", 2),
                                           ("ddp", "torch-1f1b", 1), ("zero1", "torch-zbv", 2),
                                           ("ddp", "zbv", 2), ("zero1", "zbv", 2), ("zero2", "zbv", 2),
                                           ("ddp", "dualpipev", 2), ("zero1", "dualpipev", 2),
                                           ("zero2", "dualpipev", 2),
                                           ("ddp", "torch-zbv", 2), ("zero2", "torch-zbv", 2),
                                           ("ddp", "torch-dualpipev", 2), ("zero1", "torch-dualpipev", 2),
                                           ("zero2", "torch-dualpipev", 2)])
def test_pipeline_composes_with_data_parallel(pool4, reference, dp, schedule, v):
    """World 4 = pp 2 x dp 2: each stage's gradients reduced over its data-parallel pair, once a step. With
    two virtual stages per rank both chunks' gradients are reduced, in the rank's last backward; with zb
    that backward is a W, which also carries the gradients its I halves computed (LayerNorms, embeddings);
    torch's schedules hand theirs to the (own) data-parallel layer after the step."""
    _check(_run(pool4, dp=dp, pp=2, pp_schedule=schedule, pp_virtual=v), reference, f"pp2 x {dp} ({schedule})")


@pytest.mark.parity
@pytest.mark.parametrize("schedule,v,sp", [("1f1b", 1, False), ("interleaved", 2, True), ("torch-1f1b", 1, False),
                                           ("zbv", 2, True), ("dualpipev", 2, False)])
def test_pipeline_composes_with_tensor_parallel(pool4, reference, schedule, v, sp):
    """World 4 = pp 2 x tp 2: each stage's part split over its tp pair (the vocabulary-parallel embedding on
    the first stage, head and loss on the last); activations go between the same tp rank of the two stages,
    split by sequence under SP."""
    results = _run(pool4, pp=2, tp=2, sp=sp, pp_schedule=schedule, pp_virtual=v)
    _check(results, reference, f"pp2 x tp2 ({schedule}, sp={sp})")


@pytest.mark.parity
def test_pipeline_x_tensor_x_data_parallel_at_world_8(pool8, reference):
    """World 8 = pp 2 x dp 2 x tp 2 (zero2, SP): 8 gloo processes (the session's pool8) and a generous timeout."""
    results = pool8.run(in_float64, train, STEPS, dp="zero2", pp=2, tp=2, sp=True, pp_schedule="1f1b", timeout=600)
    _check(results, reference, "pp2 x dp2 x tp2")
