"""Activation recompute (train.recompute): the same numbers as without it, less kept in memory.

fp32, dropout off: losses and final parameters with full and selective recompute are bitwise equal to
none over 5 steps under ddp and zero3 at world 2 (recompute reruns the same kernels on the same inputs, so
nothing may differ, not even the last bit); with dropout on, still equal: the RNG state is replayed.
Activation bytes per block are counted exactly and equal the formula of docs/memory.md.
"""
import pytest
import torch

from memory_harness import composed_modes, modes
from shardlab.config import Config, ConfigError, load, validate
from shardlab.model.gpt import GPTConfig, build_model
from shardlab.observe.activations import ActivationBytes, formula_bytes
from shardlab.parallel import recompute
from zero_harness import TINY

DROPOUT = dict(TINY, dropout=0.1)


def _bitwise(out: list[dict], ref: str = "none", others=("full", "selective")):
    for rank_out in out:
        for mode in others:
            assert rank_out[mode]["losses"] == rank_out[ref]["losses"], mode
    for mode in others:
        got, want = out[0][mode]["params"], out[0][ref]["params"]
        assert got.keys() == want.keys()
        for k in want:
            assert torch.equal(got[k], want[k]), (mode, k)


def _cfg(mode: str, every: int = 1) -> Config:
    cfg = Config()
    cfg.train.recompute, cfg.train.recompute_every = mode, every
    return cfg


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_parameter_names_and_state_dict_unchanged(mode):
    """The block's class is swapped, no wrapper module: checkpoints keep their keys."""
    ref = build_model(GPTConfig(**TINY), 0)
    model = recompute.apply(build_model(GPTConfig(**TINY), 0), _cfg(mode)).part
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert list(model.state_dict()) == list(ref.state_dict())
    assert all(getattr(b, "recompute", None) == mode for b in model.blocks.values())
    model.load_state_dict(ref.state_dict())  # a checkpoint written without recompute loads as is


def test_recompute_every_k_picks_blocks_k_minus_1_2k_minus_1():
    model = recompute.apply(build_model(GPTConfig(**dict(TINY, n_layer=5)), 0), _cfg("full", every=2)).part
    assert [k for k, b in model.blocks.items() if getattr(b, "recompute", None)] == ["1", "3"]


@pytest.mark.parametrize("overrides,needle", [(["train.recompute=some"], "train.recompute='some'"),
                                              (["train.recompute_every=0"], "train.recompute_every=0")])
