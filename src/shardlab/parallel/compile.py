"""Compiled blocks (`train.compile=true`): each transformer block's forward through torch.compile (inductor).

torchtitan compiles every block, not the whole model: a block is the unit that repeats, so one graph
serves all of them (the guards do not depend on which block), and the layers around the blocks (data
parallel hooks, pipeline stages, the loss) stay eager Python. On CPU inductor generates C++ (gcc) that fuses
the non-GEMM ops (LayerNorm, GELU, bias adds, residual adds, dropout) into a few loops; the GEMMs stay
calls into the BLAS library, as in eager.

Applied after tensor parallelism, context parallelism and recompute (so a recomputed block's
checkpoint is traced into the graph, as torchtitan orders them) and before data parallelism. The
block's class is swapped for a subclass whose `forward` is the compiled one (the way recompute.py does
it): no wrapper module, so names, state dicts and checkpoints are unchanged, and the hooks a data-parallel
layer puts on the block (zero3's all-gather before forward, its reshard after it, the pre-backward
gather on the outputs' gradients) run in `Module.__call__`, outside the compiled region: they stay
eager, no graph break. Gradient hooks on parameters (ddp's bucket launch, zero's reduce-scatter) fire from
the eager autograd engine when the compiled backward hands back the parameter gradients.

torch.compile is lazy: it compiles at a block's first call. A failure there (no C++ compiler, an op
inductor cannot lower) falls back to eager for every block of that class with one warning line; nothing has
run yet when compilation fails, so the eager rerun of that call is exact.
"""
from __future__ import annotations

import getpass
import os
import sys
import tempfile

import torch
import torch.nn as nn

from shardlab.model import anatomy
from shardlab.parallel.layer import Layer

BACKEND = "inductor"  # tests replace it with a backend that fails, to check the fallback
_CLASSES: dict[type, type] = {}


def _compiled_class(cls: type) -> type:
    """A subclass of `cls` whose forward runs compiled (one per class, so isinstance holds)."""
    if cls not in _CLASSES:
        state = {"fn": None, "failed": None, "calls": 0}  # calls: forwards that ran compiled

        def forward(self, *args, **kwargs):
            if state["failed"] is None:
                if state["fn"] is None:
                    state["fn"] = torch.compile(cls.forward, backend=BACKEND)
                try:
                    out = state["fn"](self, *args, **kwargs)
                    state["calls"] += 1
                    return out
                except Exception as e:  # noqa: BLE001 -- a compile error: eager is the same function
                    if not _is_compile_error(e):
                        raise
                    state["failed"] = _reason(e)
                    print(f"warning: train.compile: compiling {cls.__name__} failed ({state['failed'][:200]}); "
                          "running it eager", file=sys.stderr)
            return cls.forward(self, *args, **kwargs)

        _CLASSES[cls] = type(f"Compiled{cls.__name__}", (cls,),
                             {"forward": forward, "compiled": True, "_compile_state": state})
    return _CLASSES[cls]


def _reason(e: Exception) -> str:
    """`Type: first line` of the error that made compilation fail (a backend's own error, not dynamo's wrapper)."""
    cause = getattr(e, "inner_exception", None) or e.__cause__ or e
    lines = [ln for ln in str(cause).splitlines() if ln.strip()]
    return f"{type(cause).__name__}: {lines[0].strip() if lines else ''}"


def _is_compile_error(e: Exception) -> bool:
    """Errors raised by dynamo or a backend while compiling (not by the model's own code at run time)."""
    from torch._dynamo import exc
    kinds = tuple(k for k in (getattr(exc, "TorchDynamoException", None), getattr(exc, "BackendCompilerFailed", None))
                  if k is not None)
    try:
        from torch._inductor.exc import InductorError
        kinds += (InductorError,)
    except ImportError:
        pass
    return isinstance(e, kinds)


def compile_block(block: nn.Module) -> nn.Module:
    """Compile `block`'s forward (in place: its class is swapped); returns the same object."""
    if not getattr(block, "compiled", False):
        block.__class__ = _compiled_class(type(block))
    _route_eager(block)
    return block


_EAGER: dict[type, type] = {}


def _route_eager(block: nn.Module) -> None:
    """A mixture-of-experts MLP inside the block runs eager (`torch.compiler.disable`: one graph break, the
    dense parts before and after it compile). After routing every shape depends on the data (the kept
    slots, the per-expert counts, the split sizes): traced, they broke a 2-block model's graphs 18 times and
    recompiled as the counts changed (92 s for 3 steps against 8 s, loaded machine). Eager runs it exactly as
    without compile. Swapped here, not decorated in model/moe.py, so that importing the model does not
    import dynamo."""
    from shardlab.model.moe import MoE

    for m in block.modules():
        if isinstance(m, MoE) and not getattr(m, "eager_in_compile", False):
            cls = type(m)
            if cls not in _EAGER:
                _EAGER[cls] = type(f"Eager{cls.__name__}", (cls,),
                                   {"forward": torch.compiler.disable(cls.forward), "eager_in_compile": True})
            m.__class__ = _EAGER[cls]


def fell_back(block: nn.Module) -> str | None:
    """Why `block`'s class runs eager after a failed compile, or None (compiled, or not called yet)."""
    state = getattr(block, "_compile_state", None)
    return state["failed"] if state else None


def apply(part: nn.Module, cfg, dims=None) -> Layer:
    """The compile layer: compile every block of this part when `cfg.train.compile` says so. `dims` is
    unused (the same on every rank); it keeps the layers' common signature."""
    if getattr(cfg.train, "compile", False):
        _separate_cache_per_cpu_capability()
        for _, block in anatomy.of(part).named_blocks(part):
            compile_block(block)
    return Layer("compile", part)


def _separate_cache_per_cpu_capability() -> None:
    """inductor's on-disk cache (kernels, precompiled headers) is not keyed by ATEN_CPU_CAPABILITY: a kernel
    built for the CPU's own vector width and reused in a process that forces another one computed NaN
    (avx2 after avx512), and a stale precompiled header failed to compile (default after avx512). A forced
    capability therefore gets a cache directory of its own, unless the user chose one."""
    cap = os.environ.get("ATEN_CPU_CAPABILITY")
    if cap and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
            tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_aten_{cap}")


# At import, not only in apply(): every path that compiles (apply, compile_block from a harness or a bench)
# imports this module before inductor first reads its cache directory.
_separate_cache_per_cpu_capability()
