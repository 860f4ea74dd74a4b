"""What context parallelism accepts, checked before launch by `config.validate` (one line each)."""
from __future__ import annotations

import math

from shardlab.errors import ConfigError, choice as _choice
from shardlab.parallel import layers, rules


def _cuda() -> bool:
    import torch  # only here: the launcher validates without loading torch where it can

    return torch.cuda.is_available()


# Context parallelism: the ring (zigzag chunks), Ulysses (all-to-all over heads) and the 2-D hybrid.
def validate_cp(cfg, dims) -> None:
    """Context parallelism's own conditions, one line each, before launch (docs/context.md)."""
    p, t = cfg.parallel, cfg.train
    _choice("parallel.cp_impl", p.cp_impl, tuple(layers.CONTEXT_PARALLEL))
    if dims.cp == 1:
        return
    if p.cp_impl == "torch" and cfg.data.doc_mask:
        raise ConfigError("data.doc_mask=true with parallel.cp_impl=torch: torch's ring attention has no document "
                          "mask; use parallel.cp_impl=own (its ring masks by document across chunks)")
    u = ulysses_degree(p.cp_impl, dims.cp, p.cp_ulysses)
    if p.cp_impl == "hybrid" and (u < 1 or dims.cp % u):
        raise ConfigError(f"parallel.cp_impl=hybrid needs parallel.cp_ulysses, the Ulysses degree inside each ring "
                          f"step, dividing parallel.cp={dims.cp} (got {p.cp_ulysses}); e.g. parallel.cp_ulysses=2")
    if t.seq_len % seq_multiple(p.cp_impl, dims.cp, u):
        raise ConfigError(seq_line(p.cp_impl, t.seq_len, dims.cp, u))
    if p.cp_impl == "torch" and (p.backend == "gloo" or not _cuda()):
        from shardlab.parallel.cp.layer import TORCH_ON_CPU
        raise ConfigError(TORCH_ON_CPU)
    if u > 1:
        from shardlab.model.configs import resolve_model_config

        m = resolve_model_config(cfg.model, t.seq_len)
        line = heads_refusal(m.n_head, getattr(m, "n_kv_heads", None) or m.n_head, dims.tp, u, p.cp_impl)
        if line:
            raise ConfigError(line)
    rules.check(cfg, dims, "cp")  # the data-parallel layers it composes with, the pairs not built yet
    if p.sp and (t.seq_len // dims.cp) % dims.tp:
        raise ConfigError(f"parallel.sp=true with parallel.cp={dims.cp}: each rank's {t.seq_len // dims.cp} tokens are "
                          f"not divisible by parallel.tp={dims.tp}; choose train.seq_len as a multiple of "
                          f"{dims.cp * dims.tp * 2}")
    if cfg.model.dropout > 0:
        raise ConfigError(f"model.dropout={cfg.model.dropout} with parallel.cp={dims.cp}: context parallelism computes "
                          "attention without dropout; set model.dropout=0")


def ulysses_degree(impl: str, cp: int, cp_ulysses: int) -> int:
    """Ranks an all-to-all spans: cp (ulysses), parallel.cp_ulysses (hybrid), 1 (the ring)."""
    return cp if impl == "ulysses" else cp_ulysses if impl == "hybrid" else 1


def seq_multiple(impl: str, cp: int, u: int = 1) -> int:
    """What train.seq_len must be a multiple of: 2 x cp zigzag chunks (the ring); cp contiguous pieces
    (Ulysses: attention sees the whole sequence); 2R zigzag chunks cut U ways (hybrid, R = cp/U)."""
    if impl == "ulysses":
        return cp
    if impl == "hybrid":
        return (cp // u) * (2 * u // math.gcd(2, u))  # R x lcm(2, U): 2R chunks, each group's s/R in U pieces
    return 2 * cp


def seq_line(impl: str, seq_len: int, cp: int, u: int = 1) -> str:
    n = seq_multiple(impl, cp, u)
    if impl == "ulysses":
        why = f"Ulysses cuts every sequence into {cp} contiguous pieces"
    elif impl == "hybrid":
        why = f"the hybrid cuts every sequence into {2 * cp // u} zigzag chunks, each ring rank's {u} ways"
    else:
        return (f"train.seq_len={seq_len} is not divisible by 2 x parallel.cp = {n} (zigzag context parallelism "
                f"cuts every sequence into {n} equal chunks); choose a multiple of {n}")
    return f"train.seq_len={seq_len} is not divisible by {n} ({why}); choose a multiple of {n}"


def heads_refusal(n_head: int, n_kv_heads: int, tp: int, u: int, impl: str = "ulysses") -> str | None:
    """The one line training and the planner refuse a head count with, None when the all-to-all fits:
    each tensor-parallel rank's h = n_head/tp query heads split u ways (u divides h); its
    g = max(n_kv_heads/tp, 1) key/value heads split when u divides g, are replicated u/g times when g
    divides u, and are refused otherwise."""
    h, g = n_head // tp, max(n_kv_heads // tp, 1)
    key = "parallel.cp" if impl == "ulysses" else "parallel.cp_ulysses"
    split = f" / parallel.tp={tp}" if tp > 1 else ""
    if h % u:
        return (f"parallel.cp_impl={impl}: {key}={u} must divide the query heads of each rank, model.n_head="
                f"{n_head}{split} = {h} (Ulysses splits heads across its ranks); choose a divisor of {h} or "
                f"parallel.cp_impl=own")
    if g % u and u % g:
        return (f"parallel.cp_impl={impl}: {key}={u} and the key/value heads of each rank, model.n_kv_heads="
                f"{n_kv_heads}{split} = {g}, must divide one another (split, or replicated {u} ways); choose a "
                f"divisor or multiple of {g} or parallel.cp_impl=own")
    return None


def check_heads_for(model, tp: int, u: int, impl: str = "ulysses") -> None:
    """At apply time (a model built without config validation): the same line as `validate_cp`."""
    m = getattr(model, "cfg", None)
    if m is not None and u > 1:
        line = heads_refusal(m.n_head, getattr(m, "n_kv_heads", None) or m.n_head, tp, u, impl)
        if line:
            raise ConfigError(line)
