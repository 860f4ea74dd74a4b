"""Comparing two runs that should have computed the same thing, in a way that holds on every CPU.

Why a fixed fp32 tolerance is not portable. Two layouts compute the same sums in another order (split
matmuls, sharded reductions, another microbatch grouping), and the CPU's kernels choose the order too
(MKL's code path on AMD vs Intel, AVX2 vs AVX-512 blocking, FMA or not). Any order obeys the classic bound
|fl(Σ x_i) − Σ x_i| ≤ γ_n Σ|x_i| (γ_n ≈ n·u, u the unit round-off), so the *forward pass and the gradients*
agree to a few γ_n whatever the machine. AdamW does not preserve that: it divides each gradient entry by its
own running magnitude, so an entry that nearly cancels (a sum of large terms with a tiny result, or an
entry whose true gradient is zero, like the attention key bias) turns its *relative* round-off into an
update of up to ~lr. In fp32 (u = 6e-8) such an entry moves by ~lr per step on one machine and not on
another: a tolerance fitted on one CPU (3e-5 here, then an AMD machine, then a Sapphire Rapids Xeon) only
moves the edge.

1. The parity tests therefore run in float64 (`in_float64`). u = 1.1e-16, and AdamW's eps (1e-8) caps the
   amplification: an update error is at most lr·δg / max(|g|, eps). With δg ≤ γ_n Σ|terms| ≲ 1e-15 on the
   tiny models (n ≤ a few thousand terms of size ≤ 1), that is ≤ 1e-3·1e-15/1e-8 = 1e-10 per step in the
   very worst entry, and ~1e-15 typically (measured worst on tp=2: 7.7e-15, the key bias). `assert_float64_equal`
   asserts rtol = atol = FP64_TOL = 1e-9 on every element, losses and norms: 1e2-1e6 above any round-off, and
   a wrong gradient (an entry off by a fraction of itself) moves a parameter by ~1e-4 or more within the
   first step. Nothing in this argument depends on which kernels ran, so it holds on every CPU.
2. One fp32 test per layer keeps the real training precision covered, against an error model rather than a
   fitted number (`assert_fp32_within_error_model`): the float64 single-device run is the exact answer;
   the single-device fp32 run's distance from it is this machine's own fp32 round-off for this very
   computation, measured in the same test; the layout's fp32 run must be within FP32_NOISE_FACTOR times
   that distance (plus a floor of a few ulps) — per loss, per gradient norm, and per parameter tensor as a
   root-mean-square over its elements (Adam's isolated amplified entries are spread over the tensor; a real
   defect moves every element by ~lr and is 10^3-10^4 times over). The layout's order of sums is as valid
   as the single device's, so the two errors are of one kind and size on any CPU: the bound scales with
   the machine instead of being set by one.
"""
from __future__ import annotations

import torch

FP64_TOL = 1e-9
FP32_NOISE_FACTOR = 16.0
FP32_ULP_FLOOR = 4 * torch.finfo(torch.float32).eps  # relative: below this, a difference is a few ulps


def in_float64(fn, *args, **kwargs):
    """Call `fn(*args, **kwargs)` with float64 as the default dtype (models, optimizer states and every
    float tensor the step creates without a dtype), then restore it. Module-level, so a WorkerPool can
    run it: `pool.run(in_float64, harness_fn, args...)`."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_default_dtype(old)


def _as_tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.float64)


def assert_float64_equal(got, ref, what: str = "value", tol: float = FP64_TOL) -> None:
    """Float64 results of two layouts: equal to `tol` relative and absolute (module docstring, 1.).
    `got`/`ref`: a dict name -> tensor (parameters), a tensor, or a list of floats (losses, norms)."""
    if isinstance(ref, dict):
        assert got.keys() == ref.keys(), sorted(set(got) ^ set(ref))
        for name, r in ref.items():
            assert r.dtype == torch.float64 and got[name].dtype == torch.float64, \
                f"{name}: {got[name].dtype} / {r.dtype}: run the harness under in_float64"
            assert got[name].shape == r.shape, f"{name}: shape {tuple(got[name].shape)} != {tuple(r.shape)}"
            torch.testing.assert_close(got[name], r, rtol=tol, atol=tol, msg=lambda m, n=name: f"{n}: {m}")
        return
    g, r = _as_tensor(got).double(), _as_tensor(ref).double()
    torch.testing.assert_close(g, r, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def _rms(t: torch.Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt()) if t.numel() else 0.0


def assert_fp32_within_error_model(got, single, exact, what: str = "value",
                                   factor: float = FP32_NOISE_FACTOR) -> None:
    """fp32 `got` (a layout) against fp32 `single` (one device) and float64 `exact` (one device):
    |got − exact| ≤ factor · max(|single − exact|, FP32_ULP_FLOOR · |exact|), per scalar of a list
    (losses, norms) and per tensor as an RMS for a dict of parameters (module docstring, 2.)."""
    if isinstance(exact, dict):
        assert got.keys() == exact.keys() == single.keys(), sorted(set(got) ^ set(exact))
        for name, e in exact.items():
            e = e.double()
            err = _rms(got[name].double() - e)
            noise = max(_rms(single[name].double() - e), FP32_ULP_FLOOR * _rms(e))
            assert err <= factor * noise, (f"{name}: RMS distance from the float64 result {err:.3g} > "
                                           f"{factor:g} x the single device's fp32 round-off {noise:.3g}")
        return
    g, s, e = (_as_tensor(x).double().reshape(-1) for x in (got, single, exact))
    err = (g - e).abs()
    noise = torch.maximum((s - e).abs(), FP32_ULP_FLOOR * e.abs())
    bad = err > factor * noise
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} of {bad.numel()} off; worst |got - exact| "
                                 f"{float(err.max()):.3g} against a single-device fp32 round-off of "
                                 f"{float(noise[err.argmax()]):.3g} (x{factor:g} allowed)")


def lr_sum(cfg, steps: int, start: int = 0) -> float:
    """Σ lr over optimizer steps start..start+steps-1 under the trainer's schedule."""
    from shardlab.optim import lr_at

    return sum(lr_at(s, cfg) for s in range(start, start + steps))
