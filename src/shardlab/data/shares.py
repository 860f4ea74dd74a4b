"""Each data-parallel rank's share of the global batch (`data.shares`, docs/balance.md): parsing the key,
the whole-sample partition every rank computes alike, and the checks made before launch. The measuring
and re-setting of `auto` shares while training is train/balance.py."""
from __future__ import annotations

from shardlab.errors import ConfigError


def parse(spec: str, dp_size: int) -> list[float] | None:
    """`data.shares` as weights per data-parallel rank; None for `auto`. Raises ConfigError."""
    spec = str(spec).strip()
    if spec == "auto":
        return None
    if spec == "equal":
        return [1.0] * dp_size
    try:
        weights = [float(v) for v in spec.split(",")]
    except ValueError:
        raise ConfigError(f"data.shares={spec!r}: expected auto, equal or one weight per data-parallel rank "
                          f"like 1,3") from None
    if len(weights) != dp_size:
        raise ConfigError(f"data.shares={spec}: {len(weights)} weight(s) for {dp_size} data-parallel rank(s); "
                          f"give one weight per data-parallel rank (or auto / equal)")
    if any(not w > 0 or w == float("inf") for w in weights):
        raise ConfigError(f"data.shares={spec}: every weight must be a positive number")
    top = max(weights)
    return [w / top for w in weights]  # relative to the largest: huge weights cannot overflow their sum


def partition(total: int, weights: list[float], minimum: int = 1) -> list[int]:
    """Whole samples per rank, proportional to `weights`, summing to `total`, each at least `minimum`.
    Ranks whose proportional share is under `minimum` get `minimum` and the rest is shared among the
    others; then largest remainder (ties to the lower rank). Deterministic: every rank computes it alike."""
    n = len(weights)
    if total < minimum * n:
        raise ValueError(f"{total} samples cannot give {n} ranks {minimum} each")
    fixed: dict[int, int] = {}
    while True:  # clamp the ranks under the minimum, re-share the rest among the others
        free = [r for r in range(n) if r not in fixed]
        left = total - sum(fixed.values())
        wsum = sum(weights[r] for r in free)
        ideal = {r: left * weights[r] / wsum for r in free}
        low = [r for r in free if ideal[r] < minimum]
        if not low:
            break
        fixed.update({r: minimum for r in low})
    counts = {r: int(ideal[r]) for r in free}
    rest = left - sum(counts.values())
    for r in sorted(free, key=lambda r: (-(ideal[r] - counts[r]), r))[:rest]:
        counts[r] += 1
    counts.update(fixed)
    return [counts[r] for r in range(n)]


def validate(cfg, dims) -> None:
    """Before launch: the shares key, the slow rank's factor, and that every rank gets a sample per microbatch."""
    d, t = cfg.data, cfg.train
    if d.shares_resume not in ("keep", "measure"):
        raise ConfigError(f"data.shares_resume={d.shares_resume!r}: must be one of keep, measure")
    if d.shares_window < 1:
        raise ConfigError(f"data.shares_window={d.shares_window}: must be at least 1")
    if not 0 <= d.shares_drift < 1:
        raise ConfigError(f"data.shares_drift={d.shares_drift}: must be in [0, 1)")
    if cfg.debug.slow_factor < 1:
        raise ConfigError(f"debug.slow_factor={cfg.debug.slow_factor}: must be at least 1 (1 = not slowed)")
    if d.shares != "equal" and d.uneven == "join":  # join's loss correction (world / active ranks) assumes equal shares
        raise ConfigError(f"data.shares={d.shares} with data.uneven=join: the join correction assumes equal shares; "
                          "set data.uneven=error or data.shares=equal")
    weights = parse(d.shares, dims.dp_size)
    if weights is None or len(set(weights)) == 1:
        return
    counts = partition(t.global_batch, weights, minimum=0)
    if min(counts) < t.grad_accum:
        r = counts.index(min(counts))
        raise ConfigError(f"data.shares={d.shares}: data-parallel rank {r} would get {counts[r]} of the "
                          f"{t.global_batch} samples, fewer than train.grad_accum={t.grad_accum} (every rank runs "
                          "every microbatch); use less uneven weights or a larger train.global_batch")