def test_bad_recompute_keys_are_one_clear_error(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        validate(load(None, overrides), 2)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_world1_bitwise_equal_to_none(dropout):
    """In process (no group): 5 steps, with dropout the masks must be replayed in recompute."""
    _bitwise([modes("single", model_kw=dict(TINY, dropout=dropout))])


def test_ddp_world2_bitwise_equal_to_none(pool2):
    _bitwise(pool2.run(modes, "ddp"))


def test_zero3_world2_bitwise_equal_to_none_and_gathers_unchanged(pool2):
    """zero3's per-block all-gathers (before forward, and before backward, which now also feeds the
    recompute) happen exactly as without recompute: same collectives, same order, same results."""
    out = pool2.run(modes, "zero3")
    _bitwise(out)
    for rank_out in out:
        assert rank_out["none"]["gathers"] and all(
            rank_out[m]["gathers"] == rank_out["none"]["gathers"] for m in ("full", "selective"))


def test_zero3_wrap_layer_world2_bitwise_equal_to_none(pool2):
    """wrap=layer puts zero3 units (attn, mlp) inside the recomputed block: their hooks fire again in
    the recompute, which must gather the parameters it needs and keep them for the backward."""
    out = pool2.run(modes, "zero3", wrap="layer")
    _bitwise(out)
    for rank_out in out:  # the same all-gathers, the inner units' possibly earlier
        assert sorted(rank_out["full"]["gathers"]) == sorted(rank_out["none"]["gathers"])


def test_dropout_world2_zero3_equal_to_none(pool2):
    """Dropout masks are replayed in recompute: the same losses and parameters as without."""
    _bitwise(pool2.run(modes, "zero3", model_kw=DROPOUT))


# --- activation bytes --------------------------------------------------------------------------------

SIZES = dict(n_layer=3, n_head=4, d_model=64, vocab_size=256, max_seq_len=32)


def _measure(mode: str, batch: int = 3):  # b·s = 96 differs from h = 64: no coincidental sizes
    model = recompute.apply(build_model(GPTConfig(**SIZES), 0), _cfg(mode)).part
    x = torch.randint(0, 256, (batch, SIZES["max_seq_len"]))
    with ActivationBytes(model) as acts:
        out = model(x)
    out.sum().backward()  # the counted graph is a real one: backward (and recompute) still runs
    return acts


def test_activation_bytes_none_equal_formula_exactly():
    """Without recompute autograd's saved tensors are what the block holds, and both equal the formula
    sbh(64 + (16 + 4a)/h) bytes, to the byte."""
    acts = _measure("none")
    want = formula_bytes(3, SIZES["max_seq_len"], SIZES["d_model"], SIZES["n_head"], "none")
    assert set(acts.saved.values()) == {want} and acts.held == acts.saved


def test_full_recompute_keeps_the_block_input_only():
    acts = _measure("full")
    s, h = SIZES["max_seq_len"], SIZES["d_model"]
    assert set(acts.held.values()) == {4 * 3 * s * h} == {formula_bytes(3, s, h, SIZES["n_head"], "full")}
    assert acts.saved == acts.held  # the checkpoint saves its input, nothing else


def test_selective_recompute_keeps_what_its_policy_saves():
    """Input + q, k, v + attention output and log-sum-exp + both projections + the 4h MLP matmul."""
    acts = _measure("selective")
    want = formula_bytes(3, SIZES["max_seq_len"], SIZES["d_model"], SIZES["n_head"], "selective")
    assert set(acts.held.values()) == {want}
    assert want < formula_bytes(3, SIZES["max_seq_len"], SIZES["d_model"], SIZES["n_head"], "none")


@pytest.mark.parametrize("name", ["zero1", "zero2", "torch-ddp", "torch-fsdp2", "torch-zero1"])
def test_other_dp_layers_world2_bitwise_equal_to_none(pool2, name):
    _bitwise(pool2.run(modes, name))


# --- under tensor (with sequence) parallelism and pipeline parallelism --------------------------------

TP_SP = ["parallel.tp=2", "parallel.sp=true", "train.micro_batch=2", "train.grad_accum=1"]
PP_1F1B = ["parallel.pp=2", "parallel.pp_schedule=1f1b", "train.micro_batch=1", "train.grad_accum=4"]


def _bitwise_per_rank(out: list[dict]):
    """Every rank's losses and the parameters it holds (a stage's, a TP shard's gathered) are bitwise none's."""
    for rank_out in out:
        for mode in ("full", "selective"):
            assert rank_out[mode]["losses"] == rank_out["none"]["losses"], mode
            assert rank_out[mode]["recomputed"], mode  # this stage's blocks really are recomputed
            want = rank_out["none"]["params"]
            assert rank_out[mode]["params"].keys() == want.keys()
            for k in want:
                assert torch.equal(rank_out[mode]["params"][k], want[k]), (mode, k)


def _check_layer(pool2, overrides: list[str], dropout: float):
    out = pool2.run(composed_modes, overrides + [f"model.dropout={dropout}"], timeout=300)
    _bitwise_per_rank(out)
    if dropout:  # the masks are really drawn: the losses are not those of the run without dropout
        plain = pool2.run(composed_modes, overrides + ["model.dropout=0.0"], modes=("none",), timeout=300)
        assert plain[-1]["none"]["losses"] != out[-1]["none"]["losses"]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_tp2_sp_world2_bitwise_equal_to_none(pool2, dropout):
    """Own TP with SP: recompute reruns the block's sequence all-gather and the per-rank dropout stream
    (ShardedRegionRNG draws its seed from the default generator, which the checkpoint restores)."""
    _check_layer(pool2, TP_SP, dropout)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_pp2_1f1b_world2_bitwise_equal_to_none(pool2, dropout):
    """1F1B: a stage's backward of microbatch i runs after later forwards; the recompute restores the RNG
    state stashed at i's forward."""
    _check_layer(pool2, PP_1F1B, dropout)
