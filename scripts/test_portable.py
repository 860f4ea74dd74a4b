"""Run the parity tests (`pytest -m parity`) under every CPU kernel path a user's machine may take:
ATEN_CPU_CAPABILITY ∈ {default, avx2, avx512} × MKL_CBWR ∈ {unset, COMPATIBLE, AVX2}, and the bf16 parity
tests once more under ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN, which runs bf16 matmuls, ignores MKL_CBWR).
avx2 with MKL_CBWR=AVX2 stands in for an AMD machine. Prints one table; exits non-zero if any cell failed.

A capability this CPU lacks cannot be forced (ATen falls back to the best it has): such a cell would rerun an
identical configuration, so it is reported as the cell it equals, not run twice. `make test-portable`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPS = ("default", "avx2", "avx512")
CBWR = (None, "COMPATIBLE", "AVX2")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def effective_capability(cap: str, flags: set[str]) -> str:
    """The kernel path ATEN_CPU_CAPABILITY=cap can really take here. torch reports the requested value
    whatever the CPU (seen: "AVX512" on an AVX2-only AMD EPYC, where an AVX-512 instruction is SIGILL), so
    the CPU's own flags decide: without avx512f the avx512 cell is the avx2 one."""
    if cap == "avx512" and flags and "avx512f" not in flags:
        return "avx2"
    if cap == "avx2" and flags and "avx2" not in flags:
        return "default"
    return cap


def run_cell(env_extra: dict, select: list[str], pytest_args: list[str]) -> tuple[int, float, str]:
    env = dict(os.environ, **env_extra)
    if "MKL_CBWR" not in env_extra:
        env.pop("MKL_CBWR", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *select, *pytest_args],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    tail = (lines or [""])[-1]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    if failed:  # name what failed: the table's one line is not enough to act on
        tail += " | " + "; ".join(failed)
    # pytest's exit code 5 (nothing collected) is a failure here: the selection must not silently vanish
    return proc.returncode, time.monotonic() - t0, tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[],
                    help="run only the cells whose name contains this (repeatable), e.g. 'avx2 MKL_CBWR=AVX2'")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. a -k filter)")
    args = ap.parse_args(argv)
    cells = []
    flags = cpu_flags()
    effective = {cap: effective_capability(cap, flags) for cap in CAPS}
    print("kernel path each ATEN_CPU_CAPABILITY can take on this CPU: "
          + ", ".join(f"{c} -> {e}" for c, e in effective.items()), flush=True)
    seen: dict = {}
    for cap in CAPS:
        for cbwr in CBWR:
            name = f"ATEN_CPU_CAPABILITY={cap} MKL_CBWR={cbwr or 'unset'}"
            key = (effective[cap], cbwr)
            if key in seen:
                cells.append((name, "not run: this CPU lacks it, same as " + seen[key], None, 0.0, ""))
                continue
            seen[key] = name
            if args.only and not any(o in name for o in args.only):
                continue
            env = {"ATEN_CPU_CAPABILITY": cap, **({"MKL_CBWR": cbwr} if cbwr else {})}
            rc, secs, tail = run_cell(env, ["-m", "parity"], args.pytest_args)
            cells.append((name, "pass" if rc == 0 else f"FAIL (exit {rc})", rc, secs, tail))
            print(f"{name:50s} {cells[-1][1]:14s} {secs:6.0f} s  {tail}", flush=True)
    name = "ONEDNN_MAX_CPU_ISA=AVX2 (bf16 parity tests)"
    if args.only and not any(o in name for o in args.only):
        return report(cells)
    rc, secs, tail = run_cell({"ONEDNN_MAX_CPU_ISA": "AVX2"}, ["-m", "parity", "-k", "bf16"], args.pytest_args)
    cells.append((name, "pass" if rc == 0 else f"FAIL (exit {rc})", rc, secs, tail))
    print(f"{name:50s} {cells[-1][1]:14s} {secs:6.0f} s  {tail}", flush=True)
    return report(cells)


def report(cells) -> int:
    print("\n| kernel path | result | time | pytest |\n|---|---|---|---|")
    for name, verdict, rc, secs, tail in cells:
        print(f"| {name} | {verdict} | {secs:.0f} s | {tail} |")
    return 0 if all(rc in (0, None) for _, _, rc, _, _ in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
