"""FP8 training recipes, one row each: how each of a linear's three operands (input, weight, the output's
gradient) is cast, and how its scale is found. The names follow torchao's `Float8LinearRecipeName` (and
torchtitan's `--float8.recipe_name`), whose definitions these rows restate:

- tensorwise: one dynamic scale per tensor (amax over the whole tensor); input and weight in e4m3, the
  output gradient in e5m2 (gradients need range more than precision); scales not rounded.
- rowwise: one dynamic scale per row of a GEMM's left operand and per column of its right one, i.e. per
  slice along the contraction dimension; e4m3 for all three operands, gradients included (a row's own scale
  already gives the range e5m2 would); scales rounded down to a power of two, so scaling is exact in binary.
- mxfp8: the OCP microscaling format: one power-of-two scale (an e8m0 exponent) per block of 32 consecutive
  elements along the contraction dimension, elements in e4m3. No CPU or Hopper GEMM takes it, so it is
  emulated here: quantize-dequantize, then a matmul in fp32 (`emulated=True`, and named so wherever shown).

Pure data: no torch at import (the config reads the names).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str
    granularity: str  # "tensor" | "row" (along the contraction dim) | "block" (blocks of `block` along it)
    input: str  # the float8 format of each operand: "e4m3" | "e5m2"
    weight: str
    grad: str
    pow2_scales: bool = False  # round every scale down to a power of two
    block: int = 0  # block length along the contraction dimension ("block" granularity)
    emulated: bool = False  # quantize-dequantize and a high-precision matmul instead of torch._scaled_mm
    multiple: int = 16  # a linear converts when its in and out features are multiples of this

    @property
    def label(self) -> str:
        return f"{self.name} (emulated)" if self.emulated else self.name


RECIPES = {
    "tensorwise": Recipe("tensorwise", "tensor", "e4m3", "e4m3", "e5m2"),
    "rowwise": Recipe("rowwise", "row", "e4m3", "e4m3", "e4m3", pow2_scales=True),
    "mxfp8": Recipe("mxfp8", "block", "e4m3", "e4m3", "e4m3", pow2_scales=True, block=32, emulated=True,
                    multiple=32),
}
NAMES = tuple(RECIPES)


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"unknown fp8 recipe {name!r}; choose from {', '.join(NAMES)}")
    return RECIPES[name]
