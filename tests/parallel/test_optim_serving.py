"""The one serve-or-refuse rule between optimizers and the layers that shard parameters (optim/serving.py):
a toy optimizer whose update needs whole matrices, registered in the registry, is refused in one line by
every layer that hands the optimizer parts of matrices, and served by those that hand it whole ones."""
from __future__ import annotations

import pytest

from shardlab.errors import ConfigError
from shardlab.optim import registry
from shardlab.optim.serving import Factory, Pieces, serve
from optim_harness import build_with_toy

# layout -> what the rule answers at 2 gloo ranks
CASES = {
    "ddp": ["parallel.strategy=ddp"],
    "torch-ddp": ["parallel.strategy=torch-ddp"],
    "torch-zero1": ["parallel.strategy=torch-zero1"],
    "zero1": ["parallel.strategy=zero1"],
    "zero2": ["parallel.strategy=zero2"],
    "zero3": ["parallel.strategy=zero3"],
    "torch-fsdp2": ["parallel.strategy=torch-fsdp2"],
    "own tp": ["parallel.tp=2", "parallel.tp_impl=own"],
    "dtensor tp": ["parallel.tp=2", "parallel.tp_impl=dtensor"],
    "ep": ["parallel.strategy=ddp", "parallel.ep=2", "model.moe_experts=2"],
}
SERVED = ("ddp", "torch-ddp", "torch-zero1", "ep")
HANDS = {"zero1": "dim-0 row shards", "zero2": "dim-0 row shards", "zero3": "dim-0 row shards",
         "torch-fsdp2": "DTensor dim-0 shards", "own tp": "column or row slice", "dtensor tp": "DTensor shards"}


@pytest.mark.parametrize("name", list(CASES))
def test_whole_matrix_optimizer_served_or_refused_in_one_line(pool2, name):
    answers = pool2.run(build_with_toy, CASES[name], timeout=240)
    assert answers[0] == answers[1], answers  # every rank answers alike
    got = answers[0]
    if name in SERVED:
        assert got.startswith("served"), got
        return
    assert got.startswith("refused: optimizer toy-whole-matrix needs whole matrices"), got
    assert HANDS[name] in got and "\n" not in got, got


def test_elementwise_rows_are_served_everywhere():
    for row in registry.OPTIMIZERS.values():
        if row.whole_matrix:
            assert row.gathers, row  # only an optimizer that assembles matrices itself (muon)
            continue
        serve(Factory(row, lambda named: None), "zero3", "dim-0 row shards")  # no refusal
    serve(lambda named: None, "zero3", "dim-0 row shards")  # a bare callable: elementwise


def test_an_optimizer_that_gathers_is_handed_the_pieces_a_layer_describes():
    muon = registry.get("muon")
    pieces = Pieces("dim-0 row shards", lambda fqn: None)
    factory = Factory(muon, lambda named, pieces=(): pieces)
    serve(factory, "zero2", pieces)
    assert factory([]) == [pieces]
    with pytest.raises(ConfigError, match="optimizer muon needs whole matrices, and torch-fsdp2 hands it DTensor"):
        serve(factory, "torch-fsdp2", "DTensor dim-0 shards of each matrix (FSDP2)")
    toy = registry.OptimizerRow("muon-like", states=1, factory="x:y", whole_matrix=True)  # does not gather
    with pytest.raises(ConfigError, match="zero2 hands it dim-0 row shards"):
        serve(Factory(toy, None), "zero2", pieces)


def test_refusal_names_both_sides():
    row = registry.OptimizerRow("muon-like", states=1, factory="x:y", whole_matrix=True)
    serve(Factory(row, None), "ddp", None)  # whole matrices: served
    with pytest.raises(ConfigError, match="optimizer muon-like needs whole matrices, and zero2 hands it rows"):
        serve(Factory(row, None), "zero2", "rows")


def test_rows_declare_state_for_the_planner():
    adamw, sgd = registry.get("adamw"), registry.get("sgd")
    assert (adamw.states, adamw.bytes_per_param, adamw.step_bytes) == (2, 8, 28)
    assert (sgd.states, sgd.bytes_per_param, sgd.step_bytes) == (1, 4, 20)
    assert registry.training_name(type("C", (), {"train": object()})) == "adamw"
