"""Expert parallelism on the trainer's build path: the model built on the meta device from the config, each
rank allocating and drawing what it holds (parallel/materialize.py, parallel/init_shards.py).

Allocation replaces every meta parameter by a new object. The expert layer must see the experts the model
holds after that, not the meta ones it split: otherwise their gradients are neither reduced nor scaled, and
the gradient norm counts them as dense copies, so each rank clips by its own norm and the data-parallel
replicas diverge. Under ep=2 over two ranks (gloo), a few steps with clipping on: the layer's experts are the
model's parameters, the dense parameters are bitwise equal on both ranks, and the run equals one device built
the same way (losses, every final parameter), as the whole-model build does (test_ep.py)."""
import pytest
import torch

from ep_harness import train
from shardlab.testing import assert_float64_equal, in_float64
from shardlab.testing.compare import FP64_TOL

pytestmark = pytest.mark.timeout(300)

STEPS = 3


def test_meta_built_ep2_keeps_replicas_equal_and_equals_single(pool2):
    ref = in_float64(train, 1, 0.0, "single", steps=STEPS, meta=True)
    res = pool2.run(in_float64, train, 2, 0.0, steps=STEPS, meta=True)
    assert all(r["expert_params_held"] for r in res)  # the layer's experts are the allocated parameters
    dense = [r["dense"] for r in res]
    assert dense[0].keys() == dense[1].keys() and "wte.weight" in dense[0]
    assert not any("experts" in n for n in dense[0])
    for name, p in dense[0].items():
        assert torch.equal(p, dense[1][name]), f"{name}: the data-parallel replicas differ"
    for r in res:
        assert r["loss"] == pytest.approx(ref["loss"], rel=FP64_TOL)
    assert_float64_equal(res[0]["params"], ref["params"])
