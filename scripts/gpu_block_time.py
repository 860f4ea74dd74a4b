"""One Llama 3 8B block on one GPU against the planner's block, to place the Hopper excess (docs/planner.md, "The
twentieth set": the plan runs 10-28% fast on every 2024-25 H100 row, PyTorch-native and Megatron-Core alike).

Prints, for shardlab's own Llama block at the 8B shape (bf16 weights, micro batch 1, SDPA), each measured with CUDA
events beside the planner's figure for the same shape on the device's preset:
  - the block's forward and backward, eager and under torch.compile (per block, over a stack of --blocks);
  - its seven linears alone, forward and backward (the GEMMs' achieved TFLOP/s);
  - a sustained GEMM (8192 x 4096 -> 14336) held for --sustain seconds: the rate once the clock has settled (the
    planner's Hopper GEMM rate is an H200's MSMF, 698.6 of 989 TFLOP/s), with the clock and power where torch
    reports them.
Run on a GPU machine: python3 scripts/gpu_block_time.py [--sustain 60]. --tiny runs small shapes on any device
(a dry run of the script itself, no figure worth keeping)."""
from __future__ import annotations

import argparse
import time

import torch

from shardlab.model.configs import LlamaConfig
from shardlab.model.llama import LlamaBlock


def timed(fn, reps: int) -> float:
    """Mean seconds of fn() over `reps` after 2 warm-ups: CUDA events on a GPU, the wall clock elsewhere."""
    for _ in range(2):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / 1e3 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def plan_block(cfg: LlamaConfig, seq: int, compiled: bool, device: str) -> tuple[float, float]:
    """The planner's (forward, backward) seconds of one block at this shape on the device's preset."""
    from shardlab.plan.compute import micro_batch_time
    from shardlab.plan.hardware import load_cluster
    from shardlab.plan.layout import Layout
    from shardlab.plan.model import ModelSpec
    from shardlab.plan.train_spec import TrainSpec
    name = torch.cuda.get_device_name() if device == "cuda" else ""
    preset = "H200" if "H200" in name else "B200" if "B200" in name else "H100-SXM"
    model = ModelSpec("block", n_layer=1, d_model=cfg.d_model, n_head=cfg.n_head, vocab=cfg.vocab_size, seq=seq,
                      arch="llama", n_kv_heads=cfg.n_kv_heads, ffn=cfg.ffn_hidden, tied=False)
    train = TrainSpec(global_batch=1, micro_batch=1, seq=seq, flash_attention=True, compile=compiled, dropout=False)
    return micro_batch_time(model, train, Layout(dp=1), load_cluster(preset, 1)).block


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--sustain", type=float, default=60.0, help="seconds of the sustained GEMM (0: skip)")
    ap.add_argument("--tiny", action="store_true", help="small shapes, any device: a dry run")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    d, heads, kv, ffn, seq = (4096, 32, 8, 14336, args.seq) if not args.tiny else (64, 4, 2, 128, 32)
    cfg = LlamaConfig(n_layer=args.blocks, n_head=heads, d_model=d, n_kv_heads=kv, intermediate_size=ffn,
                      max_seq_len=seq)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    blocks = [LlamaBlock(cfg, i).to(device=device, dtype=dtype) for i in range(args.blocks)]
    x = torch.randn(1, seq, d, device=device, dtype=dtype, requires_grad=True)
    reps = 3 if args.tiny else 10
    print(f"device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"block d {d} heads {heads}/{kv} ffn {ffn} seq {seq}, {args.blocks} blocks", flush=True)

    for compiled in (False, True):
        stack = [torch.compile(b) for b in blocks] if compiled else blocks

        def fwd():
            h = x
            for b in stack:
                h = b(h)
            return h

        out = fwd()
        grad = torch.randn_like(out)
        t_f = timed(fwd, reps)
        def fwd_bwd():  # one backward each time, as the plan counts it: no gradient accumulation
            for b in blocks:
                b.zero_grad(set_to_none=True)
            x.grad = None
            torch.autograd.backward(fwd(), grad)

        t_fb = timed(fwd_bwd, reps)
        p_f, p_b = plan_block(cfg, seq, compiled, device)
        n = args.blocks
        print(f"{'compiled' if compiled else 'eager   '} block: forward {t_f / n * 1e3:8.3f} ms (plan {p_f * 1e3:8.3f}), "
              f"backward {(t_fb - t_f) / n * 1e3:8.3f} ms (plan {p_b * 1e3:8.3f})", flush=True)

    # the block's seven linears alone: (out, in) per linear, forward x W^T, backward dX and dW
    shapes = [(heads * d // heads, d), (kv * d // heads, d), (kv * d // heads, d), (d, d), (ffn, d), (ffn, d), (d, ffn)]
    a = torch.randn(seq, max(d, ffn), device=device, dtype=dtype)
    flops = t_all = 0.0
    for n_out, k in shapes:
        w = torch.randn(n_out, k, device=device, dtype=dtype)
        xi, g = a[:, :k], torch.randn(seq, n_out, device=device, dtype=dtype)
        t_all += timed(lambda: (xi @ w.t(), g @ w, g.t() @ xi), reps)
        flops += 3 * 2 * seq * n_out * k
    print(f"linears alone: {t_all * 1e3:8.3f} ms fwd+bwd, {flops / t_all / 1e12:7.1f} TFLOP/s", flush=True)

    if args.sustain > 0:
        m, k, n = (8192, 4096, 14336) if not args.tiny else (64, 64, 64)
        p, q = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        end, rates = time.time() + args.sustain, []
        while time.time() < end:
            rates.append(2 * m * k * n / timed(lambda: p @ q, 20) / 1e12)
        settled = sorted(rates[len(rates) // 2:])  # the second half, once the clock has settled
        extra = ""
        if device == "cuda":
            for what, f in (("clock MHz", "clock_rate"), ("power mW", "power_draw")):
                if hasattr(torch.cuda, f):
                    try:
                        extra += f", {what} {getattr(torch.cuda, f)()}"
                    except Exception as e:  # reported, not fatal: the rate is the figure
                        extra += f", {what} unavailable ({type(e).__name__})"
        print(f"sustained GEMM {m}x{k}x{n}: median of the settled half {settled[len(settled) // 2]:7.1f} TFLOP/s "
              f"({len(rates)} samples over {args.sustain:g} s){extra}", flush=True)


if __name__ == "__main__":
    main()
