"""Muon under every sharding, through the real trainer: each layout's trajectory (losses, gradient norms and
final parameters) equals single-device Muon's in float64 (compare.py's FP64_TOL), at 2 and 4 gloo ranks.
The zero stages, own TP, torch-fsdp2 and DTensor TP gather each matrix on one rank and scatter the
orthogonalised update back (optim/muon/exchange.py; the DTensor layers' pieces: optim/dtensor_pieces.py);
ddp, torch-zero1, the pipeline's stages and EP's experts hold whole matrices."""
import pytest

from parity_harness import train_run
from shardlab.testing import assert_float64_equal, in_float64

MUON = ["train.optimizer=muon", "train.muon_lr=0.02"]
MOE = ["model.moe_experts=4", "model.moe_capacity=0"]  # dropless: the same tokens reach each expert anywhere

LAYOUTS = {
    "ddp": ["parallel.strategy=ddp"],
    "torch-zero1": ["parallel.strategy=torch-zero1"],
    "zero1": ["parallel.strategy=zero1"],
    "zero2": ["parallel.strategy=zero2"],
    "zero3": ["parallel.strategy=zero3"],
    "tp2": ["parallel.tp=2"],
    "pp2": ["parallel.pp=2", "parallel.pp_schedule=1f1b"],
    "torch-fsdp2": ["parallel.strategy=torch-fsdp2"],
    "dtensor-tp2": ["parallel.tp=2", "parallel.tp_impl=dtensor"],
}
# 4 ranks: two levels (a replica or TP group around a shard group), and EP's experts
LAYOUTS4 = {
    "hsdp-zero3": ["parallel.strategy=zero3", "parallel.dp_replicate=2"],
    "tp2-zero3": ["parallel.tp=2", "parallel.strategy=zero3"],
    "fsdp2-dtensor-tp2": ["parallel.tp=2", "parallel.tp_impl=dtensor", "parallel.strategy=torch-fsdp2"],
    "fsdp2-hsdp": ["parallel.strategy=torch-fsdp2", "parallel.dp_replicate=2"],  # (Replicate, Shard(0))
    "fsdp2-cp2": ["parallel.strategy=torch-fsdp2", "parallel.cp=2"],  # FSDP2 over the flattened dp x cp mesh
    "ep2-ddp": ["parallel.ep=2", *MOE],
    # d 66 over 4 ranks: torch.chunk's rows 17, 17, 17, 15 (the short last piece padded, then cut off again)
    "fsdp2-uneven": ["parallel.strategy=torch-fsdp2", "model.d_model=66", "model.n_head=6"],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """single(model overrides) -> single-device Muon's run of that model (each computed once per module)."""
    runs = {}

    def run(model=()):
        if model not in runs:
            runs[model] = in_float64(train_run, tmp_path_factory.mktemp("single"),
                                     ["parallel.strategy=single", *model, *MUON], 1)
        return runs[model]

    return run


def _model(layout) -> tuple:
    return tuple(o for o in layout if o.startswith("model."))


def _assert_matches(results, ref):
    ref_losses, ref_params, _ = ref
    losses, _, summary = results[0]
    params = {k: v for r in reversed(results) for k, v in r[1].items()}  # a pipeline's ranks: their stages'
    assert len(losses) == 5
    assert_float64_equal(losses, ref_losses, "losses and gradient norms")
    assert_float64_equal(params, ref_params)
    assert summary["ranks_consistent"] is True


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parity
def test_muon_layouts_match_single(pool2, tmp_path, single, name):
    layout = [*LAYOUTS[name], *MUON]
    _assert_matches(pool2.run(in_float64, train_run, tmp_path, layout, 2, timeout=400), single(_model(layout)))


@pytest.mark.parametrize("name", list(LAYOUTS4))
@pytest.mark.parity
def test_muon_layouts_at_4_ranks_match_single(pool4, tmp_path, single, name):
    layout = [*LAYOUTS4[name], *MUON]
    _assert_matches(pool4.run(in_float64, train_run, tmp_path, layout, 4, timeout=600), single(_model(layout)))
