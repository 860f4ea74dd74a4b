"""The library implementation: torchao's `Float8Linear` (torchao.float8.convert_to_float8_training) by the
same rule and recipe names as the own linears. On a machine without float8 GEMMs (a CPU) it runs in
torchao's emulation mode (`emulate=True`: its casts, then a high-precision matmul), and says so ("emulated")
in the start-up line. The optional `torchao` package (`pip install 'shardlab[fp8]'`, pinned in
constraints.txt) is imported only here, on first use.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn

from shardlab.fp8.linear import Conversion, default_rule
from shardlab.fp8.recipes import recipe as recipe_named


def emulated(device: torch.device) -> bool:
    """torchao emulates where torch._scaled_mm has no float8 kernel of its own: CPUs, and GPUs before sm_89."""
    return device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9)


def convert_torchao(part: nn.Module, name: str, device: torch.device) -> Conversion:
    """torchao's Float8Linear in place of every linear the own rule converts (the same modules: the rule is
    asked for each, the filter only answers it). Returns the Conversion, its recipe labelled "(torchao,
    emulated)" where torchao emulates."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    recipe = recipe_named(name)
    done = Conversion(dataclasses.replace(recipe, name=f"{name} (torchao{', emulated' if emulated(device) else ''})"))
    for fqn, module in part.named_modules():
        if type(module) is nn.Linear:
            why = default_rule(fqn, module, recipe)
            (done.skipped.__setitem__(fqn, why) if why else done.converted.append(fqn))
    keep = set(done.converted)
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(name), emulate=emulated(device))
    convert_to_float8_training(part, config=config, module_filter_fn=lambda m, fqn: fqn in keep)
    return done
