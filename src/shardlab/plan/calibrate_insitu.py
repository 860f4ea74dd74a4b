"""Calibration, in situ: the model's own operations timed inside shardlab's GPT, not in isolation.

An op timed alone in a loop runs with its operands and output hot in cache and its output buffer
recycled; inside a training step its inputs were written long ago, its output is fresh memory, and
the optimizer finds parameters, gradients and moments evicted by the backward pass. On this kind of
machine that difference is 10-30%, in both directions (a GEMM alone can be slower than in the model).
So calibration also runs the real model (same dimensions, micro batch, one thread) for a few steps
with a dispatch mode that times every aten op, and takes each op's own time at its exact shape:

  forward  aten::addmm (x @ W^T + b)   -> linear:m,n,k        aten::mm (tied head) -> linear_nobias:m,n,k
           (the q, k, v and output projections are four (T, h, h) calls of one key)
  backward aten::mm dY @ W             -> mm:m,k,n            dY^T @ X             -> mm_ta:n,k,m
  SDPA forward / backward              -> sdpa:, sdpa_bwd:    (FLOP rates, as the isolated table)
  LayerNorm, GELU forward / backward   -> ewt:ln:B, ewt_bwd:ln:B, ewt:gelu:B, ...  (seconds per call)
  the optimizer step (grad-norm clip + AdamW) -> (tensors, params, seconds) for the optimizer fit
  whole forward / backward minus the keyed ops  -> rest_fwd:, rest_bwd:   (seconds, this model and b)
  the doctor's gradient hooks                   -> hooks:                 (seconds, this model and b)

The keys are those of the isolated table (calibrate_compute.py), which they override; shapes the
model does not run (other micro batches, tensor-parallel splits) keep the isolated measurement.
"""
from __future__ import annotations

import time

from .compute import keyed_time, rest_key
from .model import ModelSpec


def _add(acc: dict, key: str, seconds: float, calls: int) -> None:
    s, n = acc.get(key, (0.0, 0))
    acc[key] = (s + seconds, n + calls)


def _keys(name: str, shapes: list, transposed: bool, T: int, backward: bool) -> list[tuple[str, float]]:
    """(table key, FLOPs per call; 0 for a seconds-per-call entry) of one aten op."""
    if name == "addmm" and not backward:  # x @ W^T + b
        (m, k), (_, n) = shapes[1], shapes[2]
        return [(f"linear:{m},{n},{k}", 2 * m * n * k)]
    if name == "mm":
        (a, b), (_, c) = shapes[0], shapes[1]
        if not backward:  # the tied head, x @ wte^T
            return [(f"linear_nobias:{a},{c},{b}", 2 * a * b * c)] if a == T else []
        # backward: dX = dY (T x out) @ W (out x in), or dW = dY^T (out x T) @ X (T x in), whose first
        # operand is a transposed view
        kind = "mm_ta" if transposed else "mm"
        return [(f"{kind}:{a},{c},{b}", 2 * a * b * c)]
    fam = {"native_layer_norm": "ln", "native_layer_norm_backward": "ln", "gelu": "gelu",
           "gelu_backward": "gelu"}.get(name)
    if fam is not None:  # keyed by the forward bytes as compute.py counts them (2 x the input)
        src = shapes[1] if name == "gelu_backward" else shapes[0]  # gelu_backward(grad, self)
        numel = 1
        for d in src:
            numel *= d
        return [(f"ewt{'_bwd' if backward else ''}:{fam}:{int(2 * numel * 4)}", 0)]
    return []


