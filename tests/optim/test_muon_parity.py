"""Muon under every sharding, through the real trainer: each layout's trajectory (losses, gradient norms and
final parameters) equals single-device Muon's in float64 (compare.py's FP64_TOL) at 2 gloo ranks. The zero
stages and own TP gather each matrix on one rank and scatter the orthogonalised update back
(optim/muon/exchange.py); ddp and the pipeline's stages hold whole matrices."""
import pytest

from parity_harness import train_run
from shardlab.testing import assert_float64_equal, in_float64

MUON = ["train.optimizer=muon", "train.muon_lr=0.02"]

LAYOUTS = {
    "ddp": ["parallel.strategy=ddp"],
    "torch-zero1": ["parallel.strategy=torch-zero1"],
    "zero1": ["parallel.strategy=zero1"],
    "zero2": ["parallel.strategy=zero2"],
    "zero3": ["parallel.strategy=zero3"],
    "tp2": ["parallel.tp=2"],
    "pp2": ["parallel.pp=2", "parallel.pp_schedule=1f1b"],
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return in_float64(train_run, tmp_path_factory.mktemp("single"), ["parallel.strategy=single", *MUON], 1)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parity
def test_muon_layouts_match_single(pool2, tmp_path, reference, name):
    ref_losses, ref_params, _ = reference
    results = pool2.run(in_float64, train_run, tmp_path, [*LAYOUTS[name], *MUON], 2, timeout=400)
    losses, _, summary = results[0]
    params = {**results[1][1], **results[0][1]}  # a pipeline's ranks hold their stages' parameters
    assert len(losses) == 5
    assert_float64_equal(losses, ref_losses, "losses and gradient norms")
    assert_float64_equal(params, ref_params)
    assert summary["ranks_consistent"] is True
