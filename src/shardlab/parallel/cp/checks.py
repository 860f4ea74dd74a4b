"""What context parallelism accepts, checked before launch by `config.validate` (one line each)."""
from __future__ import annotations

from shardlab.errors import ConfigError, choice as _choice
from shardlab.parallel import layers, rules


def _cuda() -> bool:
    import torch  # only here: the launcher validates without loading torch where it can

    return torch.cuda.is_available()


# Context parallelism (ring attention, zigzag chunks).
def validate_cp(cfg, dims) -> None:
    """Context parallelism's own conditions, one line each, before launch (docs/context.md)."""
    p, t = cfg.parallel, cfg.train
    _choice("parallel.cp_impl", p.cp_impl, tuple(layers.CONTEXT_PARALLEL))
    if dims.cp == 1:
        return
    if p.cp_impl == "torch" and cfg.data.doc_mask:
        raise ConfigError("data.doc_mask=true with parallel.cp_impl=torch: torch's ring attention has no document "
                          "mask; use parallel.cp_impl=own (its ring masks by document across chunks)")
    if t.seq_len % (2 * dims.cp):
        raise ConfigError(f"train.seq_len={t.seq_len} is not divisible by 2 x parallel.cp = {2 * dims.cp} (zigzag "
                          f"context parallelism cuts every sequence into {2 * dims.cp} equal chunks); choose a "
                          f"multiple of {2 * dims.cp}")
    if p.cp_impl == "torch" and (p.backend == "gloo" or not _cuda()):
        from shardlab.parallel.cp.layer import TORCH_ON_CPU
        raise ConfigError(TORCH_ON_CPU)
    rules.check(cfg, dims, "cp")  # the data-parallel layers it composes with, the pairs not built yet
    if p.sp and (t.seq_len // dims.cp) % dims.tp:
        raise ConfigError(f"parallel.sp=true with parallel.cp={dims.cp}: each rank's {t.seq_len // dims.cp} tokens are "
                          f"not divisible by parallel.tp={dims.tp}; choose train.seq_len as a multiple of "
                          f"{dims.cp * dims.tp * 2}")
    if cfg.model.dropout > 0:
        raise ConfigError(f"model.dropout={cfg.model.dropout} with parallel.cp={dims.cp}: the ring computes attention "
                          "without dropout; set model.dropout=0")
