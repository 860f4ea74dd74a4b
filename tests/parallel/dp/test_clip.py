"""The base layer's gradient clipping (parallel/dp/base.py): the fused norm and scaling match torch's own
clip_grad_norm_, and a step under the threshold leaves every gradient's bits alone."""
import pytest
import torch

from shardlab.parallel.dp.base import Strategy


def _layer_with_grads(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model(torch.randn(8, 16)).square().sum().backward()
    layer = Strategy.__new__(Strategy)  # no mesh needed: one rank, gradients not sharded
    layer.device, layer.group, layer.model = torch.device("cpu"), None, model
    layer.grads_are_sharded = lambda: False
    return layer, model


@pytest.mark.parity
def test_clipping_matches_torch_clip_grad_norm():
    layer, model = _layer_with_grads()
    ref, ref_model = _layer_with_grads()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref_model.parameters(), 1.0, foreach=True)
    norm = layer.clip_grad_norm_(1.0, groups=[])
    # the same formula (foreach norms, 1e-6, clamp at 1); the norm's sum is rounded once more (squared
    # norms added, then sqrt) than torch's vector_norm of the norms: a few ulp
    assert abs(norm - ref_norm.item()) <= 1e-6 * ref_norm.item() and norm > 1.0
    for p, q in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=0)


def test_a_norm_under_the_threshold_leaves_gradients_unchanged():
    layer, model = _layer_with_grads()
    before = [p.grad.clone() for p in model.parameters()]
    norm = layer.clip_grad_norm_(1e6, groups=[])
    assert 0 < norm < 1e6
    assert all(torch.equal(p.grad, b) for p, b in zip(model.parameters(), before))
