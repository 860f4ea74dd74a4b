"""FP8 training, own implementation: float8 linears whose three GEMMs (forward, input gradient, weight gradient)
run through torch._scaled_mm with dynamic scaling, by recipe (recipes.py: tensorwise, rowwise, and MXFP8 as an
emulated, numerics-only recipe), the module converter that puts them in the model by a rule (linear.py), and
the casts' sampled statistics (stats.py), what the float8 layer does to a model part (part.py; its
declaration is parallel/fp8_spec.py), torchao's linears as the library implementation (torchao_impl.py)
and the planner's formulas (cost.py). docs/precision.md has the recipes and the scaling math.

The converter entry points (`tensorwise`, `rowwise`, `mxfp8`: nn.Module -> nn.Module) convert in place and
leave the `Conversion` (what was converted, what stayed and why) on the model as `fp8_conversion`, for the
start-up line. Model code stays ignorant of it: a converted linear is an nn.Linear with another product.
"""
from __future__ import annotations

from shardlab.fp8.recipes import NAMES, RECIPES, Recipe
from shardlab.lazy import lazy_names

__all__ = ["Conversion", "Float8Linear", "NAMES", "RECIPES", "Recipe", "convert", "default_rule",
           "tensorwise", "rowwise", "mxfp8"]
# torch loads on the first name that needs it: the config reads the recipe names at start-up
__getattr__ = lazy_names(__name__, {"Conversion": "linear", "Float8Linear": "linear", "convert": "linear",
                                    "default_rule": "linear", "tensorwise": "converters", "rowwise": "converters",
                                    "mxfp8": "converters"})
