"""`Float8Linear`, an nn.Linear whose product runs in float8, and `convert`, the module converter that puts it
in place of the model's block linears by a rule.

The converted module keeps the linear's own parameters (the fp32 master weight and bias, the same tensors,
under the same names: checkpoints and optimizers see no difference); only its product changes. That product is
`matmul(x, weight, bias)`, so a tensor-parallel module wrapping it can call it with its piece of the weight.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from shardlab.fp8.gather import Float8WeightGather, gathered_weight
from shardlab.fp8.gemm import Float8Matmul
from shardlab.fp8.recipes import Recipe, recipe as recipe_named


class Float8Linear(nn.Linear):
    """x W^T + b with the three GEMMs in float8 per `recipe`. The output is in autocast's dtype where autocast
    is on (bf16 around the rest of the model), else in the input's; the bias is added after the GEMM in that
    dtype, as F.linear does under autocast. `fp8_stats` holds the last cast statistics of each operand
    ("input", "weight", "grad"), tensors read by whoever wants them (`shardlab.fp8.stats`)."""
    recipe: Recipe

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: Recipe) -> "Float8Linear":
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        new.__dict__.update({k: v for k, v in linear.__dict__.items() if not k.startswith("_")})
        new.weight, new.bias = linear.weight, linear.bias  # the same Parameters: nothing is copied
        new.recipe, new.fp8_stats = recipe, {}
        new.amax_group = None  # tensor parallelism: the group a tensorwise amax is agreed over (layer.py)
        return new

    def matmul(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        kind = x.device.type
        out_dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
        held = (lambda: gathered_weight(weight)) if hasattr(weight, "gather_encoding") else None
        y = Float8Matmul.apply(x.reshape(-1, x.shape[-1]), weight, self.recipe, out_dtype, self.fp8_stats,
                                self.amax_group, held)
        y = y.reshape(*x.shape[:-1], weight.shape[0])
        return y if bias is None else y + bias.to(y.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.weight, self.bias)

    def adopt_piece(self, piece: nn.Parameter) -> None:
        """Own TP took this linear's weight apart and holds `piece` (the seam in parallel/tp/modules.py):
        a tensorwise piece is gathered in float8 under sharded data parallelism like a whole weight, its
        amax agreed over the shard group and then over the TP group (`amax_group`), so the scale is the
        whole logical weight's, as the forward's own agreement makes it (gather.py)."""
        if self.recipe.granularity == "tensor":
            piece.gather_encoding = Float8WeightGather(self.recipe.weight, agree_also=self.amax_group)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.label}"


def default_rule(name: str, module: nn.Linear, recipe: Recipe) -> str | None:
    """Why the linear `name` stays as it is, or None to convert it: every linear inside the blocks whose in
    and out features are multiples of `recipe.multiple` (16: torch._scaled_mm's alignment; 32 for MX
    blocks), except the MoE router (its logits pick experts: torchtitan keeps it in high precision too).
    The head and the embeddings are outside the blocks and stay in bf16."""
    if not name.startswith("blocks."):
        return "outside the blocks (the head stays bf16)"
    if name.rsplit(".", 1)[-1] == "router":
        return "the MoE router stays bf16"
    m = recipe.multiple
    if module.in_features % m or module.out_features % m:
        return f"{module.in_features}x{module.out_features} features are not multiples of {m}"
    return None


@dataclass
class Conversion:
    recipe: Recipe
    converted: list[str] = field(default_factory=list)  # module names, in the model's order
    skipped: dict[str, str] = field(default_factory=dict)  # linear name -> why it stays

    def describe(self) -> str:
        """One line to print at start: the recipe, how many linears run in float8, and what stayed, why."""
        left = "; ".join(f"{n} ({why})" for n, why in self.skipped.items()) or "none"
        return f"fp8 {self.recipe.label}: {len(self.converted)} linears converted; stay: {left}"


def convert(model: nn.Module, recipe: Recipe | str, rule=default_rule) -> Conversion:
    """Swap, in place, every nn.Linear of `model` that `rule(name, linear, recipe)` lets through for a
    Float8Linear sharing its parameters. Returns the names converted and the linears skipped with the
    rule's reason (already converted modules are left alone and not listed)."""
    recipe = recipe_named(recipe) if isinstance(recipe, str) else recipe
    done = Conversion(recipe)
    for name, module in list(model.named_modules()):
        if type(module) is not nn.Linear:
            continue
        why = rule(name, module, recipe)
        if why is not None:
            done.skipped[name] = why
            continue
        parent_name, _, child = name.rpartition(".")
        new = Float8Linear.from_linear(module, recipe)
        new.fp8_name = name  # what its statistics are reported as (a TP module may hold it under another)
        setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
        done.converted.append(name)
    return done
