"""Which linears the converter puts in float8 (the rule), on the configs' models, and what it leaves alone."""
import torch
import torch.nn as nn

from shardlab import config
from shardlab.fp8 import RECIPES, Float8Linear, convert, mxfp8, tensorwise
from shardlab.model.configs import resolve_model_config
from shardlab.model.gpt import build_model


def model_of(path, *overrides):
    cfg = config.load(path, list(overrides))
    return build_model(resolve_model_config(cfg.model, cfg.train.seq_len), 0)


def test_tiny_gpt_converts_every_block_linear_and_keeps_the_head():
    m = model_of("configs/tiny.toml")
    before = {k: v for k, v in m.state_dict().items()}
    params = {n: p for n, p in m.named_parameters()}
    done = convert(m, "tensorwise")
    per_block = ["attn.q", "attn.k", "attn.v", "attn.proj", "mlp.fc", "mlp.proj"]
    assert done.converted == [f"blocks.{i}.{n}" for i in range(2) for n in per_block]
    assert list(done.skipped) == ["lm_head"] and "head" in done.skipped["lm_head"]
    assert type(m.lm_head) is nn.Linear and type(m.wte) is nn.Embedding
    # the same parameters under the same names: checkpoints and optimizers see no difference
    assert {n: p for n, p in m.named_parameters()}.keys() == params.keys()
    assert all(p is params[n] for n, p in m.named_parameters())
    assert m.state_dict().keys() == before.keys()
    assert m.blocks["0"].attn.proj.residual_scaled  # the linear's own attributes move with it
    assert "12 linears converted" in done.describe() and "lm_head" in done.describe()


def test_llama_small_converts_its_28_block_linears():
    m = model_of("configs/llama-small.toml")
    done = convert(m, "rowwise")
    assert len(done.converted) == 4 * 7 and list(done.skipped) == ["lm_head"]
    assert {n.split(".", 2)[2] for n in done.converted} == {
        "attn.q", "attn.k", "attn.v", "attn.proj", "mlp.gate", "mlp.up", "mlp.down"}
    assert m.blocks["0"].attn.k.out_features == 64  # 2 key/value heads of 32: still a multiple of 16


def test_dimensions_not_multiples_of_16_are_skipped_and_named():
    m = model_of(None, "model.preset=custom", "model.n_layer=1", "model.n_head=4", "model.d_model=72")
    done = convert(m, "tensorwise")
    assert done.converted == []
    assert done.skipped["blocks.0.attn.q"] == "72x72 features are not multiples of 16"
    assert done.skipped["blocks.0.mlp.fc"] == "72x288 features are not multiples of 16"


def test_mx_blocks_need_multiples_of_32():
    m = model_of(None, "model.preset=custom", "model.n_layer=1", "model.n_head=3", "model.d_model=48")
    assert len(convert(m, "tensorwise").converted) == 6
    m = model_of(None, "model.preset=custom", "model.n_layer=1", "model.n_head=3", "model.d_model=48")
    m = mxfp8(m)
    assert m.fp8_conversion.converted == [] and "mxfp8 (emulated)" in m.fp8_conversion.describe()
    assert "multiples of 32" in m.fp8_conversion.skipped["blocks.0.attn.q"]


def test_moe_router_stays_and_experts_convert():
    m = model_of("configs/tiny.toml", "model.moe_experts=4")
    m = tensorwise(m)
    done = m.fp8_conversion
    assert "blocks.0.mlp.router" in done.skipped and "router" in done.skipped["blocks.0.mlp.router"]
    assert "blocks.0.mlp.experts.3.fc" in done.converted
    assert isinstance(m.blocks["0"].mlp.experts[3].fc, Float8Linear)
    with torch.autocast("cpu", torch.bfloat16):  # every expert, even one without tokens, runs
        y = m(torch.randint(0, 256, (2, 16)))
    y.float().sum().backward()
    assert torch.isfinite(m.blocks["0"].mlp.experts[0].fc.weight.grad).all()


def test_converting_twice_changes_nothing_and_the_output_stays_close():
    m = model_of("configs/tiny.toml")
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = m(x).double()
        convert(m, "rowwise")
        again = convert(m, "rowwise")
        y = m(x).double()
    assert again.converted == [] and list(again.skipped) == ["lm_head"]
    # the logits at initialisation through 12 e4m3 GEMMs: measured 3.7% (tensorwise 3.6%, mxfp8 4.3%), about
    # one GEMM's cast error (the residual stream carries the embeddings past the blocks' errors)
    assert float((y - ref).norm() / ref.norm()) < 0.1


def test_matmul_takes_a_piece_of_the_weight():
    """What a column-parallel module does with a converted linear: `matmul` with this rank's rows of W. Rowwise
    scales W per row (per output feature) in the forward, so a piece gives exactly its slice of the full
    output; tensorwise takes one amax over the piece, so the pieces agree with one rank only once the amax is
    reduced over the tensor-parallel group (the integration's part)."""
    lin = nn.Linear(64, 96, bias=False)
    with torch.no_grad():
        lin.weight[0, 0] = 1.0  # the tensor's amax, outside the piece taken below
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    for name, exact in (("rowwise", True), ("tensorwise", False)):
        f8 = Float8Linear.from_linear(lin, RECIPES[name])
        with torch.no_grad():
            full = f8(x)
            piece = f8.matmul(x, lin.weight[48:])
        assert torch.equal(piece, full[:, 48:]) == exact
        assert float((piece - full[:, 48:]).norm() / full[:, 48:].norm()) < 0.1
