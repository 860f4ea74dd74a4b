"""A few training steps with float8 block linears: finite, close to bf16, bitwise repeatable."""
import pytest
import torch

from shardlab import config
from shardlab.fp8 import Float8Linear, convert
from shardlab.fp8.stats import collect, first_nonfinite
from shardlab.model.configs import resolve_model_config
from shardlab.model.gpt import build_model

STEPS = 8


def train(path, recipe, overrides=(), steps=STEPS):
    """`steps` AdamW steps under bf16 autocast (fp32 master weights, as train.dtype=bf16) on a learnable
    byte stream; the losses and the final weights."""
    cfg = config.load(path, list(overrides))
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), 0)
    if recipe:
        convert(model, recipe)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = (torch.arange(33)[None] * (torch.arange(4)[:, None] + 1)) % 97  # 4 arithmetic progressions
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", torch.bfloat16):
            logits = model(data[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), data[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.fixture(scope="module")
def bf16_losses():
    return {path: train(path, None, over)[0] for path, over in CONFIGS}


CONFIGS = [("configs/tiny.toml", ()), ("configs/llama-small.toml", ("model.preset=llama-tiny",))]


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "mxfp8"])
@pytest.mark.parametrize("path,over", CONFIGS)
def test_losses_finite_and_close_to_bf16(bf16_losses, path, over, recipe):
    """Bound: 1% of the bf16 loss at every step. Each float8 GEMM errs by ~4% (relative, random in sign:
    tests/fp8/test_gemm.py), bf16 by ~0.4%; the loss moves by far less, as the casts' errors average out over
    the vocabulary and the residual stream. Measured over 8 steps: at most 0.15% / 0.19% / 0.22% (tensorwise /
    rowwise / mxfp8, tiny GPT) and 0.10% / 0.19% / 0.16% (tiny Llama); over 20 steps up to 0.1% (GPT) and 2%
    (Llama, whose fp8 losses then fell faster than bf16's, not slower)."""
    losses, model = train(path, recipe, over)
    ref = bf16_losses[path]
    gaps = [abs(a - b) / b for a, b in zip(losses, ref)]
    print(path, recipe, f"max gap {max(gaps):.4%}")
    assert all(torch.isfinite(torch.tensor(losses)))
    assert max(gaps) < 0.01
    assert losses[-1] < losses[0] - 0.5  # it learns
    stats = collect(model)
    assert len(stats) == sum(isinstance(m, Float8Linear) for m in model.modules())
    assert all(set(s) == {"input", "weight", "grad"} for s in stats.values())
    assert first_nonfinite(model) is None


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "mxfp8"])
def test_bitwise_repeatable(recipe):
    a_losses, a = train("configs/tiny.toml", recipe, steps=3)
    b_losses, b = train("configs/tiny.toml", recipe, steps=3)
    assert a_losses == b_losses
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_a_nonfinite_scale_is_named():
    losses, model = train("configs/tiny.toml", "tensorwise", steps=1)
    with torch.no_grad():
        model.blocks["1"].mlp.fc.weight[0, 0] = float("inf")
    model(torch.zeros(1, 8, dtype=torch.long))
    assert first_nonfinite(model) == "blocks.1.mlp.fc weight"
