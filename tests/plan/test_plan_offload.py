"""Activations offloaded to host memory (offload_activations; plan/offload.py): Transformer Engine's default schedule
(at most L - N blocks' activations on the GPU; copies on a stream of their own), its memory, its waits, its refusals."""
from dataclasses import replace

import pytest

from shardlab.plan.hardware import load_cluster
from shardlab.plan.layout import Layout
from shardlab.plan.train_spec import TrainSpec
from shardlab.plan.presets import PRESETS
from shardlab.plan.step import evaluate
from shardlab.plan.offload import waits


def test_waits_follow_te_schedule():
    """TE's docs' two figures (5 blocks): 2 offloaded overlap fully; 3 offloaded leave 2 sets on the GPU, so block 4
    waits for block 2's copy when copies outlast blocks; 4 of 5 (one set) serialize every copy with the compute."""
    assert waits(1.0, 2.0, 1.0, 5, 2) == (0.0, 0.0)
    assert waits(1.0, 2.0, 1.0, 5, 3) == (0.0, 0.0)
    assert waits(1.0, 2.0, 1.5, 5, 3) == pytest.approx((0.5, 0.0))  # block 4 starts at 4.5, not 3
    # one set on the GPU: each block waits for the copy before it (3, 6, 9, 12), then the reloads one at a time
    assert waits(1.0, 2.0, 3.0, 5, 4) == pytest.approx((8.0, 12.0))
    assert waits(1.0, 2.0, 3.0, 5, 0) == (0.0, 0.0)


def test_offload_keeps_l_minus_n_blocks_and_hides_behind_compute():
    """Llama 3 70B on GB200 (the Grace superchip's NVLink-C2C): 40 of 80 blocks offloaded halves the blocks'
    activations, and at 225 GB/s the copies hide behind the blocks (no time added); through PCIe at 1 GB/s they
    do not; pipeline parallelism and recomputation are refused, as Megatron-Core refuses them."""
    model = PRESETS["llama3-70b"]
    train = TrainSpec(128, 2, 8192, precision="bf16-mixed", flash_attention=True, llama_impl="te", fp8="tensorwise")
    c = load_cluster("GB200", 64)
    base, off = (evaluate(model, train, Layout(dp=64, strategy="zero3", offload_activations=n), c) for n in (0, 40))
    a_base, a_off = (sum(ln.bytes for ln in p.memory if ln.name == "activations") for p in (base, off))
    assert 0.5 * a_base < a_off < 0.55 * a_base  # 40 of 80 blocks' kept, the embedding's and the output's too
    assert off.step_time == pytest.approx(base.step_time)  # hidden: no wait
    assert "waits 0.000 + 0.000 ms" in off.explain["forward"]
    slow = evaluate(model, train, Layout(dp=64, strategy="zero3", offload_activations=40),
                    replace(c, pcie_bw=1e9))
    assert slow.step_time > 1.5 * base.step_time
    for lay, words in ((Layout(dp=32, pp=2, strategy="zero1", offload_activations=4), "pp=1"),
                       (Layout(dp=64, strategy="zero3", recompute="full", offload_activations=4), "recompute=none"),
                       (Layout(dp=64, strategy="zero3", offload_activations=80), "between 1 and")):
        with pytest.raises(ValueError, match=words):
            lay.check(model)
