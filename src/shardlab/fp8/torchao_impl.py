"""The library implementation: torchao's `Float8Linear` (torchao.float8.convert_to_float8_training) by the
same rule and recipe names as the own linears. On a machine without float8 GEMMs (a CPU) it runs in
torchao's emulation mode (`emulate=True`: its casts, then a high-precision matmul), and says so ("emulated")
in the start-up line. The optional `torchao` package (`pip install 'shardlab[fp8]'`, pinned in
constraints.txt) is imported only here, on first use.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch
import torch.nn as nn

from shardlab.fp8.linear import Conversion, default_rule
from shardlab.fp8.recipes import recipe as recipe_named


def emulated(device: torch.device) -> bool:
    """torchao emulates where torch._scaled_mm has no float8 kernel of its own: CPUs, and GPUs before sm_89."""
    return device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9)


def fsdp_float8_all_gather(name: str, fsdp: bool, device: torch.device, staged: bool) -> tuple[bool, str]:
    """(on, why not): torchao's float8 all-gather under torch-fsdp2 (`enable_fsdp_float8_all_gather`, what
    torchtitan turns on): tensorwise only, and NCCL only. FSDP2 gathers the float8 bytes in a float8 dtype,
    which gloo refuses ("Invalid scalar type", measured with torch 2.13 and torchao 0.18 on CPU), so on gloo
    torch-fsdp2 gathers the weights as they are and says so in one line."""
    if not fsdp or name != "tensorwise":
        return False, ""
    if device.type != "cuda" or staged:
        return False, ("fp8: torchao's float8 all-gather is off: gloo has no float8 dtype for FSDP2's "
                       "all-gather (NCCL only); torch-fsdp2 gathers the fp32 weights")
    return True, ""


class _NoCudaExtensionNotice(logging.Filter):
    """Drops torchao's "Failed to load .../torchao/_C*.so" warnings: its import tries each of its compiled
    CUDA extensions and logs every failure, which on a machine without CUDA is expected (it emulates)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.startswith("Failed to load ") and "/torchao/_C" in msg)


@contextlib.contextmanager
def _quiet_cuda_extensions(device: torch.device):
    """Around torchao's import on a device other than CUDA, only its own logger's extension notices are
    filtered; on CUDA they stay (there a failed extension is news)."""
    if device.type == "cuda":
        yield
        return
    log, notice = logging.getLogger("torchao"), _NoCudaExtensionNotice()
    log.addFilter(notice)
    try:
        yield
    finally:
        log.removeFilter(notice)


def convert_torchao(part: nn.Module, name: str, device: torch.device, fsdp_gather: bool = False) -> Conversion:
    """torchao's Float8Linear in place of every linear the own rule converts (the same modules: the rule is
    asked for each, the filter only answers it). Returns the Conversion, its recipe labelled "(torchao,
    emulated)" where torchao emulates. `fsdp_gather`: torch-fsdp2 gathers the weights in float8 (torchao's
    float8 all-gather, amax all-reduced over the mesh in the pre-all-gather hook)."""
    with _quiet_cuda_extensions(device):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    recipe = recipe_named(name)
    done = Conversion(dataclasses.replace(recipe, name=f"{name} (torchao{', emulated' if emulated(device) else ''})"))
    for fqn, module in part.named_modules():
        if type(module) is nn.Linear:
            why = default_rule(fqn, module, recipe)
            (done.skipped.__setitem__(fqn, why) if why else done.converted.append(fqn))
    keep = set(done.converted)
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(name), emulate=emulated(device),
                                 enable_fsdp_float8_all_gather=fsdp_gather)
    convert_to_float8_training(part, config=config, module_filter_fn=lambda m, fqn: fqn in keep)
    return done
