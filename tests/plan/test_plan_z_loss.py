"""The eager z-loss (TrainSpec.z_loss, ops.Z_LOSS_BYTES): its passes over the fp32 logits counted through torch's
dispatcher, and planned in the head where a run computes it beside its loss."""
from dataclasses import replace

import pytest

from shardlab.plan import ops
from shardlab.plan.cli import main as plan_main
from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.presets import PRESETS
from shardlab.plan.step import evaluate
from shardlab.plan.train_spec import TrainSpec


def _bytes_mode():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Bytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.__name__.split(".")[0] not in ("detach", "view", "unsqueeze", "expand", "alias"):
                self.total += sum(x.numel() * x.element_size() for x in tree_flatten((args, kwargs, out))[0]
                                  if isinstance(x, torch.Tensor))
            return out
    return Bytes


def test_the_z_loss_bytes_are_counted_through_torchs_dispatcher():
    """Forward: logsumexp as ATen's composite runs it (amax, the shifted copy, exp, sum: torch._refs.logsumexp takes
    the same steps as ReduceOps.cpp's logsumexp_out_impl), the squares and sum per token. Backward: what the
    z-loss adds to the cross-entropy's backward of the same fp32 logits (logsumexp_backward's subtraction, exp and
    product, and autograd's sum of the two gradients). Per logit, rounded: the per-token vectors are below 1/10 of
    a byte a logit at this vocabulary."""
    import torch
    import torch._refs as refs

    Bytes = _bytes_mode()
    T, v = 64, 4096
    x = torch.randn(T, v, requires_grad=True)
    target = torch.randint(0, v, (T,))
    with Bytes() as fwd:
        refs.logsumexp(x.detach(), -1).pow(2).sum()
    ce = torch.nn.functional.cross_entropy(x, target, reduction="sum")
    with Bytes() as ce_only:
        ce.backward()
    x.grad = None
    both = torch.nn.functional.cross_entropy(x, target, reduction="sum") + 1e-5 * x.logsumexp(-1).pow(2).sum()
    with Bytes() as with_z:
        both.backward()
    n = T * v
    assert (round(fwd.total / n), round((with_z.total - ce_only.total) / n)) == ops.Z_LOSS_BYTES


def test_the_z_loss_is_planned_in_the_head():
    model = replace(PRESETS["llama3-8b"], seq=4096)
    c = load_cluster("H100-SXM", 8)
    train = TrainSpec(global_batch=8, micro_batch=1, seq=4096, flash_attention=True)
    base, z = (evaluate(model, replace(train, z_loss=flag), Layout(dp=8), c) for flag in (False, True))
    (op,) = [o for o in ops.head_ops(model, 1, 4096, 1, 2, z_loss=True) if o.name == "z_loss"]
    n = 4096 * model.vocab
    assert (op.bytes, op.bwd_bytes) == (24 * n, 36 * n)
    assert z.step_time > base.step_time
    assert "z-loss" in z.explain["forward"] and "z-loss" not in base.explain["forward"]


@pytest.mark.parametrize("value,code", [("true", 0), ("maybe", 2)])
def test_the_cli_key(value, code, capsys):
    assert plan_main(["model=gpt2", "cluster=H100-SXM", "gpus=8", f"z_loss={value}"]) == code
    if code:
        assert "z_loss" in capsys.readouterr().err
