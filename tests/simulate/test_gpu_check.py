"""`make gpu-check` (shardlab.testing.gpu_check) without a GPU: its case list covers every layer and
feature, it refuses clearly when there is no CUDA device, and its CPU rehearsal runs a real case through
comm's staged mode (CPU tensors staged the way CUDA ones are for gloo), so the script cannot rot."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from shardlab.testing.gpu_check import cases

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


def test_optimizer_offload_trains_on_cuda():
    """ZeRO-Offload (the optimizer's state and step on the host, parameters on the GPU) is a training case on
    CUDA, at one rank (NCCL) and staged at two, to disk and to the host; none of it is CPU-only."""
    off = [c for c in cases() if "parallel.offload=optimizer" in c.keys and not c.name.startswith("meta build")]
    assert {c.world for c in off} == {1, 2} and not any(c.cuda_only for c in off)
    assert {k for c in off for k in c.keys if k.startswith("parallel.offload_to=")} == \
        {"parallel.offload_to=disk", "parallel.offload_to=host"}
    assert {k for c in off for k in c.keys if k.startswith("parallel.strategy=")} == \
        {"parallel.strategy=zero1", "parallel.strategy=zero2", "parallel.strategy=zero3"}


@pytest.mark.parametrize("name", ["gpt2", "llama-1b"])
def test_the_mfu_numerator_of_the_performance_runs_is_the_bench_count(name):
    """The performance runs report summary.json's MFU (plan/model.py's model_flops): for both models of record
    it is the bench's 6N + 12·L·d·T per token (N without the position table), counted on the built model.
    The one difference: the bench's N counts the norms' and biases' parameters (6 FLOPs each, as Kaplan's
    6N does), the planner only the matrices; gpt2's 121,344 such parameters are 0.09% of its FLOPs, hence
    rel=1e-3 (the llama has no biases and its norms are 0.003%)."""
    from shardlab import config
    from shardlab.bench.measure import flops_per_token as bench_count
    from shardlab.model import build_model
    from shardlab.model.configs import resolve_model_config
    from shardlab.plan.from_config import model_spec
    from shardlab.testing.gpu_perf import PERF_MODELS

    keys, micro, seq = PERF_MODELS[name]
    cfg = config.load(None, [*keys, f"train.seq_len={seq}"])
    with torch.device("meta"):
        model = build_model(resolve_model_config(cfg.model, seq), seed=0)
    assert model_spec(cfg).model_flops(seq, seq) == pytest.approx(bench_count(model, seq) * seq, rel=1e-3)


def test_every_case_is_a_valid_config_at_its_world():
    """Each case's keys, as the check passes them (tiny.toml + the case's overrides), validate at its world:
    a default that moves under the list (tiny.toml's global batch once made the pp cases contradict their
    grad_accum) fails here, not in the first minutes of a GPU."""
    from shardlab import config
    from shardlab.testing.gpu_check import REPO, TINY
    from shardlab.testing.gpu_perf import PERF_MODELS, perf_cases

    for c in cases():
        if c.cmd == "generate" or c.cuda_only:  # a cuda_only case is refused here by design (one clear line)
            continue
        ft = ["parallel.replica_id=0", "parallel.ft_store=127.0.0.1:1"] if c.cmd == "ft" else []  # one replica's
        overrides = TINY[2:] + c.keys + ft
        cfg = config.load(REPO / "configs" / "tiny.toml", overrides)
        cfg = config.validate(cfg, 1 if c.cmd == "ft" else c.world)  # ft: two one-process replicas
    for c in perf_cases(list(PERF_MODELS), {}):
        config.validate(config.load(None, c.keys), 1)


def test_fp8_cases_run_on_a_gpu_only_and_are_valid_configs():
    """FP8 (tensorwise, rowwise, zero3's float8 all-gather at 2 staged ranks): native torch._scaled_mm on an
    H100/H200, skipped in the CPU rehearsal (the suite checks the emulated float8 on CPU); valid configs at
    their world all the same, so a GPU's minutes are not spent on a refusal."""
    from shardlab import config
    from shardlab.testing.gpu_check import REPO, TINY

    fp8 = [c for c in cases() if any(k.startswith("train.fp8=") for k in c.keys)]
    assert {k for c in fp8 for k in c.keys if k.startswith(("train.fp8=", "parallel.strategy="))} == \
        {"train.fp8=tensorwise", "train.fp8=rowwise", "parallel.strategy=ddp", "parallel.strategy=zero3"}
    assert all(c.cuda_only for c in fp8) and {c.world for c in fp8} == {1, 2}
    for c in fp8:
        config.validate(config.load(REPO / "configs" / "tiny.toml", TINY[2:] + c.keys), c.world)


def test_spec_peaks_match_torch_device_names():
    """summary.json's MFU denominator (plan/peak.py) by torch's device names; a part whose peak is not the
    table's (NVL, PCIe) gets none rather than the SXM part's."""
    from shardlab.plan.peak import gpu_peak

    assert gpu_peak("NVIDIA H200", "bf16")[0] == 989e12
    assert gpu_peak("NVIDIA H100 80GB HBM3", "bf16")[0] == 989e12
    assert gpu_peak("NVIDIA A100-SXM4-80GB", "bf16")[0] == 312e12
    assert gpu_peak("NVIDIA H200", "fp32")[0] == 67e12
    assert gpu_peak("NVIDIA H800", "bf16") == (989e12, "spec H800 (bf16)")
    assert gpu_peak("NVIDIA A100-SXM4-40GB", "bf16") == (312e12, "spec A100-40G (bf16)")
    assert gpu_peak("NVIDIA B200", "bf16") == (2250e12, "spec B200 (bf16)")
    assert gpu_peak("NVIDIA GB200", "bf16") == (2500e12, "spec GB200 (bf16)")  # the NVL72 part: its own preset
    for name in ("NVIDIA H200 NVL", "NVIDIA H100 PCIe", "Some Future GPU"):
        assert gpu_peak(name, "bf16")[0] is None, name


def _gpu_check(*args, timeout=900):
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "shardlab.testing.gpu_check", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_without_cuda_it_says_so_and_exits_2(capsys):
    from shardlab.testing import gpu_check

    # the script's main in this process: it stops before any case starts (the rehearsals below are the script)
    assert gpu_check.main([]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--device cpu" in err and "nothing was checked" in err


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


def test_a_model_too_big_for_one_copy_per_rank_is_built_sharded():
    """The meta-build case: four staged ranks on one GPU, a model four whole copies of which exceed 80 GB,
    zero3 (each rank allocates only its shards); CUDA only (too big to rehearse on a CPU)."""
    (big,) = [c for c in cases() if c.name.startswith("meta build")]
    assert big.world == 4 and big.cuda_only and "parallel.strategy=zero3" in big.keys


def test_block_probe_rehearses_on_cpu(capsys):
    """The block probe gpu-check ends with (testing/block_probe.py): a tiny Llama block timed on CPU beside the
    planner's block, its table and the profiler's top kernels; without a GPU it refuses with exit 2."""
    from shardlab.testing import block_probe

    assert block_probe.main(["--device", "cpu", "--tiny", "--repeat", "1", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "| eager |" in out and "a CPU rehearsal" in out and "aten::mm" in out
    if not torch.cuda.is_available():
        assert block_probe.main([]) == 2
    fwd, bwd = block_probe.planned(block_probe.LLAMA3_8B, 2, 8192, "H100-SXM", compiled=False)
    assert 0 < fwd < bwd  # the planner's Llama 3 8B block on an H100: the backward about twice the forward
