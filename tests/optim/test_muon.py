"""Own Muon on one device: the Moonlight split (which parameters Muon steps), and the matrices' trajectory
equal to torch.optim.Muon's (adjust_lr_fn="match_rms_adamw", Nesterov, momentum 0.95, five quintic
Newton-Schulz steps) with float64 parameters: bitwise when our iterations run in bfloat16 as torch's do."""
import types

import torch

from shardlab import config
from shardlab.model import build_model
from shardlab.model.configs import resolve_model_config
from shardlab.optim import factory_for, no_decay_names, router_names
from shardlab.optim.muon.newton_schulz import newton_schulz, rms_scale
from shardlab.optim.muon.optimizer import MuonAdamW


def _cfg(extra=()):
    return config.validate(config.load(None, ["model.preset=tiny", "train.seq_len=16", "train.optimizer=muon",
                                              "train.lr=0.02", *extra]), 1)


def _model(cfg):
    torch.set_default_dtype(torch.float64)
    try:
        return build_model(resolve_model_config(cfg.model, cfg.train.seq_len), seed=0)
    finally:
        torch.set_default_dtype(torch.float32)


def _opt(cfg, model):
    return factory_for(cfg, no_decay_names(model), router_names(model))(list(model.named_parameters()))


def test_the_split_muon_on_the_blocks_matrices_adamw_on_the_rest():
    cfg = _cfg()
    model = _model(cfg)
    opt = _opt(cfg, model)
    assert isinstance(opt, MuonAdamW)
    muon = {m.fqn for m in opt.matrices}
    assert muon == {n for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2}
    assert not any("wte" in n or "wpe" in n or "ln" in n for n in muon)
    adam = {id(p) for g in opt.param_groups if not g.get("muon") for p in g["params"]}
    assert {n for n, p in model.named_parameters() if id(p) in adam} == set(dict(model.named_parameters())) - muon


def test_matches_torch_muon_on_its_matrices_in_float64():
    cfg = _cfg(["train.muon_lr=0.05"])
    ours, theirs = _model(cfg), _model(cfg)
    opt = _opt(cfg, ours)
    opt.ns_dtype = torch.bfloat16  # torch.optim.Muon's iterations run in bfloat16
    names = [m.fqn for m in opt.matrices]
    ref = torch.optim.Muon([dict(theirs.named_parameters())[n] for n in names], lr=0.05, weight_decay=0.1,
                           momentum=0.95, nesterov=True, adjust_lr_fn="match_rms_adamw")
    gen = torch.Generator().manual_seed(0)
    for step in range(4):
        grads = {n: torch.randn(p.shape, generator=gen, dtype=torch.float64) for n, p in ours.named_parameters()}
        for model in (ours, theirs):
            for n, p in model.named_parameters():
                p.grad = grads[n].clone()
        opt.step()
        ref.step()
    for n in names:
        assert torch.equal(dict(ours.named_parameters())[n], dict(theirs.named_parameters())[n]), n


def test_newton_schulz_orthogonalises_and_is_equivariant():
    g = torch.randn(24, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    o = newton_schulz(g)
    s = torch.linalg.svdvals(o)
    assert 0.6 < s.min() and s.max() < 1.25  # Jordan's quintic: singular values near 1, not exactly 1
    perm = torch.randperm(24, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(newton_schulz(g[perm]), o[perm], rtol=1e-12, atol=1e-12)
    assert newton_schulz(g.T).shape == (40, 24)
    assert rms_scale((24, 40)) == 0.2 * 40 ** 0.5
