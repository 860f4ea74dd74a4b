"""Precision rows and their roles (precision.py), module converters, and own TP keeping a converted linear
converted (parallel/tp/modules.py): a toy converter applied before tp=2 still computes every product."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from shardlab import precision
from shardlab.parallel.tp import modules
from converter_harness import CountingLinear, converted_steps, count_linears


def test_rows_keep_the_config_surface():
    assert precision.NAMES == precision.WIRE_NAMES == precision.OUTER_NAMES == ("fp32", "bf16", "fp16")
    assert precision.LOSS_SCALED == ("fp16",)
    assert precision.PLANNED_AS == {"fp32": "fp32", "bf16": "bf16-autocast", "fp16": "fp16-autocast"}
    assert [precision.autocast_dtype(n) for n in precision.NAMES] == [None, torch.bfloat16, torch.float16]
    assert [precision.wire_dtype(n) for n in precision.NAMES] == [None, torch.bfloat16, torch.float16]


def test_a_converter_row_converts_and_has_no_autocast():
    from converter_harness import TOY, register_toy
    register_toy()
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))])
    assert precision.convert(model, "fp32") is model and type(model.blocks[0][0]) is nn.Linear
    precision.convert(model, TOY)
    assert type(model.blocks[0][0]) is CountingLinear and precision.autocast_dtype(TOY) is None
    assert TOY not in precision.NAMES  # a runtime row: not a choice of the config


def test_tp_module_of_a_plain_linear_is_f_linear_bitwise():
    torch.manual_seed(0)
    lin, x = nn.Linear(8, 6), torch.randn(3, 8)
    col = modules.ColumnParallelLinear(lin, None, 0, 1, False, "t", enter=False)
    row = modules.RowParallelLinear(lin, None, 0, 1, False, "t")
    assert col.converted is None and row.converted is None
    assert torch.equal(col(x), F.linear(x, lin.weight, lin.bias))
    assert [n for n, _ in col.named_parameters()] == ["weight", "bias"]


def test_tp_module_takes_the_matmul_of_a_converted_linear():
    lin = count_linears(_blocks(nn.Linear(8, 6))).blocks[0]
    col = modules.ColumnParallelLinear(lin, None, 0, 1, False, "t", enter=False)
    col(torch.randn(3, 8))
    assert col.converted is lin and lin.calls == 1 and lin.weight is None  # the piece lives in the TP module
    assert [n for n, _ in col.named_parameters()] == ["weight", "bias"]  # names as without a converter


def _blocks(*mods):
    m = nn.Module()
    m.blocks = nn.ModuleList(mods)
    return m


@pytest.mark.parity
def test_converter_survives_own_tp2(pool2):
    """The composition converts before TP: at tp = 2 every converted linear of the blocks still runs its
    own product, and the losses equal one device's converted run."""
    got = pool2.run(converted_steps, ["parallel.tp=2", "parallel.tp_impl=own"], timeout=300)[0]
    one = converted_steps(["parallel.strategy=single"])
    assert one["converted"] == one["ran"] > 0
    assert got["converted"] == got["ran"] == one["converted"]  # q, k, v, proj, fc, proj per block
    assert got["wrappers"] == ["ColumnParallelLinear", "RowParallelLinear"]
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=0)
