"""The converter entry points, nn.Module -> nn.Module, one per recipe: each converts in place and leaves the
`Conversion` on the model as `fp8_conversion` (the form a module converter of precision.py takes)."""
from __future__ import annotations

from shardlab.fp8.linear import convert
from shardlab.fp8.recipes import NAMES


def _converter(name: str):
    def apply(model):
        model.fp8_conversion = convert(model, name)
        return model
    apply.__name__ = apply.__qualname__ = name
    apply.__doc__ = f"The `{name}` converter: `convert(model, {name!r})`, its Conversion left on the model."
    return apply


tensorwise, rowwise, mxfp8 = (_converter(n) for n in NAMES)
