"""The peak FLOP/s of one rank's device: the MFU denominator (summary.json `mfu`, docs/training.md).

GPU: the spec table of plan/hardware.py (dense 16-bit tensor-core, or fp32, FLOP/s), found by the
device's name; a device not in the table has no peak (MFU null) rather than a guessed one.

CPU: no spec sheet says what the cores a rank gets can do, so the peak is measured. The calibrated
profile (`shardlab plan calibrate`, the planner's `cluster=this`) already holds one: its GEMM saturation
fit, measured one thread per rank at the models' own shapes; a one-thread rank uses it. Otherwise one
large GEMM loop at the rank's thread count, best of a few (the peak is what the cores reach, not what a
neighbour's load leaves of it), measured once per machine and thread count and cached beside the profile
(`gemm_peak.json`), so a run pays it at most once (about half a second).
"""
from __future__ import annotations

import json
import os
import platform
import time

from .hardware import PRESETS, default_profile_path, read_profile

# substring of the name -> preset, the first that matches ("NVIDIA A100-SXM4-40GB" is the 40 GB part)
_GPU_NAMES = (("GB200", "GB200"), ("GB300", "GB300"), ("B200", "B200"), ("H200", "H200"), ("H800", "H800"),
              ("H100", "H100-SXM"), ("A100-SXM4-40GB", "A100-40G"), ("A100", "A100-80G"))
GEMM_N = 1024  # 2 GFLOP per product: long enough to saturate, short enough to repeat


# H100/H200 NVL (835 TFLOP/s bf16) and H100 PCIe (756): not the SXM presets (the GB200 and GB300, the NVL72 racks'
# parts, have presets of their own, matched before "B200")
_OTHER_PARTS = ("NVL", "PCIe")


def gpu_preset(device_name: str) -> str | None:
    """The preset of plan/hardware.py a CUDA device's name (torch.cuda.get_device_name) is, or None (then no
    MFU: the NVL and PCIe parts share the SXM part's name but not its clocks or peak)."""
    if any(part.lower() in device_name.lower() for part in _OTHER_PARTS):
        return None
    return next((preset for needle, preset in _GPU_NAMES if needle in device_name), None)


def gpu_peak(device_name: str, dtype: str) -> tuple[float | None, str]:
    """(peak FLOP/s, where from) for a CUDA device by its name; (None, why) when it is not in the table."""
    preset = gpu_preset(device_name)
    if preset is None:
        return None, f"no spec for {device_name!r} in plan/hardware.py"
    c = PRESETS[preset]
    return (c.peak_flops_fp32 if dtype == "fp32" else c.peak_flops), f"spec {preset} ({dtype})"


def fp8_peak(device_name: str | None) -> tuple[float | None, str]:
    """(dense FP8 FLOP/s, where from) for a CUDA device by its name (None: a CPU, whose float8 GEMMs are
    emulated: no FP8 peak); (None, why) when the device has none in plan/hardware.py's table."""
    if device_name is None:
        return None, "no FP8 GEMM on a CPU (float8 emulated)"
    preset = gpu_preset(device_name)
    if preset is None or not PRESETS[preset].peak_flops_fp8:
        return None, f"no FP8 spec for {device_name!r} in plan/hardware.py"
    return PRESETS[preset].peak_flops_fp8, f"spec {preset} (fp8 dense)"


def cpu_peak(threads: int) -> tuple[float, str]:
    """(peak FLOP/s of one rank at `threads` threads, where from)."""
    profile = default_profile_path()
    if threads == 1 and profile.exists():
        try:
            c = read_profile(profile)
            if c.peak_flops_fp32 > 0:
                return c.peak_flops_fp32, f"calibrated profile {profile}"
        except ValueError:
            pass  # an unreadable profile: measure instead
    cache = profile.parent / "gemm_peak.json"
    key = f"{_cpu_name()}|threads={threads}"
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = measure_gemm_peak()
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(known, indent=1) + "\n")
            os.replace(tmp, cache)  # atomic: ranks measuring at once each write a whole file
        except OSError:
            pass  # a read-only cache: measured again next time
    return float(known[key]), f"measured GEMM {GEMM_N}^3 fp32 ({cache})"


def measure_gemm_peak(reps: int = 8) -> float:
    """Best FLOP/s of an fp32 GEMM_N^3 product at this process's torch threads."""
    import torch  # deferred: the planner is pure Python everywhere else

    a, b = torch.randn(GEMM_N, GEMM_N), torch.randn(GEMM_N, GEMM_N)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * GEMM_N ** 3 / best


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
