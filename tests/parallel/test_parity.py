"""Strategy parity through the real trainer: with the same seed and global batch, ddp, torch-ddp,
torch-fsdp2 (both reshard modes) and torch-zero1 at world 2 compute the same losses and final
parameters as `single` at world 1: in float64 to compare.py's FP64_TOL, and torch-ddp in fp32 against
compare.py's error model."""
import pytest
import torch

from parity_harness import train_run
from shardlab.testing import assert_float64_equal, assert_fp32_within_error_model, in_float64


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return in_float64(train_run, tmp_path_factory.mktemp("single"), ["parallel.strategy=single"], 1)


@pytest.fixture(scope="module")
def reference32(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("single32"), ["parallel.strategy=single"], 1)


@pytest.mark.parametrize("overrides", [
    ["parallel.strategy=ddp"],
    ["parallel.strategy=torch-ddp"],
    ["parallel.strategy=torch-fsdp2", "parallel.reshard_after_forward=true"],
    ["parallel.strategy=torch-fsdp2", "parallel.reshard_after_forward=false"],
    ["parallel.strategy=torch-zero1"],
], ids=lambda o: "-".join(x.split("=")[1] for x in o))
@pytest.mark.parity
def test_native_strategies_match_single(pool2, tmp_path, reference, overrides):
    ref_losses, ref_params, _ = reference
    results = pool2.run(in_float64, train_run, tmp_path, overrides, 2)
    losses, params, summary = results[0]
    assert len(losses) == 5
    # every step's loss and gradient norm (before clipping): Adam's update hides a gradient's scale
    assert_float64_equal(losses, ref_losses, "losses and gradient norms")
    assert_float64_equal(params, ref_params)
    assert summary["ranks_consistent"] is True
    assert summary["world_size"] == 2 and summary["tokens_per_step"] == 8 * 32
    # both ranks end with identical full parameters
    for name in params:
        assert torch.equal(results[1][1][name], params[name])


@pytest.mark.parity
def test_torch_ddp_fp32_within_the_error_model(pool2, tmp_path, reference, reference32):
    """fp32, the training precision, through the trainer: torch-ddp at world 2 is as close to the float64
    single run as the fp32 single run is (compare.py, 2.)."""
    losses, params, _ = pool2.run(train_run, tmp_path, ["parallel.strategy=torch-ddp"], 2)[0]
    assert_fp32_within_error_model(losses, reference32[0], reference[0], "losses and gradient norms")
    assert_fp32_within_error_model(params, reference32[1], reference[1])