def _timer():
    """A dispatch mode that times each aten op it runs (CPU seconds of this process): (name, operand
    shapes, first operand transposed, seconds). Only shapes are kept, never the tensors: holding
    them would change the very memory behaviour being measured."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Timer(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[tuple[str, list, bool, float]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            t0 = time.process_time()
            out = func(*args, **(kwargs or {}))
            sec = time.process_time() - t0
            first = args[0] if args and hasattr(args[0], "stride") else None
            transposed = first is not None and first.dim() == 2 and first.stride(0) == 1 and first.shape[0] > 1
            self.ops.append((func._overloadpacket.__name__, [tuple(a.shape) if hasattr(a, "shape") else None
                                                             for a in args], transposed, sec))
            return out
    return Timer()


def measure_in_situ(model: ModelSpec, b: int, steps: int = 2,
                    min_time: float = 0.0) -> tuple[dict, tuple[int, int, float]] | None:
    """(table entries, (tensors, params, optimizer seconds)) for `model` at micro batch `b`, or None
    without shardlab's model (the planner used on its own). CPU seconds of this process, over at
    least `steps` rounds and `min_time` seconds: on a machine whose speed moves from second to second
    (other tenants' memory traffic), a calibration as long as a short run averages over the same mix
    of fast and slow spells as the run, where a few steps catch one or the other.

    Each round runs three steps: one under the op timer (the per-op table), one plain (the whole
    forward and backward: what the keyed ops leave is the remainder, `rest_fwd:` / `rest_bwd:`) and
    one with the doctor's per-gradient hooks attached as the trainer has them (their cost, `hooks:`).
    The optimizer step (grad-norm clip + AdamW + zero_grad) is timed in the untimed steps."""
    try:
        import torch

        from shardlab.doctor.anomaly import LocalGradMonitor
        from shardlab.model.gpt import GPTConfig, build_model
        from shardlab.model.loss import cross_entropy
    except ImportError:
        return None
    if model.mlp_ratio != 4 or not model.tied:  # shardlab's GPT is GPT-2: MLP 4h, tied head
        return None
    net = build_model(GPTConfig(n_layer=model.n_layer, n_head=model.n_head, d_model=model.d_model,
                                vocab_size=model.vocab, max_seq_len=model.seq), seed=0)
    params = list(net.parameters())
    optimizer_step = make_optimizer_step(params)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, model.vocab, (b, model.seq), generator=g)
    y = torch.randint(0, model.vocab, (b, model.seq), generator=g)

    for _ in range(2):  # warm-up: allocator, optimizer state
        cross_entropy(net(x), y, reduction="sum").backward()
        optimizer_step()
    rates: dict = {}  # key -> (calls' seconds per FLOP, or seconds, summed; calls)
    whole = {"fwd": [], "bwd": [], "bwd_hooked": [], "opt": []}  # untimed steps, CPU seconds
    w0, done = time.perf_counter(), 0
    while done < steps or time.perf_counter() - w0 < min_time:
        done += 1
        _op_timed_step(net, x, y, cross_entropy, optimizer_step, rates, model, b)
        for hooked in (False, True):
            monitor = LocalGradMonitor(list(net.named_parameters()), torch.device("cpu")) if hooked else None
            _whole_step(net, x, y, cross_entropy, optimizer_step, whole, "bwd_hooked" if hooked else "bwd")
            if monitor is not None:
                monitor.remove()
    table = _rates_table(rates, model, b)
    mean = {k: sum(v) / len(v) for k, v in whole.items()}
    _add_remainders(table, model, b, mean)
    return table, (len(params), sum(p.numel() for p in params), mean["opt"])


def _attention(model: ModelSpec, b: int) -> tuple[int, str]:
    """(FLOPs of one fused attention forward, its table key's shape part) at micro batch `b`."""
    s, a, dh = model.seq, model.n_head, model.d_model // model.n_head
    return 4 * b * a * s * s * dh, f"{b * a}x{s},{dh}"


def _op_timed_step(net, x, y, loss_fn, optimizer_step, rates: dict, model: ModelSpec, b: int) -> None:
    """One step with forward and backward under the op timer: each keyed op's seconds (per FLOP, or per
    call for seconds-per-call entries) added to `rates`. The timers' records go when this returns."""
    with _timer() as tf:
        loss = loss_fn(net(x), y, reduction="sum")
    with _timer() as tb:
        loss.backward()
    optimizer_step()
    T, sdpa_key = b * model.seq, _attention(model, b)[1]
    for ops, backward in ((tf.ops, False), (tb.ops, True)):
        for name, shapes, transposed, sec in ops:
            if name.startswith("_scaled_dot_product_flash_attention_for_cpu"):
                _add(rates, ("sdpa_bwd:" if backward else "sdpa:") + sdpa_key, sec, 1)
                continue
            for key, flops in _keys(name, shapes, transposed, T, backward):
                _add(rates, key, sec / flops if flops else sec, 1)


def _whole_step(net, x, y, loss_fn, optimizer_step, whole: dict, bwd_key: str) -> None:
    """One step without the op timer: its forward, backward (under `bwd_key`) and optimizer CPU seconds."""
    c0 = time.process_time()
    loss = loss_fn(net(x), y, reduction="sum")
    c1 = time.process_time()
    loss.backward()
    c2 = time.process_time()
    optimizer_step()
    whole["opt"].append(time.process_time() - c2)
    whole["fwd"].append(c1 - c0)
    whole[bwd_key].append(c2 - c1)


def _rates_table(rates: dict, model: ModelSpec, b: int) -> dict:
    """The summed per-op measurements as table entries, in each key family's unit."""
    attn_flops = _attention(model, b)[0]
    table = {}
    for key, (sec, n) in rates.items():
        if key.startswith("sdpa"):  # fused attention: FLOP/s of the forward's FLOPs, backward 2x
            table[key] = attn_flops * (2 if key.startswith("sdpa_bwd") else 1) * n / sec
        elif key.startswith("ewt"):
            table[key] = sec / n  # seconds per call
        else:
            table[key] = n / sec  # FLOP/s, the harmonic mean over calls (time-weighted)
    return table


def _add_remainders(table: dict, model: ModelSpec, b: int, mean: dict) -> None:
    """rest_fwd:, rest_bwd: and hooks: entries from the whole passes' mean seconds."""
    keyed = keyed_time(model, b, table)
    if keyed is not None:  # the remainder, so that keyed ops + rest = the whole pass at this shape
        rk = rest_key(model, b, model.seq)
        table["rest_fwd:" + rk] = max(0.0, mean["fwd"] - keyed[0])
        table["rest_bwd:" + rk] = max(0.0, mean["bwd"] - keyed[1])
        table["hooks:" + rk] = max(0.0, mean["bwd_hooked"] - mean["bwd"])


def make_optimizer_step(params: list, zero_grad: bool = True, optimizer: str = "adamw"):
    """The optimizer step as shardlab's trainer runs it, for timing: per-tensor grad norm, clip, the
    optimizer built by its registry row's factory (optim/registry.py: AdamW fused, matrices decayed, 1-D
    tensors not, as the trainer groups them: the decay is a pass over the weights of its own), then grads
    set to None unless `zero_grad=False`."""
    from types import SimpleNamespace

    import torch

    from shardlab.optim import factory_for
    hyper = SimpleNamespace(train=SimpleNamespace(lr=1e-4, weight_decay=0.1, beta1=0.9, beta2=0.999),
                            model=SimpleNamespace())
    named = [(str(i), p) for i, p in enumerate(params)]
    opt = factory_for(hyper, {n for n, p in named if p.dim() < 2}, name=optimizer)(named)

    def step():
        sq = torch.zeros(1)
        for p in params:
            sq += p.grad.detach().float().pow(2).sum()
        coef = torch.clamp(1.0 / (sq.sqrt() + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(coef)
        opt.step()
        if zero_grad:
            opt.zero_grad(set_to_none=True)
    return step
