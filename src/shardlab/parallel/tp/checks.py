"""What tensor parallelism accepts, checked before launch by `config.validate` (one line each)."""
from __future__ import annotations

from shardlab.errors import ConfigError, choice as _choice
from shardlab.parallel import layers, rules


# Tensor parallelism (own / DTensor, sequence parallelism).
def validate_tp(cfg, dims) -> None:
    """Tensor parallelism's own conditions, one line each, before anything starts (docs/tp.md)."""
    from shardlab.model.configs import resolve_model_config

    p = cfg.parallel
    _choice("parallel.tp_impl", p.tp_impl, tuple(layers.TENSOR_PARALLEL) or ("own",))
    if dims.tp == 1:
        if p.sp:
            raise ConfigError("parallel.sp=true splits the sequence across tensor-parallel ranks: it needs "
                              "parallel.tp > 1")
        return
    from shardlab.parallel.tp.own import check_divisible

    m = resolve_model_config(cfg.model, cfg.train.seq_len)
    try:
        check_divisible(m.n_head, m.d_model, dims.tp, n_kv_heads=getattr(m, "n_kv_heads", None),
                        ffn_hidden=getattr(m, "ffn_hidden", None))
    except ValueError as e:
        raise ConfigError(f"{e}; choose another degree") from None
    n_kv = getattr(m, "n_kv_heads", m.n_head)
    if p.tp_impl == "dtensor" and n_kv < dims.tp:
        raise ConfigError(f"parallel.tp_impl=dtensor with model.n_kv_heads={n_kv} < parallel.tp={dims.tp}: replicated "
                          "key/value heads are built in the own implementation only; use parallel.tp_impl=own")
    if p.tp_impl == "dtensor" and cfg.data.doc_mask:  # its SP plan cuts a (t,) position vector, not (b, t) rows
        raise ConfigError("data.doc_mask=true with parallel.tp_impl=dtensor: the DTensor plan's position lookup and "
                          "module inputs carry no per-token document positions; use parallel.tp_impl=own")
    if p.sp and cfg.train.seq_len % dims.tp:
        raise ConfigError(f"parallel.sp=true with parallel.tp={dims.tp}: train.seq_len={cfg.train.seq_len} is not "
                          f"divisible by the degree; choose train.seq_len as a multiple of parallel.tp")
    rules.check(cfg, dims, "tp")  # the data-parallel layers it composes with (its spec)
