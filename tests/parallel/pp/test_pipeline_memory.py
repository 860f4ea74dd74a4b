"""Activation memory of the pipeline schedules, measured: the saved tensors autograd holds per microbatch
on each stage (saved-tensor hooks, observe.activations.HeldActivations) during one real step of a tiny GPT
at pp = 2. The schedules' memory argument: GPipe holds all m microbatches, 1F1B at most p (p - r on rank r),
ZB-H1 at most p too (a postponed W keeps its microbatch's inputs until it runs)."""
import pytest

from shardlab.parallel.pp import build
from shardlab.parallel.pp.simulate import simulate

M = 4


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb"])
def test_held_activations_match_the_schedule(pool2, name):
    from shardlab.parallel.pp.testing import held_activations

    got = pool2.run(held_activations, name, M)
    derived = simulate(build(name, 2, M)).peak_activations
    assert [g["peak_microbatches"] for g in got] == derived
    if name == "gpipe":
        assert derived == [M, M]
    else:
        assert max(derived) <= 2  # p
    for g in got:
        assert g["after_step"] == 0  # every microbatch's activations are freed by the end of the step
        # every microbatch of a stage saves the same tensors: the peak is that many microbatches' worth
        # (ZB-H1: a microbatch between its I and its W holds only its linear layers' inputs, so less)
        full = g["peak_microbatches"] * g["bytes_per_microbatch"]
        assert g["peak_bytes"] == full if name != "zb" else 0 < g["peak_bytes"] <= full


def test_1f1b_holds_fewer_bytes_than_gpipe(pool2):
    from shardlab.parallel.pp.testing import held_activations

    gpipe = pool2.run(held_activations, "gpipe", M)
    one = pool2.run(held_activations, "1f1b", M)
    assert one[0]["peak_bytes"] * M // 2 == gpipe[0]["peak_bytes"]  # rank 0: 2 of 4 microbatches
    assert one[1]["peak_bytes"] * M == gpipe[1]["peak_bytes"]  # rank 1 (last stage): 1 of 4
