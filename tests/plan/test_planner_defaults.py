"""The planner's defaults are the trainer's (plan/from_config.py writes train.dtype's default as a literal,
since plan/ may not import config/)."""
from shardlab import precision
from shardlab.config.schema import TrainConfig
from shardlab.plan.from_config import trainer_defaults


def test_the_planned_precision_is_train_dtypes_default():
    assert trainer_defaults()["precision"] == precision.PLANNED_AS[TrainConfig.dtype]
    assert trainer_defaults()["flash_attention"] is True


def test_the_trainers_full_recompute_stops_early_as_planned():
    """shardlab's recompute is torch's non-reentrant checkpoint, whose early stop leaves the block's last linear
    out of a full recompute (without dropout masks after it): the trainer's backward runs 5 of a GPT-2 block's 6
    linears again, and the planner's default plan (trainer_defaults: recompute_early_stop) counts the same 5."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from shardlab.model.gpt import GPTConfig, build_model
    from shardlab.parallel import recompute
    from shardlab.plan.model import ModelSpec
    from shardlab.plan.ops import layer_ops
    from shardlab.plan.recompute import recomputed_ops

    mm = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func in mm
            return func(*args, **(kwargs or {}))

    reruns = {}
    for drop in (0.0, 0.1):
        model = build_model(GPTConfig(n_layer=1, n_head=4, d_model=64, vocab_size=256, max_seq_len=32,
                                      dropout=drop), 0)
        block = next(iter(model.blocks.values())) if isinstance(model.blocks, torch.nn.ModuleDict) else model.blocks[0]
        backward = []
        for mode in ("none", "full"):
            if mode == "full":
                recompute.wrap_block(block, "full")
            y = block(torch.randn(2, 32, 64, requires_grad=True))
            with Count() as c:
                y.sum().backward()
            backward.append(c.n)
        reruns[drop] = backward[1] - backward[0]
    assert trainer_defaults()["recompute_early_stop"] is True
    ops = layer_ops(ModelSpec("t", n_layer=1, d_model=64, n_head=4, vocab=256, seq=32), 2, 32, 1, 4, True)
    planned = [o for o in recomputed_ops(ops, "full", early_stop=True) if o.kind == "gemm" and o.name != "attention"]
    assert reruns == {0.0: len(planned), 0.1: len(planned) + 1} == {0.0: 5, 0.1: 6}
