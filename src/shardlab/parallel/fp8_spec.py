"""FP8 training's declaration (parallel/spec.py), the one file of the float8 feature outside `shardlab.fp8`:
a feature layer applied to every part after the pipeline split and before tensor parallelism, so each part's
block linears are converted while they are still whole `nn.Linear`s (own TP's modules then keep the
converted linear and call its `matmul` with their piece). It lives here, not in the package, because the
package sits below the parallel layers (the doctor and the dp layers read its numerics) and a spec is a
parallel record; everything it names is in `shardlab.fp8` (the layer: `shardlab.fp8.layer`).

`train.fp8` picks the recipe (none: the layer converts nothing), `train.fp8_impl` the implementation: own
float8 linears (shardlab.fp8) or torchao's (`Float8Linear`, emulated on CPU). Pure data: no torch import.
"""
from __future__ import annotations

import importlib.util

from shardlab.errors import ConfigError, choice
from shardlab.fp8.recipes import NAMES as RECIPES
from shardlab.parallel.spec import Impl, Key, Spec

CHOICES = ("none",) + RECIPES  # train.fp8
IMPLS = (
    Impl("own", "shardlab.parallel.fp8_spec:apply"),
    Impl("torchao", "shardlab.parallel.fp8_spec:apply_torchao"),
)

SPEC = Spec(
    "fp8", "float8 training", IMPLS, choose="train.fp8_impl",
    keys=(
        Key("train.fp8",
            "float8 block linears under train.dtype=bf16: tensorwise or rowwise dynamic scaling through "
            "torch._scaled_mm, or mxfp8 (emulated: quantize-dequantize); the head, embeddings and routers "
            "stay bf16 (docs/precision.md)",
            " | ".join(CHOICES)),
        Key("train.fp8_impl",
            "float8 linears: own (shardlab.fp8) or torchao's Float8Linear (the optional torchao package; "
            "emulated on CPU)",
            " | ".join(i.name for i in IMPLS)),
    ),
    inference=None,  # training only: generation runs the fp32 master weights under autocast
    checks=("shardlab.parallel.fp8_spec:validate",),
    cost={"flops": "shardlab.fp8.cost:gemm_time", "bytes": "shardlab.fp8.cost:all_gather_bytes",
          "memory": "shardlab.fp8.cost:scale_bytes"},
)



def validate(cfg, dims) -> None:
    t, p = cfg.train, cfg.parallel
    choice("train.fp8", t.fp8, CHOICES)
    choice("train.fp8_impl", t.fp8_impl, tuple(i.name for i in IMPLS))
    if t.fp8 == "none":
        return
    if t.dtype != "bf16":
        raise ConfigError(f"train.fp8={t.fp8} runs the block linears in float8 and the rest of the model under "
                          f"bf16 autocast, not train.dtype={t.dtype}: set train.dtype=bf16")
    if dims.tp > 1 and p.tp_impl != "own":
        raise ConfigError(f"train.fp8={t.fp8} with parallel.tp_impl={p.tp_impl}: float8 linears compose with own "
                          "tensor parallelism only in this version; set parallel.tp_impl=own")
    if t.fp8_impl == "torchao":
        if t.fp8 == "mxfp8":
            raise ConfigError("train.fp8=mxfp8 is the own emulated recipe only (torchao's MX training needs "
                              "Blackwell kernels): set train.fp8_impl=own")
        if importlib.util.find_spec("torchao") is None:
            raise ConfigError("train.fp8_impl=torchao needs the optional torchao package: pip install -c "
                              "constraints.txt 'shardlab[fp8]' (or train.fp8_impl=own)")
        if dims.tp > 1:
            raise ConfigError("train.fp8_impl=torchao under parallel.tp > 1: own TP's modules call a converted "
                              "linear's matmul(x, weight, bias), which torchao's Float8Linear has not; use "
                              "train.fp8_impl=own")


def apply(part, cfg, dims):
    """The own float8 linears in this part (train.fp8; none: nothing changes). A feature layer: applied to
    every part, after the pipeline split, before tensor parallelism."""
    from shardlab.fp8.part import convert_part

    tp = dims.group("tp") if dims.tp > 1 else None
    return _layer(part, cfg, dims, lambda: convert_part(part, cfg.train.fp8, tp))


def apply_torchao(part, cfg, dims):
    """torchao's Float8Linear in this part (train.fp8_impl=torchao), emulated where no float8 GEMM exists."""
    from shardlab import comm
    from shardlab.fp8.torchao_impl import convert_torchao, fsdp_float8_all_gather

    fsdp = cfg.parallel.strategy == "torch-fsdp2" and dims.dp > 1
    on, note = fsdp_float8_all_gather(cfg.train.fp8, fsdp, comm.device(), comm.staged())
    if note and comm.rank() == 0:
        print(f"shardlab: {note}", flush=True)
    return _layer(part, cfg, dims, lambda: convert_torchao(part, cfg.train.fp8, comm.device(), on))


def _layer(part, cfg, dims, convert):
    from shardlab.fp8.part import announce, whole
    from shardlab.parallel.layer import Layer

    if cfg.train.fp8 == "none":
        return Layer("fp8", part)
    done = whole(convert(), dims.group("pp") if dims.pp > 1 else None)
    announce(done, cfg.train.fp8_impl)
    return Layer("fp8", part, impl=done)
