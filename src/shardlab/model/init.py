"""Initial values, one parameter at a time: a per-parameter seeded draw.

Each parameter's values are drawn by a generator of its own, seeded from (the run's seed, the parameter's
fully-qualified name in the single-device model): `draw(rule, shape, dtype, seed, fqn)`. A parameter's draw
therefore depends on nothing else in the model, so a rank that holds a slice of it (a tensor-parallel piece,
a ZeRO row shard, one pipeline stage's blocks) generates that one parameter whole on the host, keeps its
slice, and drops the rest: its slice equals the same slice of the single-device model built with the same
seed, at any layout. (torchtitan gets the same property from DTensor's offset-based RNG; a per-parameter
seed needs no sharding-aware RNG and covers the layers that are not DTensors.)

A rule says what a parameter starts as: ("normal", std), ("ones",) or ("zeros",). A model lists its rules
(`init_rules`), the single-device model applies them (`initialise`), and the composition applies the same
rules to the shards of a model it built on the meta device (parallel/init_shards.py).

`parameters_on_meta()` builds a model whose parameters are on the meta device (no storage, initialisers
no-ops) and whose buffers are real: buffers are small, and their values (an MoE's expert bias) are not
drawn, so they are kept as the constructor made them. The constructors' normal draws on meta parameters are
skipped, not run: run, each would import torch._dynamo for a draw that changes nothing (_NoNormalOnMeta).
"""
from __future__ import annotations

import contextlib
import hashlib

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

NORMAL, ONES, ZEROS = "normal", "ones", "zeros"


def param_seed(seed: int, fqn: str) -> int:
    """The generator seed of parameter `fqn` (its name in the single-device model) for run seed `seed`."""
    digest = hashlib.sha256(f"{int(seed)}:{fqn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def draw(rule: tuple, shape, dtype: torch.dtype, seed: int, fqn: str) -> torch.Tensor:
    """Parameter `fqn`'s whole initial value on the host, by `rule`."""
    kind = rule[0]
    if kind == ONES:
        return torch.ones(shape, dtype=dtype)
    if kind == ZEROS:
        return torch.zeros(shape, dtype=dtype)
    if kind != NORMAL:
        raise ValueError(f"{fqn}: unknown init rule {rule!r}")
    gen = torch.Generator().manual_seed(param_seed(seed, fqn))
    return torch.empty(shape, dtype=dtype).normal_(0.0, rule[1], generator=gen)


def standard_rules(model: nn.Module, n_layer: int, embedding_std) -> dict[str, tuple]:
    """GPT-2's scheme as rules, by module type: linear weights normal(0.02) (residual projections scaled by
    1/sqrt(2 n_layer)), biases zero, embeddings normal(`embedding_std(module)`), norm gains one and biases
    zero. Keys are the model's parameter names (a tied head is registered once, as the embedding)."""
    import math

    rules: dict[str, tuple] = {}
    for mname, mod in model.named_modules():
        prefix = f"{mname}." if mname else ""
        if isinstance(mod, nn.Linear):
            scale = 1 / math.sqrt(2 * n_layer) if getattr(mod, "residual_scaled", False) else 1.0
            rules[prefix + "weight"] = (NORMAL, 0.02 * scale)
            if mod.bias is not None:
                rules[prefix + "bias"] = (ZEROS,)
        elif isinstance(mod, nn.Embedding):
            rules[prefix + "weight"] = (NORMAL, embedding_std(mod))
        elif isinstance(mod, (nn.LayerNorm, nn.RMSNorm)):
            if mod.weight is not None:
                rules[prefix + "weight"] = (ONES,)
            if getattr(mod, "bias", None) is not None:
                rules[prefix + "bias"] = (ZEROS,)
    names = {n for n, _ in model.named_parameters()}
    return {k: v for k, v in rules.items() if k in names}  # a tied head's weight: under the embedding's name


def initialise(model: nn.Module, rules: dict[str, tuple], seed: int) -> None:
    """Fill every parameter of a model built whole (not on meta) by its rule."""
    with torch.no_grad():
        for fqn, p in model.named_parameters():
            if p.is_meta:
                continue
            p.copy_(draw(rules[fqn], p.shape, p.dtype, seed, fqn))


class _NoNormalOnMeta(TorchFunctionMode):
    """`normal_` on a meta tensor returns it untouched, without running it. Run, it changes nothing (a meta
    tensor holds no values) but costs an import: torch's meta kernel of `normal_` is a Python decomposition
    (torch._refs.normal) wrapped in torch._dynamo.disable, which imports torch._dynamo on its first call
    (~0.5-1 s, torch._inductor with it). A training rank imports it later anyway (torch.optim's
    add_param_group and DCP's get_model_state_dict are wrapped or look it up the same way); a process that
    only builds on meta (a `shardlab generate` rank under tp / pp) no longer does. Both entries are caught:
    `nn.init.normal_` (nn.Embedding's initialiser) hands its tensor over as a keyword, and the
    `Tensor.normal_` it calls inside would no longer pass through this mode."""

    DRAWS = (torch.Tensor.normal_, nn.init.normal_)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.DRAWS:
            t = args[0] if args else kwargs.get("tensor")
            if isinstance(t, torch.Tensor) and t.is_meta:
                return t
        return func(*args, **kwargs)


@contextlib.contextmanager
def parameters_on_meta():
    """Inside: every parameter a module registers is moved to the meta device as it is registered (its
    constructor's initialiser then runs on meta: a no-op; a normal draw is skipped, _NoNormalOnMeta);
    buffers stay where they are made."""
    register = nn.Module.register_parameter

    def on_meta(self, name, param):
        if param is not None and not param.is_meta:
            param = type(param)(param.to("meta"), requires_grad=param.requires_grad)
        register(self, name, param)

    nn.Module.register_parameter = on_meta
    try:
        with _NoNormalOnMeta():
            yield
    finally:
        nn.Module.register_parameter = register
