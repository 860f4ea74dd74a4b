"""`make gpu-check` (shardlab.testing.gpu_check) without a GPU: its case list covers every layer and
feature, it refuses clearly when there is no CUDA device, and its CPU rehearsal runs a real case through
comm's staged mode (CPU tensors staged the way CUDA ones are for gloo), so the script cannot rot."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from shardlab.testing.gpu_check import cases, spec_peak

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_case_list_covers_every_layer_and_feature():
    from shardlab.parallel.layers import DATA_PARALLEL
    from shardlab.parallel.pp import SCHEDULES

    listed = {(c.name, c.world) for c in cases()}
    keys = " ".join(k for c in cases() for k in c.keys)
    for dp in DATA_PARALLEL:
        assert (f"dp {dp}", 1) in listed
    for s in SCHEDULES:
        assert f"parallel.pp_schedule={s}" in keys
    for needle in ("parallel.sp=true", "parallel.cp=2", "parallel.ep=2", "train.recompute=full",
                   "train.recompute=selective", "train.compile=true", "train.dtype=bf16", "parallel.offload_to=host",
                   "parallel.offload_to=disk", "parallel.compress=powersgd", "parallel.dp_replicate=2"):
        assert needle in keys, needle
    assert {c.world for c in cases()} == {1, 2, 4}
    assert any(c.cmd == "generate" and c.world == 2 for c in cases())
    assert any(c.cmd == "ft" and "debug.ft_absent=1@2-3" in c.keys for c in cases())  # a heal across replicas


def test_flops_per_token_is_the_bench_count_for_gpt2():
    from shardlab.bench.measure import flops_per_token as bench_count
    from shardlab.model.gpt import GPTConfig, PRESETS, build_model
    from shardlab.testing.gpu_check import flops_per_token

    with torch.device("meta"):
        model = build_model(GPTConfig(**PRESETS["gpt2"], max_seq_len=1024), seed=0)
    params = sum(p.numel() for p in model.parameters())
    assert flops_per_token(params, 1024) == bench_count(model, 1024)


def test_spec_peaks_match_torch_device_names():
    assert spec_peak("NVIDIA H200") == 989
    assert spec_peak("NVIDIA H200 NVL") == 835
    assert spec_peak("NVIDIA H100 80GB HBM3") == 989
    assert spec_peak("NVIDIA H100 PCIe") == 756
    assert spec_peak("NVIDIA A100-SXM4-80GB") == 312
    assert spec_peak("Some Future GPU") is None


def _gpu_check(*args, timeout=900):
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "shardlab.testing.gpu_check", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_2():
    r = _gpu_check()
    assert r.returncode == 2
    assert "no CUDA device" in r.stderr and "--device cpu" in r.stderr and "nothing was checked" in r.stderr


@pytest.mark.timeout(900)
def test_cpu_rehearsal_runs_a_staged_case_through_the_cli():
    """zero3 at world 2 (reduce-scatter and all-gather through host copies) as `make gpu-check` runs it:
    the script, SHARDLAB_BACKEND=gloo-staged and the table. (Staged point-to-point is test_pipeline.py's
    bit-for-bit check.)"""
    r = _gpu_check("--device", "cpu", "--only", "dp zero3", "--world", "2", "--steps", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| dp zero3")]
    assert len(rows) == 1 and "gloo staged" in rows[0] and "| ok " in rows[0], r.stdout
    assert "1 of 1 passed" in r.stdout


@pytest.mark.timeout(900)
def test_cpu_rehearsal_runs_the_fault_tolerance_case():
    """Two replicas and a lighthouse, replica 1 healed over the quorum group: on a GPU its tensors are CUDA
    ones on gloo (two NCCL ranks cannot share one GPU); here the same orchestration on CPU."""
    r = _gpu_check("--device", "cpu", "--only", "ft heal")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ft heal")]
    assert len(rows) == 1 and "| ok " in rows[0] and "replica 1 healed" in rows[0], r.stdout
