"""`make gpu-check`: every layer and feature on the tiny model on one GPU, and the gpt2 preset's bf16 MFU.

Meant for the first minutes a GPU is available, on a machine that is not set up for shardlab: no
network, its own torch (2.11 with CUDA or so). It does not install anything (`make setup` would
fetch the pinned CPU torch); it runs `python -m shardlab` from src/ with the torch it finds, and an
optional package that is missing only costs what needs it (named in the header).

Each case is one real CLI run (`shardlab train`, `shardlab generate`) with its own run directory:
- world 1 on NCCL (backend nccl: one rank, so every collective is a group of one, but every tensor,
  kernel and NCCL call is on the device);
- worlds 2 and 4 on gloo with the model on the GPU ("staged": one GPU cannot host two NCCL ranks, and
  gloo takes CUDA tensors only for broadcast and all_reduce, so comm copies the tensors of every other
  op through host memory; `SHARDLAB_BACKEND=gloo-staged`, see comm.py). Layers whose collectives do not
  go through comm (torch-fsdp2, DTensor, torch's pipelining) cannot be staged and run at world 1 only;
- fault tolerance: two replicas of one rank on the one GPU and a lighthouse, replica 1 absent for two steps
  (debug.ft_absent) and healed over the quorum group. Two NCCL ranks cannot share a GPU, so the quorum
  groups run on gloo with CUDA tensors (SHARDLAB_BACKEND=gloo-staged); the NCCL quorum groups need two
  GPUs and are checked in simulation only (tests/parallel/dp/test_ft_nccl.py).
A case passes when the run exits 0 with a finite final loss. Then the performance runs of record (PERF_MODELS:
gpt2 124M and a Llama of Llama 3.2 1B's shape), bf16 on one rank, compiled and eager, one at a time: tokens/s
and MFU as summary.json reports them (PaLM's model FLOPs, 6N + 12·L·d·T per token, over the GPU's spec bf16
dense peak), peak memory, `shardlab explain --cluster <the GPU's preset>` (the planner's step and memory
against the measured ones) and torch.profiler's top kernels over two steps (trace.profile). Last, one Llama 3 8B
block timed beside the planner's block (testing/block_probe.py; block.md with --out).

One table on stdout (and with --out DIR, five files written as the cases finish: a check cut off by a time
limit keeps what it did); exit 0 when every case passed, 1 otherwise, 2 when there is no CUDA device.
`--device cpu` rehearses the same cases on CPU (gloo; the staged cases stage CPU tensors), which is
how the suite keeps this script from rotting: tests/simulate/test_gpu_check.py runs a case that way.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shardlab.testing.gpu_perf import PERF_MODELS, perf_cases, run_perf
from shardlab.testing.gpu_runs import (REPO, Case, Result, _env, _gpu_name, _last_line, _launcher_log, _run,
                                       _tail)

OPTIONAL = {"matplotlib": "loss.png and other plots", "xxhash": "xxh3 checkpoint checksums (sha256 instead)",
            "safetensors": "HF export / loading an HF directory"}
TINY = ["--config", str(REPO / "configs" / "tiny.toml"), "train.steps=6", "train.log_every=2",
        "train.eval_every=0", "train.warmup_steps=1", "ckpt.final=false"]
PP = ["model.n_layer=4"]  # four stages' worth of layers (interleaved: 2 x 2); tiny.toml's batch: 8 microbatches at pp=2
# two replicas of one rank (each its own `shardlab train`), replica 1 sitting out steps 2-3: healed at step 4
FT = ["parallel.strategy=single", "parallel.fault_tolerant=true", "parallel.replicas=2", "parallel.ft_job=gpu-check",
      "parallel.ft_timeout=60", "parallel.ft_join_timeout=120", "debug.ft_absent=1@2-3", "train.steps=6"]

BIG = ["model.preset=llama3-8b", "model.n_layer=20", "train.seq_len=128", "train.micro_batch=1",
       "train.global_batch=4", "train.steps=2", "train.log_every=1", "parallel.strategy=zero3",
       "parallel.offload=optimizer", "parallel.offload_to=host"]


def cases() -> list[Case]:
    """The check list: (name, world, config keys). World 1 runs on NCCL, 2 and 4 staged on gloo."""
    from shardlab.parallel.layers import DATA_PARALLEL
    from shardlab.parallel.pp import SCHEDULES
    from shardlab.parallel.pp.registry import DEFAULT, many_stages

    out = []
    for dp in DATA_PARALLEL:
        out.append(Case(f"dp {dp}", 1, [f"parallel.strategy={dp}"]))
        if dp not in ("single", "torch-fsdp2"):  # fsdp2's collectives bypass comm: no staging
            out.append(Case(f"dp {dp}", 2, [f"parallel.strategy={dp}"]))
    out += [
        Case("hsdp zero3 2x2", 4, ["parallel.strategy=zero3", "parallel.dp_replicate=2"]),
        Case("tp+sp", 2, ["parallel.tp=2", "parallel.sp=true", "parallel.strategy=ddp"]),
        Case("tp+sp x ddp", 4, ["parallel.tp=2", "parallel.sp=true", "parallel.strategy=ddp"]),
    ]
    for sched in SCHEDULES:
        extra = ["parallel.pp_virtual=2"] if many_stages(sched) else []
        out.append(Case(f"pp {sched}", 2, PP + ["parallel.pp=2", f"parallel.pp_schedule={sched}",
                                                "parallel.strategy=ddp"] + extra))
    out += [
        Case(f"pp {DEFAULT} x ddp", 4, PP + ["parallel.pp=2", "parallel.strategy=ddp"]),
        Case("cp ring", 2, ["parallel.cp=2", "parallel.strategy=ddp"]),
        Case("moe", 1, ["model.moe_experts=4", "parallel.strategy=ddp"]),
        Case("moe ep", 2, ["model.moe_experts=4", "parallel.ep=2", "parallel.strategy=ddp"]),
        Case("recompute full", 1, ["train.recompute=full", "parallel.strategy=ddp"]),
        Case("recompute selective", 1, ["train.recompute=selective", "parallel.strategy=ddp"]),
        Case("recompute full zero3", 2, ["train.recompute=full", "parallel.strategy=zero3"]),
        Case("compile", 1, ["train.compile=true", "parallel.strategy=ddp"], timeout=420),
        Case("compile ddp", 2, ["train.compile=true", "parallel.strategy=ddp"], timeout=420),
        Case("bf16", 1, ["train.dtype=bf16", "parallel.strategy=ddp"]),
        Case("bf16 zero2", 2, ["train.dtype=bf16", "parallel.strategy=zero2"]),
        # FP8: H100/H200 run torch._scaled_mm natively (a CPU emulates it: the suite tests that, not this);
        # zero3 at 2 (staged) gathers the tensorwise weights in float8 (fp8/gather.py)
        *(Case(f"fp8 {r}", 1, ["train.dtype=bf16", f"train.fp8={r}", "parallel.strategy=ddp"], cuda_only=True)
          for r in ("tensorwise", "rowwise")),
        Case("fp8 zero3 all-gather", 2, ["train.dtype=bf16", "train.fp8=tensorwise", "parallel.strategy=zero3"],
             cuda_only=True),
        # ZeRO-Offload: the optimizer's state and step on the host, parameters and gradients on the GPU,
        # copies both ways through pinned buffers (parallel/dp/host_step.py, docs/memory.md)
        Case("offload optimizer disk", 1, ["parallel.strategy=zero1", "parallel.offload=optimizer",
                                           "parallel.offload_to=disk"]),
        Case("offload optimizer disk", 2, ["parallel.strategy=zero2", "parallel.offload=optimizer",
                                           "parallel.offload_to=disk"]),
        Case("offload optimizer host", 1, ["parallel.strategy=zero3", "parallel.offload=optimizer",
                                           "parallel.offload_to=host"]),
        Case("offload params host", 1, ["parallel.strategy=zero3", "parallel.offload=params",
                                        "parallel.offload_to=host"]),
        Case("offload params host", 2, ["parallel.strategy=zero3", "parallel.offload=params",
                                        "parallel.offload_to=host"]),
        Case("offload params disk", 2, ["parallel.strategy=zero3", "parallel.offload=params",
                                        "parallel.offload_to=disk"]),
        Case("offload fsdp2 host", 1, ["parallel.strategy=torch-fsdp2", "parallel.offload=params",
                                       "parallel.offload_to=host"], cuda_only=True),
        Case("powersgd", 2, ["parallel.strategy=ddp", "parallel.compress=powersgd"]),
        # a model the GPU could not hold once per staged rank (5.4B parameters, 21.6 GB in fp32: 86 GB for four
        # whole copies), built on meta and allocated as zero3 shards (parallel/materialize.py): the four
        # ranks' shards add up to one model, the optimizer state lives on the host
        Case("meta build 5.4B zero3", 4, BIG, timeout=600, cuda_only=True),
        Case("ft heal", 2, FT, cmd="ft"),
        Case("gen source", 1, ["parallel.strategy=single", "ckpt.final=true"]),
        Case("generate", 1, [], cmd="generate", source="gen source"),
        Case("generate pp lanes", 2, ["parallel.pp=2"], cmd="generate", source="gen source"),
    ]
    return out


def run_ft_case(case: Case, device: str, work: Path) -> Result:
    """A lighthouse and two fault-tolerant replicas (`case.keys`, parallel.replica_id 0 and 1) at once; passes
    when both exit 0 with a finite loss, replica 1 was healed once, and the replicas end bitwise equal."""
    from shardlab.launch.launcher import free_port

    t0 = time.perf_counter()
    env = _env(True, device)  # gloo-staged: the model on the GPU, the quorum groups on gloo with CUDA tensors
    root = work / case.name.replace(" ", "_")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs = []

    def start(args, log):
        fh = open(root / log, "w")
        procs.append(subprocess.Popen([sys.executable, "-m", "shardlab", *args], stdout=fh, stderr=subprocess.STDOUT,
                                      env=env, cwd=work, start_new_session=True))
        fh.close()
        return procs[-1]

    try:
        start(["lighthouse", "--port", str(port), "--host", "127.0.0.1"], "lighthouse.log")
        keys = TINY + case.keys + [f"parallel.ft_store=127.0.0.1:{port}"]
        replicas = [start(["train", "--nproc", "1", "--out", str(root / f"r{i}"), *keys, f"parallel.replica_id={i}"],
                          f"r{i}.log") for i in (0, 1)]
        codes = []
        for p in replicas:
            try:
                codes.append(p.wait(timeout=max(1.0, case.timeout - (time.perf_counter() - t0))))
            except subprocess.TimeoutExpired:
                codes.append(124)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    took = time.perf_counter() - t0
    if codes != [0, 0]:
        log = (root / f"r{codes.index(next(c for c in codes if c != 0))}.log").read_text()
        return Result(case, "FAIL", seconds=took, note=f"exit {codes}: {_last_line(log)}", log=_tail(log))
    try:
        s0, s1 = (json.loads((root / f"r{i}" / "summary.json").read_text()) for i in (0, 1))
    except (OSError, ValueError) as e:
        return Result(case, "FAIL", seconds=took, note=f"no summary.json ({e})")
    loss = s0.get("final_train_loss")
    if loss is None or not math.isfinite(loss):
        return Result(case, "FAIL", loss, seconds=took, note=f"final loss {loss}")
    if s1.get("heals") != 1 or s0.get("param_checksum") != s1.get("param_checksum"):
        return Result(case, "FAIL", loss, seconds=took, note=f"heals {s1.get('heals')}, parameters "
                                                               f"{s0.get('param_checksum')} vs {s1.get('param_checksum')}")
    return Result(case, "ok", loss, s0.get("tokens_per_s"), took, "replica 1 healed; replicas bitwise equal")


def run_case(case: Case, device: str, work: Path, steps: int | None, runs: dict) -> Result:
    t0 = time.perf_counter()
    if case.cuda_only and device != "cuda":
        return Result(case, "skip", note="needs CUDA")
    if case.cmd == "ft":
        return run_ft_case(case, device, work)
    env = _env(case.staged, device)
    run_dir = work / case.name.replace(" ", "_").replace("+", "p") / f"w{case.world}"
    if case.cmd == "generate":
        src = runs.get(case.source)
        if src is None:
            return Result(case, "FAIL", note=f"its source run ({case.source}) did not finish")
        # two prompts: two request lanes at pp=2; the world follows from the layout keys
        args = ["generate", str(src), "--prompt", "def main():", "--prompt", "x", "--max-new", "16", *case.keys]
    else:
        keys = TINY + case.keys + ([f"train.steps={steps}"] if steps else [])
        args = ["train", "--nproc", str(case.world), "--out", str(run_dir), *keys]
    rc, out, err = _run(args, env, case.timeout, work)
    if rc != 0 and "address already in use" in (out + err).lower():  # a port taken between pick and bind
        rc, out, err = _run(args, env, case.timeout, work)
    took = time.perf_counter() - t0
    if rc != 0:
        return Result(case, "FAIL", seconds=took, note=f"exit {rc}: {_last_line(err) or _last_line(out)}",
                      log=_tail(out, 20) + "\n--- stderr ---\n" + _tail(err) + _launcher_log(run_dir))
    if case.cmd == "generate":
        return Result(case, "ok", seconds=took, note=f"{len(out.strip())} chars out")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError) as e:
        return Result(case, "FAIL", seconds=took, note=f"no summary.json ({e})")
    loss = summary.get("final_train_loss")
    if loss is None or not math.isfinite(loss):
        return Result(case, "FAIL", loss, seconds=took, note=f"final loss {loss}")
    runs[case.name] = run_dir
    return Result(case, "ok", loss, summary.get("tokens_per_s"), took)


def environment() -> tuple[list[str], str | None]:
    """Header lines (python, torch, CUDA, optional packages) and a reason to stop, if any."""
    import torch

    lines = [f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}"]
    if sys.version_info < (3, 11):
        return lines, "shardlab needs Python >= 3.11 (tomllib)"
    if importlib.util.find_spec("numpy") is None:
        return lines, "numpy is missing: shardlab's data path needs it"
    missing = [f"{m} (skipped: {what})" for m, what in OPTIONAL.items() if importlib.util.find_spec(m) is None]
    lines.append("optional packages missing: " + (", ".join(missing) if missing else "none"))
    return lines, None


def table(results: list[Result]) -> str:
    rows = [("case", "world", "backend", "result", "final loss", "tokens/s", "s", "note")]
    for r in results:
        backend = "gloo staged" if r.case.staged else ("nccl" if _DEVICE == "cuda" else "gloo")
        if r.case.cmd == "ft":  # the quorum groups: gloo with the replicas' CUDA tensors
            backend = "gloo, CUDA tensors" if _DEVICE == "cuda" else "gloo"
        rows.append((r.case.name, str(r.case.world), backend, r.status,
                     "" if r.loss is None else f"{r.loss:.4f}",
                     "" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}", f"{r.seconds:.0f}", r.note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for k, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " | " + row[-1])
        if k == 0:
            lines.append("|-" + "-|-".join("-" * w for w in widths) + "-| ")
    return "\n".join(lines)


_DEVICE = "cuda"


class Sink:
    """Where results go as they come (--out DIR): progress.txt (a line per finished case), table.md (rewritten
    after each), fails.txt (each failed run's output tail), perf.json (the performance runs' figures) and
    profiles.txt (their top kernels); written at once, so a check cut off by a time limit still leaves what it
    did. Five files whatever the number of cases: a machine that returns only a few files loses none."""

    def __init__(self, out: str, head: str):
        self.dir = Path(out) if out else None
        self.head, self.results = head, []
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "progress.txt").write_text(head + "\n")

    def add(self, r: Result) -> None:
        self.results.append(r)
        line = f"  {r.status:4} {r.case.name} (world {r.case.world}) {r.seconds:.0f}s {r.note}"
        print(line, flush=True)
        if not self.dir:
            return
        with open(self.dir / "progress.txt", "a") as f:
            f.write(line + "\n")
        if r.log:
            name = "fails.txt" if r.status == "FAIL" else "profiles.txt"
            with open(self.dir / name, "a") as f:
                f.write(f"===== {r.case.name} (world {r.case.world}) =====\n{r.log}\n\n")
        (self.dir / "table.md").write_text(self.head + "\n\n" + table(self.results) + "\n")
        perf = {x.case.name: x.extra for x in self.results if x.extra}
        if perf:
            (self.dir / "perf.json").write_text(json.dumps(perf, indent=1) + "\n")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: rehearse the cases on CPU (gloo; staged cases stage CPU tensors), no MFU")
    p.add_argument("--only", default="", help="comma-separated case names (as in the table, e.g. 'dp zero3')")
    p.add_argument("--world", type=int, default=0, help="only the cases of this world size")
    p.add_argument("--steps", type=int, default=0, help="training steps per case (default: the list's)")
    p.add_argument("--jobs", type=int, default=0, help="cases run at once (default: 8 on cuda, 1 on cpu)")
    p.add_argument("--list", action="store_true", help="print the case list and exit")
    p.add_argument("--no-mfu", action="store_true", help="skip the performance runs")
    p.add_argument("--perf", default="llama-1b,gpt2",
                   help=f"performance runs, comma-separated of {', '.join(PERF_MODELS)} ('' = none)")
    p.add_argument("--perf-first", action="store_true", help="the performance runs before the cases")
    p.add_argument("--micro", default="", help="micro batch per performance model, e.g. llama-1b=8,gpt2=32")
    p.add_argument("--seq", default="", help="sequence length per performance model, e.g. llama-1b=8192")
    p.add_argument("--modes", default="compile,eager", help="performance runs: compile, eager or both")
    p.add_argument("--out", default="", help="write progress.txt, table.md, fails.txt, perf.json, profiles.txt "
                                             "here as it goes")
    p.add_argument("--keep", default="", help="keep the run directories here (default: a temporary one)")
    return p


def main(argv: list[str] | None = None) -> int:
    global _DEVICE
    args = parser().parse_args(argv)
    _DEVICE = args.device
    chosen = cases()
    if args.only:
        names = {n.strip() for n in args.only.split(",")}
        chosen = [c for c in chosen if c.name in names or f"{c.name} w{c.world}" in names]
    if args.world:
        chosen = [c for c in chosen if c.world == args.world]
    perf_names = [n.strip() for n in args.perf.split(",") if n.strip()]
    unknown = [n for n in perf_names if n not in PERF_MODELS]
    if unknown:
        print(f"gpu-check: --perf {unknown[0]!r} is not one of {', '.join(PERF_MODELS)}", file=sys.stderr)
        return 2
    micro, seqs = ({k: int(v) for k, _, v in (kv.partition("=") for kv in arg.split(",") if kv)}
                   for arg in (args.micro, args.seq))
    modes = tuple(m == "compile" for m in args.modes.split(",") if m in ("compile", "eager"))
    perf = [] if (args.no_mfu or args.device != "cuda") else perf_cases(perf_names, micro, seqs, modes)
    if args.list:
        for c in chosen + perf:
            print(f"{c.name} w{c.world}: {c.cmd} {' '.join(c.keys)}")
        return 0
    head, stop = environment()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda or 'not built'}): "
              "nothing was checked. Run it on a machine with a GPU, or rehearse on CPU with "
              "`PYTHONPATH=src python3 -m shardlab.testing.gpu_check --device cpu`", file=sys.stderr)
        return 2
    if stop:
        print(f"gpu-check: {stop}", file=sys.stderr)
        return 2
    gpu = _gpu_name(args.device)
    sink = Sink(args.out, f"gpu-check on {gpu}; " + "; ".join(head))
    print(sink.head, flush=True)
    t0 = time.perf_counter()
    run_all(args, chosen, perf, sink)
    results = sink.results
    print(table(results))
    failed = [r for r in results if r.status == "FAIL"]
    print(f"{len(results) - len(failed)} of {len(results)} passed in {time.perf_counter() - t0:.0f}s"
          + (f"; FAILED: {', '.join(f'{r.case.name} w{r.case.world}' for r in failed)}" if failed else ""))
    if perf:  # one Llama 3 8B block timed beside the planner's (testing/block_probe.py); a record, not a case
        _block_probe(args.out)
    return 1 if failed else 0


def _block_probe(out: str) -> None:
    from shardlab.testing import block_probe

    try:
        lines = block_probe.report(profile=True)
    except Exception as e:  # noqa: BLE001 - the probe informs; it never fails the check
        lines = [f"block probe: not run ({type(e).__name__}: {e})"]
    print("\n".join(lines), flush=True)
    if out:
        (Path(out) / "block.md").write_text("\n".join(lines) + "\n")


def run_all(args, chosen: list[Case], perf: list[Case], sink: Sink) -> None:
    """The cases, phase by phase (`--jobs` at once), and the performance runs one at a time, before or after
    them; each result to `sink` as it comes."""
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Path] = {}
    jobs = args.jobs or (8 if args.device == "cuda" else 1)  # 8: 225 s for everything on a 16-core H200 machine

    def run_perf_all():  # one at a time, on a GPU nothing else uses
        for c in perf:
            sink.add(run_perf(c, args.device, work))

    try:
        if args.perf_first:
            run_perf_all()
        for phase in ("train", "ft", "generate"):  # a generate case reads the checkpoint of a train case
            todo = [c for c in chosen if c.cmd == phase]
            with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
                futs = [pool.submit(run_case, c, args.device, work, args.steps or None, runs) for c in todo]
                for f in concurrent.futures.as_completed(futs):
                    sink.add(f.result())
        if not args.perf_first:
            run_perf_all()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
