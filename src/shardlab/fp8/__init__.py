"""FP8 training, own implementation: float8 linears whose three GEMMs (forward, input gradient, weight gradient)
run through torch._scaled_mm with dynamic scaling, by recipe (recipes.py: tensorwise, rowwise, and MXFP8 as an
emulated, numerics-only recipe), the module converter that puts them in the model by a rule (linear.py), and
the casts' sampled statistics (stats.py). docs/precision.md has the recipes and the scaling math.

The converter entry points (`tensorwise`, `rowwise`, `mxfp8`: nn.Module -> nn.Module) convert in place and
leave the `Conversion` (what was converted, what stayed and why) on the model as `fp8_conversion`, for the
start-up line. Model code stays ignorant of it: a converted linear is an nn.Linear with another product.
"""
from __future__ import annotations

from shardlab.fp8.linear import Conversion, Float8Linear, convert, default_rule
from shardlab.fp8.recipes import NAMES, RECIPES, Recipe

__all__ = ["Conversion", "Float8Linear", "NAMES", "RECIPES", "Recipe", "convert", "default_rule",
           "tensorwise", "rowwise", "mxfp8"]


def _converter(name: str):
    def apply(model):
        model.fp8_conversion = convert(model, name)
        return model
    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = f"The `{name}` converter: `convert(model, {name!r})`, its Conversion left on the model."
    return apply


tensorwise, rowwise, mxfp8 = (_converter(n) for n in NAMES)
