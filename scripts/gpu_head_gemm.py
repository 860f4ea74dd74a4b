"""The head GEMMs of gpt2 (32,768 tokens x 768 -> vocabulary) on a GPU at 50,257 and at 50,304 (a multiple of 64):
the three products of a training step, bf16, timed with CUDA events (mean of 20 after 3 warm-ups).
Run on a GPU machine: python3 scripts/gpu_head_gemm.py (docs/cuda.md has the H200 figures)."""
import torch, time
x = torch.randn(32768, 768, device="cuda", dtype=torch.bfloat16)
for v in (50257, 50304):
    w = torch.randn(v, 768, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(32768, v, device="cuda", dtype=torch.bfloat16)
    for name, f in (("fwd x@w.T", lambda: x @ w.t()), ("dgrad g@w", lambda: g @ w), ("wgrad g.T@x", lambda: g.t() @ x)):
        for _ in range(3): f()
        torch.cuda.synchronize(); e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20): f()
        e1.record(); torch.cuda.synchronize(); ms = e0.elapsed_time(e1) / 20
        print(f"vocab {v} {name}: {ms:.3f} ms, {2*32768*768*v/ms/1e9:.0f} TFLOP/s", flush=True)
